"""The teardown gate on a real receipt: it refuses first and acts only on an explicit, named approval.

The command line always lists the box over SSH (``tests/box/test_box_down.py`` runs it against a real
sshd); here the listing is replaced by a fixed inventory, so the receipt, plan and record logic is
exercised on the real demo project without a box.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from runaudit import receipts
from runaudit.cli import main
from runaudit.examples.digits.build import DEMO_RUN_ID
from runaudit.manifest import RECEIPT
from runaudit.platforms import builtin_dir, load_profile
from runaudit.receipts import receipt_status, snapshot
from runaudit.runners import down as down_module
from runaudit.runners.box import Box
from runaudit.runners.down import Entry, Inventory, Refused, gate, parse_inventory, record_path

RUNPOD_TERMINATE = 'how = "console or `runpodctl remove pod <id>`"\n'
BOX_ARGS = ["--host", "box.invalid", "--remote-root", "/srv/project", "--known-hosts", "/nonexistent"]


def profile_with(tmp_path: Path, *, command: list[str] | None = None, verified: str = "2026-06") -> Path:
    text = (builtin_dir() / "runpod.toml").read_text(encoding="utf-8")
    if command is not None:
        text = text.replace(
            RUNPOD_TERMINATE, RUNPOD_TERMINATE + f"command = {command!r}\n".replace("'", '"'), 1
        )
    text = text.replace('verified = "2026-06"', f'verified = "{verified}"')
    path = tmp_path / f"runpod-{len(list(tmp_path.glob('*.toml')))}.toml"
    path.write_text(text, encoding="utf-8")
    return path


def inventory(*entries: tuple[str, str]) -> Inventory:
    """A box listing: (area, name) pairs, every one a folder."""
    return Inventory(
        "me@box.invalid:22", "/srv/project", tuple(Entry(area, name, "dir") for area, name in entries)
    )


@pytest.fixture
def box_holds(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[tuple[str, str]]]:
    """What the (stand-in) box lists for ``down``; by default the sealed demo capsule, as its producer left it."""
    listing = [("export", DEMO_RUN_ID)]

    def take(box: Box) -> Inventory:
        assert str(box.root) == "/srv/project" and box.endpoint.host == "box.invalid"
        return inventory(*listing)

    monkeypatch.setattr(down_module, "take_inventory", take)
    yield listing


def down(project: Path, profile: str | Path, *extra: str, runs: tuple[str, ...] = (DEMO_RUN_ID,)) -> int:
    roster = [arg for run in runs for arg in ("--run", run)]
    return main(
        [
            "down",
            *BOX_ARGS,
            "--root",
            str(project),
            *roster,
            "--profile",
            str(profile),
            "--target",
            "pod-7",
            *extra,
        ]
    )


def records(project: Path) -> list[Path]:
    return sorted((project / "_trust" / "teardowns").glob("*.json"))


def test_a_roster_run_without_a_receipt_blocks_the_whole_teardown(
    project: Path, box_holds: list, capsys: pytest.CaptureFixture[str]
) -> None:
    assert down(project, "runpod", "--confirm", "pod-7", runs=(DEMO_RUN_ID, "seed1")) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("runaudit down: error: down refused: no current receipt")
    assert "seed1 (named, not on the box): no pull manifest names it" in err and "nothing was stopped" in err
    assert "meter stop" not in err  # the plan is not even offered
    assert not records(project)


def test_the_command_runs_only_after_the_named_confirmation(
    project: Path, tmp_path: Path, box_holds: list, capsys: pytest.CaptureFixture[str]
) -> None:
    marker = tmp_path / "stopped-pod-7"
    profile = profile_with(tmp_path, command=["touch", str(tmp_path / "stopped-{target}")])
    assert down(project, profile) == 2
    err = capsys.readouterr().err
    assert "meter stop: terminate" in err and "danger clock: low account balance" in err
    assert "still billed afterwards: Network Volume" in err and not marker.exists()
    assert not records(project)
    assert down(project, profile, "--confirm", "pod-7") == 0
    assert marker.exists()
    out, err = capsys.readouterr()
    assert "a success reply is not proof: poll the pod's show endpoint until it answers 404" in err
    [record] = records(project)
    assert f"down pod-7: approved; teardown record {record}" in out
    assert record.name.startswith("pod-7-") and record.name.endswith("Z.json")


def test_a_failing_teardown_command_is_reported_as_not_stopped(
    project: Path, tmp_path: Path, box_holds: list, capsys: pytest.CaptureFixture[str]
) -> None:
    assert down(project, profile_with(tmp_path, command=["false"]), "--confirm", "pod-7") == 1
    assert "the meter may still be running" in capsys.readouterr().err


def test_a_stale_governing_fact_blocks_an_irreversible_verb_until_reverified(
    project: Path, tmp_path: Path, box_holds: list, capsys: pytest.CaptureFixture[str]
) -> None:
    stale = profile_with(tmp_path, verified="2001-01")
    assert down(project, stale, "--confirm", "pod-7") == 2
    err = capsys.readouterr().err
    assert "STALE: runpod.teardown.terminate_deletes_volume last verified 2001-01" in err
    assert "then pass --facts-reverified" in err
    assert down(project, stale, "--confirm", "pod-7", "--facts-reverified") == 0


def test_a_profile_whose_teardown_differs_per_member_needs_the_member(
    project: Path, box_holds: list, capsys: pytest.CaptureFixture[str]
) -> None:
    assert down(project, "china", "--confirm", "pod-7") == 2
    assert "pass one of china:matpool, china:gpushare" in capsys.readouterr().err


# Finding 6: the receipt is not the proof; the bytes it verified are. Each case below keeps the receipt
# itself current (a gate that trusted the receipt file alone would approve), and changes only the bytes.


@pytest.fixture
def verified_copy(project: Path) -> Path:
    """The demo capsule's verified copy, with the receipt's stat keys taken where the copy now sits.

    ``project`` is a copy of the demo project, so every file has a new inode; re-keying the receipt to
    this copy is what ``runaudit verify`` run here would record, and makes an untouched file skip its
    re-hash, as in the user's own tree.
    """
    path = project / "_trust" / "pulls" / DEMO_RUN_ID / RECEIPT
    receipt = json.loads(path.read_text())
    assert receipt["roster"] == [DEMO_RUN_ID] and receipt["holder"] in ("runs", "export")
    holder = project / receipt["holder"]
    receipt["stat_keys"] = snapshot(holder, list(receipt["stat_keys"]))
    path.write_text(json.dumps(receipt, indent=2))
    assert receipt_status(project, [DEMO_RUN_ID]).ok
    return holder / DEMO_RUN_ID


def receipt_alone_would_approve(project: Path) -> bool:
    return receipt_status(project, [DEMO_RUN_ID], check_bytes=False).ok


def test_a_flipped_byte_with_size_and_mtime_kept_is_refused(
    project: Path, verified_copy: Path, box_holds: list, capsys: pytest.CaptureFixture[str]
) -> None:
    best = verified_copy / "best.pth"
    before = best.stat()
    data = bytearray(best.read_bytes())
    data[len(data) // 2] ^= 0xFF
    best.write_bytes(bytes(data))
    os.utime(best, ns=(before.st_atime_ns, before.st_mtime_ns))
    assert best.stat().st_size == before.st_size and best.stat().st_mtime_ns == before.st_mtime_ns
    assert receipt_alone_would_approve(project)

    assert down(project, "runpod", "--confirm", "pod-7") == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err
    assert f"{best} changed since it was verified and its bytes now differ from the producer's" in err
    assert f"re-verify before any teardown: runaudit verify --root {project} --pull-id {DEMO_RUN_ID}" in err
    assert err.rstrip().endswith("nothing was stopped") and "meter stop" not in err
    assert not records(project)


def test_a_capsule_folder_removed_after_verification_is_refused(
    project: Path, verified_copy: Path, box_holds: list, capsys: pytest.CaptureFixture[str]
) -> None:
    shutil.rmtree(verified_copy)
    assert receipt_alone_would_approve(project)
    assert down(project, "runpod", "--confirm", "pod-7") == 2
    err = capsys.readouterr().err
    assert f"{verified_copy / 'best.pth'} is gone" in err and "runaudit verify --root" in err
    assert "nothing was stopped" in err and not records(project)


def test_a_touched_file_with_the_same_bytes_is_rehashed_and_approved(
    project: Path,
    verified_copy: Path,
    box_holds: list,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    best = verified_copy / "best.pth"
    os.utime(best, ns=(best.stat().st_atime_ns, best.stat().st_mtime_ns + 5_000_000_000))
    rehashed: list[Path] = []
    real: Callable[..., Any] = receipts.hash_files

    def spy(files: Any, *args: Any, **kwargs: Any) -> Any:
        rehashed.extend(files)
        return real(files, *args, **kwargs)

    monkeypatch.setattr(receipts, "hash_files", spy)
    assert down(project, "runpod", "--confirm", "pod-7") == 0
    assert rehashed == [best]  # the changed stat key forced a fresh hash; the untouched files needed none
    assert "approved; teardown record" in capsys.readouterr().out


# Finding 7: the box's inventory is part of the proof. The gate takes it as a parameter.


def approve(
    project: Path, listing: Inventory, *, roster: tuple[str, ...] = (), abandon: tuple[str, ...] = ()
):
    return gate(
        project,
        list(roster),
        load_profile("runpod"),
        "pod-7",
        "pod-7",
        inventory=listing,
        abandon=abandon,
        say=lambda line: None,
    )


def test_a_live_unpulled_run_on_the_box_blocks_until_abandoned(project: Path) -> None:
    listing = inventory(("export", DEMO_RUN_ID), ("active", "d4"))
    with pytest.raises(
        Refused, match=r"d4 \(active/, live\): no pull manifest names it.*nothing was stopped"
    ):
        approve(project, listing, roster=(DEMO_RUN_ID,))
    approval = approve(project, listing, roster=(DEMO_RUN_ID,), abandon=("d4",))
    assert list(approval.receipts) == [DEMO_RUN_ID] and approval.abandoned == ["d4"]
    # The default roster is the inventory itself.
    assert list(approve(project, listing, abandon=("d4",)).receipts) == [DEMO_RUN_ID]


def test_a_receipted_run_the_box_holds_newer_bytes_of_blocks_until_pulled_again_or_abandoned(
    project: Path,
) -> None:
    """A receipt covers the bytes it verified: a run being closed again, or resumed after its pull, is not home."""
    closing = inventory(("export", DEMO_RUN_ID), ("export/.partial", DEMO_RUN_ID))
    with pytest.raises(
        Refused,
        match=rf"{DEMO_RUN_ID} \(export/, sealed; export/.partial/, closing, interrupted\): the box holds",
    ):
        approve(project, closing)
    resumed = Inventory(
        "me@box.invalid:22",
        "/srv/project",
        (Entry("export", DEMO_RUN_ID, "dir"), Entry("active", DEMO_RUN_ID, "dir", resumed=True)),
    )
    with pytest.raises(Refused, match=r"active/, live, holding files close seals.*newer than its receipt"):
        approve(project, resumed, roster=(DEMO_RUN_ID,))
    assert approve(project, resumed, abandon=(DEMO_RUN_ID,)).abandoned == [DEMO_RUN_ID]
    # After a close, its workspace stays, without the sealed names: the receipt covers the run.
    closed = inventory(("export", DEMO_RUN_ID), ("active", DEMO_RUN_ID))
    assert list(approve(project, closed).receipts) == [DEMO_RUN_ID]


def test_an_empty_inventory_with_no_run_named_proves_nothing(project: Path) -> None:
    with pytest.raises(Refused, match=r"holds no run under /srv/project.*check --remote-root"):
        approve(project, inventory())
    # A run named explicitly still rests on its own receipt.
    assert list(approve(project, inventory(), roster=(DEMO_RUN_ID,)).receipts) == [DEMO_RUN_ID]


def test_abandon_must_name_something_on_the_box_and_not_a_run_claimed_home(project: Path) -> None:
    listing = inventory(("export", DEMO_RUN_ID), ("active", "d4"))
    with pytest.raises(Refused, match=r"--abandon d5 names nothing on me@box.invalid:22"):
        approve(project, listing, abandon=("d4", "d5"))
    with pytest.raises(Refused, match=rf"{DEMO_RUN_ID} is both named as proven home and abandoned"):
        approve(project, listing, roster=(DEMO_RUN_ID,), abandon=(DEMO_RUN_ID, "d4"))


def test_quarantined_attempts_map_back_to_their_run(project: Path) -> None:
    listing = inventory(
        ("export", DEMO_RUN_ID),
        ("quarantine", f"{DEMO_RUN_ID}--20260101T000000Z-abc123"),  # covered by the demo's receipt
        ("quarantine", "d5--20260102T030405Z-0f0f0f"),
    )
    with pytest.raises(
        Refused, match=r"d5 \(quarantine/d5--20260102T030405Z-0f0f0f, quarantined\)"
    ) as refused:
        approve(project, listing)
    assert f"{DEMO_RUN_ID} (" not in str(refused.value)
    assert approve(project, listing, abandon=("d5",)).abandoned == ["d5"]


def test_an_unsafe_name_is_escaped_and_needs_its_exact_abandon(project: Path) -> None:
    listing = inventory(("export", DEMO_RUN_ID), ("active", "..x"), ("export", "two\nlines"))
    with pytest.raises(Refused) as refused:
        approve(project, listing)
    message = str(refused.value)
    assert "\n" not in message
    assert (
        "'..x' (active/, live): not a safe run id" in message and "'two\\nlines' (export/, sealed)" in message
    )
    with pytest.raises(Refused, match=r"'two\\nlines' \(export/"):
        approve(project, listing, abandon=("..x",))
    approval = approve(project, listing, abandon=("..x", "two\nlines"))
    assert approval.abandoned == ["..x", "two\nlines"]


def test_the_teardown_record_says_what_the_approval_rests_on(
    project: Path, box_holds: list, capsys: pytest.CaptureFixture[str]
) -> None:
    box_holds += [("active", "d4"), ("active", "bad name")]
    assert down(project, "runpod", "--confirm", "pod-7", "--abandon", "d4", "--abandon", "bad name") == 0
    [path] = records(project)
    assert str(path) in capsys.readouterr().out
    record = json.loads(path.read_text())
    assert record["schema_version"] == "runaudit.teardown/1"
    assert (record["target"], record["profile"]) == ("pod-7", "runpod")
    assert (record["box"], record["remote_root"]) == ("me@box.invalid:22", "/srv/project")
    assert record["named"] == [DEMO_RUN_ID] and record["roster"] == [DEMO_RUN_ID]
    receipt = record["receipts"][DEMO_RUN_ID]
    assert receipt == {
        "pull_id": DEMO_RUN_ID,
        "receipt": str(project / "_trust" / "pulls" / DEMO_RUN_ID / RECEIPT),
    }
    assert record["abandoned"] == ["d4", "'bad name'"]
    assert [(item["area"], item["run"], item["state"]) for item in record["inventory"]] == [
        ("export", DEMO_RUN_ID, "sealed"),
        ("active", "d4", "live"),
        ("active", "'bad name'", "live"),
    ]
    assert record["approved_utc"].endswith("Z") and record["runaudit_version"]


def test_the_listing_is_decoded_strictly() -> None:
    def hexed(name: str) -> str:
        return name.encode("utf-8", "surrogateescape").hex()

    answer = "\n".join(
        [
            "root=present",
            "area active present",
            f"entry active dir {hexed('d4')}",
            f"resumed {hexed('d4')}",
            f"entry active dir {hexed('d5')}",
            f"entry export dir {hexed('.partial')}",  # the harness's own folders and lock are not runs
            f"entry export dir {hexed('hardware')}",
            f"entry export file {hexed('.close.lock')}",
            f"entry export/.partial dir {hexed('d6')}",
            f"entry export/hardware link-dir {hexed('h1')}",
            f"entry quarantine dir {hexed('odd' + chr(0xDCFF))}",  # a byte that is not UTF-8
            "inventory=complete",
        ]
    )
    found = parse_inventory(answer, "me@box:22", "/r")
    assert [(entry.area, entry.key, entry.run_id, entry.resumed) for entry in found.entries] == [
        ("active", "d4", "d4", True),
        ("active", "d5", "d5", False),
        ("export/.partial", "d6", "d6", False),
        ("export/hardware", "h1", "h1", False),
        ("quarantine", "odd\udcff", None, False),
    ]
    assert found.entries[2].where == "export/.partial/, closing, interrupted"
    # "resumed" belongs to the live run listed just before it, by the same name, and to nothing else.
    with pytest.raises(
        Refused, match=r"active/d5 cannot be listed: whether training resumed there is not known"
    ):
        parse_inventory(
            answer.replace("inventory=complete", f"unlisted {hexed('d5')}\ninventory=complete"), "b", "/r"
        )
    # A quarantined attempt's name must be <id>--<attempt> whole: a line break after it makes it no attempt.
    [odd] = parse_inventory(
        f"entry quarantine dir {hexed('d4--20260101T000000Z-abc123' + chr(10))}\ninventory=complete",
        "b",
        "/r",
    ).entries
    assert odd.run_id is None
    for stray in (f"resumed {hexed('d5')}", f"resumed {hexed('d4')} x", f"resumed {hexed('d6')}"):
        lines = answer.replace("inventory=complete", f"{stray}\ninventory=complete")
        with pytest.raises(Refused, match="unexpected listing line"):
            parse_inventory(lines.replace(f"resumed {hexed('d4')}\n", ""), "me@box:22", "/r")
    with pytest.raises(Refused, match="cut short"):
        parse_inventory(answer.replace("inventory=complete", ""), "me@box:22", "/r")
    with pytest.raises(Refused, match=r"/r does not exist on me@box:22.*check --remote-root"):
        parse_inventory("root=missing\ninventory=complete\n", "me@box:22", "/r")
    with pytest.raises(Refused, match=r"/r/quarantine cannot be listed"):
        parse_inventory("root=present\narea quarantine unreadable\ninventory=complete\n", "me@box:22", "/r")


def test_the_record_name_comes_from_the_target_but_is_never_a_path(project: Path) -> None:
    import datetime as dt

    now = dt.datetime(2026, 1, 2, 3, 4, 5, tzinfo=dt.UTC)
    path = record_path(project, "../../etc/pod 7", now)
    assert (
        path.parent == project / "_trust" / "teardowns" and path.name == "_.._etc_pod_7-20260102T030405Z.json"
    )
