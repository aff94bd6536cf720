"""The bundled demo: a small CNN trained on CPU on scikit-learn's 8×8 digits (shipped in the package).

It is written the way we ask users to write theirs: the trainer loads the newest ``latest.pth`` on every
start and writes it atomically, the history lives in the checkpoint and ``train.csv`` is derived from it,
the test split is evaluated under two conditions with two roles each, the fixed selection and the split
manifest go under ``_trust/``, and the run is sealed by ``runaudit close``.
"""
