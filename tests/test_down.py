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
from dataclasses import replace
from functools import partial
from pathlib import Path
from typing import Any

import pytest
from capsules import pulled_home
from cpu_time import least_cpu_seconds

from runaudit import receipts
from runaudit.cli import main
from runaudit.examples.digits.build import DEMO_RUN_ID
from runaudit.manifest import RECEIPT, locate
from runaudit.platforms import builtin_dir, load_profile
from runaudit.receipts import receipt_status, snapshot
from runaudit.runners import down as down_module
from runaudit.runners.box import Box
from runaudit.runners.down import (
    AREAS,
    Entry,
    Inventory,
    Refused,
    gate,
    mark_resumed,
    own_names,
    parse_inventory,
    record_path,
    shown,
)

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


Files = tuple[tuple[str, int, str], ...]


def as_pulled(project: Path, run_id: str) -> Files:
    """What the producer's box holds in ``export/<run_id>``: the files its pull manifest lists, as the
    box's listing gives them (path below the capsule, size, SHA-256); nothing for a run no pull names."""
    manifest = locate(project, run_id)
    entries = manifest.entries_of(run_id) if manifest is not None else []
    return tuple((item["path"].split("/", 1)[1], item["bytes"], item["sha256"]) for item in entries)


def inventory(
    project: Path,
    *entries: tuple[str, str],
    holding: dict[tuple[str, str], Files] | None = None,
    areas: tuple[str, ...] = tuple(AREAS),
) -> Inventory:
    """A box listing: (area, name) pairs, every one a folder, under a root holding ``areas``. A sealed
    capsule holds what its pull listed; ``holding`` gives any folder other files."""
    found = [
        Entry(
            area,
            name,
            "dir",
            files=(holding or {}).get((area, name), as_pulled(project, name) if area == "export" else ()),
        )
        for area, name in entries
    ]
    return Inventory("me@box.invalid:22", "/srv/project", tuple(mark_resumed(found)), areas)


@pytest.fixture
def box_holds(monkeypatch: pytest.MonkeyPatch, project: Path) -> Iterator[list[tuple[str, str]]]:
    """What the (stand-in) box lists for ``down``; by default the sealed demo capsule, as its producer left it."""
    listing = [("export", DEMO_RUN_ID)]

    def take(box: Box) -> Inventory:
        assert str(box.root) == "/srv/project" and box.endpoint.host == "box.invalid"
        return inventory(project, *listing)

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
def project(project: Path) -> Path:
    """The demo project as a user's own after a pull: the capsule in ``runs/``, verified there."""
    return pulled_home(project, DEMO_RUN_ID)


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
    listing = inventory(project, ("export", DEMO_RUN_ID), ("active", "d4"))
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
    closing = inventory(project, ("export", DEMO_RUN_ID), ("export/.partial", DEMO_RUN_ID))
    with pytest.raises(
        Refused,
        match=rf"{DEMO_RUN_ID} \(export/, sealed; export/.partial/, closing, interrupted\): the box holds",
    ):
        approve(project, closing)
    sealed = as_pulled(project, DEMO_RUN_ID)
    best = next(item for item in sealed if item[0] == "best.pth")
    for workspace in (
        (("last.pth", 16, "0" * 64),),  # training went on: a checkpoint the capsule does not hold
        (best[:2] + ("f" * 64,),),  # a checkpoint by a sealed name, with other bytes (whatever its time)
    ):
        resumed = inventory(
            project,
            ("export", DEMO_RUN_ID),
            ("active", DEMO_RUN_ID),
            holding={("active", DEMO_RUN_ID): workspace},
        )
        with pytest.raises(
            Refused, match=r"active/, live, holding files close seals that its sealed capsule does not hold"
        ):
            approve(project, resumed, roster=(DEMO_RUN_ID,))
        assert approve(project, resumed, abandon=(DEMO_RUN_ID,)).abandoned == [DEMO_RUN_ID]
    # After a close, its workspace stays, without the sealed names, or with copies of them (export/ on
    # another filesystem): the receipt covers the run.
    for workspace in ((), (best,)):
        closed = inventory(
            project,
            ("export", DEMO_RUN_ID),
            ("active", DEMO_RUN_ID),
            holding={("active", DEMO_RUN_ID): workspace},
        )
        assert list(approve(project, closed).receipts) == [DEMO_RUN_ID]


