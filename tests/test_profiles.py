"""Platform profiles are validated data: every built-in loads, a bad one is one line naming file and field."""

from __future__ import annotations

import argparse
import datetime as dt
import os
import tomllib
from pathlib import Path

import pytest

from runaudit.cli import main
from runaudit.platforms import (
    MEASURE_LIVE,
    ProfileError,
    builtin_dir,
    load_profile,
    merge_member,
    profile_names,
)
from runaudit.runners.box import add_box_arguments, endpoint_from_args

PLATFORMS = ("autodl", "runpod", "vastai", "lambda", "paperspace", "china", "generic-ssh", "local")
FRONTMATTER = (
    "spot_available",
    "spot_grace_s",
    "shared_fs",
    "inode_cap",
    "free_egress",
    "china_mirror_needed",
    "host_driver_cuda_max",
    "local_nvme",
)


def test_every_platform_of_the_design_card_ships_with_its_members() -> None:
    names = profile_names()
    assert set(PLATFORMS) <= set(names)
    assert {"china:matpool", "china:gpushare", "china:featurize", "china:lanrui"} <= set(names)
    assert {"generic-ssh:slurm", "generic-ssh:kubernetes", "generic-ssh:notebook"} <= set(names)


@pytest.mark.parametrize("name", profile_names())
def test_each_profile_loads_with_the_thirteen_frontmatter_facts(name: str) -> None:
    profile = load_profile(name)
    assert profile.platform and profile.kind and profile.detach["primitive"]
    assert profile.meter_stop.verb and profile.meter_stop.reversible in (True, False, "per member", "n/a")
    assert set(FRONTMATTER) <= set(profile.facts)
    assert profile.danger_clocks and profile.tiers
    for action in (profile.meter_stop, *profile.teardown):
        if action.applicable:  # a governing teardown fact always carries a stamp
            assert action.fact in {stamp.fact for stamp in profile.stamps}


def test_members_replace_the_base_values_and_keep_its_stamps() -> None:
    gpushare = load_profile("china:gpushare")
    assert load_profile("china").needs_member and not gpushare.needs_member
    assert gpushare.meter_stop.verb == "关机" and gpushare.setting("DURABLE_DIR").value() == "/hy-netdisk"
    assert gpushare.detach["primitive"] == "tmux"  # inherited from the base
    slurm = load_profile("generic-ssh:slurm")
    assert slurm.kind == "slurm" and slurm.detach["primitive"] == "sbatch"
    assert {"generic.teardown.provider_manual", "slurm.clock.killwait"} <= {
        stamp.fact for stamp in slurm.stamps
    }


def test_an_empty_override_means_none_and_is_never_replaced_by_a_default() -> None:
    autodl = load_profile("autodl")
    durable = autodl.setting("DURABLE_DIR")
    assert durable.disabled and durable.value("/root/autodl-fs") is None  # the seed's ${VAR:-default} bug
    unset = autodl.setting("PIP_CACHE_DIR")
    assert not unset.disabled and unset.value("/default") == "/default"
    runpod = load_profile("runpod", {"DURABLE_DIR": ""})
    assert runpod.setting("DURABLE_DIR").disabled and runpod.setting("DURABLE_DIR").source == "--override"
    member = merge_member({"overrides": {"DURABLE_DIR": "/base"}}, {"overrides": {"DURABLE_DIR": ""}})
    assert member["overrides"]["DURABLE_DIR"] == ""


def test_host_dependent_values_are_listed_for_live_measurement() -> None:
    generic = load_profile("generic-ssh")
    live = generic.measured_live()
    assert {"facts.inode_cap", "facts.shared_fs", "facts.host_driver_cuda_max"} <= set(live)
    facts = [
        field.split(".")[1]
        for field in live
        if field.startswith("facts.") and field != "facts.host_driver_cuda_max"
    ]
    assert all(generic.facts[name] in MEASURE_LIVE for name in facts)
    assert "tiers[1].survives_teardown" in live  # the provider volume's fate is host dependent too


def test_governing_stamps_go_stale_after_six_months_but_event_dates_do_not() -> None:
    runpod = load_profile("runpod")
    assert runpod.stale_stamps(dt.date(2026, 12, 2)) == []  # the 2026-04 stamp governs nothing (RP15)
    stale = {stamp.fact for stamp in runpod.stale_stamps(dt.date(2027, 1, 5))}
    assert "runpod.teardown.terminate_deletes_volume" in stale
    assert "runpod.other.no_spot_account_gate" not in stale


def _broken(tmp_path: Path, edit: str, old: str = "", name: str = "broken.toml") -> Path:
    text = (builtin_dir() / "runpod.toml").read_text(encoding="utf-8")
    text = text.replace(old, edit, 1) if old else text + edit
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


