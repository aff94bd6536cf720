"""A roster: the explicit list of run ids a manifest, a sweep, a cluster job or a teardown is about.

One run id per line, ``#`` starts a comment, blank lines are ignored. An empty roster proves nothing and
is refused, as are unsafe ids, an id listed twice and ids that collide after case folding (two runs a
case-insensitive filesystem would merge).
"""

from __future__ import annotations

from pathlib import Path

from runaudit.ids import casefold_collisions, duplicates, is_safe_id
from runaudit.safeio import parse_file
from runaudit.usage import Refusal

ROSTER_CAP = 16 << 20  # a roster names runs; past this it is not one


class RosterError(Refusal):
    """The roster cannot be used; the message names it and why."""


def parse_roster(text: str, source: str) -> list[str]:
    roster = [line.split("#", 1)[0].strip() for line in text.splitlines()]
    roster = [name for name in roster if name]
    if not roster:
        raise RosterError(f"{source}: the roster is empty; an empty roster proves nothing")
    unsafe = [name for name in roster if not is_safe_id(name)]
    if unsafe:
        raise RosterError(f"{source}: unsafe run id(s) {unsafe} (expected ^[A-Za-z0-9][A-Za-z0-9._-]*$)")
    if duplicates(roster):
        raise RosterError(f"{source}: run id(s) listed twice: {duplicates(roster)}")
    if collisions := casefold_collisions(roster):
        raise RosterError(f"{source}: run ids collide after case folding: {collisions}")
    return roster


def read_roster(path: Path) -> list[str]:
    return parse_file(path, ROSTER_CAP, parse_roster, "roster")
