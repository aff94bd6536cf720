"""Root wiring: registers the harness plugin when this checkout runs without being installed.

Installed, the ``pytest11`` entry point has already imported and registered the plugin before any
conftest is read; naming it again here would then only trip pytest's rule against ``pytest_plugins`` in
a conftest that is not at the rootdir (as when ``--run`` collects these audits from another folder).
"""

import sys

if "runaudit.fixtures.plugin" not in sys.modules:
    pytest_plugins = ["runaudit.fixtures.plugin"]
