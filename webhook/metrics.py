"""Prometheus metrics of one app instance, in its own CollectorRegistry.

Hot-path metrics (latency, decisions) are updated per request; usage, cache sync
state and relists are read from the backend and ledger only when scraped.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import Any

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.exposition import generate_latest

__all__ = ["LATENCY_BUCKETS", "Metrics"]

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


class _StateCollector:
    """Usage per queue/flavor/resource, cache sync state and relists, computed at scrape time."""

    def __init__(self, backend: Any, ledger: Any) -> None:
        self._backend = backend
        self._ledger = ledger

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
        usage = GaugeMetricFamily(
            "draquota_queue_usage",
            "quota in use (live pods + reservations) per ClusterQueue, flavor and resource",
            labels=["cluster_queue", "flavor", "resource"],
        )
        current = self._ledger.usage()
        for queue in self._backend.state.list("ClusterQueue"):
            name = (queue.get("metadata") or {}).get("name") or ""
            for key, amount in sorted(current.of(name).items()):
                usage.add_metric([name, key.flavor, key.resource], float(amount))
        yield usage


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
        self.bad_requests = Counter(
            "draquota_bad_requests",
            "bodies refused before a decision (not an AdmissionReview, too large)",
            ["endpoint", "code"],
            registry=self.registry,
        )

    def observe_latency(self, endpoint: str, seconds: float) -> None:
        child = self._latency_children.get(endpoint)
        if child is None:
            child = self._latency_children[endpoint] = self.latency.labels(endpoint)
        child.observe(seconds)

    def watch(self, backend: Any, ledger: Any) -> None:
        """Export usage and cache state of this backend and ledger."""
        self.registry.register(_StateCollector(backend, ledger))

    def render(self) -> bytes:
        return generate_latest(self.registry)
