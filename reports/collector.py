"""Collect settled verdicts on the xdist controller and write the report once, at session end.

The verdict record crosses xdist inside ``report.user_properties``. Once collected here, the teardown
report's record (the one ``--junitxml`` writes as ``<property>`` elements) is swapped for flat
``runaudit.*`` properties (audit id, subject, gate, verdict): the JUnit twin names every audit and verdict
without pasting a Python dict into the XML, and without ``record_property`` (which warns under xunit2).
Setup and call reports keep the record, which the terminal's status words (DISCLOSED, NOT RUN) read.
"""

from __future__ import annotations

import copy
import functools
import signal
import subprocess
import threading
from pathlib import Path
from types import FrameType
from typing import Any

import pytest

from runaudit.atomic import write_bytes_atomic, write_json_atomic
from runaudit.clock import utc_now
from runaudit.fixtures.custody import changed_key
from runaudit.fixtures.subjects import expected_custody, session_cases
from runaudit.fixtures.verdicts import PROPERTY, record_of, strict_mode
from runaudit.ids import report_stem
from runaudit.reports import document
from runaudit.run import Run
from runaudit.verdict import Verdict, printable, shell_word

PREDRAW_WAIT_S = 60
# How a session that pytest reports with these statuses ended, in the report's words.
SESSION_ENDS: dict[int, str] = {
    pytest.ExitCode.OK: document.SESSION_COMPLETED,
    pytest.ExitCode.TESTS_FAILED: document.SESSION_COMPLETED,
    pytest.ExitCode.NO_TESTS_COLLECTED: document.SESSION_COMPLETED,
    pytest.ExitCode.INTERRUPTED: "interrupted",
    pytest.ExitCode.INTERNAL_ERROR: "internal error",
    pytest.ExitCode.USAGE_ERROR: "usage error",
}


def session_end(session: pytest.Session, exitstatus: int) -> str:
    """Whether the session ran to its end: a stop after ``-x``/``--maxfail`` is not an end."""
    ended = SESSION_ENDS.get(exitstatus, f"exit status {exitstatus}")
    if ended == document.SESSION_COMPLETED and (session.shouldstop or session.shouldfail):
        return f"stopped early: {session.shouldstop or session.shouldfail}"
    return ended


def junit_properties(record: dict[str, Any]) -> list[tuple[str, str]]:
    """The flat properties a JUnit ``<testcase>`` carries for one audit (the verdict once it is settled)."""
    fields = {
        "audit": record["audit"],
        "subject": record["subject"],
        "gate": record["gate_class"],
        "verdict": record["verdict"],
    }
    return [(f"{PROPERTY}.{name}", value) for name, value in fields.items() if value is not None]


def _interrupt_on_sigterm() -> Any:
    """Make SIGTERM end the session as Ctrl-C does; the handler it replaces, or None where it did not.

    A CI job's timeout, the end of a Slurm job and ``kill`` send SIGTERM, which ends Python with no
    cleanup: the session died without a report, and an earlier session's "yes" stayed in the file. As a
    KeyboardInterrupt, pytest finishes the session as interrupted and the report says so. Only on the main
    thread, and only where nothing else handles SIGTERM (the default action is to die anyway).
    """
    if threading.current_thread() is not threading.main_thread():
        return None
    if signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL:
        return None

    def interrupt(signum: int, frame: FrameType | None) -> None:
        raise KeyboardInterrupt("SIGTERM")

    return signal.signal(signal.SIGTERM, interrupt)


report_key = pytest.StashKey["VerdictReport"]()


def _xdist_workers(config: pytest.Config) -> int:
    """How many pytest-xdist workers this session starts beside the controller (0 without ``-n``)."""
    workers = config.getoption("numprocesses", None)
    return workers if isinstance(workers, int) else 0