@pytest.mark.parametrize(
    ("old", "new", "field"),
    [
        ('reversible = false\nproof = "poll', 'reversible = "maybe"\nproof = "poll', "meter_stop.reversible"),
        ('spot_available = "yes"', 'spot_avialable = "yes"', "facts.spot_avialable: unknown field"),
        ('trust = "doc_researched"\nsummary', "summary", "trust: required field is missing"),
        (
            'fact = "runpod.teardown.terminate_deletes_volume"\n\n[[teardown]]',
            'fact = "runpod.teardown.nowhere"\n\n[[teardown]]',
            "meter_stop.fact: 'runpod.teardown.nowhere' has no [[stamps]]",
        ),
        (
            'deletes = ["container", "volume"]',
            'deletes = ["container", "attic"]',
            "meter_stop.deletes: 'attic' is not a tier",
        ),
        ('verified = "2026-06"', 'verified = "June 2026"', "stamps[0].verified"),
        ('inode_cap = "undocumented"', 'inode_cap = "lots"', "facts.inode_cap"),
    ],
)
def test_a_malformed_profile_is_one_line_naming_the_file_and_the_field(
    tmp_path: Path, old: str, new: str, field: str
) -> None:
    path = _broken(tmp_path, new, old)
    with pytest.raises(ProfileError) as caught:
        load_profile(str(path))
    message = str(caught.value)
    assert "\n" not in message
    assert message.startswith(f"{path}: ") and field in message, message


def test_a_bad_member_is_named_by_its_member_path(tmp_path: Path) -> None:
    text = (builtin_dir() / "china.toml").read_text(encoding="utf-8")
    path = tmp_path / "china.toml"
    path.write_text(text.replace('deletes = ["root"]', 'deletes = ["roof"]', 1), encoding="utf-8")
    with pytest.raises(ProfileError, match=r"members\.matpool\.meter_stop\.deletes: 'roof'"):
        load_profile(f"{path}:gpushare")  # any member: the whole file is checked


def test_not_toml_and_unknown_names_are_one_line(tmp_path: Path) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text("kind = [unclosed\n")
    with pytest.raises(ProfileError, match=r"bad\.toml: not valid TOML"):
        load_profile(str(bad))
    with pytest.raises(ProfileError, match=r"no such profile \(known: autodl"):
        load_profile("hetzner")
    with pytest.raises(ProfileError, match=r"members\.nope: no such member"):
        load_profile("china:nope")
    with pytest.raises(ProfileError, match=r"--override DURABLE: not a profile override"):
        load_profile("runpod", {"DURABLE": "/x"})


def test_profile_files_are_plain_toml_with_no_secret_values() -> None:
    for path in builtin_dir().glob("*.toml"):
        document = tomllib.loads(path.read_text(encoding="utf-8"))
        text = str(document).lower()
        assert "password" not in text and "api_key" not in text and "token=" not in text, path


def test_the_profiles_verb_lists_every_profile_and_shows_one(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["profiles"]) == 0
    listing = capsys.readouterr().out
    assert all(name in listing for name in profile_names())
    assert main(["profiles", "vastai"]) == 0
    detail = capsys.readouterr().out
    assert "meter stop: destroy" in detail and "DURABLE_DIR: off-box" in detail
    assert "danger clock: zero balance" in detail


def test_the_profiles_verb_reports_a_broken_file_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _broken(tmp_path, 'kind = "spaceship"', 'kind = "ssh-rental"')
    assert main(["profiles", str(path)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "kind" in err and str(path) in err


def test_a_profile_can_pin_its_own_known_hosts_file(tmp_path: Path) -> None:
    """Host keys come from --known-hosts, else the profile's pinned file, else ~/.ssh/known_hosts."""
    text = (builtin_dir() / "lambda.toml").read_text(encoding="utf-8")
    path = tmp_path / "pinned.toml"
    path.write_text(
        text.replace(
            'trust = "doc_researched"\n', 'trust = "doc_researched"\nknown_hosts = "pins/known_hosts"\n', 1
        )
    )
    profile = load_profile(str(path))
    parser = argparse.ArgumentParser()
    add_box_arguments(parser)
    args = parser.parse_args(["--host", "203.0.113.7", "--remote-root", "/home/ubuntu/proj"])
    endpoint = endpoint_from_args(args, profile)
    assert endpoint.known_hosts == tmp_path / "pins" / "known_hosts"
    assert endpoint.login == "ubuntu"  # the profile's SSH_USER
    assert endpoint_from_args(args, None).known_hosts == Path("~/.ssh/known_hosts")
    explicit = parser.parse_args(["--host", "h", "--remote-root", "/p", "--known-hosts", "/pins/kh"])
    assert endpoint_from_args(explicit, profile).known_hosts == Path("/pins/kh")


def test_a_profile_file_that_is_a_fifo_or_nested_past_reading_is_one_refusal(tmp_path: Path) -> None:
    """``--runaudit-profile`` naming a FIFO hung the session; a profile of arrays nested 100,000 deep ended it
    in INTERNALERROR (tomllib's RecursionError), with no report."""
    fifo = tmp_path / "fifo.toml"
    os.mkfifo(fifo)
    deep = tmp_path / "deep.toml"
    deep.write_text("platform = " + "[" * 100_000 + "]" * 100_000 + "\n")
    for path, why in ((fifo, "cannot read the profile"), (deep, "nest too deeply to read")):
        with pytest.raises(ProfileError, match=why):
            load_profile(str(path))
