"""The report's twins: the same verdicts with and without xdist, and JUnit XML that names each audit."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest

from runaudit.examples.digits.build import DEMO_RUN_ID
from runaudit.reports.schema import report_problems

VOLATILE = ("started_utc", "session", "command", "reproduce", "invocation_dir")
SESSION_STAMPS = (
    "when",
    "session",
)  # each verdict's session: equal verdicts of two sessions differ here only
# Custody and science read the run's own bytes, so every word of their verdicts must match; the smoke gate
# times the user's code on this CPU, so only its verdicts (not its seconds) must.
MEASURED_ON_THE_RUN = ("custody", "science")


def identity(item: dict[str, Any]) -> tuple[Any, ...]:
    return item["audit"], item["subject"], item["gate_class"], item["verdict"], item["affects"], item["where"]


def unstamped(item: dict[str, Any]) -> dict[str, Any]:
    return {key: value for key, value in item.items() if key not in SESSION_STAMPS}


def junit_verdicts(path: Path) -> tuple[set[tuple[str, str, str]], list[str]]:
    """``(audit, subject, verdict)`` per testcase from JUnit properties, and every property name seen."""
    found, names = set(), []
    for case in ET.parse(path).getroot().iter("testcase"):
        properties = {item.get("name"): item.get("value") for item in case.iter("property")}
        names.extend(properties)
        found.add(
            (properties["runaudit.audit"], properties["runaudit.subject"], properties["runaudit.verdict"])
        )
    return found, names


def section(page: str, name: str) -> str:
    match = re.search(rf'<section id="{name}".*?</section>', page, re.S)
    assert match, f"no {name} section"
    return match.group(0)


@pytest.fixture(scope="module")
def parity(demo_project: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The demo with one damaged file (so verdicts differ), audited serially and on 2 xdist workers.

    Each run is ``python -m pytest --run ...`` in a fresh process, exactly as a user types it, hashing
    fresh (the second run would otherwise reuse the first one's stat-keyed hash cache and say so). The
    preflight gate is left out: it reads this machine (free bytes, memory in use), not the run; so is
    ``smoke.capsule_roundtrip``, which trains and seals a capsule of its own (seconds a run, twice) and
    reads nothing of this one (tests/test_smoke.py covers it).
    """
    base = tmp_path_factory.mktemp("parity")
    project = base / "project"
    shutil.copytree(demo_project, project, ignore=shutil.ignore_patterns("*.lock", "reports"))
    (project / "export" / DEMO_RUN_ID / "config.yaml").write_text("tampered: true\n")
    runs = {}
    for workers in ("0", "2"):
        reports, junit = base / f"reports-{workers}", base / f"junit-{workers}.xml"
        done = subprocess.run(
            [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "--run", DEMO_RUN_ID, "--root", str(project),
             "--report-dir", str(reports), "-n", workers, f"--junitxml={junit}", "--fresh-hashes",
             "-m", "not preflight", "-k", "not capsule_roundtrip"],
            cwd=base, capture_output=True, text=True, timeout=600, check=False,
        )  # fmt: skip
        assert done.returncode == 1, done.stdout + done.stderr  # config_hash fails
        runs[workers] = {
            "report": json.loads((reports / f"{DEMO_RUN_ID}.json").read_text()),
            "page": (reports / f"{DEMO_RUN_ID}.html").read_text(encoding="utf-8"),
            "junit": junit,
            "output": done.stdout + done.stderr,
        }
    return runs


def test_the_same_verdicts_come_out_with_and_without_xdist(parity: dict[str, Any]) -> None:
    serial, parallel = (parity[workers]["report"] for workers in ("0", "2"))
    assert len(serial["verdicts"]) > 20
    failed = {item["audit"] for item in serial["verdicts"] if item["verdict"] == "failed"}
    assert {"capsule.config_hash", "manifest.size"} <= failed  # the tampered file, caught by two gates
    assert [identity(item) for item in serial["verdicts"]] == [
        identity(item) for item in parallel["verdicts"]
    ]
    measured = [
        [unstamped(item) for item in report["verdicts"] if item["gate_class"] in MEASURED_ON_THE_RUN]
        for report in (serial, parallel)
    ]
    assert measured[0] == measured[1]
    rest = VOLATILE + ("verdicts",)
    assert {key: value for key, value in serial.items() if key not in rest} == {
        key: value for key, value in parallel.items() if key not in rest
    }
    assert report_problems(serial) == [] and report_problems(parallel) == []
    for name in ("teardown", "claims", "failures", "disclosures", "figures", "coverage", "visuals"):
        assert section(parity["0"]["page"], name) == section(parity["2"]["page"], name), name


def test_the_report_is_written_once_by_the_controller(parity: dict[str, Any]) -> None:
    for workers in ("0", "2"):
        lines = parity[workers]["output"].splitlines()
        assert len([line for line in lines if line.startswith("runaudit: wrote ")]) == 2, workers


def test_junit_xml_carries_each_audit_id_and_verdict(parity: dict[str, Any]) -> None:
    expected = {
        (item["audit"], item["subject"], item["verdict"]) for item in parity["0"]["report"]["verdicts"]
    }
    for workers in ("0", "2"):
        found, names = junit_verdicts(parity[workers]["junit"])
        assert found == expected, workers
        assert "runaudit" not in names  # the verdict record itself stays out of the XML
        assert set(names) == {"runaudit.audit", "runaudit.subject", "runaudit.gate", "runaudit.verdict"}
        output = parity[workers]["output"]
        assert "record_property" not in output and "xunit2" not in output  # no junit_family warning


def test_status_words_survive_and_junit_names_not_run_audits(
    run_audits: Any, pytester: pytest.Pytester, project: Path
) -> None:
    """A live run: every capsule audit is NOT RUN on the terminal, in the JSON and in the JUnit XML."""
    shutil.copytree(project / "export" / DEMO_RUN_ID, project / "active" / "live")
    junit = pytester.path / "junit.xml"
    # run.json still names the run demo; the report is named for the folder
    outcome = run_audits("live", project, "-m", "custody", "-k", "capsule", f"--junitxml={junit}")
    assert outcome.report is not None and outcome.result.ret == 0
    verdicts = {item["verdict"] for item in outcome.report["verdicts"]}
    assert verdicts == {"not_run"}
    outcome.result.stdout.fnmatch_lines([f"*= * deselected, {len(outcome.report['verdicts'])} not run in *"])
    found, _ = junit_verdicts(junit)
    assert {verdict for _, _, verdict in found} == {"not_run"} and len(found) == len(
        outcome.report["verdicts"]
    )