class VerdictReport:
    """Registered in ``pytest_configure`` on the controller only, when ``--run`` is given."""

    name = "runaudit-report"

    def __init__(self, config: pytest.Config, run: Run) -> None:
        self.config = config
        self.run = run
        self.started_utc = utc_now()
        self.records: dict[str, dict[str, Any]] = {}
        self.written: list[Path] = []
        self.teardown: dict[str, str] | None = None
        self.predraw: subprocess.Popen[bytes] | None = None
        self.report_problem: str | None = None
        self.on_sigterm: Any = None  # SIGTERM's handler before the session, while ours is installed

    @property
    def report_dir(self) -> Path:
        chosen = self.config.getoption("runaudit_report_dir")
        return chosen if chosen is not None else self.run.root / "reports"

    @pytest.hookimpl(tryfirst=True)  # before junitxml reads the properties
    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        record = record_of(report)
        if record is None:
            return
        decisive = report.when == "call" or report.outcome != "passed"
        if decisive and record["verdict"] is not None:
            self.records[report.nodeid] = copy.deepcopy(record)
        if report.when == "teardown":  # the report junitxml writes; the others still feed the status words
            report.user_properties = [
                *(pair for pair in report.user_properties if pair[0] != PROPERTY),
                *junit_properties(record),
            ]

    @property
    def writes_page(self) -> bool:
        return bool(self.config.getoption("runaudit_report_format") == "html")

    @pytest.hookimpl
    def pytest_sessionstart(self, session: pytest.Session) -> None:
        self.on_sigterm = _interrupt_on_sigterm()
        if self.writes_page and not self.config.getoption("collectonly") and not self.run.is_group:
            # the page's modules load numpy: a JSON-only session (a cached custody re-audit) skips them
            from runaudit.reports import figures

            self.predraw = figures.predraw_curves(self.run.path, busy=1 + _xdist_workers(self.config))

    def _join_predraw(self, *, needed: bool) -> None:
        """Wait for the predrawn curves when a page will show them; otherwise (Ctrl-C, nothing ran) stop it."""
        if self.predraw is None:
            return
        try:
            self.predraw.wait(timeout=PREDRAW_WAIT_S if needed else 0)
        except subprocess.TimeoutExpired:
            self.predraw.kill()  # a page still draws the curves itself
            self.predraw.wait()
        self.predraw = None

    @pytest.hookimpl
    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        if self.on_sigterm is not None:  # how the session ended is decided: a second SIGTERM ends the process
            signal.signal(signal.SIGTERM, self.on_sigterm)
            self.on_sigterm = None
        interrupted = exitstatus == pytest.ExitCode.INTERRUPTED
        self._join_predraw(needed=bool(self.records) and not interrupted)
        if self.config.getoption("collectonly"):
            return
        doc = document.build(
            self.run,
            self.records.values(),
            started_utc=self.started_utc,
            args=list(self.config.invocation_params.args),
            invocation_dir=self.config.invocation_params.dir,
            strict=strict_mode(self.config),
            custody_gate={
                "expected": {}
                if self.run.is_group
                else expected_custody(self.run, functools.partial(session_cases, self.config)),
                "session": session_end(session, exitstatus),
                "changed": self.config.stash.get(changed_key, []),
            },
        )
        stem = report_stem(self.run.run_id, group=self.run.is_group)
        folder = self.report_dir
        earlier = document.earlier_verdicts(folder / f"{stem}.json", doc)
        if earlier:
            doc["verdicts"] = document.merge_verdicts(earlier, doc["verdicts"])
            document.derive(doc)
        self.teardown = doc["teardown"]
        partial = any(item["gate_class"] == "custody" for item in doc["verdicts"]) and not doc["custody_ok"]
        if (
            partial
            and (doc["teardown"]["reason"].startswith("incomplete") or doc["custody_gate"]["changed"])
            and exitstatus == pytest.ExitCode.OK
        ):
            # A subset of the gate, or a capsule that changed under it, must not read as a pass.
            session.exitstatus = pytest.ExitCode.TESTS_FAILED
        try:
            self.written = [write_json_atomic(folder / f"{stem}.json", doc)]
            if self.writes_page:
                self.written.append(write_bytes_atomic(folder / f"{stem}.html", self._page(doc)))
        except OSError as exc:  # the folder is a file, the report's name a folder, the disk full or read-only
            # A rename names its target second; a failed mkdir or open, its only path first.
            where = printable(str(exc.filename2 or exc.filename or folder))
            self.report_problem = (
                f"the report could not be written: {where}: {exc.strerror or exc}; free that path, or pass "
                f"--report-dir (every verdict was reached: see the lines above)"
            )
            session.exitstatus = pytest.ExitCode.USAGE_ERROR

    def _page(self, doc: dict[str, Any]) -> bytes:
        """The run's page; if drawing it fails, a plain page that says why and points at the JSON twin.

        The JSON is already written by then and holds every verdict. The page also reads the capsule
        (curves, thumbnails) and a box's bytes must not cost the report its page, nor the session an
        internal error: the failure is named on the page and in the terminal summary.
        """
        from runaudit.reports import html

        try:
            return html.render_run(doc).encode("utf-8")
        except Exception as exc:  # any failure here must still leave a page behind
            why = printable(f"{type(exc).__name__}: {exc}".splitlines()[0])
            self.report_problem = f"the page could not be drawn ({why}); every verdict is in the JSON report"
            return html.render_fallback(doc, self.report_problem).encode("utf-8")

    @pytest.hookimpl
    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        records = sorted(self.records.values(), key=lambda item: (item["audit"], item["subject"]))
        findings = [r for r in records if r["verdict"] in (Verdict.DISCLOSED, Verdict.NOT_RUN)]
        if findings:
            terminalreporter.section(f"runaudit disclosures: {self.run.run_id}", sep="-")
            declared_once: dict[str, str] = {}
            for record in findings:
                declared = record.get("declared")
                if declared:
                    declared_once.setdefault(
                        declared["topic"],
                        f"declared {declared['topic']}={declared['choice']}: {declared['note']}",
                    )
                    continue
                word = "DISCLOSED" if record["verdict"] == Verdict.DISCLOSED else "NOT RUN"
                subject = f"[{record['subject']}]" if record["subject"] else ""
                affects = f" (affects {', '.join(record['affects'])})" if record["affects"] else ""
                terminalreporter.write_line(
                    f"{word} {record['audit']}{subject}: {record['message']}{affects}"
                )
            for line in declared_once.values():
                terminalreporter.write_line(line)
        if self.teardown is not None and self.teardown["reason"].startswith("incomplete"):
            terminalreporter.write_line(
                f"runaudit: safe to tear down? NO, {self.teardown['reason']}", red=True
            )
        if self.report_problem is not None:
            terminalreporter.write_line(f"runaudit: {self.report_problem}", red=True)
        for path in self.written:
            terminalreporter.write_line(f"runaudit: wrote {shell_word(str(path))}")
