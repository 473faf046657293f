"""`draquota serve --state DIR`: the cluster is a directory of manifests.

The directory is read at start and, with a watch interval, polled by file mtimes
and sizes; a change reloads it and replaces each kind whose objects changed, so
that caches keyed by kind revision keep what did not change. A directory that no
longer loads keeps the last good view and makes the backend not ready.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from certs.periodic import Periodic
from quota.errors import DraquotaError
from webhook.store.manifests import MANIFEST_SUFFIXES, load_state

__all__ = ["StateDirBackend"]

log = logging.getLogger("draquota.backend")


def _signature(root: Path) -> tuple[tuple[str, int, int], ...]:
    if root.is_file():
        files = [root]
    else:
        files = sorted(p for p in root.rglob("*") if p.is_file() and p.suffix in MANIFEST_SUFFIXES)
    entries = []
    for path in files:
        try:
            stat = path.stat()
        except OSError:
            continue
        entries.append((str(path), stat.st_mtime_ns, stat.st_size))
    return tuple(entries)


class StateDirBackend:
    """`--state DIR`: the cluster is a directory of manifests, reloaded when files change."""

    blocking_io = False

    def __init__(self, root: Path, watch_interval: float | None = None) -> None:
        self.root = root
        self.watch_interval = watch_interval
        self._signature = _signature(root)
        self.state = load_state(root)
        self._error = ""
        self._reloads = 0
        # The watcher must survive anything a half-written file does: Periodic logs and goes on.
        self._watch = Periodic("state-dir-watch", watch_interval or 0.0, self.poll)

    def start(self) -> None:
        if self.watch_interval:
            self._watch.start()

    def stop(self) -> None:
        self._watch.stop()

    def ready(self) -> tuple[bool, str]:
        return (not self._error, self._error)

    def fetch(self, kind: str, namespace: str | None, name: str) -> Mapping[str, Any] | None:
        return None

    def relists(self) -> Mapping[str, int]:
        """Reloads of the directory, for the metrics."""
        return {"state-dir": self._reloads}

    def poll(self) -> bool:
        """Reload when a file changed since the last look; True when it did."""
        signature = _signature(self.root)
        if signature == self._signature:
            return False
        self._signature = signature
        self.reload()
        return True

    def reload(self) -> None:
        """Load the directory again and replace each kind whose objects changed."""
        try:
            fresh = load_state(self.root)
        except (DraquotaError, OSError) as exc:
            self._error = f"state directory {self.root} is invalid: {exc}"
            log.error("state reload failed", extra={"error": str(exc)})
            return
        for kind in sorted(set(fresh.kinds()) | set(self.state.kinds())):
            objects = fresh.list(kind)
            if objects != self.state.list(kind):
                self.state.replace_kind(kind, objects)
        self._error = ""
        self._reloads += 1
        log.info("state reloaded", extra={"root": str(self.root)})
