"""The JSON twin: its schema, the teardown answer and the receipt it rests on, safe report file names."""

from __future__ import annotations

import copy
import errno
import json
import os
import socket
import stat
import subprocess
from pathlib import Path
from typing import Any

import pytest
from report_records import HOSTILE, build, demo_run, record, science_records

from runaudit.ids import report_stem
from runaudit.reports import html
from runaudit.reports.document import reproduce_line
from runaudit.reports.receipt import binding_receipt
from runaudit.reports.schema import report_problems
from runaudit.verdict import printable


def custody(verdict: str = "passed") -> dict[str, Any]:
    return record("capsule.ids", verdict, gate_class="custody")


def test_a_built_report_meets_its_own_schema(project: Path) -> None:
    doc = build(
        demo_run(project), [custody(), *science_records(), record("history.finite", "passed", HOSTILE)]
    )
    assert report_problems(doc) == []
    assert json.loads(json.dumps(doc)) == doc  # plain JSON all the way down
    assert [row["metric"] for row in doc["headlines"]] == ["accuracy", "cross_entropy"] * 2
    assert doc["tests"] == [
        {
            "test_id": "main",
            "conditions": ["clean", "noise"],
            "roles": ["input", "prediction"],
            "selection_id": "digits-stratified-s0-test",
            "k": json.loads((project / "export" / "demo" / "run.json").read_text())["selections"][0]["k"],
        }
    ]
    assert doc["reproduce"] == f"cd {project} && python -m pytest --run demo"


def test_a_malformed_run_json_still_yields_a_valid_report_and_page(project: Path) -> None:
    capsule = project / "export" / "demo"
    declared = json.loads((capsule / "run.json").read_text())
    main = declared["tests"][0]
    declared.update(
        source="a string", seed=[1, 2], tests=[main, {"test_id": 5, "conditions": "clean"}, "junk"]
    )
    (capsule / "run.json").write_text(json.dumps(declared))
    (capsule / "test/main/metrics.json").write_text("{ torn")
    (capsule / "train.csv").write_bytes(b"\xff\xfe not csv")
    run = demo_run(project)
    doc = build(run, [custody(), *science_records()])
    assert report_problems(doc) == []
    assert doc["run_context"]["source"] is None and doc["headlines"] == []
    assert doc["headline_problems"] == [
        "test/main/metrics.json could not be read (JSONDecodeError): its numbers are not shown"
    ]
    assert doc["tests"][1] == {"test_id": "5", "conditions": [], "roles": [], "selection_id": None, "k": None}
    page = html.render_run(doc)
    assert "curves not drawn: train.csv is not readable CSV" in page
    assert "its numbers are not shown" in page


@pytest.mark.parametrize(
    ("where", "value"),
    [
        ("/verdicts/0/verdict", "maybe"),
        ("/verdicts/0/gate_class", "vibes"),
        ("/summary/passed", -1),
        ("/teardown/answer", "probably"),
        ("/schema_version", "runaudit.report/2"),
        ("/surprise", True),
    ],
)
def test_the_schema_rejects_a_report_that_breaks_the_contract(project: Path, where: str, value: Any) -> None:
    doc = copy.deepcopy(build(demo_run(project), [custody()]))
    *parents, last = where.strip("/").split("/")
    target: Any = doc
    for part in parents:
        target = target[int(part)] if isinstance(target, list) else target[part]
    target[last] = value
    assert report_problems(doc), f"the schema accepted {where} = {value!r}"


def test_the_receipt_shown_is_the_one_runaudit_down_accepts(project: Path) -> None:
    run = demo_run(project)
    found = binding_receipt(run)  # the demo's own pull, verified when it was built
    assert found is not None
    assert (found["pull_id"], found["current"], found["problem"]) == ("demo", True, None)
    assert found["path"] == "_trust/pulls/demo/PULL_VERIFIED.json"
    assert found["verifier"] == socket.gethostname() and found["verified_utc"]
    manifest = project / "_trust/pulls/demo/PULL_MANIFEST.json"
    manifest.write_text(manifest.read_text() + " ")  # the same content in new bytes: the receipt is stale
    found = binding_receipt(run)
    assert found["current"] is False and "is stale: it binds manifest" in found["problem"]
    (manifest.parent / "PULL_VERIFIED.json").unlink()
    assert binding_receipt(run) is None


