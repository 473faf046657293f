"""`WaitingIndex`: the gated pods and suspended Jobs of a cluster view, by the LocalQueue they
name.

The answer at submit (`webhook.admission.submitwait`) needs what waits in one ClusterQueue,
on every create into a queueing one; listing every pod and Job of the cluster each time
would cost O(cluster). This index follows the views' change journal instead
(`quota.journal.JournalCursor`, moved to each view read, older ones included): a read costs
O(pods and Jobs changed since the last one) plus what waits in the LocalQueues asked for,
and a full rescan of a kind only on the first read, after a relist, on a view of another
store, or when the journal no longer reaches back that far. Entries are keyed by the
LocalQueue an object names (its queue label, else `default`), which no change to the queue
objects moves. Whether a pod is still live, and which ClusterQueue a LocalQueue points to,
is the reader's business.
Thread-safe: admissions run on several threads and share one index.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable
from typing import Any

from quota.cluster import ClusterView, Key, Obj, meta_of
from quota.journal import JournalCursor, JournalPosition
from quota.livepods import is_gated
from quota.waiting import local_queue_key

__all__ = ["WaitingIndex"]

_KINDS = ("Pod", "Job")


def _waits(kind: str, obj: Obj) -> bool:
    if kind == "Pod":
        return is_gated(obj)
    spec: Any = obj.get("spec")
    return isinstance(spec, dict) and spec.get("suspend") is True


class WaitingIndex:
    """Gated pods and suspended Jobs by LocalQueue (`ns/name`), brought up to each view read."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._read: JournalPosition | None = None  # holds no view
        self._by_queue: dict[str, dict[tuple[str, Key], Obj]] = {}
        self._queue_of: dict[tuple[str, Key], str] = {}
        self.rescans = 0

    def waiting(
        self, view: ClusterView, local_queues: Iterable[str]
    ) -> tuple[list[Obj], list[Obj]]:
        """The gated pods and the suspended Jobs of `view` that name one of `local_queues`."""
        pods: list[Obj] = []
        jobs: list[Obj] = []
        with self._lock:
            self._follow(view)
            for local in local_queues:
                for (kind, _), obj in self._by_queue.get(local, {}).items():
                    (jobs if kind == "Job" else pods).append(obj)
        return pods, jobs

    def _follow(self, view: ClusterView) -> None:
        cursor = self._read.reading(view) if self._read is not None else JournalCursor(view)
        changes = cursor.follow(*_KINDS)
        self._read = cursor.position()
        for kind, changed in changes:
            if changed is None:  # also every kind of another store's view: all entries go
                self._rescan(view, kind)
            else:
                for namespace, name in changed:
                    self._update(kind, (namespace, name), view.get(kind, namespace, name))

    def _rescan(self, view: ClusterView, kind: str) -> None:
        self.rescans += 1
        for entry in [e for e in self._queue_of if e[0] == kind]:
            self._drop(entry)
        for obj in view.list(kind):
            _, namespace, name = meta_of(obj)
            self._update(kind, (namespace, name), obj)

    def _update(self, kind: str, key: Key, obj: Obj | None) -> None:
        entry = (kind, key)
        self._drop(entry)
        if obj is not None and _waits(kind, obj):
            local = local_queue_key(obj)
            self._by_queue.setdefault(local, {})[entry] = obj
            self._queue_of[entry] = local

    def _drop(self, entry: tuple[str, Key]) -> None:
        local = self._queue_of.pop(entry, None)
        if local is not None:
            objects = self._by_queue[local]
            objects.pop(entry, None)
            if not objects:
                del self._by_queue[local]