def test_a_receipt_covers_the_box_s_capsule_only_while_it_holds_the_bytes_that_were_pulled(
    project: Path,
) -> None:
    """The box's export/<id> (or runs/<id>) must be, file for file, what the receipt verified: a run minted
    again under the same id, or a capsule edited on the box after the pull, is bytes that are nowhere else
    (each case was approved before)."""
    pulled = as_pulled(project, DEMO_RUN_ID)
    best = next(item for item in pulled if item[0] == "best.pth")
    others = tuple(item for item in pulled if item is not best)
    for area in ("export", "runs"):
        same = inventory(project, (area, DEMO_RUN_ID), holding={(area, DEMO_RUN_ID): pulled})
        assert list(approve(project, same).receipts) == [DEMO_RUN_ID]
        for held, why in (
            ((*others, (best[0], best[1], "e" * 64)), "best.pth differs"),  # same size, other bytes
            (
                (*pulled, ("test/new_eval/preds.csv", 9, "e" * 64)),
                "test/new_eval/preds.csv is not in the pull",
            ),
            (others, "best.pth is missing"),
        ):
            changed = inventory(project, (area, DEMO_RUN_ID), holding={(area, DEMO_RUN_ID): held})
            with pytest.raises(Refused) as refused:
                approve(project, changed)
            assert (
                f"the box's {area}/{DEMO_RUN_ID} is not the capsule pull {DEMO_RUN_ID} verified ({why}"
                in str(refused.value)
            )
            assert approve(project, changed, abandon=(DEMO_RUN_ID,)).abandoned == [DEMO_RUN_ID]
    linked = Inventory(
        "me@box.invalid:22",
        "/srv/project",
        (Entry("export", DEMO_RUN_ID, "dir", files=pulled, odd=("test",)),),
        tuple(AREAS),
    )
    with pytest.raises(Refused, match=r"\(test is not a regular file\)"):
        approve(project, linked)


def test_a_hardware_capsule_is_never_covered_by_a_receipt_of_the_same_name(project: Path) -> None:
    """No pull manifest lists export/hardware or runs/hardware, so no receipt covers what they hold: a
    hardware capsule named like a receipted run was approved on that run's receipt."""
    for area in ("export/hardware", "runs/hardware"):
        listing = inventory(project, ("export", DEMO_RUN_ID), (area, DEMO_RUN_ID))
        with pytest.raises(Refused) as refused:
            approve(project, listing)
        assert f"hardware/{DEMO_RUN_ID} ({area}/, " in str(refused.value)
        assert "a hardware capsule, which no pull manifest lists" in str(refused.value)
        with pytest.raises(Refused, match=f"hardware/{DEMO_RUN_ID} \\("):
            approve(project, listing, abandon=(DEMO_RUN_ID,))  # the run, not the hardware capsule
        approval = approve(project, listing, abandon=(f"hardware/{DEMO_RUN_ID}",))
        assert list(approval.receipts) == [DEMO_RUN_ID] and approval.abandoned == [f"hardware/{DEMO_RUN_ID}"]


def test_an_empty_inventory_with_no_run_named_proves_nothing(project: Path) -> None:
    with pytest.raises(Refused, match=r"holds no run under /srv/project.*check --remote-root"):
        approve(project, inventory(project))
    # A run named explicitly still rests on its own receipt.
    assert list(approve(project, inventory(project), roster=(DEMO_RUN_ID,)).receipts) == [DEMO_RUN_ID]
    # Unless the remote root holds none of the project's areas: a wrong --remote-root (the attack named the
    # run, pointed down at the folder above the project, and was approved while active/ held a live run).
    with pytest.raises(Refused, match=r"holds none of active/, export/.*check --remote-root"):
        approve(project, inventory(project, areas=()), roster=(DEMO_RUN_ID,))


def test_abandon_must_name_something_on_the_box_and_not_a_run_claimed_home(project: Path) -> None:
    listing = inventory(project, ("export", DEMO_RUN_ID), ("active", "d4"))
    with pytest.raises(Refused, match=r"--abandon d5 names nothing on me@box.invalid:22"):
        approve(project, listing, abandon=("d4", "d5"))
    with pytest.raises(Refused, match=rf"{DEMO_RUN_ID} is both named as proven home and abandoned"):
        approve(project, listing, roster=(DEMO_RUN_ID,), abandon=(DEMO_RUN_ID, "d4"))


