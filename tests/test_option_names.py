"""runaudit's pytest options live under ``--runaudit-``: installed beside other plugins, nothing collides.

pytest builds one argparse parser from every plugin, and argparse refuses an option string registered
twice, so one plugin's generic ``--profile`` breaks every pytest run in an environment that also has
pytest-profiling. The profiling checks run pytest in a fresh interpreter with both plugins loaded, as a
user's environment would; pytest-profiling is in the ``test`` extra.
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

import pytest

from runaudit import options  # its names are read inside the tests, which then fail one by one
from runaudit.runners import custody, remote_audit, suite
from runaudit.runners.box import Box
from runaudit.runners.cluster import Sweep
from runaudit.runners.ssh import Endpoint
from runaudit.usage import Refusal

RUN = "r1"
BOTH = ("-p", "runaudit.fixtures.plugin", "-p", "profiling", "-p", "no:cacheprovider")

# The options of the well-known plugins runaudit must install beside (pytest-profiling 1.8.1, pytest-html
# 4.2, pytest-json-report 1.5, pytest-reportlog 1.0, pytest-cov 7.1, pytest-benchmark 5.2, pytest-randomly
# 5.1, pytest-timeout 2.4, pytest-rerunfailures 16.7, pytest-django 4.14, pytest-xdist 3.8, pytest-metadata
# 3.1), read from their pytest_addoption. pytest's own options are checked live, on the real parser.
KNOWN_PLUGIN_OPTIONS = frozenset(
    {
        *("--profile", "--profile-svg", "--pstats-dir", "--element-number", "--strip-dirs"),
        *("--html", "--self-contained-html", "--css"),
        *("--json-report", "--json-report-file", "--json-report-omit", "--json-report-summary"),
        *("--json-report-indent", "--json-report-verbosity"),
        *("--report-log", "--report-log-exclude-logs-on-passed-tests"),
        *("--cov", "--cov-report", "--cov-config", "--no-cov-on-fail", "--no-cov", "--cov-reset"),
        *("--cov-fail-under", "--cov-append", "--cov-branch", "--cov-precision", "--cov-context"),
        *("--benchmark-skip", "--benchmark-disable", "--benchmark-enable", "--benchmark-only"),
        *("--benchmark-save", "--benchmark-autosave", "--benchmark-save-data", "--benchmark-json"),
        *("--benchmark-compare", "--benchmark-compare-fail", "--benchmark-timer", "--benchmark-warmup"),
        *("--randomly-seed", "--randomly-dont-reset-seed", "--randomly-dont-reorganize"),
        *("--timeout", "--timeout-method", "--timeout_method", "--session-timeout"),
        *("--timeout-disable-debugger-detection",),
        *("--reruns", "--reruns-delay", "--only-rerun", "--rerun-except", "--fail-on-flaky"),
        *("--force-reruns", "--max-suite-reruns", "--reruns-mode", "--rerun-exclude-path"),
        *("--reuse-db", "--create-db", "--ds", "--dc", "--nomigrations", "--no-migrations"),
        *("--migrations", "--fail-on-template-vars", "--keepdb", "--liveserver"),
        *("--numprocesses", "--maxprocesses", "--max-worker-restart", "--dist", "--tx", "--px"),
        *("--rsyncdir", "--rsyncignore", "--looponfail", "--testrunuid", "--maxschedchunk"),
        *("--metadata", "--metadata-from-json", "--metadata-from-json-file"),
    }
)


class _Recorder:
    """Stands in for pytest's parser and group: keeps each ``addoption`` call's option strings."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, ...]] = []

    def getgroup(self, *args: Any, **kwargs: Any) -> _Recorder:
        return self

    def addoption(self, *names: str, **attrs: Any) -> None:
        self.calls.append(names)

    def addini(self, *args: Any, **kwargs: Any) -> None:
        pass


