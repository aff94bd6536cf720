"""Leave the interpreter without a last sweep of the heap an audit leaves behind.

When CPython exits it clears every module and then collects the tracked objects, walking all of them. A
custody session holds torch, pyarrow, jsonschema and pytest with hundreds of cases: that walk, and the
page faults it takes, cost 0.2 s (a ``pytest --run``) to 0.4 s (``runaudit verify``, which imports torch)
of every process on the machines of ``benchmarks/bench_custody.py``, more than most audits.

Freezing the heap as the last step before that sweep moves every live object out of the collector's
reach. Exit handlers still run, files and streams are flushed and closed as modules are cleared, and the
reports are written long before: only the finalizers of objects caught in reference cycles do not run, as
Python already allows at exit.
"""

from __future__ import annotations

import atexit
import functools
import gc


@functools.cache
def skip_final_collection() -> None:
    """From now on, this process's exit skips the final collection (registered once per process).

    ``atexit`` runs the last registered handler first, so the freeze comes after every exit handler
    registered later (a report written at exit, say) and before the interpreter clears its modules.
    """
    atexit.register(gc.freeze)
