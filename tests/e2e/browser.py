"""Headless Chromium, driven over the DevTools protocol on a pipe: pages as a person sees them.

`Browser` starts `chromium --headless --remote-debugging-pipe` (Debian's package; `$CHROMIUM`
names another binary) and speaks the protocol over file descriptors 3 and 4, JSON messages
ended by NUL, so no Python package beyond the standard library is needed. A `Tab` loads a
URL and keeps it open, so a test sees what the page's own script does afterwards (no
reload); `text()` is `document.body.innerText`, what is on the screen. Console errors and
uncaught exceptions (a script the Content-Security-Policy blocked, a failed fetch) are
collected in `Tab.errors`. As root, Chromium needs `--no-sandbox`; it is added only then.
"""

from __future__ import annotations

import base64
import fcntl
import itertools
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

__all__ = ["Browser", "Tab", "chromium", "missing_chromium"]

CANDIDATES = ("chromium", "chromium-browser", "google-chrome")


def chromium() -> str | None:
    """The Chromium binary: $CHROMIUM, else the first of CANDIDATES on PATH."""
    configured = os.environ.get("CHROMIUM")
    if configured:
        return shutil.which(configured)
    return next((found for name in CANDIDATES if (found := shutil.which(name))), None)


def missing_chromium() -> str | None:
    """Why no browser test can run here, or None."""
    if chromium() is None:
        return "no chromium on PATH (Debian: apt-get install chromium; or set $CHROMIUM)"
    return None


def _high(pipe: tuple[int, int]) -> tuple[int, int]:
    """The pipe's ends moved above 9, clear of the descriptors 3 and 4 the child needs."""
    moved = tuple(fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 10) for fd in pipe)
    for fd in pipe:
        os.close(fd)
    return moved[0], moved[1]


