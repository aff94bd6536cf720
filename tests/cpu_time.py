"""The CPU seconds an action takes at its least over a few tries: how the linear-time tests bound a reader.

One measurement against a bound failed on a loaded run of the suite: a LaTeX check that takes 0.65 s of its
thread's CPU alone was charged 7 s beside two busy workers and their children (time a virtual machine's
host takes from it, and caches thrashed by neighbours, count as the thread's). A quadratic reader is over its
bound on every try; a busy moment of the machine is not on all of them.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable

TRIES = 3


def least_cpu_seconds(
    action: Callable[[], object], bound: float, *, clock: Callable[[], float] = time.thread_time
) -> float:
    """The least ``clock`` seconds ``action()`` took over at most :data:`TRIES` runs, stopping at the first
    run under ``bound``. ``clock`` is ``time.process_time`` where the work runs on other threads too."""
    least = math.inf
    for _ in range(TRIES):
        started = clock()
        action()
        least = min(least, clock() - started)
        if least < bound:
            break
    return least
