"""Prometheus metrics of one app instance, in its own CollectorRegistry.

Hot-path metrics (latency, decisions) are updated per request; usage, quota, lending,
cache sync state and relists are read from the backend and ledger only when scraped,
from one queue table and one read of the usage per scrape.

Label values never come from users: a queue is labelled only when its LocalQueue
exists in the cluster's configuration (else `unknown`), the resource only when it is
one draquota decides (else `other`), so the number of series is bounded by the
configuration, whatever names requests carry. Usage, quota and lending are labelled with
the names of ClusterQueues, their flavors and resources: configuration an admin writes.
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Any

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.exposition import generate_latest

from quota.charge import FlavorResource
from quota.lending import Lending, lending
from quota.queues import ClusterQueue, ResourceQuota
from quota.queuetable import QueueTable, queue_table
from quota.settings import Settings
from quota.waiting import waiting_in
from webhook.ledger.metrics import LedgerCollector
from webhook.queueing.gatedpods import GatedPods

__all__ = [
    "LATENCY_BUCKETS",
    "OTHER",
    "UNKNOWN_QUEUE",
    "Metrics",
    "queue_label",
    "quota_families",
    "reason_label",
    "resource_label",
]

UNKNOWN_QUEUE = "unknown"
OTHER = "other"
# The resources the webhook configurations send (manifests/webhooks.yaml).
_RESOURCES = frozenset(
    {
        "pods",
        "jobs",
        "cronjobs",
        "deployments",
        "replicasets",
        "statefulsets",
        "daemonsets",
        "resourceclaims",
    }
)
_REASON = re.compile(r"[A-Z][A-Za-z]{0,63}")


def queue_label(queue: str, exists: Callable[[str, str], bool]) -> str:
    """`ns/name` of a LocalQueue that exists, "" for none, `unknown` for any other name."""
    if not queue:
        return ""
    namespace, _, name = queue.partition("/")
    return queue if name and exists(namespace, name) else UNKNOWN_QUEUE


def resource_label(resource: str) -> str:
    """The request's resource when draquota decides it, else `other`."""
    return resource if resource in _RESOURCES else OTHER


def reason_label(reason: str) -> str:
    """A CamelCase reason (draquota's own), else `other`."""
    return reason if _REASON.fullmatch(reason) else OTHER


# Sub-millisecond resolution where a healthy webhook lives, up to the API server's 10 s limit.
LATENCY_BUCKETS = (
    0.0001,
    0.00025,
    0.0005,
    0.00075,
    0.001,
    0.0025,
    0.005,
    0.0075,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    10.0,
)


# How long a scrape waits for the ledger's usage before it shows the last usage it read.
USAGE_WAIT_SECONDS = 0.5


class _StateCollector:
    """Usage, quota and lending per queue/flavor/resource, waiting workloads, cache sync state
    and relists, computed at scrape time from one queue table and one read of the usage.

    Usage is read under the ledger's lock, which a slow admission may hold: a scrape
    waits for it at most USAGE_WAIT_SECONDS, then shows the last usage read (and
    `draquota_queue_usage_stale` 1). At most one read waits on the lock at a time.
    """

    def __init__(self, backend: Any, ledger: Any, settings: Settings) -> None:
        self._backend = backend
        self._ledger = ledger
        self._settings = settings
        self._reader = ThreadPoolExecutor(1, thread_name_prefix="draquota-usage")
        self._pending: Future[Any] | None = None
        self._last: Any = None
        self._guard = threading.Lock()
        self._gated = GatedPods(backend.state)
        self._gated_lock = threading.Lock()  # two scrapes may collect at once

    def _usage(self) -> tuple[Any, bool]:
        """(usage, fresh): the ledger's usage if it can be read in time, else the last one."""
        with self._guard:
            if self._pending is None:
                self._pending = self._reader.submit(self._ledger.usage)
            pending = self._pending
        try:
            usage = pending.result(timeout=USAGE_WAIT_SECONDS)
        except FutureTimeout:
            return self._last, False
        with self._guard:
            if self._pending is pending:
                self._pending = None
            self._last = usage
        return usage, True

    def describe(self) -> list[Metric]:
        return []

    def collect(self) -> Iterator[Metric]:
        ready, _ = self._backend.ready()
        synced = GaugeMetricFamily(
            "draquota_cache_synced", "1 when the cluster view is synced and fresh, else 0"
        )
        synced.add_metric([], 1.0 if ready else 0.0)
        yield synced
        relists = CounterMetricFamily(
            "draquota_cache_relists", "full re-reads of the cluster view", labels=["source"]
        )
        counts: Callable[[], Mapping[str, int]] | None = getattr(self._backend, "relists", None)
        for source, count in sorted((counts() if counts else {}).items()):
            relists.add_metric([source], float(count))
        yield relists
        table = queue_table(self._backend.state.snapshot(), self._settings)
        current, fresh = self._usage()
        usage: dict[str, dict[FlavorResource, int]] | None = None
        if current is not None:
            usage = {name: current.of(name) for name in sorted({*table.queues, *table.invalid})}
        yield _usage_family(usage or {})
        stale = GaugeMetricFamily(
            "draquota_queue_usage_stale",
            "1 when the ledger was busy at scrape time and usage shows the last value read",
        )
        stale.add_metric([], 0.0 if fresh else 1.0)
        yield stale
        unrecorded = GaugeMetricFamily(
            "draquota_unrecorded_pods",
            "managed live pods charged by recomputation alone: no admission record (created "
            "before draquota was installed, or while its webhooks were removed)",
        )
        unrecorded_pods: Callable[[], int] | None = getattr(self._ledger, "unrecorded_pods", None)
        unrecorded.add_metric([], float(unrecorded_pods()) if unrecorded_pods else 0.0)
        yield unrecorded
        yield from quota_families(table, usage)
        yield self._waiting(table)

    def _waiting(self, table: QueueTable) -> Metric:
        pending = GaugeMetricFamily(
            "draquota_pending_workloads",
            "pods and pod groups waiting, gated, in a ClusterQueue with whenFull: Queue",
            labels=["cluster_queue"],
        )
        with self._gated_lock:
            gated = self._gated.pods()
        waiting = waiting_in(self._backend.state, table, time.time(), gated)
        for name in sorted(n for n, queue in table.queues.items() if queue.queues):
            pending.add_metric([name], float(len(waiting.get(name, ()))))
        return pending


