"""Debian's Chromium, headless, driven over the DevTools protocol on a pipe: no port, no extra package.

``--remote-debugging-pipe`` makes Chromium read commands on fd 3 and write replies on fd 4, one JSON
message per NUL-terminated frame. A shell ``exec`` maps our stdin/stdout pipes onto those descriptors.
Every wait is bounded; the browser runs with a fresh profile and background networking off, so any
request it makes comes from the page under test.
"""

from __future__ import annotations

import base64
import json
import os
import select
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

BINARY = shutil.which("chromium") or "/usr/bin/chromium"
FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-extensions",
    "--disable-default-apps",
    "--no-first-run",
    "--no-default-browser-check",
    "--mute-audio",
    "--remote-debugging-pipe",
)
TIMEOUT_S = 60.0
ERROR_EVENTS = ("Runtime.exceptionThrown", "Runtime.consoleAPICalled", "Log.entryAdded")
SETTLED = (
    "new Promise(done => requestAnimationFrame(() => requestAnimationFrame(() => done(performance.now()))))"
)


class BrowserError(RuntimeError):
    pass


def available() -> bool:
    return Path(BINARY).is_file() and os.access(BINARY, os.X_OK)


@dataclass
class PageLoad:
    """What one navigation did: how long until painted, what it logged, what it fetched."""

    url: str
    seconds: float  # from the navigate command to the second animation frame after the load event
    console_errors: list[str] = field(default_factory=list)
    requests: list[str] = field(default_factory=list)  # every URL requested besides the page itself


