"""Work done once the caches have synced and before the replica reports ready.

Two parts of a replica take long to load at scale, growing with the cluster: the ledger's
first load of records and pod usage, and the placement index (bench/README.md, "Scale",
has the figures). Done by the first admission, either held every admission behind it;
done here, once the caches have synced, each is part of what `/readyz` waits for.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

__all__ = ["WarmUp"]

log = logging.getLogger("draquota.warmup")


class WarmUp:
    """Calls `build` once the backend's caches are ready, in a thread named `name`; until it
    has, `warming()` says `why`. A failed build is logged: with `ready_on_failure` the
    replica is ready anyway (the first admission does the work then), else it stays unready."""

    def __init__(
        self,
        name: str,
        backend: Any,
        build: Callable[[], object],
        why: str,
        *,
        ready_on_failure: bool,
    ) -> None:
        self.name = name
        self.backend = backend
        self.build = build
        self.why = why
        self.ready_on_failure = ready_on_failure
        self._done = threading.Event()
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._stopping.clear()
        self._thread = threading.Thread(target=self._run, name=self.name, daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stopping.set()
        if self._thread is not None:
            self._thread.join(5)

    def warming(self) -> str:
        return "" if self._done.is_set() else self.why

    def _run(self) -> None:
        caches_ready = getattr(self.backend, "caches_ready", None) or self.backend.ready
        while not self._stopping.is_set():
            if caches_ready()[0]:
                started = time.monotonic()
                try:
                    self.build()
                except Exception:
                    log.exception("%s failed", self.name)
                    if not self.ready_on_failure:
                        return
                log.info("%s done", self.name, extra={"seconds": time.monotonic() - started})
                self._done.set()
                return
            self._stopping.wait(0.05)
