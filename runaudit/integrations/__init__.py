"""Framework callbacks that write a capsule with one line in the user's code (optional extras).

- :mod:`runaudit.integrations.lightning`: ``CapsuleCallback``, a ``lightning.pytorch.Callback``
  (``pip install 'runaudit[lightning]'``);
- :mod:`runaudit.integrations.transformers`: ``CapsuleCallback``, a Hugging Face ``TrainerCallback``, and
  ``score_test`` after ``trainer.predict`` (``pip install 'runaudit[transformers]'``).

Both drive :mod:`runaudit.writer` and nothing else: what the writer guarantees holds for them too. This
package imports no framework; each module imports its own and says in one line how to install it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any


def checkpoint_weights(path: str | Path) -> dict[str, Any]:
    """The weights of a capsule checkpoint (``best.pth`` or ``best.safetensors``), loaded without pickle.

    What a smoke adapter's ``smoke_eval_model`` loads into a fresh model built from the run's config: the
    state dict the callbacks (and :meth:`runaudit.writer.RunWriter.checkpoint`) saved.
    """
    path = Path(path)
    if path.suffix == ".safetensors":
        from safetensors.torch import load_file

        return dict(load_file(str(path)))
    import torch

    loaded = torch.load(path, weights_only=True, map_location="cpu")
    if not isinstance(loaded, dict):
        raise ValueError(f"{path}: not a state dict or a checkpoint holding one under 'model'")
    weights = loaded.get("model", loaded)
    return dict(weights)
