"""Writes the status of every ClusterQueue and LocalQueue (`quota.status` computes it).

A ClusterQueue's: the `Active` condition, usage per flavor, the admitted and pending
counts. A LocalQueue's: the same counts and usage for its own workloads, and its
ClusterQueue's quota, usage and cohort lending, which its namespace's users may read.

The elected replica runs it (`leading`, `webhook.bootstrap`): it alone holds the records
it has not written yet, so only its view has the usage a status must show. A write races
other writers (an election in between) through the resourceVersion precondition; a lost
race is simply retried on the next pass. A status is
written only when it differs, and at most once per pass (`interval`): a queue whose usage
changes all the time is written once per interval, not once per change.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import Any, Protocol

from certs.periodic import Periodic
from quota.charge import FlavorResource
from quota.cluster import ClusterView
from quota.demand import catalog_of
from quota.devicecharge import unpublished_sources
from quota.holdings import holdings
from quota.objectkeys import namespace_of, object_key_of
from quota.queuetable import QueueTable, queue_table
from quota.settings import Settings
from quota.status import cluster_queue_status, cluster_queue_summary, local_queue_status
from quota.usage import Usage
from quota.waiting import Waiting, waiting_in
from webhook.kube.client import ApiError, KubeClient, TransportError
from webhook.kube.resources import LOCAL_QUEUE, QUOTA_GROUP, QUOTA_VERSION, ResourceType
from webhook.queueing.gatedpods import GatedPods
from webhook.store.clusterstate import ClusterState

__all__ = ["CLUSTER_QUEUE", "QueueStatusWriter"]

log = logging.getLogger("draquota.queuestatus")
CLUSTER_QUEUE = ResourceType("ClusterQueue", QUOTA_GROUP, QUOTA_VERSION, "clusterqueues", False)


class _Backend(Protocol):
    state: ClusterState

    def ready(self) -> tuple[bool, str]: ...


class _Ledger(Protocol):
    def usage(self) -> Usage: ...


class _Pass:
    """What one pass reads, each worked out once: a ClusterQueue's usage and summary are asked
    for by each of its LocalQueues and by every member of its cohort."""

    def __init__(self, table: QueueTable, usage: Usage, now: str) -> None:
        self.table, self.usage, self.now = table, usage, now
        self.held = holdings(usage)
        self._usage: dict[str, Mapping[FlavorResource, int]] = {}
        self._summaries: dict[str, dict[str, Any]] = {}

    def usage_of(self, name: str) -> Mapping[FlavorResource, int]:
        if name not in self._usage:
            self._usage[name] = self.usage.of(name)
        return self._usage[name]

    def summary(self, name: str) -> dict[str, Any]:
        if name not in self._summaries:
            self._summaries[name] = cluster_queue_summary(self.table, name, self.usage_of)
        return self._summaries[name]


def _rfc3339(seconds: float) -> str:
    return datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class QueueStatusWriter:
    """Keeps `status` of every ClusterQueue and LocalQueue current; start()/stop() with the
    backend."""

    def __init__(
        self,
        client: KubeClient,
        backend: _Backend,
        ledger: _Ledger,
        settings: Settings,
        interval: float = 10.0,
        clock: Callable[[], float] = time.time,
        leading: Callable[[], bool] = lambda: True,
    ) -> None:
        self.client, self.backend, self.ledger = client, backend, ledger
        self.settings, self.clock = settings, clock
        self._gated = GatedPods(backend.state)
        self._writer = Periodic(
            "queue-status", interval, self.sync, lambda: leading() and backend.ready()[0]
        )

    def start(self) -> None:
        self._writer.start()

    def stop(self) -> None:
        self._writer.stop()

    def sync(self) -> int:
        """One pass over every cached ClusterQueue and LocalQueue; how many statuses were
        written."""
        state = self.backend.state.snapshot()
        seconds = self.clock()
        table = queue_table(state, self.settings)
        pass_ = _Pass(table, self.ledger.usage(), _rfc3339(seconds))
        waiting = waiting_in(state, table, seconds, self._gated.pods())
        written = 0
        catalog = catalog_of(state)  # parsed only if a queue needs it
        for queue in state.list("ClusterQueue"):
            name = str((queue.get("metadata") or {}).get("name"))
            parsed = table.queues.get(name)
            sources = parsed.sources if parsed is not None else {}
            wanted = cluster_queue_status(
                pass_.table, name, pass_.usage_of(name), _status(queue), pass_.now,
                pending=len(waiting.get(name, ())),
                admitted=pass_.held.cluster_queues.get(name, 0),
                unpublished=unpublished_sources(catalog(), sources) if sources else (),
            )  # fmt: skip
            written += self._write_changed(queue, CLUSTER_QUEUE, None, name, wanted)
        return written + self._sync_local_queues(state, pass_, waiting)

    def _sync_local_queues(
        self, state: ClusterView, pass_: _Pass, waiting: Mapping[str, list[Waiting]]
    ) -> int:
        pending: dict[str, int] = {}
        for workloads in waiting.values():
            for workload in workloads:
                pending[workload.local_queue] = pending.get(workload.local_queue, 0) + 1
        written = 0
        for local in state.list("LocalQueue"):
            metadata = local.get("metadata") or {}
            namespace, name = namespace_of(local), str(metadata.get("name"))
            parsed = pass_.table.local_queues.get(object_key_of(namespace, name))
            if parsed is None or isinstance(parsed, str):
                continue
            wanted = local_queue_status(
                pass_.table, parsed, pass_.held, pending.get(parsed.key, 0),
                pass_.summary(parsed.cluster_queue), _status(local), pass_.now,
            )  # fmt: skip
            written += self._write_changed(local, LOCAL_QUEUE, namespace, name, wanted)
        return written

    def _write_changed(
        self,
        obj: Mapping[str, Any],
        kind: ResourceType,
        namespace: str | None,
        name: str,
        wanted: Mapping[str, Any],
    ) -> int:
        current = _status(obj)
        if current is not None and _same(current, wanted):
            return 0
        return self._write(obj, kind, namespace, name, wanted)

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


def _status(obj: Mapping[str, Any]) -> Mapping[str, Any] | None:
    status = obj.get("status")
    return status if isinstance(status, Mapping) else None


def _same(current: Mapping[str, Any], wanted: Mapping[str, Any]) -> bool:
    return all(current.get(key) == value for key, value in wanted.items())
