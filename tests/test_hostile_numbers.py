"""Numbers from a box, judged as numbers: the same limit whatever their spelling, refused in plain words.

run.json refuses an integer past a float's range, and config.yaml one past 4300 decimal digits (the limit
Python puts on writing an integer as text). The limits held for one spelling only: a run of digits inside a
run.json *string* (a build tag) was taken for such a number and the whole run.json refused, while a
config.yaml integer written in hexadecimal or base 60 passed and failed later, in whatever serialised the
config, in Python's own words. A date in config.yaml, which its audit allows, broke the demo adapter. And a
``--root`` holding terminal escapes was echoed raw, where ``--run`` is shown escaped. Each end-to-end test
edits a private copy of the sealed demo, binds the edit again in run.json and the pull manifest (a producer
that wrote the file so), and runs the harness as users do.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from runaudit.examples.digits.build import DEMO_RUN_ID
from runaudit.manifest import load_json, pulls_dir
from runaudit.reader import YamlRefused, yaml_documents
from runaudit.runners.manifest import build_manifest

RunAudits = Callable[..., Any]  # conftest.run_audits, returning an AuditRun
PYTHONS_OWN_WORDS = "set_int_max_str_digits"
# config.yaml's longest integer in decimal digits (runaudit.reader.CONFIG_INT_DIGITS), whatever its base:
# the limit a decimal integer always met, Python's default ``sys.get_int_max_str_digits()``.
CONFIG_INT_DIGITS = 4300
SEED_LINE = "  seed: 0\n"  # the demo config's training seed, replaced by each spelling below


def _reseal(project: Path) -> None:
    """A fresh pull manifest over the edited capsule (the old one and its receipt bound the old bytes)."""
    shutil.rmtree(pulls_dir(project))
    build_manifest(project, [DEMO_RUN_ID], "edited", log=lambda line: None)


def _edit_run_json(capsule: Path, change: Callable[[dict[str, Any]], object]) -> None:
    run = json.loads((capsule / "run.json").read_text())
    change(run)
    (capsule / "run.json").write_text(json.dumps(run, indent=2))


def _write_config(project: Path, text: str) -> None:
    """config.yaml replaced by ``text``, its hash bound again in run.json, and the pull resealed."""
    capsule = project / "export" / DEMO_RUN_ID
    data = text.encode()
    (capsule / "config.yaml").write_bytes(data)
    digest = hashlib.sha256(data).hexdigest()
    _edit_run_json(capsule, lambda run: run["config"].update(sha256=digest))
    _reseal(project)


def _config_with_seed(project: Path, seed: str) -> str:
    text = (project / "export" / DEMO_RUN_ID / "config.yaml").read_text()
    assert text.count(SEED_LINE) == 1, "the demo config no longer writes its seed as '  seed: 0'"
    return text.replace(SEED_LINE, f"  seed: {seed}\n")


def _one(outcome: Any, audit: str) -> dict[str, Any]:
    [verdict] = outcome.find(audit)
    return verdict


# -- run.json: digits in a string are text --------------------------------------------------------------


def test_digits_inside_a_run_json_string_are_text_not_a_number(run_audits: RunAudits, project: Path) -> None:
    """A build tag holding 400 digits is valid JSON: run.json was refused as "a run of 309+ digits", and
    some 45 audits (checkpoint.safe_load among them) then said run.json was unreadable."""
    capsule = project / "export" / DEMO_RUN_ID
    _edit_run_json(capsule, lambda run: run["environment"].update(python="3.11.7+build." + "1" * 400))
    _reseal(project)

    outcome = run_audits(DEMO_RUN_ID, project, "-k", "run_json_schema or safe_load")

    schema = _one(outcome, "capsule.run_json_schema")
    assert schema["verdict"] == "passed", schema["message"]
    [best] = [item for item in outcome.find("checkpoint.safe_load") if item["subject"] == "best.pth"]
    assert best["verdict"] == "passed", best["message"]
    unreadable = [item["audit"] for item in outcome.report["verdicts"] if "unreadable" in item["message"]]
    assert unreadable == []


def test_load_json_judges_number_tokens_and_not_runs_of_digits() -> None:
    """Digits in a string are accepted; an integer past a float's range is still refused, however long,
    in plain words that say how many digits it has (never the interpreter's advice to raise its limit)."""
    long_tag = "1" * 5000
    assert load_json(json.dumps({"python": f"3.11.7+build.{long_tag}", "n": 9}).encode())["n"] == 9
    assert load_json(b'{"n": ' + b"9" * 308 + b"}")["n"] == 10**308 - 1  # the longest a float holds

    for digits in (309, 400, 5000):
        with pytest.raises(ValueError, match="309\\+ digits") as refused:
            load_json(b'{"note": "' + long_tag.encode() + b'", "n": -' + b"9" * digits + b"}")
        assert f"an integer of {digits} digits" in str(refused.value)
        assert PYTHONS_OWN_WORDS not in str(refused.value)
        assert "\n" not in str(refused.value)


# -- config.yaml: one integer limit, whatever the base ----------------------------------------------------


@pytest.mark.parametrize(
    "seed",
    ["0x" + "f" * 6000, ":".join(["59"] * 3000), "9" * 6000],
    ids=["hexadecimal", "base-60", "decimal"],
)
def test_a_config_integer_past_the_limit_is_refused_in_any_base(
    run_audits: RunAudits, project: Path, seed: str
) -> None:
    """A 6000-digit seed in hexadecimal or base 60 passed capsule.config_hash, then evaluation.fresh
    failed with "Exceeds the limit (4300 digits) for integer string conversion"; in decimal it was
    refused, ending in Python's "use sys.set_int_max_str_digits()". Now each is config_hash's one plain
    line, and the fresh evaluation is not run on it."""
    _write_config(project, _config_with_seed(project, seed))

    outcome = run_audits(DEMO_RUN_ID, project, "-k", "config_hash or fresh")

    owner = _one(outcome, "capsule.config_hash")
    assert owner["verdict"] == "failed", owner
    assert f"config.yaml holds an integer longer than {CONFIG_INT_DIGITS} decimal digits" in owner["message"]
    assert PYTHONS_OWN_WORDS not in owner["message"] and "\n" not in owner["message"]
    fresh = _one(outcome, "evaluation.fresh")
    assert fresh["verdict"] == "not_run", fresh
    assert "(reported by capsule.config_hash)" in fresh["message"]


@pytest.mark.parametrize(
    ("longest", "too_long"),
    [
        ("9" * CONFIG_INT_DIGITS, "9" * (CONFIG_INT_DIGITS + 1)),
        ("0x" + "f" * 3571, "0x" + "f" * 3572),  # 16**3571 - 1 has 4300 decimal digits
        ("0" + "7" * 4761, "0" + "7" * 4762),  # YAML 1.1 octal (0o is YAML 1.2's, text here)
        ("0b" + "1" * 14284, "0b" + "1" * 14285),
        ("-0x" + "f" * 3571, "-0x" + "f" * 3572),
        ("1" + ":59" * 2418, "1" + ":59" * 2419),  # base 60
    ],
    ids=["decimal", "hexadecimal", "octal", "binary", "negative", "base-60"],
)
def test_every_base_meets_the_limit_a_decimal_integer_meets(longest: str, too_long: str) -> None:
    """The longest integer a config may hold is read in every base; one more digit is refused, as a value
    or as a key, in one line that names the line of the file."""
    [document] = yaml_documents(f"train:\n  seed: {longest}\n".encode())
    assert len(str(abs(document["train"]["seed"]))) == CONFIG_INT_DIGITS

    for text in (f"train:\n  seed: {too_long}\n", f"train:\n  ? {too_long}\n  : seed\n"):  # value, key
        with pytest.raises(YamlRefused) as refused:
            yaml_documents(text.encode())
        message = str(refused.value)
        assert message.startswith(f"holds an integer longer than {CONFIG_INT_DIGITS} decimal digits (line 2)")
        assert PYTHONS_OWN_WORDS not in message and "\n" not in message


def test_a_long_base_60_integer_is_refused_before_it_is_converted() -> None:
    """Base-60 conversion is quadratic in its length: 100,000 fields took 4 s to convert and pass, and the
    16 MiB a config.yaml may hold would take hours. Its length alone refuses it now."""
    with pytest.raises(YamlRefused, match="holds an integer longer than"):
        yaml_documents(b"seed: " + b":".join([b"59"] * 100_000))


# -- config.yaml: a date is a setting's value -----------------------------------------------------------


def test_dates_in_the_config_reach_the_demo_adapters_fresh_evaluation(
    run_audits: RunAudits, project: Path
) -> None:
    """capsule.config_hash allows dates, yet the demo adapter's ``json.dumps(config)`` refused them:
    evaluation.fresh failed with "Object of type date is not JSON serializable"."""
    dated = _config_with_seed(project, "0\n  stamp: 2024-01-01\n  taken: 2024-01-01 12:30:00")
    _write_config(project, dated + "snapshots:\n  2024-02-29: digits-v1\n")

    outcome = run_audits(DEMO_RUN_ID, project, "-k", "config_hash or fresh")

    assert _one(outcome, "capsule.config_hash")["verdict"] == "passed"
    fresh = _one(outcome, "evaluation.fresh")
    assert fresh["verdict"] == "passed", fresh["message"]


# -- the command line: paths from the user are shown escaped --------------------------------------------


@pytest.mark.parametrize("option", ["--root", "--report-dir", "--runaudit-claims"])
def test_a_path_option_holding_terminal_escapes_is_shown_escaped(
    pytester: pytest.Pytester, project: Path, option: str
) -> None:
    """A --root holding ESC sequences cleared the screen and set the window title when the usage error
    echoed it; --run was shown escaped. Every path option is now shown as --run is (ESC as \\x1b)."""
    hostile = "x\x1b[2J\x1b]0;pwned\x07y"
    value = {
        "--root": f"/nonexistent/{hostile}",
        "--report-dir": str(pytester.path / hostile),  # a file where a folder belongs
        "--runaudit-claims": f"/nonexistent/{hostile}.md",
    }[option]
    if option == "--report-dir":
        Path(value).write_text("a file, not a folder\n")
    root = [] if option == "--root" else ["--root", str(project)]

    result = pytester.runpytest("-p", "runaudit.fixtures.plugin", "--run", DEMO_RUN_ID, *root, option, value)

    shown = result.stdout.str() + result.stderr.str()
    assert result.ret == pytest.ExitCode.USAGE_ERROR, shown
    assert "\x1b" not in shown and "\x07" not in shown, shown
    assert "x\\x1b[2J\\x1b]0;pwned\\x07y" in shown, shown
