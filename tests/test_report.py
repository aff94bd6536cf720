"""The report: the JSON shape of audits.md, the same verdicts under xdist, written once, escaped HTML."""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path
from typing import Any

import pytest

from runaudit.examples.digits.build import DEMO_RUN_ID
from runaudit.reports import html
from runaudit.verdict import GATE_CLASSES, Verdict

GATE = ("-m", "custody", "-k", "capsule")
REPORT_KEYS = {
    "schema_version",
    "run_id",
    "root",
    "started_utc",
    "harness_version",
    "environment",
    "verdicts",
    "summary",
    "custody_ok",
}
VERDICT_KEYS = ("audit", "gate_class", "subject", "verdict", "message", "evidence", "affects")
RFC3339 = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?(Z|[+-]\d{2}:\d{2})$")
HOSTILE = '<script>alert("x")</script><img src=x onerror=alert(1)>'


def verdict_content(report: dict) -> list[dict]:
    return [{key: item[key] for key in VERDICT_KEYS} for item in report["verdicts"]]


def test_report_json_has_the_shape_of_audits_md(run_audits, demo_project: Path) -> None:
    outcome = run_audits(DEMO_RUN_ID, demo_project, *GATE)
    report = outcome.report
    assert report.keys() >= REPORT_KEYS
    assert report["schema_version"] == "runaudit.report/1"
    assert report["run_id"] == DEMO_RUN_ID and report["root"] == str(demo_project.resolve())
    assert RFC3339.match(report["started_utc"]), report["started_utc"]
    assert isinstance(report["harness_version"], str) and report["harness_version"]
    assert {"python", "packages"} <= report["environment"].keys()
    assert report["summary"].keys() == {verdict.value for verdict in Verdict}
    assert sum(report["summary"].values()) == len(report["verdicts"]) > 0
    for item in report["verdicts"]:
        assert set(VERDICT_KEYS) <= item.keys()
        assert re.fullmatch(r"capsule\.[a-z_]+", item["audit"])
        assert item["gate_class"] in GATE_CLASSES and item["verdict"] in report["summary"]
        assert isinstance(item["evidence"], dict) and isinstance(item["affects"], list)
        assert isinstance(item["subject"], str) and isinstance(item["message"], str)
    keys = [(item["audit"], item["subject"]) for item in report["verdicts"]]
    assert keys == sorted(keys) and len(set(keys)) == len(keys)
    # A subset of the custody gate (-k capsule) proves nothing about the rest: never custody_ok, exit 1.
    assert report["custody_ok"] is False and report["teardown"]["reason"].startswith("incomplete")
    assert outcome.result.ret == pytest.ExitCode.TESTS_FAILED and report["summary"]["failed"] == 0
    written = [line for line in outcome.result.outlines if line.startswith("runaudit: wrote ")]
    assert [Path(line.split()[-1]).name for line in written] == ["demo.json", "demo.html"]


def test_report_format_json_writes_the_twin_alone(run_audits, demo_project: Path) -> None:
    """Runners read verdicts, not the page: ``--report-format json`` skips the HTML and its figures."""
    outcome = run_audits(DEMO_RUN_ID, demo_project, *GATE, "--report-format", "json")
    assert outcome.report is not None and outcome.report["summary"]["failed"] == 0
    written = [line for line in outcome.result.outlines if line.startswith("runaudit: wrote ")]
    assert [Path(line.split()[-1]).name for line in written] == ["demo.json"]
    assert not (Path(written[0].split()[-1]).parent / "demo.html").exists()


