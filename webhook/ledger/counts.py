"""`LedgerCounts`: what one replica wrote to the QuotaLedgers, for /metrics.

Records are counted by the ClusterQueue they charge (a name from the configuration: a
record is written only for a queue a decision routed to) and by outcome:
- `written`: in a write the API server accepted;
- `removed`: taken out of a shard (its pod left, its reservation ran out, a queue took it
  back);
- `moved`: written again to the active shard, out of a sparse one about to be deleted;
- `conflict`: in a write refused because the shard changed (409) or went (404); it is
  decided again and retried;
- `error`: in a write that failed otherwise; its admission failed closed;
- `throttled`: not written, its ClusterQueue over its write rate (`webhook.ledger.writerate`).
Shard deletions are counted by outcome: `deleted`, `conflict` (a record was written to it
meanwhile: the precondition held it), `gone` (already deleted), `error`.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Iterable

__all__ = ["DELETION_OUTCOMES", "WRITE_OUTCOMES", "LedgerCounts"]

WRITE_OUTCOMES = ("written", "removed", "moved", "conflict", "error", "throttled")
DELETION_OUTCOMES = ("deleted", "conflict", "gone", "error")


class LedgerCounts:
    """Thread-safe counters; read as snapshots."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._writes: Counter[tuple[str, str]] = Counter()
        self._deletions: Counter[str] = Counter()

    def records(self, queues: Iterable[str], outcome: str) -> None:
        """One record per queue name listed (a name listed twice: two records)."""
        assert outcome in WRITE_OUTCOMES, outcome
        with self._lock:
            for queue in queues:
                self._writes[(queue, outcome)] += 1

    def deletion(self, outcome: str) -> None:
        assert outcome in DELETION_OUTCOMES, outcome
        with self._lock:
            self._deletions[outcome] += 1

    def writes(self) -> dict[tuple[str, str], int]:
        """(cluster_queue, outcome) -> records."""
        with self._lock:
            return dict(self._writes)

    def deletions(self) -> dict[str, int]:
        with self._lock:
            return dict(self._deletions)
