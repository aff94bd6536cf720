"""Platform profiles as validated data: load, merge a member, check, and answer the questions verbs ask.

A profile is ``profiles/<platform>.toml`` checked against ``profiles/profile.schema.json`` and a few
cross-field rules (a governing teardown fact has a stamp; a deleted tier exists). A member
(``china:gpushare``) or sub-kind (``generic-ssh:slurm``) is a partial profile merged over its base.
A bad profile is one :class:`ProfileError` line naming the file and the field.

Two value rules carry the seed's lessons: ``"host dependent"`` and ``"unknown"`` are values that force a
live measurement, never a default; and an override set to ``""`` means "none", which is not the same as
an override left unset (the seed's ``${VAR:-default}`` templates confused the two).
"""

from __future__ import annotations

import copy
import datetime as dt
import re
import tomllib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from importlib import resources
from pathlib import Path
from typing import Any, cast

from runaudit.safeio import read_regular
from runaudit.schema import Problem, most_relevant, validator
from runaudit.usage import Refusal

SCHEMA_VERSION = "runaudit.profile/1"
MEASURE_LIVE = frozenset({"host dependent", "unknown"})
PER_MEMBER = "per member"
STALE_AFTER_MONTHS = 6
GOVERNING = frozenset({"teardown", "billing", "clock"})
# Tables a member merges key by key (so a member's explicit "" wins); every other key it replaces whole.
MERGED_TABLES = ("facts", "overrides", "network", "detach", "env")
NO_ACTION = frozenset({"n/a", PER_MEMBER})


class ProfileError(Refusal):
    """A profile that cannot be used; the message names the file and the field."""


def builtin_dir() -> Path:
    return Path(str(resources.files("runaudit.profiles")))


@dataclass(frozen=True)
class Stamp:
    """When a fact was last verified, from where, and how far it is trusted."""

    fact: str
    verified: str  # YYYY-MM
    source: str
    trust: str
    governs: str

    def age_months(self, today: dt.date) -> int:
        year, month = map(int, self.verified.split("-"))
        return (today.year * 12 + today.month) - (year * 12 + month)

    @property
    def governing(self) -> bool:
        return self.governs in GOVERNING


@dataclass(frozen=True)
class Action:
    """A teardown step: what it stops, what it deletes, and whether it can be undone."""

    verb: str
    stops: tuple[str, ...]
    deletes: tuple[str, ...]
    reversible: bool | str
    how: str = ""
    command: tuple[str, ...] = ()
    proof: str = ""
    fact: str | None = None

    @classmethod
    def parse(cls, raw: Mapping[str, Any]) -> Action:
        return cls(
            verb=raw["verb"],
            stops=tuple(raw["stops"]),
            deletes=tuple(raw["deletes"]),
            reversible=raw["reversible"],
            how=raw.get("how", ""),
            command=tuple(raw.get("command", ())),
            proof=raw.get("proof", ""),
            fact=raw.get("fact"),
        )

    @property
    def applicable(self) -> bool:
        return self.verb not in NO_ACTION

    def describe(self) -> str:
        if not self.applicable:
            return f"meter stop: {self.verb}"
        deleted = ", ".join(self.deletes) if self.deletes else "nothing"
        labels: dict[bool | str, str] = {True: "reversible", False: "IRREVERSIBLE"}
        undo = labels.get(self.reversible, str(self.reversible))
        how = f" ({self.how})" if self.how else ""
        return f"{self.verb}{how}: stops {', '.join(self.stops) or 'nothing'}; deletes {deleted}; {undo}"


@dataclass(frozen=True)
class Setting:
    """One script override. ``raw`` is None when unset; ``""`` means explicitly none."""

    name: str
    raw: str | None
    source: str

    @property
    def disabled(self) -> bool:
        return self.raw == ""

    def value(self, default: str | None = None) -> str | None:
        """The effective value: the default only when unset, never when explicitly emptied."""
        if self.raw is None:
            return default
        return self.raw or None


