"""`LedgerCollector`: the QuotaLedger series of /metrics, read from the ledger at scrape time.

What one replica wrote to the QuotaLedgers (`webhook.ledger.counts`) and how many
QuotaLedger objects each ledger has in its view. A ledger that keeps no counts (the
in-memory ledger of `--state`) exports none of them. Label values are configuration:
ClusterQueue names records were written for, and ledger names `cohort-<name>` or
`queue-<name>`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import Any

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

__all__ = ["LedgerCollector"]


class LedgerCollector:
    """Collected at scrape time from a ledger with `ledger_writes`, `shard_deletions` and
    `ledger_objects` (`webhook.ledger.cluster.ClusterLedger`)."""

    def __init__(self, ledger: Any) -> None:
        self._ledger = ledger

    def describe(self) -> list[Metric]:
        return []

    def collect(self) -> Iterator[Metric]:
        writes: Callable[[], Mapping[tuple[str, str], int]] | None = getattr(
            self._ledger, "ledger_writes", None
        )
        if writes is None:
            return
        family = CounterMetricFamily(
            "draquota_ledger_writes",
            "admission records by ClusterQueue and outcome: written, removed, moved (out of a "
            "sparse shard), conflict (retried), error (the admission failed closed), "
            "throttled (over the write rate)",
            labels=["cluster_queue", "outcome"],
        )
        for (queue, outcome), count in sorted(writes().items()):
            family.add_metric([queue, outcome], float(count))
        yield family
        deletions = CounterMetricFamily(
            "draquota_ledger_shard_deletions",
            "deletions of empty QuotaLedger shards by outcome: deleted, conflict (written "
            "meanwhile: kept), gone, error",
            labels=["outcome"],
        )
        for outcome, count in sorted(self._ledger.shard_deletions().items()):
            deletions.add_metric([outcome], float(count))
        yield deletions
        objects = GaugeMetricFamily(
            "draquota_ledger_objects",
            "QuotaLedger objects (shards and head) per ledger, in this replica's view",
            labels=["ledger"],
        )
        for base, count in sorted(self._ledger.ledger_objects().items()):
            objects.add_metric([base], float(count))
        yield objects