def test_a_quarantined_attempt_is_covered_by_no_receipt_only_by_its_own_name(project: Path) -> None:
    """A close that failed is bytes no pull brought home: the run's receipt (of the capsule sealed later)
    covered it before, and tearing down deleted it, its reasons with it."""
    attempt = f"{DEMO_RUN_ID}--20260101T000000Z-abc123"
    listing = inventory(project, ("export", DEMO_RUN_ID), ("quarantine", attempt))
    with pytest.raises(
        Refused,
        match=rf"quarantine/{attempt} \(quarantine/, quarantined\): a close of run {DEMO_RUN_ID} that failed",
    ) as refused:
        approve(project, listing)
    assert f"{DEMO_RUN_ID} (export" not in str(refused.value)  # the sealed capsule itself is covered
    with pytest.raises(Refused, match=rf"quarantine/{attempt} \(quarantine/"):
        approve(project, listing, abandon=(DEMO_RUN_ID,))  # abandoning the run is not abandoning the attempt
    approval = approve(project, listing, abandon=(f"quarantine/{attempt}",))
    assert approval.abandoned == [f"quarantine/{attempt}"] and list(approval.receipts) == [DEMO_RUN_ID]
    # An attempt of a run never pulled, and a name that is no attempt, are abandoned the same way.
    listing = inventory(project, ("quarantine", "d5--20260102T030405Z-0f0f0f"), ("quarantine", "loose"))
    with pytest.raises(Refused, match=r"quarantine/d5--20260102T030405Z-0f0f0f .*quarantine/loose \("):
        approve(project, listing)
    keys = ("quarantine/d5--20260102T030405Z-0f0f0f", "quarantine/loose")
    assert approve(project, listing, abandon=keys).abandoned == list(keys)


def test_a_run_still_training_blocks_even_when_its_files_are_the_pulled_ones(project: Path) -> None:
    """A live run whose workspace holds the sealed bytes (a close across filesystems leaves that copy) was
    approved while a trainer held its lock: tearing down killed the training in mid-write."""
    sealed = as_pulled(project, DEMO_RUN_ID)
    held = {("active", DEMO_RUN_ID): sealed}
    listing = inventory(project, ("export", DEMO_RUN_ID), ("active", DEMO_RUN_ID), holding=held)
    assert list(approve(project, listing).receipts) == [DEMO_RUN_ID]  # a closed run's copy: approved
    for state, reason in (
        ("held", "a writer holds active/"),
        ("unknown", rf"its active/{DEMO_RUN_ID}/\.writer\.lock is not a plain file"),
    ):
        live = Inventory(
            listing.box,
            listing.root,
            tuple(
                replace(entry, writer=state) if entry.area == "active" else entry for entry in listing.entries
            ),
            listing.areas,
        )
        with pytest.raises(Refused, match=rf"{DEMO_RUN_ID} \(export/, sealed; active/, live\): {reason}"):
            approve(project, live)
        assert approve(project, live, abandon=(DEMO_RUN_ID,)).abandoned == [DEMO_RUN_ID]


