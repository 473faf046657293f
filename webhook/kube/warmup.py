"""`PlacementWarmUp`: the placement index is built before the replica reports ready.

At 5,000 nodes the first placement question builds the index for about 3 s (devices
parsed, pools per node). Built by the first admission, it held every admission behind
it for those seconds; built here, once the caches have synced, it is part of what
`/readyz` waits for, like the ledger's first load.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

__all__ = ["PlacementWarmUp"]

log = logging.getLogger("draquota.warmup")


class PlacementWarmUp:
    """Calls `build` once the backend's caches are ready; `warming()` says why not yet."""

    def __init__(self, backend: Any, build: Callable[[], object]) -> None:
        self.backend = backend
        self.build = build
        self._done = threading.Event()
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._stopping.clear()
        self._thread = threading.Thread(target=self._run, name="placement-warm-up", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stopping.set()
        if self._thread is not None:
            self._thread.join(5)

    def warming(self) -> str:
        return "" if self._done.is_set() else "building the placement index"

    def _run(self) -> None:
        caches_ready = getattr(self.backend, "caches_ready", None) or self.backend.ready
        while not self._stopping.is_set():
            if caches_ready()[0]:
                started = time.monotonic()
                try:
                    self.build()
                except Exception:  # the first admission builds it then, as before
                    log.exception("placement index not built ahead")
                log.info("placement index built", extra={"seconds": time.monotonic() - started})
                self._done.set()
                return
            self._stopping.wait(0.05)
