"""`WriteRate`: how fast one replica writes admission records for each ClusterQueue.

A token bucket per ClusterQueue: `rate` records per second, `burst` at once. An admission
over its queue's rate waits for its turn, in arrival order (each one reserves the next
free slot), so that one queue's churn cannot take the API server's write capacity, nor its
cohort's lock, from the other queues. The wait is bounded: an admission whose turn is
more than `max_wait` away takes no slot and is refused, to be retried (the webhook has to
answer within its deadline; a queued workload simply waits for the next pass).

The bucket is per replica: with N replicas a queue may write N times `rate`.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

__all__ = ["WriteRate"]

# Buckets kept before full ones are forgotten (a full bucket is the same as a new one).
_MAX_BUCKETS = 1024


@dataclass
class _Bucket:
    tokens: float
    updated: float


class WriteRate:
    """Token buckets by ClusterQueue name; `turn()` blocks until the caller may write."""

    def __init__(
        self,
        rate: float,
        burst: float,
        max_wait: float,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        if rate <= 0 or burst < 1 or max_wait < 0:
            raise ValueError(f"write rate {rate}/s, burst {burst}, wait {max_wait}s: out of range")
        self.rate = rate
        self.burst = burst
        self.max_wait = max_wait
        self._clock = clock
        self._sleep = sleep
        self._buckets: dict[str, _Bucket] = {}
        self._lock = threading.Lock()

    def turn(self, cluster_queue: str) -> float | None:
        """Wait for this queue's next write slot; the seconds waited, or None (nothing taken)
        when the slot is more than `max_wait` away."""
        wait = self._reserve(cluster_queue)
        if wait is None:
            return None
        if wait > 0:
            self._sleep(wait)
        return wait

    def _reserve(self, cluster_queue: str) -> float | None:
        """Take one token (the balance may go below zero: those are slots promised to the
        admissions queued for them); how long until the caller's slot comes."""
        with self._lock:
            now = self._clock()
            bucket = self._buckets.get(cluster_queue)
            if bucket is None:
                if len(self._buckets) >= _MAX_BUCKETS:
                    self._forget_full(now)
                bucket = self._buckets[cluster_queue] = _Bucket(self.burst, now)
            bucket.tokens = min(self.burst, bucket.tokens + (now - bucket.updated) * self.rate)
            bucket.updated = now
            wait = max(0.0, (1 - bucket.tokens) / self.rate) if bucket.tokens < 1 else 0.0
            if wait > self.max_wait:
                return None
            bucket.tokens -= 1
            return wait

    def _forget_full(self, now: float) -> None:
        for name, bucket in list(self._buckets.items()):
            if bucket.tokens + (now - bucket.updated) * self.rate >= self.burst:
                del self._buckets[name]
