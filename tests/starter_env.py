"""What a user's shell may hold for their own test runs, and must never reach a session runaudit starts.

``-n 2`` is unknown where plugin autoload is off, ``-k`` deselects every audit, and a named plugin that
does not exist stops pytest before it collects anything.
"""

from __future__ import annotations

HOSTILE_PYTEST_ENV = {
    "PYTEST_ADDOPTS": "-n 2 -k no_audit_has_this_name",
    "PYTEST_PLUGINS": "no_such_plugin_module",
}
