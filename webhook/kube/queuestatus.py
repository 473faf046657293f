"""Writes each ClusterQueue's status: the `Active` condition, usage per flavor, and the
workloads waiting in a queue with `whenFull: Queue`.

Every replica runs it; they compute the same status from the same caches, so
after one write the others find nothing to change. A write races other writers
through the resourceVersion precondition; a lost race is simply retried on the
next pass.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import Any, Protocol

from certs.periodic import Periodic
from quota.derived import DerivedCache
from quota.queuetable import QueueTable, queue_table
from quota.settings import Settings
from quota.status import cluster_queue_status, local_queue_status
from quota.usage import Usage
from quota.waiting import Waiting, waiting_in
from webhook.clusterstate import ClusterState
from webhook.gatedpods import GatedPods
from webhook.kube.client import ApiError, KubeClient, TransportError
from webhook.kube.resources import QUOTA_GROUP, QUOTA_VERSION, ResourceType

__all__ = ["CLUSTER_QUEUE", "QueueStatusWriter"]

log = logging.getLogger("draquota.queuestatus")
CLUSTER_QUEUE = ResourceType("ClusterQueue", QUOTA_GROUP, QUOTA_VERSION, "clusterqueues", False)
LOCAL_QUEUE = ResourceType("LocalQueue", QUOTA_GROUP, QUOTA_VERSION, "localqueues", True)


class _Backend(Protocol):
    state: ClusterState

    def ready(self) -> tuple[bool, str]: ...


class _Ledger(Protocol):
    def usage(self) -> Usage: ...


def _rfc3339(seconds: float) -> str:
    return datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class QueueStatusWriter:
    """Keeps `status` of every ClusterQueue current; start()/stop() with the backend."""

    def __init__(
        self,
        client: KubeClient,
        backend: _Backend,
        ledger: _Ledger,
        settings: Settings,
        interval: float = 10.0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.client, self.backend, self.ledger = client, backend, ledger
        self.settings, self.clock = settings, clock
        self._cache = DerivedCache()  # the queue table, until a queue object changes
        self._gated = GatedPods(backend.state)
        self._writer = Periodic("queue-status", interval, self.sync, lambda: backend.ready()[0])

    def start(self) -> None:
        self._writer.start()

    def stop(self) -> None:
        self._writer.stop()

    def sync(self) -> int:
        """One pass over every cached ClusterQueue; how many statuses were written."""
        state = self.backend.state.snapshot()
        table = queue_table(state, self.settings, cache=self._cache)
        usage = self.ledger.usage()
        seconds = self.clock()
        now = _rfc3339(seconds)
        waiting = waiting_in(state, table, seconds, self._gated.pods())
        written = 0
        for queue in state.list("ClusterQueue"):
            name = str((queue.get("metadata") or {}).get("name"))
            current = queue.get("status") if isinstance(queue.get("status"), Mapping) else None
            parsed = table.queues.get(name)
            pending = len(waiting.get(name, ())) if parsed is not None and parsed.queues else None
            count = getattr(usage, "holder_count", None)
            admitted = count(name) if count is not None else None
            wanted = cluster_queue_status(
                table, name, usage.of(name), current, now, pending, admitted
            )
            if current is not None and _same(current, wanted):
                continue
            written += self._write(queue, CLUSTER_QUEUE, None, name, wanted)
        return written + self._sync_local_queues(table, usage, waiting)

    def _sync_local_queues(
        self, table: QueueTable, usage: Usage, waiting: Mapping[str, list[Waiting]]
    ) -> int:
        """The admitted and pending counts of every LocalQueue."""
        count = getattr(usage, "local_holder_count", None)
        if count is None:
            return 0
        pending: dict[str, int] = {}
        for workloads in waiting.values():
            for workload in workloads:
                pending[workload.local_queue] = pending.get(workload.local_queue, 0) + 1
        written = 0
        for local in self.backend.state.list("LocalQueue"):
            metadata = local.get("metadata") or {}
            namespace, name = str(metadata.get("namespace")), str(metadata.get("name"))
            parsed = table.local_queues.get(f"{namespace}/{name}")
            if parsed is None or isinstance(parsed, str):
                continue
            queue = table.queues.get(parsed.cluster_queue)
            queued = queue is not None and queue.queues
            wanted = local_queue_status(
                count(parsed.key), pending.get(parsed.key, 0) if queued else None
            )
            current = local.get("status") if isinstance(local.get("status"), Mapping) else None
            if current is not None and _same(current, wanted):
                continue
            written += self._write(local, LOCAL_QUEUE, namespace, name, wanted)
        return written

    def _write(
        self,
        obj: Mapping[str, Any],
        kind: ResourceType,
        namespace: str | None,
        name: str,
        status: Mapping[str, Any],
    ) -> int:
        body = {**obj, "status": {**(obj.get("status") or {}), **status}}
        body.setdefault("apiVersion", kind.api_version)
        body.setdefault("kind", kind.kind)
        try:
            self.client.request("PUT", kind.path(namespace, name) + "/status", body=body)
        except (ApiError, TransportError) as exc:
            log.info("%s status not written: %s: %s", kind.kind, name, exc)
            return 0
        return 1


def _same(current: Mapping[str, Any], wanted: Mapping[str, Any]) -> bool:
    return all(current.get(key) == value for key, value in wanted.items())
