"""A background pass run every few seconds: the one loop of every periodic task of the shell.

Certificate rotation and reloading, the `--state` directory watch, the ledger's
reconciler, queue status, the Lease and the queueing controller all run on it. It
lives in `certs`, the package of the shell that imports none of the others, so that
each of them can use it.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

__all__ = ["Periodic"]

log = logging.getLogger("draquota.periodic")


class Periodic:
    """Calls `tick` every `interval` seconds in a daemon thread, skipping passes while
    `ready()` is false; an exception in one pass is logged and the next pass still runs."""

    def __init__(
        self,
        name: str,
        interval: float,
        tick: Callable[[], object],
        ready: Callable[[], bool] = lambda: True,
    ) -> None:
        self.name, self.interval, self.tick, self.ready = name, interval, tick, ready
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        if self._thread is None:
            self._stop.clear()
            self._thread = threading.Thread(target=self._loop, name=self.name, daemon=True)
            self._thread.start()

    @property
    def running(self) -> bool:
        return self._thread is not None

    def stop(self, timeout: float = 5.0) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)
            self._thread = None

    def _loop(self) -> None:
        while not self._stop.wait(self.interval):
            if not self.ready():
                continue
            try:
                self.tick()
            except Exception:  # one bad pass must not end the loop
                log.exception("%s pass failed", self.name)