def test_an_unsafe_name_is_escaped_and_needs_its_exact_abandon(project: Path) -> None:
    listing = inventory(project, ("export", DEMO_RUN_ID), ("active", "..x"), ("export", "two\nlines"))
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

    digest, two_lines = "ab" * 32, "test/main/a\nb"
    answer = "\n".join(
        [
            "root=present",
            "area active present",
            f"entry active dir {hexed('d4')}",
            f"file active {hexed('d4')} {hexed('last.pth')} 16 {digest}",  # no sealed capsule of d4: resumed
            f"entry active dir {hexed('d5')}",
            f"file active {hexed('d5')} {hexed('best.pth')} 16 {digest}",  # a copy of the sealed one: not
            f"writer active {hexed('d5')} held",  # but a trainer holds its lock
            f"entry export dir {hexed('d5')}",
            f"file export {hexed('d5')} {hexed('best.pth')} 16 {digest}",
            f"file export {hexed('d5')} {hexed(two_lines)} 3 {digest}",
            f"odd export {hexed('d5')} {hexed('link')}",
            f"entry export dir {hexed('.partial')}",  # the harness's own folders and lock are not runs
            f"entry export dir {hexed('hardware')}",
            f"entry export empty {hexed('.close.lock')}",
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
        ("export", "d5", "d5", False),
        ("export/.partial", "d6", "d6", False),
        ("export/hardware", "hardware/h1", None, False),  # no receipt covers a hardware capsule
        ("quarantine", "quarantine/odd\udcff", None, False),  # nor a quarantined attempt
    ]
    assert [entry.writer for entry in found.entries] == [None, "held", None, None, None, None]
    assert found.entries[2].files == (("best.pth", 16, digest), (two_lines, 3, digest))
    assert found.entries[2].odd == ("link",) and found.areas == ("active",)
    assert found.entries[3].where == "export/.partial/, closing, interrupted"
    # What the box hashed belongs to the folder listed just before it, by the same area and name.
    with pytest.raises(
        Refused, match=r"active/d5 cannot be listed: whether training resumed there is not known"
    ):
        parse_inventory(
            answer.replace("inventory=complete", f"unlisted {hexed('d5')}\ninventory=complete"), "b", "/r"
        )
    # A quarantined attempt is abandoned by its exact name, shown escaped where it is not a safe id.
    [odd] = parse_inventory(
        f"entry quarantine dir {hexed('d4--20260101T000000Z-abc123' + chr(10))}\ninventory=complete",
        "b",
        "/r",
    ).entries
    assert odd.run_id is None and shown(odd.key) == repr("quarantine/d4--20260101T000000Z-abc123\n")
    for stray in (
        f"file quarantine {hexed('d4')} {hexed('x')} 1 {digest}",
        f"file active {hexed('d4')} {hexed('x')} 1 {digest}",  # d4 is not the entry listed last
        f"file quarantine {hexed('odd' + chr(0xDCFF))} {hexed('x')} -1 {digest}",
        f"file quarantine {hexed('odd' + chr(0xDCFF))} {hexed('x')} 1 {digest[:-1]}",
        f"odd quarantine {hexed('odd' + chr(0xDCFF))}",
        f"writer quarantine {hexed('odd' + chr(0xDCFF))} held",  # only a live run has a writer
        f"file quarantine {hexed('odd' + chr(0xDCFF))} {hexed('x')} \u00b2 {digest}",  # a digit int() refuses
        f"file quarantine {hexed('odd' + chr(0xDCFF))} {hexed('x')} {'9' * 5000} {digest}",  # nor 5000 digits
    ):
        lines = answer.replace("inventory=complete", f"{stray}\ninventory=complete")
        with pytest.raises(Refused, match="unexpected listing line"):
            parse_inventory(lines, "me@box:22", "/r")
    with pytest.raises(Refused, match="unexpected listing line"):
        parse_inventory(answer.replace("held", "maybe"), "me@box:22", "/r")
    # close's lock file holding bytes is not close's: it is listed, and a receipt can cover no such name.
    [lock] = parse_inventory(
        f"entry export file {hexed('.close.lock')}\ninventory=complete", "b", "/r"
    ).entries
    assert (lock.area, lock.key, lock.run_id) == ("export", ".close.lock", None)
    with pytest.raises(Refused, match=r"could not hash export/d5: a file or folder it cannot read"):
        parse_inventory(
            answer.replace("odd export", "unhashed export").replace(f" {hexed('link')}", ""), "b", "/r"
        )
    with pytest.raises(Refused, match=r"no Python, --python, to hash"):
        parse_inventory("root=present\nhasher=missing\ninventory=complete\n", "me@box:22", "/r")
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


def test_what_down_reads_or_writes_here_is_refused_in_one_line_when_it_is_not_what_it_should_be(
    project: Path, box_holds: list, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A FIFO as --roster hung down, /dev/zero filled the memory (a traceback), a file in the place of
    _trust/teardowns raised one after the approval, and a line break in --target split the plan's lines."""
    fifo = tmp_path / "roster"
    os.mkfifo(fifo)
    for roster in (fifo, Path("/dev/zero")):
        assert (
            main(
                [
                    "down",
                    *BOX_ARGS,
                    "--root",
                    str(project),
                    "--roster",
                    str(roster),
                    "--profile",
                    "runpod",
                    "--target",
                    "pod-7",
                ]
            )
            == 2
        )
        assert "cannot read the roster" in capsys.readouterr().err
    assert down(project, "runpod", "--confirm", "pod\n7") == 2  # no target: refused where it is parsed
    with pytest.raises(SystemExit):
        main(["down", *BOX_ARGS, "--root", str(project), "--profile", "runpod", "--target", "pod\n7"])
    assert "one printable line" in capsys.readouterr().err
    teardowns = project / "_trust" / "teardowns"
    teardowns.write_text("a file in the folder's place")
    assert down(project, "runpod", "--confirm", "pod-7") == 2
    out, err = capsys.readouterr()
    assert f"{teardowns} is not a folder" in err.splitlines()[-1] and "approved" not in out
    teardowns.unlink()
    teardowns.symlink_to(tmp_path)
    assert down(project, "runpod", "--confirm", "pod-7") == 2
    assert f"{teardowns} is a symlink" in capsys.readouterr().err and not list(tmp_path.glob("*.json"))


def test_a_listing_of_many_files_is_read_in_linear_time() -> None:
    """Each hashed file rebuilt its entry's tuple of files: 80,000 files took 21 s to read, 1,000,000 (a
    manifest admits them) about an hour before any comparison."""
    digest = "ab" * 32
    name = DEMO_RUN_ID.encode().hex()
    lines = ["root=present", "area export present", f"entry export dir {name}"]
    lines += [f"file export {name} {f'f{index}'.encode().hex()} 1 {digest}" for index in range(80_000)]
    listing = "\n".join([*lines, "inventory=complete"])
    assert least_cpu_seconds(partial(parse_inventory, listing, "b", "/r"), 3) < 3
    [entry] = parse_inventory(listing, "b", "/r").entries
    assert len(entry.files) == 80_000


def test_one_answer_reads_each_manifest_and_receipt_once_however_many_runs_it_covers(
    project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each run of a roster read and parsed every pull manifest again, and its receipt: 100 runs of one
    pull took 22 s before a byte was checked (quadratic in the runs)."""
    from runaudit import manifest as manifests

    reads: list[str] = []
    for name in ("read_manifest", "receipt_of"):
        real = getattr(manifests, name)
        monkeypatch.setattr(
            manifests, name, lambda *args, real=real, name=name: reads.append(name) or real(*args)
        )
    status = receipt_status(project, [DEMO_RUN_ID, "other-1", "other-2"], check_bytes=False)
    assert status.runs[DEMO_RUN_ID].problems == ()
    assert sorted(reads) == ["read_manifest", "receipt_of"]  # one pull folder in the demo project


def test_a_remote_root_with_a_line_break_is_refused_where_it_is_parsed(
    project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A line break in --remote-root reached rsync's protocol, whose own error was all a pull said."""
    args = ["down", "--host", "box.invalid", "--known-hosts", "/nonexistent", "--root", str(project)]
    with pytest.raises(SystemExit):
        main([*args, "--remote-root", "/srv/pro\nject", "--profile", "runpod", "--target", "pod-7"])
    assert "--remote-root must be an absolute, printable path" in capsys.readouterr().err


def test_a_verified_copy_on_the_box_s_own_nfs_export_goes_with_the_box(
    project: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """NFS is storage that outlives a box, but not the box's own export: with the pull on an NFS mount
    served by the box, down approved, and the teardown took the only copy. (The kernel's mount table is the
    boundary: this test gives it the line the mount would add.)"""
    from runaudit import mounts

    table = tmp_path / "mountinfo"
    real = mounts.MOUNTINFO.read_text() if mounts.MOUNTINFO.exists() else ""
    point = str((project / "runs").resolve()).replace(" ", "\\040")
    monkeypatch.setattr(mounts, "MOUNTINFO", table)
    listing = replace(inventory(project, ("export", DEMO_RUN_ID)), host="10.1.2.3")
    for kind, source in (("nfs4", "10.1.2.3:/srv/project/export"), ("cifs", "//10.1.2.3/project")):
        table.write_text(real + f"900 1 0:99 / {point} rw - {kind} {source} rw\n")
        with pytest.raises(Refused, match=rf"{DEMO_RUN_ID} \(export/, sealed\): .*the box's own storage"):
            approve(project, listing)
    table.write_text(real + f"900 1 0:99 / {point} rw - nfs4 10.9.9.9:/srv/project/export rw\n")
    assert list(approve(project, listing).receipts) == [DEMO_RUN_ID]  # a file server's storage is a copy


def test_a_verified_copy_on_the_box_s_export_mounted_under_another_of_its_addresses_goes_with_it(
    project: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """SSH reached the box at a provider's public address, NFS mounted its export at the box's private or
    tailnet address: down compared the mount's server with the SSH host alone and approved (a loop device
    and a bind mount on the attacker's machine). The box gives its names and addresses in its listing."""
    from runaudit import mounts

    table = tmp_path / "mountinfo"
    real = mounts.MOUNTINFO.read_text() if mounts.MOUNTINFO.exists() else ""
    point = str((project / "runs").resolve()).replace(" ", "\\040")
    monkeypatch.setattr(mounts, "MOUNTINFO", table)
    said = "box-7\n10.0.3.17\n100.64.0.7\nfd7a115cdeadbeef0000000000000001\n127.0.0.1\n"
    names = parse_inventory(f"names {said.encode().hex()}\ninventory=complete", "b", "/r").names
    listing = replace(inventory(project, ("export", DEMO_RUN_ID)), host="ssh.provider.invalid", names=names)
    assert listing.names == ("box-7", "10.0.3.17", "100.64.0.7", "fd7a:115c:dead:beef::1")
    for source in (
        "100.64.0.7:/srv/project/export",
        "BOX-7:/srv",
        "[fd7a:115c:dead:beef::1]:/",
        "//10.0.3.17/p",
    ):
        kind = "cifs" if source.startswith("//") else "nfs4"
        table.write_text(real + f"900 1 0:99 / {point} rw - {kind} {source} rw\n")
        with pytest.raises(Refused, match=rf"{DEMO_RUN_ID} \(export/, sealed\): .*the box's own storage"):
            approve(project, listing)
    table.write_text(real + f"900 1 0:99 / {point} rw - nfs4 10.9.9.9:/srv/project/export rw\n")
    assert list(approve(project, listing).receipts) == [DEMO_RUN_ID]  # a file server's storage is a copy


def test_a_box_s_own_names_are_kept_printable_bounded_and_never_loopback() -> None:
    """Loopback names every machine, so it names no box; a box may say anything, so what it says is bounded."""
    assert own_names("localhost 127.0.1.1 ::1 00000000000000000000000000000001 box\x1b[2J box") == ("box",)
    assert len(own_names(" ".join(f"n{index}" for index in range(10_000)))) == 256


def test_a_receipt_over_the_producer_s_own_export_is_no_copy_brought_home(project: Path) -> None:
    """``runaudit verify`` run in the producer's root (on the box, or a cluster's scratch) verified
    ``export/<id>`` in place, and down approved with no copy anywhere else."""
    os.rename(project / "runs" / DEMO_RUN_ID, project / "export" / DEMO_RUN_ID)
    path = project / "_trust" / "pulls" / DEMO_RUN_ID / RECEIPT
    receipt = json.loads(path.read_text())
    path.write_text(json.dumps(receipt | {"holder": "export"}, indent=2))
    assert receipt_status(project, [DEMO_RUN_ID]).ok  # whole, where it was produced
    with pytest.raises(
        Refused, match=rf"receipt {DEMO_RUN_ID} verified export/{DEMO_RUN_ID} in place, where it"
    ):
        approve(project, inventory(project, ("export", DEMO_RUN_ID)))


def test_two_approvals_in_one_second_keep_both_records(project: Path) -> None:
    """Two downs approved in the same second for one target: the check for a free name came before the
    write, and the second record replaced the first (20 of 20 tries with two processes)."""
    import datetime as dt
    import threading

    now = dt.datetime(2026, 1, 2, 3, 4, 5, tzinfo=dt.UTC)
    approval = approve(project, inventory(project, ("export", DEMO_RUN_ID)))
    start = threading.Barrier(8)
    written: list[Path] = []

    def approve_at_once() -> None:
        start.wait()
        written.append(down_module.write_record(project, approval, load_profile("runpod"), "pod-7", now=now))

    threads = [threading.Thread(target=approve_at_once) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(set(written)) == 8 and sorted(written) == records(project)


def test_launch_records_that_cannot_be_read_block_until_their_key_is_abandoned(project: Path) -> None:
    """Another project root is found through the launch records in the state folder; records that cannot be
    read may name one, and a refusal with no way to abandon it would have kept the box up for good."""
    listing = parse_inventory(
        "root=present\narea export present\nroots-unread 6b31\ninventory=complete\n", "me@box:22", "/r"
    )
    (unread,) = listing.entries
    assert (unread.area, unread.key, unread.run_id) == ("roots-elsewhere", "root/k1", None)
    found = inventory(project, ("export", DEMO_RUN_ID))
    both = replace(found, entries=(*found.entries, unread))
    with pytest.raises(
        Refused, match=r"root/k1 \(another project root on the box\): the launch records in k1"
    ):
        approve(project, both)
    assert approve(project, both, abandon=("root/k1",)).abandoned == ["root/k1"]