def test_parallel_workers_give_the_same_verdicts_and_only_the_controller_writes(
    run_audits, pytester: pytest.Pytester, project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A seeded defect, so that failures and not-run verdicts cross the wire as well as passes.
    (project / "export" / DEMO_RUN_ID / "test" / "main" / "results.parquet").unlink()
    monkeypatch.setenv("COLLECTOR_PROBE_DIR", str(pytester.path))  # xdist workers inherit it
    # A plugin module named with -p, not a conftest: an audit session (--run) imports no conftest.py.
    pytester.makepyfile(
        collector_probe="""
        import os
        import pathlib

        import pytest

        @pytest.hookimpl(trylast=True)
        def pytest_configure(config):
            name = config.workerinput["workerid"] if hasattr(config, "workerinput") else "controller"
            registered = config.pluginmanager.has_plugin("runaudit-report")
            probe = pathlib.Path(os.environ["COLLECTOR_PROBE_DIR"]) / f"collector-{name}.txt"
            probe.write_text(str(registered))
        """
    )
    pytester.syspathinsert()
    serial = run_audits(DEMO_RUN_ID, project, *GATE, "-n", "0", "-p", "collector_probe")
    # In a fresh `python -m pytest`, whose sys.path (which local xdist workers copy) starts with the current
    # folder, so that the workers can import the probe too. pytest-benchmark, where installed, warns that
    # xdist disables it.
    reports = pytester.path / "parallel-reports"
    parallel = pytester.runpytest_subprocess(
        "-p", "runaudit.fixtures.plugin", "-p", "collector_probe", "-p", "no:cacheprovider", "-p", "no:benchmark",
        "--run", DEMO_RUN_ID, "--root", str(project), "--report-dir", str(reports), *GATE, "-n", "2",
    )  # fmt: skip
    parallel_report = json.loads((reports / f"{DEMO_RUN_ID}.json").read_text(encoding="utf-8"))
    assert serial.result.ret == parallel.ret == 1
    assert verdict_content(parallel_report) == verdict_content(serial.report)
    assert parallel_report["summary"] == serial.report["summary"]
    assert serial.verdicts("failed") == {"capsule.required_paths"} and serial.verdicts("not_run")
    collectors = {path.name: path.read_text() for path in pytester.path.glob("collector-*.txt")}
    assert collectors == {
        "collector-controller.txt": "True",
        "collector-gw0.txt": "False",
        "collector-gw1.txt": "False",
    }
    written = [line for line in parallel.outlines if line.startswith("runaudit: wrote ")]
    assert len(written) == 2, parallel.outlines


def test_html_escapes_what_a_capsule_puts_in_a_message(run_audits, project: Path) -> None:
    """A file name chosen by whoever produced the capsule reaches the page as text, never as markup."""
    capsule = project / "export" / DEMO_RUN_ID
    (capsule / "<img src=x onerror=alert(1)>.txt").write_text("hostile name\n")
    outcome = run_audits(DEMO_RUN_ID, project, *GATE)
    assert outcome.verdicts("failed") == {"capsule.closed_world"}
    page_text = next(
        Path(line.split()[-1]).read_text(encoding="utf-8")
        for line in outcome.result.outlines
        if line.startswith("runaudit: wrote ") and line.endswith(".html")
    )
    assert "&lt;img src=x onerror=alert(1)&gt;.txt" in page_text
    assert "<img src=x" not in page_text and "<script" not in page_text


def test_html_escapes_every_value_and_stays_self_contained(run_audits, demo_project: Path) -> None:
    document = copy.deepcopy(run_audits(DEMO_RUN_ID, demo_project, *GATE).report)
    document["run_id"] = document["run_path"] = document["started_utc"] = HOSTILE
    document["command"] = ["pytest", HOSTILE]
    item = document["verdicts"][0]
    item.update(subject=HOSTILE, message=HOSTILE, affects=[HOSTILE])
    item["declared"] = {"topic": HOSTILE, "choice": HOSTILE, "note": HOSTILE}
    page = html.render_run(document)
    assert HOSTILE not in page and "<script" not in page and "<img src=x" not in page
    assert page.count("&lt;script&gt;") >= 8
    # Self-contained: no scripts, and nothing fetched from anywhere: images are data URIs, links in-page.
    targets = re.findall(r"<[^>]*\s(?:src|href)=\"([^\"]*)\"", page)
    assert all(target.startswith(("data:image/png;base64,", "#")) for target in targets), targets
    assert "default-src 'none'" in page


@pytest.mark.parametrize("suffix", [".json", ".html"])
def test_a_report_location_that_cannot_be_written_is_one_line_and_a_usage_error(
    run_audits: Any, capsule_dir: Path, project: Path, pytester: pytest.Pytester, suffix: str
) -> None:
    """The report's name taken by a folder: the write raised out of ``pytest_sessionfinish`` as a Python
    traceback and nothing said where or why. (A reports folder that is a file is refused where the option
    is parsed.)"""
    blocked = pytester.path / "reports" / f"{DEMO_RUN_ID}{suffix}"
    blocked.mkdir(parents=True)
    outcome = run_audits(capsule_dir, project, *GATE)
    assert outcome.result.ret == pytest.ExitCode.USAGE_ERROR
    output = outcome.result.stdout.str() + outcome.result.stderr.str()
    assert "Traceback" not in output and "INTERNALERROR" not in output
    [line] = [line for line in output.splitlines() if "the report could not be written" in line]
    assert line.startswith(f"runaudit: the report could not be written: {blocked}: ")