class Chromium:
    """One headless browser with one tab, for ``with Chromium() as browser: browser.load(path)``."""

    def __init__(self, width: int = 1280, height: int = 900) -> None:
        self.width, self.height = width, height
        self._profile = tempfile.TemporaryDirectory(prefix="runaudit-chromium-")
        self._log = open(Path(self._profile.name) / "stderr.log", "wb")  # noqa: SIM115 - closed in close()
        self._process: subprocess.Popen[bytes] | None = None
        self._buffer = b""
        self._next_id = 0
        self._events: list[dict[str, Any]] = []
        self._session = ""

    # -- lifecycle --------------------------------------------------------------------------------
    def __enter__(self) -> Chromium:
        command = [BINARY, *FLAGS, f"--user-data-dir={self._profile.name}/profile", "about:blank"]
        self._process = subprocess.Popen(
            ["sh", "-c", 'exec "$0" "$@" 3<&0 4>&1 </dev/null >&2', *command],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._log,
        )
        try:
            target = self.call("Target.createTarget", {"url": "about:blank"})["targetId"]
            self._session = self.call("Target.attachToTarget", {"targetId": target, "flatten": True})[
                "sessionId"
            ]
            for domain in ("Page", "Runtime", "Log", "Network"):
                self.call(f"{domain}.enable", session=True)
            self.call(
                "Emulation.setDeviceMetricsOverride",
                {"width": self.width, "height": self.height, "deviceScaleFactor": 1, "mobile": False},
                session=True,
            )
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        process = self._process
        if process is not None:
            try:
                self._send("Browser.close", {}, session=False)
                process.wait(timeout=10)
            except (OSError, subprocess.TimeoutExpired):
                process.kill()
                process.wait(timeout=10)
            for stream in (process.stdin, process.stdout):
                if stream is not None:
                    stream.close()
            self._process = None
        self._log.close()
        self._profile.cleanup()

    # -- protocol ---------------------------------------------------------------------------------
    def _send(self, method: str, params: dict[str, Any], *, session: bool) -> int:
        assert self._process is not None and self._process.stdin is not None
        self._next_id += 1
        message: dict[str, Any] = {"id": self._next_id, "method": method, "params": params}
        if session:
            message["sessionId"] = self._session
        self._process.stdin.write(json.dumps(message).encode("utf-8") + b"\0")
        self._process.stdin.flush()
        return self._next_id

    def _receive(self, deadline: float) -> dict[str, Any]:
        assert self._process is not None and self._process.stdout is not None
        stream = self._process.stdout.fileno()
        while b"\0" not in self._buffer:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([stream], [], [], left)[0]:
                raise BrowserError(f"chromium did not answer within {TIMEOUT_S:.0f} s")
            chunk = os.read(stream, 1 << 20)
            if not chunk:
                raise BrowserError("chromium closed the DevTools pipe")
            self._buffer += chunk
        frame, self._buffer = self._buffer.split(b"\0", 1)
        return json.loads(frame)

    def call(
        self, method: str, params: dict[str, Any] | None = None, *, session: bool = False
    ) -> dict[str, Any]:
        """Send one command and return its result; events that arrive meanwhile are kept."""
        number = self._send(method, params or {}, session=session)
        deadline = time.monotonic() + TIMEOUT_S
        while True:
            message = self._receive(deadline)
            if message.get("id") == number:
                if "error" in message:
                    raise BrowserError(f"{method}: {message['error']}")
                return message.get("result", {})
            self._events.append(message)

    def _wait_for(self, event: str) -> None:
        deadline = time.monotonic() + TIMEOUT_S
        while not any(item.get("method") == event for item in self._events):
            self._events.append(self._receive(deadline))

    # -- pages ------------------------------------------------------------------------------------
    def evaluate(self, expression: str) -> Any:
        """The value of a JavaScript expression in the page (promises awaited)."""
        result = self.call(
            "Runtime.evaluate",
            {"expression": expression, "returnByValue": True, "awaitPromise": True},
            session=True,
        )
        if "exceptionDetails" in result:
            raise BrowserError(f"{expression!r} threw: {result['exceptionDetails'].get('text')}")
        return result["result"].get("value")

    def load(self, path: Path) -> PageLoad:
        """Open ``path`` from file:// and wait until the page is loaded and painted."""
        url = path.resolve().as_uri()
        self._events.clear()
        started = time.perf_counter()
        self.call("Page.navigate", {"url": url}, session=True)
        self._wait_for("Page.loadEventFired")
        self.evaluate(SETTLED)
        seconds = time.perf_counter() - started
        self.call("Runtime.evaluate", {"expression": "0"}, session=True)  # flush late console events
        return PageLoad(url, seconds, self._errors(), self._requests(url))

    def _errors(self) -> list[str]:
        errors = []
        for event in self._events:
            method, params = event.get("method"), event.get("params", {})
            if method == "Runtime.exceptionThrown":
                details = params["exceptionDetails"]
                thrown = details.get("exception", {}).get("description", "")
                errors.append(f"{details.get('text', 'exception')} {thrown}".strip())
            elif method == "Runtime.consoleAPICalled" and params.get("type") in ("error", "assert"):
                errors.append(
                    " ".join(str(arg.get("value", arg.get("description"))) for arg in params["args"])
                )
            elif method == "Log.entryAdded" and params["entry"].get("level") == "error":
                errors.append(params["entry"].get("text", ""))
        return errors

    def _requests(self, page_url: str) -> list[str]:
        urls = [
            event["params"]["request"]["url"]
            for event in self._events
            if event.get("method") == "Network.requestWillBeSent"
        ]
        return [url for url in urls if url != page_url and not url.startswith("data:")]

    def screenshot(self, target: Path, max_height: int = 12000) -> Path:
        """A PNG of the whole page (up to ``max_height`` pixels tall), for people to look at."""
        height = min(max_height, int(self.evaluate("document.documentElement.scrollHeight")))
        shot = self.call(
            "Page.captureScreenshot",
            {
                "format": "png",
                "captureBeyondViewport": True,
                "clip": {"x": 0, "y": 0, "width": self.width, "height": height, "scale": 1},
            },
            session=True,
        )
        target.write_bytes(base64.b64decode(shot["data"]))
        return target