class Browser:
    """One headless Chromium process; `with Browser() as b: tab = b.open(url)`."""

    def __init__(self, width: int = 1280, height: int = 900, timeout: float = 30.0) -> None:
        binary = chromium()
        assert binary is not None, missing_chromium()
        self.timeout = timeout
        self.profile = tempfile.mkdtemp(prefix="draquota-chromium-")
        to_chromium, self._write = _high(os.pipe())
        self._read, from_chromium = _high(os.pipe())
        args = ["--headless", "--remote-debugging-pipe", "--disable-gpu",
                f"--user-data-dir={self.profile}", f"--window-size={width},{height}",
                "--no-first-run", "--no-default-browser-check", "about:blank"]  # fmt: skip
        if os.geteuid() == 0:
            args.insert(0, "--no-sandbox")
        # the protocol's descriptors are 3 (in) and 4 (out): moved there by a small program
        # between fork and exec (no Python code of this process runs in the child)
        moves = f"import os, sys; os.dup2({to_chromium}, 3); os.dup2({from_chromium}, 4); "
        moves += "os.execv(sys.argv[1], sys.argv[1:])"
        self.process = subprocess.Popen(
            [sys.executable, "-c", moves, binary, *args],
            pass_fds=(to_chromium, from_chromium),
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        os.close(to_chromium)
        os.close(from_chromium)
        self._ids = itertools.count(1)
        self._answers: dict[int, dict[str, Any]] = {}
        self._events: list[dict[str, Any]] = []
        self._cond = threading.Condition()
        self._thread = threading.Thread(target=self._reader, name="chromium-pipe", daemon=True)
        self._thread.start()

    def __enter__(self) -> Browser:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _reader(self) -> None:
        buffer = b""
        while chunk := os.read(self._read, 1 << 16):
            buffer += chunk
            *messages, buffer = buffer.split(b"\0")
            with self._cond:
                for raw in messages:
                    message = json.loads(raw)
                    if "id" in message:
                        self._answers[message["id"]] = message
                    else:
                        self._events.append(message)
                self._cond.notify_all()

    def call(self, method: str, session: str | None = None, **params: Any) -> dict[str, Any]:
        """One protocol command; its result (AssertionError with the protocol's error)."""
        ident = next(self._ids)
        message: dict[str, Any] = {"id": ident, "method": method, "params": params}
        if session is not None:
            message["sessionId"] = session
        os.write(self._write, json.dumps(message).encode() + b"\0")
        with self._cond:
            if not self._cond.wait_for(lambda: ident in self._answers, self.timeout):
                raise AssertionError(f"chromium did not answer {method} in {self.timeout}s")
            answer = self._answers.pop(ident)
        assert "error" not in answer, f"{method}: {answer['error']}"
        return dict(answer.get("result") or {})

    def events(self, session: str) -> list[dict[str, Any]]:
        with self._cond:
            return [e for e in self._events if e.get("sessionId") == session]

    def open(self, url: str) -> Tab:
        """A new tab with `url` loaded (document complete)."""
        target = self.call("Target.createTarget", url="about:blank")["targetId"]
        session = self.call("Target.attachToTarget", targetId=target, flatten=True)["sessionId"]
        tab = Tab(self, session)
        for domain in ("Page", "Runtime", "Log"):
            self.call(f"{domain}.enable", session)
        self.call("Page.navigate", session, url=url)
        tab.wait(lambda: tab.evaluate("document.readyState") == "complete", "the page to load")
        return tab

    def close(self) -> None:
        try:
            if self.process.poll() is None:
                self.call("Browser.close")
                self.process.wait(10)
        except (AssertionError, OSError, subprocess.TimeoutExpired):
            self.process.kill()
            self.process.wait(10)
        finally:
            os.close(self._write)
            self._thread.join(10)  # the pipe ends with the process
            os.close(self._read)
            shutil.rmtree(self.profile, ignore_errors=True)


class Tab:
    """One open page."""

    def __init__(self, browser: Browser, session: str) -> None:
        self.browser = browser
        self.session = session

    def evaluate(self, expression: str) -> Any:
        """The value of a JavaScript expression in the page."""
        result = self.browser.call(
            "Runtime.evaluate", self.session, expression=expression, returnByValue=True
        )
        assert "exceptionDetails" not in result, result["exceptionDetails"]
        return result["result"].get("value")

    def text(self, selector: str = "body") -> str:
        """What the element shows on the screen ("" when there is no such element)."""
        found = json.dumps(selector)
        return str(self.evaluate(f"document.querySelector({found})?.innerText ?? ''"))

    def wait(self, check: Callable[[], Any], what: str, timeout: float = 60.0) -> Any:
        deadline = time.monotonic() + timeout
        while not (value := check()):
            if time.monotonic() > deadline:
                raise AssertionError(
                    f"not within {timeout}s: {what}; the page shows:\n{self.text()}"
                )
            time.sleep(0.2)
        return value

    def screenshot(self, path: Path) -> Path:
        """The whole page as PNG, beyond the window's height too."""
        size = self.browser.call("Page.getLayoutMetrics", self.session)["cssContentSize"]
        clip = {"x": 0, "y": 0, "width": size["width"], "height": size["height"], "scale": 1}
        data = self.browser.call(
            "Page.captureScreenshot", self.session, format="png", clip=clip,
            captureBeyondViewport=True,
        )["data"]  # fmt: skip
        path.write_bytes(base64.b64decode(data))
        return path

    @property
    def errors(self) -> list[str]:
        """Console errors and uncaught exceptions of the page so far."""
        out = []
        for event in self.browser.events(self.session):
            params = event.get("params") or {}
            if event["method"] == "Log.entryAdded" and params["entry"]["level"] == "error":
                out.append(params["entry"]["text"])
            elif event["method"] == "Runtime.exceptionThrown":
                out.append(params["exceptionDetails"].get("text", "exception"))
            elif event["method"] == "Runtime.consoleAPICalled" and params.get("type") == "error":
                out.append(" ".join(str(a.get("value")) for a in params.get("args", ())))
        return out