def runaudit_option_calls(config: pytest.Config) -> list[tuple[str, ...]]:
    """The option strings of each ``addoption`` call made by a runaudit module's ``pytest_addoption``."""
    recorder = _Recorder()
    modules = set()
    for impl in config.pluginmanager.hook.pytest_addoption.get_hookimpls():
        name = getattr(impl.plugin, "__name__", "")
        if name.startswith("runaudit.") and name not in modules:
            modules.add(name)
            impl.function(**{arg: {"parser": recorder, "pluginmanager": None}[arg] for arg in impl.argnames})
    # Every option is added by one always-loaded module, also when the gate plugins stay unloaded.
    assert modules == {"runaudit.fixtures.options"}
    return recorder.calls


def test_every_option_is_namespaced_or_an_allowed_alias(pytestconfig: pytest.Config) -> None:
    calls = runaudit_option_calls(pytestconfig)
    for names in calls:
        canonical, *aliases = names
        assert canonical == options.RUN_OPTION or canonical.startswith(options.OPTION_PREFIX), names
        assert aliases == (
            [options.OPTION_ALIASES[canonical]] if canonical in options.OPTION_ALIASES else []
        ), names
    strings = {name for names in calls for name in names}
    assert set(options.OPTION_ALIASES) <= strings, "an allowed alias names an option runaudit does not add"
    assert not strings & set(options.DROPPED_ALIASES), "a dropped alias is registered again"
    assert not strings & KNOWN_PLUGIN_OPTIONS, "an option string a well-known plugin already uses"
    assert options.spelled(options.ROOT_OPTION) == "--runaudit-root/--root"
    assert options.spelled("--runaudit-profile") == "--runaudit-profile"


def test_pytest_knows_each_option_by_exactly_the_names_runaudit_gives(pytestconfig: pytest.Config) -> None:
    registered: dict[str, tuple[str, ...]] = {}
    parser = pytestconfig._parser  # the real parser: pytest's own options and every loaded plugin's
    for option in [*parser._anonymous.options, *(o for group in parser._groups for o in group.options)]:
        for name in option.names():
            registered[name] = tuple(option.names())
    for names in runaudit_option_calls(pytestconfig):
        for name in names:
            assert registered.get(name) == names, (name, registered.get(name))


# -- beside pytest-profiling, in a fresh interpreter ---------------------------------------------------


@pytest.fixture
def profiling() -> None:
    """pytest-profiling is in the test extra: its absence is a broken install, never a skip."""
    import pytest_profiling  # noqa: F401


@pytest.fixture
def live_project(tmp_path: Path) -> Path:
    """A live run with no capsule yet: the preflight gate reads this machine, nothing is trained."""
    root = tmp_path / "project"
    (root / "active" / RUN).mkdir(parents=True)
    return root


def report(path: Path) -> dict[str, Any]:
    assert path.is_file(), f"no report at {path}"
    return json.loads(path.read_text(encoding="utf-8"))


def test_a_plain_suite_profiles_with_pytest_profilings_own_flag(
    profiling: None, pytester: pytest.Pytester
) -> None:
    pytester.makepyfile(
        test_plain="""
        def test_both_plugins_are_loaded(pytestconfig):
            manager = pytestconfig.pluginmanager
            assert manager.hasplugin("profiling") and manager.hasplugin("runaudit.fixtures.plugin")
            assert pytestconfig.getoption("profile") is True  # pytest-profiling's --profile
            assert pytestconfig.getoption("runaudit_profile") is None
        """
    )
    result = pytester.runpytest_subprocess(*BOTH, "--profile", "test_plain.py")
    assert result.ret == pytest.ExitCode.OK, result.stderr.str()
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["Profiling (from *combined.prof):"])
    assert (pytester.path / "prof" / "combined.prof").is_file()


