"""The checkout's root conftest: what ``pytest`` run at the repository root must never collect.

runaudit's plugin is not named here. It is installed (``pip install -e .``, README) and pytest loads it
through its ``pytest11`` entry point, exactly as it does in a user's project. This file is also read when
a session elsewhere collects this checkout's ``audits/`` (an editable install, ``-m smoke``), so it holds
nothing that could change an audit: only paths to leave alone.
"""

# Real training code, benchmark scripts and tools are programs: `pytest .` at the root collects the
# harness's tests (tests/) and the audits, never a module of these that happens to match test_*.py.
collect_ignore = ["examples", "benchmarks", "tools"]
