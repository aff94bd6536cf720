"""Code inside a capsule never runs: under ``--run`` no ``conftest.py`` of the capsule or its folders loads.

A capsule is pulled from a box someone else may control. pytest imports the ``conftest.py`` of the folder
it starts in, of that folder's parents and of its ``test*`` subfolders, so ``cd runs/<id> && pytest
--run=.`` would run whatever the capsule ships before any audit has read a byte. Every planted payload
here writes a marker file when imported; the audit sessions run in a fresh ``python -m pytest`` process
from the folders a user starts in, and must leave no marker behind while still writing their report.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from runaudit.examples.digits.build import DEMO_RUN_ID

# Where a payload sits, relative to the project root. The capsule folders and their test/ subfolders are
# loaded by pytest at startup when it starts inside them; runs/, export/ and active/ as their parents.
PAYLOAD_FOLDERS = (
    "runs",
    "export",
    "active",
    f"runs/{DEMO_RUN_ID}",
    f"runs/{DEMO_RUN_ID}/test",
    f"export/{DEMO_RUN_ID}",
    f"export/{DEMO_RUN_ID}/test",
    f"active/{DEMO_RUN_ID}",
    f"active/{DEMO_RUN_ID}/test",
)
SESSION_TIMEOUT_S = 240
# As few audits as still give a full session and its report; conftests load before selection applies.
GATE = ("-m", "custody", "-k", "capsule")


def _marker_name(folder: str) -> str:
    return folder.replace("/", "__") + ".ran"


@pytest.fixture
def planted(project: Path, tmp_path: Path) -> tuple[Path, Path]:
    """The demo project with the sealed capsule also pulled to ``runs/``, and a payload in every folder.

    The project names itself in a ``pyproject.toml``, as the README's ``[tool.runaudit] root`` does; pytest
    then takes the project as its rootdir and reads conftests from there down to where it starts.
    Returns (project root, folder the payloads write their markers to).
    """
    (project / "pyproject.toml").write_text('[tool.runaudit]\nroot = "."\n', encoding="utf-8")
    shutil.copytree(project / "export" / DEMO_RUN_ID, project / "runs" / DEMO_RUN_ID)
    markers = tmp_path / "markers"
    markers.mkdir()
    for folder in PAYLOAD_FOLDERS:
        target = project / folder
        # A sealed run's test/ left active/ at its close (docs/capsule.md §1); a live run writing its test has one.
        target.mkdir(parents=True, exist_ok=True)
        marker = markers / _marker_name(folder)
        (target / "conftest.py").write_text(
            f"import pathlib\npathlib.Path({str(marker)!r}).write_text('imported')\n", encoding="utf-8"
        )
    return project, markers


def _written_report(result: pytest.RunResult) -> dict:
    """The JSON report the session says it wrote (``runaudit: wrote <path>``)."""
    written = [
        Path(line.split("runaudit: wrote ", 1)[1].strip())
        for line in result.outlines
        if "runaudit: wrote " in line
    ]
    reports = [path for path in written if path.suffix == ".json"]
    tail = "\n".join(result.outlines[-30:] + result.errlines[-30:])
    assert reports, "the session wrote no report:\n" + tail
    return json.loads(reports[0].read_text(encoding="utf-8"))


def test_the_planted_payloads_run_when_pytest_starts_inside_a_capsule_without_run(
    pytester: pytest.Pytester, planted: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The control: to plain pytest the payloads are live code, so their absence below means something."""
    root, markers = planted
    monkeypatch.chdir(root / "runs" / DEMO_RUN_ID)
    pytester.runpytest_subprocess("-p", "no:cacheprovider", "--collect-only", "-q", timeout=SESSION_TIMEOUT_S)
    ran = {path.name for path in markers.iterdir()}
    expected = ("runs", f"runs/{DEMO_RUN_ID}", f"runs/{DEMO_RUN_ID}/test")
    assert {_marker_name(folder) for folder in expected} <= ran


@pytest.mark.parametrize(
    ("start", "spec", "extra"),
    [
        pytest.param(f"runs/{DEMO_RUN_ID}", ".", (), id="inside-runs-capsule"),
        pytest.param(f"export/{DEMO_RUN_ID}", ".", (), id="inside-export-capsule"),
        pytest.param(f"active/{DEMO_RUN_ID}", ".", (), id="inside-active-run"),
        pytest.param(f"runs/{DEMO_RUN_ID}", ".", ("-n", "2"), id="inside-runs-capsule-xdist"),
        pytest.param(".", DEMO_RUN_ID, (), id="project-root"),
    ],
)
def test_no_conftest_of_a_capsule_or_its_folders_is_imported_under_run(
    pytester: pytest.Pytester,
    planted: tuple[Path, Path],
    monkeypatch: pytest.MonkeyPatch,
    start: str,
    spec: str,
    extra: tuple[str, ...],
) -> None:
    root, markers = planted
    monkeypatch.chdir(root / start)
    result = pytester.runpytest_subprocess(
        "-p", "runaudit.fixtures.plugin", "-p", "no:cacheprovider", f"--run={spec}", *GATE, *extra,
        timeout=SESSION_TIMEOUT_S,
    )  # fmt: skip
    assert sorted(path.name for path in markers.iterdir()) == []
    # The session itself ran to its end: verdicts (a capsule holding a conftest.py may fail its closed
    # world; that is the gate working), no usage or internal error, and the report.
    assert result.ret in (pytest.ExitCode.OK, pytest.ExitCode.TESTS_FAILED), result.outlines[-30:]
    report = _written_report(result)
    assert report["run_id"] == DEMO_RUN_ID and report["verdicts"]


@pytest.mark.parametrize("name", ["pytest.ini", "pyproject.toml"])
def test_a_session_configured_from_inside_a_capsule_is_refused(
    pytester: pytest.Pytester, planted: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch, name: str
) -> None:
    """pytest reads the nearest configuration file before any plugin runs: one in a capsule is refused."""
    root, _ = planted
    capsule = root / "runs" / DEMO_RUN_ID
    (capsule / name).write_text("[pytest]\n" if name == "pytest.ini" else "[tool.pytest.ini_options]\n")
    monkeypatch.chdir(capsule)
    result = pytester.runpytest_subprocess(
        "-p", "runaudit.fixtures.plugin", "-p", "no:cacheprovider", "--run=.", *GATE, timeout=SESSION_TIMEOUT_S
    )  # fmt: skip
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([f"*pytest read its configuration from {capsule / name}, inside run data*"])
    assert "Traceback" not in result.stderr.str()