def test_an_audit_takes_runaudit_profile_beside_pytest_profiling(
    profiling: None, pytester: pytest.Pytester, live_project: Path
) -> None:
    reports = pytester.path / "reports"
    result = pytester.runpytest_subprocess(
        *BOTH,
        f"--run={RUN}",
        *("--runaudit-root", str(live_project), "--runaudit-report-dir", str(reports)),
        *("--runaudit-profile", "local", "--runaudit-override", f"DATA_DIR={live_project}"),
        *("--runaudit-budget", "disk=1M", "--runaudit-report-format", "json", "-m", "preflight"),
        "--profile",  # pytest-profiling's, in the same session
    )
    assert result.ret in (pytest.ExitCode.OK, pytest.ExitCode.TESTS_FAILED), result.stderr.str()
    document = report(reports / f"{RUN}.json")
    assert not (reports / f"{RUN}.html").exists()  # --runaudit-report-format json
    verdicts = {item["audit"]: item for item in document["verdicts"]}
    assert verdicts["preflight.profile_stamps"]["verdict"] != "not_run"  # the profile arrived
    assert f"DATA_DIR={live_project} from " in json.dumps(verdicts["preflight.disk_bytes"])
    assert verdicts["preflight.disk_bytes"]["verdict"] == "passed"  # the budget arrived
    assert (pytester.path / "prof" / "combined.prof").is_file()  # and so did --profile


def test_the_kept_aliases_work_beside_pytest_profiling(
    profiling: None, pytester: pytest.Pytester, live_project: Path
) -> None:
    reports = pytester.path / "out"
    result = pytester.runpytest_subprocess(
        *BOTH,
        f"--run={RUN}",
        *("--root", str(live_project), "--report-dir", str(reports), "--report-format", "json"),
        *("--runaudit-profile", "local", "--override", f"DATA_DIR={live_project}"),
        *("--budget", "disk=1M", "--pull", "p1", "--allow-pickle", "--fresh-hashes", "-m", "preflight"),
    )
    assert result.ret in (pytest.ExitCode.OK, pytest.ExitCode.TESTS_FAILED), result.stderr.str()
    document = report(reports / f"{RUN}.json")
    assert not (reports / f"{RUN}.html").exists()
    verdicts = {item["audit"]: item for item in document["verdicts"]}
    assert f"DATA_DIR={live_project} from " in json.dumps(verdicts["preflight.disk_bytes"])
    assert verdicts["preflight.disk_bytes"]["verdict"] == "passed"


@pytest.mark.parametrize(
    ("canonical", "value", "dest"),
    [
        ("--runaudit-root", ".", "runaudit_root"),
        ("--runaudit-report-dir", "reports", "runaudit_report_dir"),
        ("--runaudit-report-format", "json", "runaudit_report_format"),
        ("--runaudit-pull", "p1", "runaudit_pull"),
        ("--runaudit-allow-pickle", None, "runaudit_allow_pickle"),
        ("--runaudit-fresh-hashes", None, "runaudit_fresh_hashes"),
        ("--runaudit-override", "DATA_DIR=/x", "runaudit_overrides"),
        ("--runaudit-budget", "disk=1M", "runaudit_budget"),
        ("--runaudit-claims", "README.md", "runaudit_claims"),
    ],
)
def test_an_alias_is_the_same_option(
    pytester: pytest.Pytester, canonical: str, value: str | None, dest: str
) -> None:
    pytester.makefile(".md", README="accuracy 0.98\n")  # --runaudit-claims takes existing documents
    values = [value] if value is not None else []
    by_name = pytester.parseconfig("-p", "runaudit.fixtures.plugin", canonical, *values)
    by_alias = pytester.parseconfig(
        "-p", "runaudit.fixtures.plugin", options.OPTION_ALIASES[canonical], *values
    )
    assert by_alias.getoption(dest) == by_name.getoption(dest) != pytester.parseconfig().getoption(dest)