_QUOTA_LABELS = ["cluster_queue", "flavor", "resource"]
# Counter and capacity resources (issue 27) too are raw numbers in their base unit: bytes for
# a GPU memory quota written 40Gi, 100000000000 for a bandwidth written 100G.
_UNITS = (
    "(quota units: devices, cpu millicores, memory bytes, counters and capacities in their "
    "base unit)"
)


def _usage_family(usage: Mapping[str, Mapping[FlavorResource, int]]) -> Metric:
    family = GaugeMetricFamily(
        "draquota_queue_usage",
        "quota in use (live pods + reservations) per ClusterQueue, flavor and resource",
        labels=_QUOTA_LABELS,
    )
    for name, amounts in usage.items():
        for key, amount in sorted(amounts.items()):
            family.add_metric([name, key.flavor, key.resource], float(amount))
    return family


# draquota_cluster_queue_<key>: what each gauge of `quota_families` holds
_QUOTA_HELP = {
    "nominal_quota": "nominal quota per ClusterQueue, flavor and resource",
    "borrowing_limit": "borrowingLimit, where set: the most a ClusterQueue may borrow",
    "lending_limit": "lendingLimit, where set: the most of its nominal quota a queue lends",
    "lent": "quota of a cohort member in use by other members of its cohort",
    "borrowed": "quota a cohort member uses beyond its nominal quota",
}


def quota_families(
    table: QueueTable, usage: Mapping[str, Mapping[FlavorResource, int]] | None
) -> list[Metric]:
    """Quota of every parsed ClusterQueue per flavor and resource, as Kueue's
    `kueue_cluster_queue_nominal_quota` family, and what cohort members lent and borrowed.

    Nominal quota for every flavor-resource a queue lists, a limit only where it is set;
    lent and borrowed (`quota.lending`, the attribution users read) only for cohort
    members, and only once usage was read (`usage` None: nothing to attribute). Names are
    the configuration's, so the series are bounded by it.
    """
    families = {
        key: GaugeMetricFamily(
            f"draquota_cluster_queue_{key}", f"{text} {_UNITS}", labels=_QUOTA_LABELS
        )
        for key, text in _QUOTA_HELP.items()
    }
    for name, queue in sorted(table.queues.items()):
        for key, quota in _quotas(queue):
            row = [name, key.flavor, key.resource]
            limits = {
                "nominal_quota": quota.nominal,
                "borrowing_limit": quota.borrowing_limit,
                "lending_limit": quota.lending_limit,
            }
            for family, value in limits.items():
                if value is not None:
                    families[family].add_metric(row, float(value))
        if queue.cohort is None or usage is None:
            continue
        for key, share in _shares(table, queue, usage):
            row = [name, key.flavor, key.resource]
            families["lent"].add_metric(row, float(share.lent))
            families["borrowed"].add_metric(row, float(share.borrowed))
    return list(families.values())


