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

from quota.cluster import ClusterState
from quota.livepods import is_live_pod
from quota.queues import queue_table
from quota.settings import Settings
from quota.status import cluster_queue_status
from quota.usage import Usage
from quota.waiting import is_gated, waiting_workloads
from webhook.kube.client import ApiError, KubeClient, TransportError
from webhook.kube.periodic import Periodic
from webhook.kube.resources import QUOTA_GROUP, QUOTA_VERSION, ResourceType

__all__ = ["CLUSTER_QUEUE", "QueueStatusWriter"]

log = logging.getLogger("draquota.queuestatus")
CLUSTER_QUEUE = ResourceType("ClusterQueue", QUOTA_GROUP, QUOTA_VERSION, "clusterqueues", False)


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
        self._writer = Periodic("queue-status", interval, self.sync, lambda: backend.ready()[0])

    def start(self) -> None:
        self._writer.start()

    def stop(self) -> None:
        self._writer.stop()

    def sync(self) -> int:
        """One pass over every cached ClusterQueue; how many statuses were written."""
        state = self.backend.state
        table = queue_table(state, self.settings)
        usage = self.ledger.usage()
        seconds = self.clock()
        now = _rfc3339(seconds)
        waiting = {}
        if any(queue.queues for queue in table.queues.values()):
            gated = (p for p in state.list("Pod") if is_gated(p) and is_live_pod(p, seconds))
            waiting = waiting_workloads(gated, table)
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
            written += self._write(queue, name, wanted)
        return written

    def _write(self, queue: Mapping[str, Any], name: str, status: dict[str, Any]) -> int:
        body = {**queue, "status": status}
        body.setdefault("apiVersion", CLUSTER_QUEUE.api_version)
        body.setdefault("kind", CLUSTER_QUEUE.kind)
        try:
            self.client.request("PUT", CLUSTER_QUEUE.path(name=name) + "/status", body=body)
        except (ApiError, TransportError) as exc:
            log.info("cluster queue status not written: %s: %s", name, exc)
            return 0
        return 1


def _same(current: Mapping[str, Any], wanted: Mapping[str, Any]) -> bool:
    return all(current.get(key) == value for key, value in wanted.items())
