"""``--run``, ``--root`` and ``--report-dir`` as users type them: resolved in order, refused in one line."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from capsules import HARDWARE_RUN_ID, build_hardware_capsule

from runaudit.examples.digits.build import DEMO_RUN_ID
from runaudit.resolve import Root, resolve

# As tests/conftest.py's run_audits passes them; the plugin module is already imported by this process.
PLUGIN = (
    "-p",
    "runaudit.fixtures.plugin",
    "-p",
    "no:cacheprovider",
    "-W",
    "ignore::pytest.PytestAssertRewriteWarning",
)


def output_lines(result: pytest.RunResult) -> list[str]:
    return [line for line in [*result.outlines, *result.errlines] if line.strip()]


def assert_one_error_line(result: pytest.RunResult, *named: str) -> None:
    """Exit 4 (usage error), and the whole output is one ``ERROR:`` line naming what was tried."""
    lines = output_lines(result)
    assert result.ret == pytest.ExitCode.USAGE_ERROR, lines
    assert len(lines) == 1 and lines[0].startswith("ERROR: "), lines
    for text in named:
        assert text in lines[0], (text, lines[0])


def assert_subset_held(result: pytest.RunResult) -> None:
    """Every selected capsule audit held, and the subset (``-k capsule``) was not taken for the whole gate."""
    assert result.ret == pytest.ExitCode.TESTS_FAILED, result.stdout.str()
    outcomes = result.parseoutcomes()
    assert outcomes.get("passed", 0) > 0 and not outcomes.get("failed") and not outcomes.get("errors")
    assert "runaudit: safe to tear down? NO, incomplete" in result.stdout.str()


@pytest.mark.parametrize(
    ("spec", "named"),
    [
        pytest.param("missing/capsule", ["--run=missing/capsule", "no such directory"], id="missing-path"),
        pytest.param("a-file.txt", ["--run=a-file.txt", "is a file"], id="a-file"),
        pytest.param(
            "ghost",
            ["--run=ghost", "runs/ghost", "export/ghost", "active/ghost", "a comparison group ghost"],
            id="id-found-nowhere",
        ),
        pytest.param("../x", ["--run=../x", "is not a run id"], id="unsafe-id"),
        # The value came back raw in "tried <cwd>/<value>": a terminal escape retitled the window.
        pytest.param("r\x1b]0;pwned\x07", ["--run=r\\x1b]0;pwned\\x07:"], id="terminal-escape"),
        # A name past the file system's 255 bytes: Path.is_dir raised, and the session ended in INTERNALERROR.
        pytest.param("a" * 300, ["--run=" + "a" * 80, "cannot be looked up"], id="name-past-the-limit"),
    ],
)
def test_bad_run_is_one_error_line(pytester: pytest.Pytester, spec: str, named: list[str]) -> None:
    (pytester.path / "a-file.txt").write_text("not a capsule\n")
    result = pytester.runpytest(*PLUGIN, "--run", spec, "--root", str(pytester.path))
    assert_one_error_line(result, *named)
    assert "\x1b" not in output_lines(result)[0]
    assert not (pytester.path / "reports").exists()


def test_a_run_id_wins_over_a_comparison_group_of_the_same_name(tmp_path: Path) -> None:
    """``--run=<group>`` is tried after every run folder: a run is never shadowed by a group's name."""
    (tmp_path / "runs" / "sweep").mkdir(parents=True)
    root = Root(tmp_path, "--root")

    def no_demo(path: Path) -> Path:
        raise AssertionError("the demo is not asked for")

    found = resolve("sweep", root, cwd=tmp_path, build_demo=no_demo, is_group=lambda name, at: True)
    assert (found.origin, found.path) == ("runs", tmp_path / "runs" / "sweep")
    group = resolve("arms", root, cwd=tmp_path, build_demo=no_demo, is_group=lambda name, at: name == "arms")
    assert (group.origin, group.group, group.path) == ("group", "arms", tmp_path)


