"""LedgerCollector: the QuotaLedger series as Prometheus renders them."""

from __future__ import annotations

from prometheus_client import CollectorRegistry
from prometheus_client.exposition import generate_latest

from quota.settings import Settings
from webhook.ledger.memory import MemoryLedger
from webhook.ledger.metrics import LedgerCollector
from webhook.store.clusterstate import ClusterState


class _Counted:
    """What `ClusterLedger` answers for its series."""

    def ledger_writes(self) -> dict[tuple[str, str], int]:
        return {("gpus", "written"): 3, ("gpus", "throttled"): 2, ("cpus", "removed"): 1}

    def shard_deletions(self) -> dict[str, int]:
        return {"deleted": 4, "conflict": 1}

    def ledger_objects(self) -> dict[str, int]:
        return {"cohort-research": 3, "queue-gpus": 2}


def render(ledger: object) -> str:
    registry = CollectorRegistry()
    registry.register(LedgerCollector(ledger))
    return generate_latest(registry).decode()


def test_writes_deletions_and_objects_are_rendered_with_their_labels() -> None:
    text = render(_Counted())
    for line in (
        'draquota_ledger_writes_total{cluster_queue="gpus",outcome="written"} 3.0',
        'draquota_ledger_writes_total{cluster_queue="gpus",outcome="throttled"} 2.0',
        'draquota_ledger_writes_total{cluster_queue="cpus",outcome="removed"} 1.0',
        'draquota_ledger_shard_deletions_total{outcome="deleted"} 4.0',
        'draquota_ledger_shard_deletions_total{outcome="conflict"} 1.0',
        'draquota_ledger_objects{ledger="cohort-research"} 3.0',
        'draquota_ledger_objects{ledger="queue-gpus"} 2.0',
    ):
        assert line in text.splitlines()
    assert "# TYPE draquota_ledger_writes_total counter" in text
    assert "# TYPE draquota_ledger_objects gauge" in text


def test_a_ledger_that_keeps_no_counts_exports_no_ledger_series() -> None:
    assert "draquota_ledger" not in render(MemoryLedger(ClusterState(), Settings()))
