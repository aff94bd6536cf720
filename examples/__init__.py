"""Real, tiny training projects that produce real capsules (the bundled demo lives in ``digits``)."""
