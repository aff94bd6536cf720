"""``python -m runaudit <verb>`` is the ``runaudit`` console script."""

from runaudit.cli import main

raise SystemExit(main())
