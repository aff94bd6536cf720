"""The process-global random number generators a training step may consume: numpy's, Python's, torch's.

The smoke audits read them before and after the project's code runs, to restore what they consumed and to
name which generators a step draws from. torch is read only once the project's code has imported it: the
harness never imports it for nothing.
"""

from __future__ import annotations

import random
import sys
from typing import Any


def loaded_torch() -> Any:
    """torch when the project's code has imported it, else None."""
    return sys.modules.get("torch")


def global_rng_state() -> dict[str, Any]:
    """numpy's, Python's and (once imported) torch's global RNG states."""
    import numpy as np

    state = {"numpy": np.random.get_state(), "python": random.getstate()}
    torch = loaded_torch()
    if torch is not None:
        state["torch"] = torch.get_rng_state()
    return state


def set_global_rng_state(state: dict[str, Any]) -> None:
    """Put back the states one :func:`global_rng_state` reading holds."""
    import numpy as np

    np.random.set_state(state["numpy"])
    random.setstate(state["python"])
    if "torch" in state:
        loaded_torch().set_rng_state(state["torch"])
