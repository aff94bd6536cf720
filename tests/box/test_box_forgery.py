"""A hostile box cannot write into the local trust records through ``pull``, nor outside the project.

The box controls its run.json, its manifest and its ``_trust/`` folder. Ids it names must pass the
safe-id rule before any local path is built from them, the manifest is checked as a whole before the
filesystem is touched, and only a local ``verify`` ever writes a receipt.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import pytest
from report_records import build, demo_run, science_records
from sshbox import SshBox
from test_box_pull import build_manifest_on_box

from runaudit.cli import main
from runaudit.examples.digits.build import DEMO_RUN_ID
from runaudit.manifest import MANIFEST, RECEIPT
from runaudit.receipts import receipt_status
from runaudit.reports.schema import report_problems

FORGED_PULL = "evil"


def _producer(box_root: Path, demo_project: Path) -> Path:
    """The box's project: the sealed demo capsule and the _trust records it binds."""
    shutil.copytree(demo_project / "export" / DEMO_RUN_ID, box_root / "export" / DEMO_RUN_ID)
    for records in ("selections", "splits"):
        shutil.copytree(demo_project / "_trust" / records, box_root / "_trust" / records)
    return box_root / "export" / DEMO_RUN_ID


def test_a_box_cannot_plant_a_receipt_through_bound_record_ids(
    sshbox: SshBox, box_root: Path, demo_project: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    capsule = _producer(box_root, demo_project)
    run_json = json.loads((capsule / "run.json").read_text())
    template = run_json["selections"][0]
    run_json["selections"] += [
        {**template, "selection_id": f"../pulls/{FORGED_PULL}/PULL_VERIFIED"},
        {**template, "selection_id": f"../pulls/{FORGED_PULL}/PULL_MANIFEST"},
    ]
    (capsule / "run.json").write_text(json.dumps(run_json, indent=2))
    manifest = build_manifest_on_box(sshbox, box_root, "p1")
    # The forgery: a manifest that names the user's run (newest wins), and a receipt that binds it.
    forged = box_root / "_trust" / "pulls" / FORGED_PULL
    forged.mkdir(parents=True)
    forged_manifest = json.dumps({**manifest, "pull_id": FORGED_PULL}).encode()
    (forged / MANIFEST).write_bytes(forged_manifest)
    real_receipt = json.loads((demo_project / "_trust" / "pulls" / DEMO_RUN_ID / RECEIPT).read_text())
    (forged / RECEIPT).write_text(
        json.dumps(
            {
                **real_receipt,
                "pull_id": FORGED_PULL,
                "manifest_sha256": hashlib.sha256(forged_manifest).hexdigest(),
            }
        )
    )
    local = tmp_path / "local"
    local.mkdir()
    code = main(["pull", *sshbox.cli_args(box_root), "--root", str(local), "--pull-id", "p1"])
    capsys.readouterr()
    assert code == 1  # the capsule names selections that are not safe ids: its own audits fail
    assert not (local / "_trust" / "pulls" / FORGED_PULL).exists()
    assert sorted(path.name for path in (local / "_trust" / "pulls").iterdir()) == ["p1"]
    assert sorted(path.name for path in (local / "_trust" / "pulls" / "p1").iterdir()) == [MANIFEST]
    status = receipt_status(local, [DEMO_RUN_ID])
    assert not status.ok


@pytest.mark.parametrize(
    "escape",
    ["demo/../../../escaped-by-box", "/tmp/escaped-by-box-absolute", "demo/./x"],
    ids=["dotdot", "absolute", "dot"],
)
def test_a_manifest_with_unsafe_empty_dirs_touches_nothing(
    sshbox: SshBox,
    box_root: Path,
    demo_project: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    escape: str,
) -> None:
    _producer(box_root, demo_project)
    manifest = build_manifest_on_box(sshbox, box_root, "p1")
    manifest["empty_dirs"].append(escape)
    (box_root / "_trust" / "pulls" / "p1" / MANIFEST).write_text(json.dumps(manifest))
    local = tmp_path / "deep" / "local"
    local.mkdir(parents=True)
    before = sorted(path for path in tmp_path.rglob("*") if "box-root" not in path.parts)
    code = main(["pull", *sshbox.cli_args(box_root), "--root", str(local), "--pull-id", "p1"])
    err = capsys.readouterr().err
    assert code == 2 and "not usable" in err and "nothing was written" in err
    assert sorted(path for path in tmp_path.rglob("*") if "box-root" not in path.parts) == before
    assert not Path("/tmp/escaped-by-box-absolute").exists()


# What a hostile box's "suite" leaves as its report: pytest on the box is the box's own code (its PYTHONPATH,
# its interpreter), so the bytes that come home are the box's word. Each was merged into the local report
# CI publishes (NaN verdicts, another run's "yes") or crashed the verb with a traceback (deep nesting).
BOX_REPORTS = {
    "another-runs-verdicts": lambda valid: json.dumps({**valid, "run_id": "someone-else"}),
    "a-nan-in-a-verdict": lambda valid: json.dumps(valid).replace('"NAN-HERE"', "NaN", 1),
    "nested-past-any-walker": lambda valid: "[" * 100_000 + "]" * 100_000,
    "verdicts-that-are-no-list": lambda valid: json.dumps({**valid, "verdicts": "all passed"}),
}

FAKE_PYTEST = """
import sys
from pathlib import Path
argv = sys.argv[1:]
folder = Path(argv[argv.index("--runaudit-report-dir") + 1])
run_id = argv[argv.index("--run") + 1]
(folder / f"{run_id}.json").write_text((Path(__file__).parent / "report.txt").read_text())
"""


@pytest.mark.parametrize("forgery", sorted(BOX_REPORTS))
def test_a_report_from_the_box_that_is_no_report_of_the_run_is_refused_and_the_local_one_kept(
    forgery: str,
    sshbox: SshBox,
    box_root: Path,
    demo_project: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    local = tmp_path / "local"
    (local / "reports").mkdir(parents=True)
    valid = build(demo_run(demo_project), science_records())
    assert report_problems(valid) == []
    local_report = local / "reports" / f"{DEMO_RUN_ID}.json"
    local_report.write_text(json.dumps(valid))
    valid["verdicts"][0]["evidence"] = {"loss": "NAN-HERE"}
    workdir = tmp_path / "box-code"
    (workdir / "pytest").mkdir(parents=True)  # shadows pytest on the box's PYTHONPATH: the box's own code
    (workdir / "pytest" / "__init__.py").write_text("")
    (workdir / "pytest" / "__main__.py").write_text(FAKE_PYTEST)
    (workdir / "pytest" / "report.txt").write_text(BOX_REPORTS[forgery](valid))
    before = local_report.read_bytes()
    args = [*sshbox.cli_args(box_root), "--workdir", str(workdir), "--root", str(local), DEMO_RUN_ID]
    code = main(["audit", *args])
    said = capsys.readouterr()
    assert code == 2, said.out + said.err
    lines = said.err.strip().splitlines()
    assert len(lines) == 1 and DEMO_RUN_ID in lines[0] and "Traceback" not in said.err, said.err
    assert local_report.read_bytes() == before  # nothing the box said reached the local report