def test_safe_to_tear_down_needs_held_custody_and_a_current_receipt(project: Path) -> None:
    def answer(records: list[dict[str, Any]], origin: str = "export") -> tuple[str, str]:
        doc = build(demo_run(project, origin), records)
        assert report_problems(doc) == []
        return doc["teardown"]["answer"], doc["teardown"]["reason"]

    # The demo verifies its capsule where it was produced: whole, but down needs a copy pulled home.
    assert answer([custody()]) == (
        "yes",
        "every custody audit held and receipt demo binds the current manifest, verified in place where it was "
        "produced (export/): runaudit down also needs a copy pulled into runs/ and verified there before a box "
        "that produced it goes",
    )
    assert answer([*science_records()])[0] == "no"  # a custody gate that checked nothing fails
    assert answer([custody(), custody("failed")]) == ("no", "1 custody audit(s) did not hold: capsule.ids")
    assert answer([custody("not_run")])[0] == "no"
    assert answer([custody()], origin="active")[0] == "no"
    manifest = project / "_trust/pulls/demo/PULL_MANIFEST.json"
    manifest.write_text(manifest.read_text() + " ")
    verdict, reason = answer([custody()])
    assert verdict == "not yet" and reason.startswith("receipt demo: run demo: ") and "is stale" in reason
    (manifest.parent / "PULL_VERIFIED.json").unlink()
    assert answer([custody()]) == (
        "not yet",
        "every custody audit held, but no pull receipt binds this run (pull and verify it first)",
    )


@pytest.mark.parametrize(
    ("run_id", "stem"),
    [
        ("demo", "demo"),
        ("../../etc/passwd", "_.._etc_passwd"),
        ("<script>x</script>", "_script_x__script_"),
        ("index", "index_run"),
        ("INDEX", "INDEX_run"),
        ("index_run", "index_run_run"),  # a run's own name, never the stem "index" is moved to
        ("Index_Run_run", "Index_Run_run_run"),
        ("index_runner", "index_runner"),
        ("...", "run"),
    ],
)
def test_report_file_names_stay_in_the_folder_and_off_the_sweep_index(run_id: str, stem: str) -> None:
    assert report_stem(run_id) == stem
    assert "/" not in stem and not stem.startswith(".")


@pytest.mark.parametrize(
    "folder",
    [
        "/tmp/plain",
        "/tmp/a space's",
        "/tmp/esc\x1b[31m",
        "/tmp/new\nline",
        "/tmp/bad\udcff",
        "/tmp/c1\x85\u2028",
    ],
    ids=["plain", "quotes", "escape", "line-break", "undecodable", "unicode-controls"],
)
def test_the_reproduce_line_names_the_real_folder_and_only_shows(folder: str) -> None:
    """A project path holding an ESC reached the report as the four characters ``\\x1b`` (every report string
    is shown printable): the reproduce line named a folder that does not exist. It must be printable as it
    is, and a shell must read the real bytes back from it."""
    line = reproduce_line(Path(folder), ["--run", "demo"])
    assert printable(line) == line and "\n" not in line
    word = line.removeprefix("cd ").partition(" && ")[0]
    echoed = subprocess.run(["bash", "-c", f"printf %s {word}"], capture_output=True, check=True).stdout
    assert echoed == folder.encode("utf-8", "surrogateescape")


@pytest.mark.parametrize(("mask", "mode"), [(0o022, 0o644), (0o077, 0o600), (0o002, 0o664)])
def test_a_written_report_takes_the_mode_the_umask_gives(tmp_path: Path, mask: int, mode: int) -> None:
    """Reports (and every file written whole) were 0600 whatever the umask, as mkstemp makes them: a report
    published from a CI artifact folder, or kept in a group's folder, could be read by its writer alone."""
    from runaudit.atomic import write_json_atomic

    old = os.umask(mask)
    try:
        written = [
            write_json_atomic(tmp_path / "demo.json", {"run_id": "demo"}),
            write_json_atomic(tmp_path / "record.json", {"run_id": "demo"}, exclusive=True),
        ]
    finally:
        os.umask(old)
    assert [stat.S_IMODE(path.stat().st_mode) for path in written] == [mode, mode]


def test_an_exclusive_write_on_a_filesystem_without_hard_links_still_claims_the_name_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The teardown record takes its name by a hard link; vfat, exFAT and s3fs refuse every link (EPERM),
    and each exclusive write failed, so ``down`` refused with no way out."""
    from runaudit import atomic

    def no_hard_links(source: Any, target: Any) -> None:
        raise OSError(errno.EPERM, "Operation not permitted")

    monkeypatch.setattr(atomic.os, "link", no_hard_links)
    record = tmp_path / "record.json"
    atomic.write_json_atomic(record, {"run_id": "demo"}, exclusive=True)
    with pytest.raises(FileExistsError):
        atomic.write_json_atomic(record, {"run_id": "other"}, exclusive=True)
    assert json.loads(record.read_text()) == {"run_id": "demo"}
    assert [path.name for path in tmp_path.iterdir()] == ["record.json"]  # no temp file left behind
