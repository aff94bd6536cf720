"""How often a run should checkpoint: the Young/Daly interval, and what a run's own saves measure.

An interruption (a spot reclaim, a reboot, a forced stop) loses everything since the last checkpoint;
each checkpoint costs the seconds it takes to write. Young (1974) and Daly (2006) give the interval that
minimises the sum, ``W = sqrt(2 · μ · C)`` for a mean time between interruptions ``μ`` and a save of
``C`` seconds (C = 30 s, μ = 3 h give W ≈ 805 s; docs/checks.md, Preflight gate). The writer records when each save
happened and how long it took (``active/<id>/.writer-state.json``), so a live run is measured, not guessed.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from pathlib import Path

from runaudit.manifest import load_json
from runaudit.safeio import JSON_CAP, read_regular
from runaudit.workspace import STATE_FILE

FAR_OFF = 2.0  # a cadence more than this factor from the optimum is disclosed
RECENT = 5  # the saves a measurement rests on


def young_daly(mtbf_s: float, save_s: float) -> float:
    """The checkpoint interval that loses the least time to interruptions and saves together."""
    return math.sqrt(2.0 * mtbf_s * save_s)


def wasted_share(every_s: float, mtbf_s: float, save_s: float) -> float:
    """The first-order share of time lost: saving (C/W) plus half an interval redone per interruption (W/2μ)."""
    return save_s / every_s + every_s / (2.0 * mtbf_s)


@dataclass(frozen=True)
class Measured:
    save_s: float | None  # median seconds of the recent saves
    every_s: float | None  # median seconds between them (None with fewer than two)
    saves: int
    problem: str | None = None


def measured(folder: Path) -> Measured:
    """The recent checkpoint saves the writer recorded in ``folder`` (a run in ``active/``); a file that is
    missing, unreadable or not the writer's measures nothing, and says why."""
    path = folder / STATE_FILE
    try:
        document = load_json(read_regular(path, JSON_CAP))
    except FileNotFoundError:
        return Measured(None, None, 0, f"{path} does not exist (no save recorded yet)")
    except (OSError, ValueError) as exc:
        return Measured(None, None, 0, f"{path} cannot be read: {exc}")
    saves = document.get("saves") if isinstance(document, dict) else None
    usable = [
        (float(item["at"]), float(item["seconds"]))
        for item in (saves if isinstance(saves, list) else [])
        if isinstance(item, dict)
        and all(
            isinstance(item.get(key), (int, float)) and not isinstance(item.get(key), bool)
            for key in ("at", "seconds")
        )
        and math.isfinite(item["at"])
        and math.isfinite(item["seconds"])
        and item["seconds"] >= 0
    ][-RECENT:]
    if not usable:
        return Measured(None, None, 0, f"{path} records no checkpoint save yet")
    gaps = [
        later - earlier
        for (earlier, _), (later, _) in zip(usable, usable[1:], strict=False)
        if later > earlier
    ]
    return Measured(
        statistics.median(seconds for _, seconds in usable),
        statistics.median(gaps) if gaps else None,
        len(usable),
    )
