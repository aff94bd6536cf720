"""The names of runaudit's pytest options, shared by the plugin that registers them and the runners
that build pytest command lines.

Every option runaudit adds to pytest is named ``--runaudit-*``, ``--run`` excepted: pytest builds one
argparse parser from all installed plugins and refuses an option string registered twice, so a generic
name breaks every pytest run in an environment that has another plugin using it.
"""

from __future__ import annotations

OPTION_PREFIX = "--runaudit-"
RUN_OPTION = "--run"
ROOT_OPTION = "--runaudit-root"
REPORT_DIR_OPTION = "--runaudit-report-dir"
REPORT_FORMAT_OPTION = "--runaudit-report-format"
PULL_OPTION = "--runaudit-pull"
ALLOW_PICKLE_OPTION = "--runaudit-allow-pickle"
FRESH_HASHES_OPTION = "--runaudit-fresh-hashes"
PROFILE_OPTION = "--runaudit-profile"
OVERRIDE_OPTION = "--runaudit-override"
BUDGET_OPTION = "--runaudit-budget"
CLAIMS_OPTION = "--runaudit-claims"
MAX_MEMBERS_OPTION = "--runaudit-max-members"
# A group session audits each member in a session of its own (~1 s each): past this many members it audits
# none unless told how many to expect, so a root that gained thousands of capsule folders never keeps a
# gate busy for hours.
MAX_MEMBERS = 256
# The short forms that stay as documented aliases (the allow-list; tests/test_option_names.py holds every
# other option string to the prefix). Each was checked against pytest's own options and those of
# pytest-profiling, -html, -json-report, -reportlog, -cov, -benchmark, -randomly, -timeout, -rerunfailures,
# -django, -xdist and -metadata: none of them uses it.
OPTION_ALIASES = {
    ROOT_OPTION: "--root",
    REPORT_DIR_OPTION: "--report-dir",
    REPORT_FORMAT_OPTION: "--report-format",
    PULL_OPTION: "--pull",
    ALLOW_PICKLE_OPTION: "--allow-pickle",
    FRESH_HASHES_OPTION: "--fresh-hashes",
    OVERRIDE_OPTION: "--override",
    BUDGET_OPTION: "--budget",
    CLAIMS_OPTION: "--claims",
}
# Short forms that are no longer accepted, and whose option they would collide with.
DROPPED_ALIASES = {"--profile": "pytest-profiling's --profile (profile the tests with cProfile)"}


def option_names(option: str) -> tuple[str, ...]:
    """The option strings of one runaudit option for ``addoption``: its name, then its alias if it has one."""
    return (option, OPTION_ALIASES[option]) if option in OPTION_ALIASES else (option,)


def spelled(option: str) -> str:
    """An option as its messages name it: ``--runaudit-root/--root``, argparse's own way of naming aliases."""
    return "/".join(option_names(option))