@dataclass(frozen=True)
class Profile:
    name: str  # "autodl", "china:gpushare", or a file path for a user's own profile
    path: Path
    document: Mapping[str, Any] = field(repr=False)
    user_overrides: Mapping[str, str] = field(default_factory=dict)

    # -- plain fields -----------------------------------------------------------------------------
    @property
    def platform(self) -> str:
        return cast(str, self.document["platform"])  # the profile schema holds each field to its type

    @property
    def member(self) -> str | None:
        return self.name.split(":", 1)[1] if ":" in self.name else None

    @property
    def kind(self) -> str:
        return cast(str, self.document["kind"])

    @property
    def trust(self) -> str:
        return cast(str, self.document["trust"])

    @property
    def display_name(self) -> str:
        return cast(str, self.document["display_name"])

    @property
    def summary(self) -> str:
        return cast(str, self.document.get("summary", ""))

    @property
    def facts(self) -> Mapping[str, Any]:
        return cast(Mapping[str, Any], self.document["facts"])

    @property
    def members(self) -> tuple[str, ...]:
        return tuple(self.document.get("members", {}))

    @property
    def meter_stop(self) -> Action:
        return Action.parse(self.document["meter_stop"])

    @property
    def teardown(self) -> tuple[Action, ...]:
        return tuple(Action.parse(raw) for raw in self.document.get("teardown", ()))

    @property
    def extra_billables(self) -> tuple[str, ...]:
        return tuple(self.document.get("extra_billables", ()))

    @property
    def danger_clocks(self) -> tuple[Mapping[str, str], ...]:
        return tuple(self.document["danger_clocks"])

    @property
    def tiers(self) -> tuple[Mapping[str, str], ...]:
        return tuple(self.document["tiers"])

    @property
    def detach(self) -> Mapping[str, Any]:
        return cast(Mapping[str, Any], self.document["detach"])

    @property
    def env(self) -> Mapping[str, Any]:
        return cast(Mapping[str, Any], self.document["env"])

    @property
    def network(self) -> Mapping[str, Any]:
        return cast(Mapping[str, Any], self.document.get("network", {}))

    @property
    def stamps(self) -> tuple[Stamp, ...]:
        return tuple(Stamp(**raw) for raw in self.document["stamps"])

    @property
    def known_hosts(self) -> Path | None:
        """A pinned known_hosts file shipped with the profile (relative to the profile file)."""
        pinned = self.document.get("known_hosts")
        return (self.path.parent / Path(pinned).expanduser()) if pinned else None

    # -- questions --------------------------------------------------------------------------------
    def setting(self, name: str) -> Setting:
        if name in self.user_overrides:
            return Setting(name, self.user_overrides[name], "--override")
        overrides = self.document.get("overrides", {})
        if name in overrides:
            return Setting(name, overrides[name], f"profile {self.name}")
        return Setting(name, None, "unset")

    def with_overrides(self, overrides: Mapping[str, str]) -> Profile:
        """The same profile with the user's overrides on top; ``NAME=`` explicitly disables NAME."""
        allowed = set(
            validator("runaudit.profiles", "profile.schema.json").schema["$defs"]["body"]["properties"][
                "overrides"
            ]["properties"]
        )
        unknown = sorted(set(overrides) - allowed)
        if unknown:
            raise ProfileError(
                f"--override {unknown[0]}: not a profile override (known: {', '.join(sorted(allowed))})"
            )
        return replace(self, user_overrides={**self.user_overrides, **overrides})

    @property
    def needs_member(self) -> bool:
        """True when a governing value is 'per member': the base alone cannot be acted on."""
        return self.meter_stop.verb == PER_MEMBER or any(v == PER_MEMBER for v in self.facts.values())

    def measured_live(self) -> list[str]:
        """Fields whose value is not a fact but an instruction to measure on the box."""
        fields = [f"facts.{key}" for key, value in self.facts.items() if value in MEASURE_LIVE]
        if not re.fullmatch(r"\d+(\.\d+)?", str(self.facts["host_driver_cuda_max"])):
            fields.append("facts.host_driver_cuda_max")
        for index, tier in enumerate(self.tiers):
            fields += [
                f"tiers[{index}].{key}"
                for key in ("survives_stop", "survives_teardown")
                if tier.get(key) in MEASURE_LIVE
            ]
        return sorted(set(fields))

    def governing_stamps(self) -> list[Stamp]:
        """Stamps of facts that decide a teardown: the actions', the clocks' and every billing fact."""
        referenced = {action.fact for action in (self.meter_stop, *self.teardown) if action.fact} | {
            clock["fact"] for clock in self.danger_clocks if clock.get("fact")
        }
        return [stamp for stamp in self.stamps if stamp.fact in referenced or stamp.governing]

    def stale_stamps(self, today: dt.date, months: int = STALE_AFTER_MONTHS) -> list[Stamp]:
        return [stamp for stamp in self.governing_stamps() if stamp.age_months(today) > months]


# -- loading ---------------------------------------------------------------------------------------


def _schema_problem(document: Any) -> str | None:
    checker = validator("runaudit.profiles", "profile.schema.json")
    problem, count = most_relevant(checker, document)
    if problem is None:
        return None
    if problem.extra:
        where, message = (
            Problem((*problem.path, problem.extra[0]), ""),
            f"unknown field (not in {SCHEMA_VERSION})",
        )
    elif problem.missing:
        where, message = Problem((*problem.path, problem.missing[0]), ""), "required field is missing"
    else:
        where, message = problem, problem.message
    more = f" (and {count - 1} more)" if count > 1 else ""
    return f"{where.field}: {message}{more}"