def _quotas(queue: ClusterQueue) -> Iterator[tuple[FlavorResource, ResourceQuota]]:
    for group in queue.groups:
        for flavor in group.flavors:
            for resource, quota in sorted(flavor.resources.items()):
                yield FlavorResource(flavor.name, resource), quota


def _shares(
    table: QueueTable, queue: ClusterQueue, usage: Mapping[str, Mapping[FlavorResource, int]]
) -> Iterator[tuple[FlavorResource, Lending]]:
    """The queue's lending of what it lists or uses (pods may hold a flavor-resource an
    admin has since removed from the queue: that is borrowed, as `quota.lending` says)."""
    keys = {key for key, _ in _quotas(queue)} | set(usage.get(queue.name, {}))
    for key in sorted(keys):
        yield key, lending(table, queue, key, lambda name: usage.get(name, {}))


class Metrics:
    """The metrics of one webhook app."""

    content_type = CONTENT_TYPE_LATEST

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.latency = Histogram(
            "draquota_admission_duration_seconds",
            "time to answer one AdmissionReview",
            ["endpoint"],
            buckets=LATENCY_BUCKETS,
            registry=self.registry,
        )
        self.decisions = Counter(
            "draquota_admission_decisions",
            "admission answers by LocalQueue (ns/name), Kubernetes resource and reason",
            ["endpoint", "queue", "resource", "reason", "allowed"],
            registry=self.registry,
        )
        self._latency_children: dict[str, Any] = {}
        self._decision_children: dict[tuple[str, ...], Any] = {}
        # Label values are ClusterQueue names the controller admitted to: the configuration's.
        self.waited = Histogram(
            "draquota_queue_wait_seconds",
            "time from creation to admission of pods and pod groups of queueing ClusterQueues",
            ["cluster_queue"],
            buckets=(1, 5, 15, 30, 60, 300, 900, 1800, 3600, 7200, 21600, 86400),
            registry=self.registry,
        )
        # Label values: the victim's ClusterQueue and Kueue's reason (quota.preemption's IN_*).
        self.preemptions = Counter(
            "draquota_preempted_workloads",
            "workloads preempted (by the queue, or reclaimed at admission), by their "
            "ClusterQueue and reason",
            ["cluster_queue", "reason"],
            registry=self.registry,
        )
        self.bad_requests = Counter(
            "draquota_bad_requests",
            "bodies refused before a decision (not an AdmissionReview, too large)",
            ["endpoint", "code"],
            registry=self.registry,
        )
        # Outcomes: forwarded (the elected replica answered), unavailable (it could not be
        # asked: denied), moved (a forwarded request reached a replica no longer elected).
        self.forwarded_requests = Counter(
            "draquota_forwarded_requests",
            "/validate requests of a replica that is not elected, by what became of them",
            ["outcome"],
            registry=self.registry,
        )

    def forwarded(self, outcome: str) -> None:
        """Count one /validate request this replica forwarded, or could not."""
        self.forwarded_requests.labels(outcome).inc()

    def decided(self, endpoint: str, queue: str, resource: str, reason: str, allowed: str) -> None:
        """Count one answer. The label values are bounded (`queue_label`, `reason_label`, ...),
        so their counters are kept rather than looked up under the client's lock each time."""
        key = (endpoint, queue, resource, reason, allowed)
        child = self._decision_children.get(key)
        if child is None:
            if len(self._decision_children) >= 4096:
                self._decision_children.clear()
            child = self._decision_children[key] = self.decisions.labels(*key)
        child.inc()

    def observe_latency(self, endpoint: str, seconds: float) -> None:
        child = self._latency_children.get(endpoint)
        if child is None:
            child = self._latency_children[endpoint] = self.latency.labels(endpoint)
        child.observe(seconds)

    def watch(self, backend: Any, ledger: Any, settings: Settings | None = None) -> None:
        """Export usage, quota, lending, cache state and waiting workloads of this backend and
        ledger."""
        self.registry.register(_StateCollector(backend, ledger, settings or Settings()))
        self.registry.register(LedgerCollector(ledger))

    def observe_wait(self, cluster_queue: str, seconds: float) -> None:
        """A waiting pod or pod group was admitted after `seconds` in its queue."""
        self.waited.labels(cluster_queue).observe(max(seconds, 0.0))

    def preempted(self, cluster_queue: str, reason: str) -> None:
        """A workload of `cluster_queue` was preempted for `reason`."""
        self.preemptions.labels(cluster_queue, reason).inc()

    def render(self) -> bytes:
        return generate_latest(self.registry)