def test_root_that_does_not_exist_is_one_error_line(pytester: pytest.Pytester) -> None:
    missing = pytester.path / "no-such-root"
    result = pytester.runpytest(*PLUGIN, "--run", DEMO_RUN_ID, "--root", str(missing))
    assert_one_error_line(result, "--root", str(missing))
    assert not missing.exists()


def test_report_dir_that_is_a_file_is_one_error_line(pytester: pytest.Pytester, demo_project: Path) -> None:
    occupied = pytester.path / "reports.txt"
    occupied.write_text("taken\n")
    result = pytester.runpytest(
        *PLUGIN, "--run", DEMO_RUN_ID, "--root", str(demo_project), "--report-dir", str(occupied)
    )
    assert_one_error_line(result, "--report-dir", str(occupied))
    assert occupied.read_text() == "taken\n"


def test_without_run_a_plain_suite_runs_normally(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        test_plain="""
        import pytest

        def test_arithmetic():
            assert 1 + 1 == 2

        @pytest.mark.smoke  # the harness's markers are registered, so --strict-markers accepts them
        def test_marked():
            assert True
        """
    )
    result = pytester.runpytest(*PLUGIN, "--strict-markers")
    result.assert_outcomes(passed=2)
    result.stdout.no_fnmatch_line("runaudit: *")  # no run header, no report written
    assert not (pytester.path / "reports").exists()


def test_pyproject_root_is_honoured_from_a_subfolder(
    pytester: pytest.Pytester, demo_project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    lab = pytester.path / "lab"
    shutil.copytree(demo_project, lab, symlinks=True, ignore=shutil.ignore_patterns("*.lock", "reports"))
    pytester.makepyprojecttoml('[tool.runaudit]\nroot = "lab"\n')
    monkeypatch.chdir(pytester.mkdir("notebooks"))
    result = pytester.runpytest(*PLUGIN, "--run", DEMO_RUN_ID, "-m", "custody", "-k", "capsule")
    assert_subset_held(result)
    result.stdout.fnmatch_lines([f"runaudit: run demo at {lab.resolve()}/export/demo *pyproject.toml*"])
    # The report goes beside the runs it describes: <root>/reports/.
    assert (lab / "reports" / "demo.json").is_file()
    assert (lab / "reports" / "demo.html").is_file()


def test_root_is_implied_by_a_hardware_capsule_path(pytester: pytest.Pytester, project: Path) -> None:
    """``export/hardware/<id>`` implies its project root, where its selection lives under ``_trust/``."""
    capsule = build_hardware_capsule(project, project / "export" / DEMO_RUN_ID)
    result = pytester.runpytest(
        *PLUGIN, "--run", str(capsule), "-m", "custody", "-k", "capsule", "--report-dir", "out"
    )
    assert_subset_held(result)
    result.stdout.fnmatch_lines([f"*root {project.resolve()} from the capsule's location*"])
    assert (pytester.path / "out" / f"{HARDWARE_RUN_ID}.json").is_file()


def test_hardware_run_id_resolves_under_export_hardware(run_audits, project: Path) -> None:
    build_hardware_capsule(project, project / "export" / DEMO_RUN_ID)
    outcome = run_audits(HARDWARE_RUN_ID, project, "-m", "custody", "-k", "capsule")
    assert_subset_held(outcome.result)
    assert outcome.report["run_path"] == str(project.resolve() / "export" / "hardware" / HARDWARE_RUN_ID)


def test_live_run_makes_sealed_capsule_audits_not_run(run_audits, project: Path) -> None:
    shutil.copytree(project / "active" / DEMO_RUN_ID, project / "active" / "live-run")
    # The report is named for the folder the user named; run.json's own "demo" never renames it.
    outcome = run_audits("live-run", project, "-m", "custody", "-k", "capsule")
    assert outcome.result.ret == 0, outcome.result.stdout.str()
    assert outcome.report["origin"] == "active"
    verdicts = outcome.report["verdicts"]
    assert verdicts and {item["verdict"] for item in verdicts} == {"not_run"}
    assert all(item["message"].startswith("run not closed") for item in verdicts)
    assert outcome.report["custody_ok"] is False
    outcome.result.stdout.fnmatch_lines(["NOT RUN capsule.*run not closed*"])