def test_the_dropped_profile_alias_is_refused_without_pytest_profiling(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PYTEST_DISABLE_PLUGIN_AUTOLOAD", "1")  # runaudit alone, named with -p
    result = pytester.runpytest_subprocess(
        "-p", "runaudit.fixtures.plugin", f"--run={RUN}", "--profile", "local", "-m", "preflight"
    )
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*unrecognized arguments: --profile*"])


# -- the runners that start pytest build its arguments with these names ---------------------------------


@dataclass
class _Done:
    stdout: str = ""
    exit_code: int = 0
    ok: bool = True

    def tail(self, lines: int = 5) -> str:
        return self.stdout


class _FakeRemote:
    """Records the commands ``runaudit audit`` sends to the box; the box answers with an empty report."""

    commands: list[str] = []

    def __init__(self, endpoint: Endpoint) -> None:
        self.reports = "/tmp/runaudit-audit.fake"

    def __enter__(self) -> _FakeRemote:
        return self

    def __exit__(self, *exc: object) -> None:
        pass

    def run(self, command: str, timeout: float | None = None) -> _Done:
        self.commands.append(command)
        return _Done(stdout=self.reports if command.startswith("mktemp") else "")

    def read_file(self, path: str) -> bytes:
        raise FileNotFoundError(path)  # no suite ran: only the command line that would start it is checked


def after_pytest(words: Sequence[str]) -> list[str]:
    """The arguments of ``python -m pytest ARGS`` within one command line."""
    start = next(index for index, word in enumerate(words) if word == "pytest" and words[index - 1] == "-m")
    return list(words[start + 1 :])


def parsed(pytester: pytest.Pytester, args: Sequence[str]) -> pytest.Config:
    return pytester.parseconfig("-p", "runaudit.fixtures.plugin", *args)


def test_the_runners_build_pytest_arguments_pytest_accepts(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    root, reports = tmp_path / "root", tmp_path / "reports"
    (root / "export" / RUN).mkdir(parents=True)
    built = {
        "verify": suite._pytest_args(root / "export" / RUN, root, str(reports), (), custody.VERIFY_ARGS),
        "cluster": after_pytest(
            shlex.split(
                Sweep("s", (RUN,), PurePosixPath(root), "audit").task_command().replace("$RUN_ID", RUN)
            )
        ),
    }
    monkeypatch.setattr(remote_audit, "Remote", _FakeRemote)
    monkeypatch.setattr(_FakeRemote, "commands", [])
    box = Box(Endpoint("box.example"), PurePosixPath(root))
    with pytest.raises(Refusal, match="wrote no report"):
        remote_audit.audit_on_box(box, RUN, None, ["-m", "preflight", "--runaudit-profile", "local"])
    (command,) = [line for line in _FakeRemote.commands if " -m pytest " in line]
    built["audit"] = after_pytest(shlex.split(command))
    short_forms = set(options.OPTION_ALIASES.values())
    for runner, args in built.items():
        assert not short_forms & {arg.split("=")[0] for arg in args}, runner  # the runners spell names out
        config = parsed(pytester, args)
        assert config.getoption("runaudit_run") in (RUN, str(root / "export" / RUN)), runner
        assert config.getoption("runaudit_root") == root, runner
    assert parsed(pytester, built["audit"]).getoption("runaudit_profile") == "local"
    assert parsed(pytester, built["verify"]).getoption("runaudit_report_format") == "json"
    assert parsed(pytester, built["verify"]).getoption("runaudit_fresh_hashes") is True


# -- a guest in other projects' sessions ----------------------------------------------------------------


def test_without_run_only_the_entry_plugin_and_its_options_are_loaded(pytester: pytest.Pytester) -> None:
    """An ordinary test suite in an environment that has runaudit: no gate plugin, no per-test hook."""
    pytester.makepyfile("def test_plain():\n    assert True\n")
    pytester.makeconftest(
        "def pytest_sessionfinish(session):\n"
        "    names = sorted(session.config.pluginmanager.list_name_plugin())\n"
        "    print('LOADED', [name for name, _ in names if name.startswith('runaudit.')])\n"
    )
    result = pytester.runpytest_subprocess("-s", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=1)
    loaded = [line[line.index("LOADED") :] for line in result.outlines if "LOADED" in line]
    assert loaded, result.outlines
    for module in ("session", "custody", "smoke", "preflight"):
        assert f"runaudit.fixtures.{module}" not in loaded[0], loaded[0]
    assert "runaudit.fixtures.options" in loaded[0], loaded[0]