def _cross_field_problem(document: Mapping[str, Any], prefix: str) -> str | None:
    """Rules a JSON Schema cannot say: references between facts, stamps and tiers."""
    stamps = [raw["fact"] for raw in document.get("stamps", ())]
    seen: set[str] = set()
    for index, fact in enumerate(stamps):
        if fact in seen:
            return f"{prefix}stamps[{index}].fact: {fact!r} is stamped twice"
        seen.add(fact)
    tier_names = {tier["name"] for tier in document["tiers"]}
    actions = [("meter_stop", document["meter_stop"])] + [
        (f"teardown[{index}]", raw) for index, raw in enumerate(document.get("teardown", ()))
    ]
    for where, raw in actions:
        if raw["verb"] in NO_ACTION:
            continue
        if "fact" not in raw:
            return f"{prefix}{where}.fact: a teardown action needs the id of its [[stamps]] entry"
        if raw["fact"] not in seen:
            return f"{prefix}{where}.fact: {raw['fact']!r} has no [[stamps]] entry"
        unknown = [name for name in raw["deletes"] if name not in tier_names]
        if unknown:
            return (
                f"{prefix}{where}.deletes: {unknown[0]!r} is not a tier of this profile "
                f"(tiers: {', '.join(sorted(tier_names))})"
            )
    for index, clock in enumerate(document["danger_clocks"]):
        if "fact" in clock and clock["fact"] not in seen:
            return f"{prefix}danger_clocks[{index}].fact: {clock['fact']!r} has no [[stamps]] entry"
    return None


def merge_member(base: Mapping[str, Any], member: Mapping[str, Any]) -> dict[str, Any]:
    """A member's document: its keys replace the base's, key by key inside the merged tables.

    Stamps add up (the base's facts still govern); a member's ``""`` override replaces the base value.
    """
    merged = copy.deepcopy({key: value for key, value in base.items() if key != "members"})
    for key, value in member.items():
        if key in MERGED_TABLES:
            merged[key] = {**merged.get(key, {}), **copy.deepcopy(value)}
        elif key == "stamps":
            merged["stamps"] = [*merged.get("stamps", []), *copy.deepcopy(value)]
        else:
            merged[key] = copy.deepcopy(value)
    return merged


PROFILE_CAP = 1 << 20  # bytes of a profile: a platform's facts fill a few KiB


def _read(path: Path) -> dict[str, Any]:
    """The profile's TOML, read as run data is (a regular file, without blocking, up to a cap): a FIFO
    named as the profile hung every session, and a table nested thousands deep ended one in INTERNALERROR."""
    try:
        return tomllib.loads(read_regular(path, PROFILE_CAP).decode("utf-8"))
    except FileNotFoundError:
        raise ProfileError(f"{path}: no such profile file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ProfileError(f"{path}: cannot read the profile ({exc})") from None
    except tomllib.TOMLDecodeError as exc:
        raise ProfileError(f"{path}: not valid TOML ({exc})") from None
    except RecursionError:
        raise ProfileError(f"{path}: not a profile (its tables or arrays nest too deeply to read)") from None


def check_document(path: Path, document: dict[str, Any]) -> None:
    """Raise :class:`ProfileError` for the first problem in a whole profile file, members included."""
    problem = _schema_problem(document) or _cross_field_problem(document, "")
    if problem is None:
        for name, member in document.get("members", {}).items():
            problem = _cross_field_problem(merge_member(document, member), f"members.{name}.")
            if problem:
                break
    if problem:
        raise ProfileError(f"{path}: {problem}")


def _locate(spec: str) -> tuple[Path, str, str | None]:
    """(file, profile name, member) for ``name``, ``name:member``, ``file.toml`` or ``file.toml:member``."""
    base, _, member = spec.partition(":")
    if base.endswith(".toml") or "/" in base:
        return Path(base).expanduser(), spec, member or None
    path = builtin_dir() / f"{base}.toml"
    if not re.fullmatch(r"[a-z0-9][a-z0-9-]*", base) or not path.is_file():
        raise ProfileError(f"profile {spec!r}: no such profile (known: {', '.join(profile_names())})")
    return path, spec, member or None


def load_profile(spec: str, overrides: Mapping[str, str] | None = None) -> Profile:
    """The profile ``spec`` names, validated, with a member merged and the user's overrides applied."""
    path, name, member = _locate(spec)
    document = _read(path)
    check_document(path, document)
    if member is not None:
        members = document.get("members", {})
        if member not in members:
            known = ", ".join(sorted(members)) or "none"
            raise ProfileError(f"{path}: members.{member}: no such member (members: {known})")
        document = merge_member(document, members[member])
    profile = Profile(name=name, path=path, document=document)
    return profile.with_overrides(overrides) if overrides else profile


def profile_names() -> list[str]:
    """Every built-in profile and member, e.g. ``autodl``, ``china:gpushare``, ``generic-ssh:slurm``."""
    names = []
    for path in sorted(builtin_dir().glob("*.toml")):
        names.append(path.stem)
        try:
            members = tomllib.loads(path.read_text(encoding="utf-8")).get("members", {})
        except (OSError, tomllib.TOMLDecodeError):
            continue  # reported when the profile itself is loaded
        names += [f"{path.stem}:{member}" for member in sorted(members)]
    return names


def parse_assignments(values: Iterable[str], option: str) -> dict[str, str]:
    """``NAME=VALUE`` pairs from the command line; ``NAME=`` is kept as an explicit empty value."""
    parsed: dict[str, str] = {}
    for item in values:
        name, sep, value = item.partition("=")
        if not sep or not name:
            raise ProfileError(f"{option} {item!r}: expected NAME=VALUE (NAME= disables NAME)")
        parsed[name] = value
    return parsed
