"""The one background loop of the shell: passes every interval, skipped while not ready, an
error in one pass logged and the next still run, and stop ends the thread."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import pytest

from certs.periodic import Periodic


def _wait_for(condition: Callable[[], object], timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition() and time.monotonic() < deadline:
        time.sleep(0.005)


def test_a_failing_pass_is_logged_and_the_next_one_still_runs(
    caplog: pytest.LogCaptureFixture,
) -> None:
    passes: list[int] = []

    def tick() -> None:
        passes.append(len(passes))
        if len(passes) == 1:
            raise RuntimeError("the API server went away")

    loop = Periodic("test-loop", 0.01, tick)
    loop.start()
    _wait_for(lambda: len(passes) >= 3)
    loop.stop()
    assert len(passes) >= 3
    assert "test-loop pass failed" in caplog.text
    assert not loop.running
    assert not any(t.name == "test-loop" for t in threading.enumerate())


def test_no_pass_runs_while_not_ready() -> None:
    ready = threading.Event()
    passes: list[float] = []
    loop = Periodic("gated", 0.01, lambda: passes.append(time.monotonic()), ready.is_set)
    loop.start()
    time.sleep(0.1)
    assert passes == []
    ready.set()
    _wait_for(lambda: passes)
    loop.stop()
    assert passes
