"""``python -m runaudit.runners <verb>``: the same verbs as the ``runaudit`` console script."""

from runaudit.cli import main

raise SystemExit(main())
