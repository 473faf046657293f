"""Usage with per-queue totals kept on add and remove, and a copy-on-write view of it.

`Usage.of` sums every holder per call; with thousands of live pods and
reservations that would be the hot path's cost. `IndexedUsage` gives the same
answers in O(resources of a queue).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping
from typing import Any

from quota.charge import Charge, FlavorResource
from quota.quantity import INT64_MAX
from quota.usage import Usage

__all__ = ["IndexedUsage"]


_Shared = dict[tuple[str, FlavorResource], Counter[int]]


def _apply(
    totals: dict[FlavorResource, int],
    shared: Callable[[tuple[str, FlavorResource]], Counter[int]],
    charge: Charge,
    sign: int,
) -> None:
    """Add (sign 1) or take back (sign -1) one charge's contribution to a queue's index."""
    for key, value in charge.flavor_usage().items():
        totals[key] = totals.get(key, 0) + sign * value
        if not totals[key]:
            del totals[key]
    for claim, amounts in charge.shared_flavor_usage().items():
        for key, value in amounts.items():
            counts = shared((claim, key))
            counts[value] += sign
            if counts[value] <= 0:
                del counts[value]


def _sum(
    totals: Mapping[FlavorResource, int], shared: Mapping[Any, Counter[int]]
) -> dict[FlavorResource, int]:
    total = dict(totals)
    for (_, key), amounts in shared.items():
        if amounts:
            total[key] = total.get(key, 0) + max(amounts)
    return {key: min(value, INT64_MAX) for key, value in sorted(total.items())}


class IndexedUsage(Usage):
    """Usage with per-queue totals kept on add/remove, so `of()` costs O(resources of a queue).

    `Usage.of` sums every holder per call; with thousands of live pods and
    reservations that would be the hot path's cost. This index gives the same
    answers: per-pod parts are summed, and each shared claim counts once per queue
    at the largest amount any holder records for it (a multiset of amounts keeps
    removal exact). Saturation at int64 is applied when read, so removal never
    drifts. `copy()` is a copy-on-write overlay (O(1)), valid while this usage is
    not modified — the decision takes one inside the ledger's lock; `snapshot()`
    is an independent copy.
    """

    def __init__(self, charges: Mapping[str, Charge] | None = None) -> None:
        self._totals: dict[str, dict[FlavorResource, int]] = {}
        self._shared: dict[str, _Shared] = {}
        self._holders: Counter[str] = Counter()  # ClusterQueue -> holders charged to it
        self._locals: Counter[str] = Counter()  # LocalQueue ns/name -> holders charged to it
        super().__init__()
        for holder, charge in (charges or {}).items():
            self.add(holder, charge)

    @classmethod
    def of_usage(cls, usage: Usage) -> IndexedUsage:
        """An indexed, independent copy of any Usage."""
        charges = {h: c for h in usage.holders() if (c := usage.charge_of(h)) is not None}
        return cls(charges)

    def add(self, holder: str, charge: Charge) -> None:
        self.remove(holder)
        super().add(holder, charge)
        self._index(charge, 1)

    def remove(self, holder: str) -> None:
        old = self.charge_of(holder)
        if old is not None:
            super().remove(holder)
            self._index(old, -1)

    def of(self, cluster_queue: str) -> dict[FlavorResource, int]:
        return _sum(self.per_pod_totals(cluster_queue), self.shared_amounts(cluster_queue))

    def per_pod_totals(self, cluster_queue: str) -> Mapping[FlavorResource, int]:
        """The queue's per-pod parts summed, not saturated. The index's own mapping, not a
        copy: read it, never change it, and only while this usage is not modified."""
        return self._totals.get(cluster_queue, {})

    def shared_amounts(
        self, cluster_queue: str
    ) -> Mapping[tuple[str, FlavorResource], Counter[int]]:
        """Per shared claim and resource of the queue, the multiset of amounts its holders
        record (the claim counts once, at the largest). Read-only, as `per_pod_totals`."""
        return self._shared.get(cluster_queue, {})

    def shared_claims(self, cluster_queue: str) -> set[tuple[str, FlavorResource]]:
        return set(self._shared.get(cluster_queue, {}))

    def holder_count(self, cluster_queue: str) -> int:
        """Pods (and admissions whose pods are not seen yet) charged to this ClusterQueue."""
        return self._holders[cluster_queue]

    def local_holder_count(self, local_queue: str) -> int:
        """The same for the LocalQueue `ns/name`."""
        return self._locals[local_queue]

    def copy(self) -> Usage:
        return _Overlay(self)

    def snapshot(self) -> IndexedUsage:
        """An independent copy: the holders' dict and the per-queue index copied as they
        are (C-level dict copies), never re-indexed charge by charge, so the status writer
        and /metrics do not hold the ledger's lock for long."""
        copy = IndexedUsage()
        copy._charges = dict(self._charges)
        copy._holders = Counter(self._holders)
        copy._locals = Counter(self._locals)
        copy._totals = {queue: dict(totals) for queue, totals in self._totals.items()}
        copy._shared = {
            queue: {key: Counter(counts) for key, counts in shared.items()}
            for queue, shared in self._shared.items()
        }
        return copy

    def _index(self, charge: Charge, sign: int) -> None:
        self._holders[charge.cluster_queue] += sign
        self._locals[charge.local_queue] += sign
        shared = self._shared.setdefault(charge.cluster_queue, {})
        _apply(
            self._totals.setdefault(charge.cluster_queue, {}),
            lambda key: shared.setdefault(key, Counter()),
            charge,
            sign,
        )
        for key in [key for key, counts in shared.items() if not counts]:
            del shared[key]


class _Overlay(Usage):
    """Changes on top of an IndexedUsage that must stay unmodified while the overlay lives."""

    def __init__(self, base: IndexedUsage) -> None:
        super().__init__()
        self._base = base
        self._removed: dict[str, Charge] = {}
        self._added: dict[str, Charge] = {}
        self._queues: dict[str, tuple[dict[FlavorResource, int], _Shared]] = {}

    def add(self, holder: str, charge: Charge) -> None:
        self.remove(holder)
        self._added[holder] = charge
        self._queues.clear()

    def remove(self, holder: str) -> None:
        if self._added.pop(holder, None) is not None:
            self._queues.clear()
            return
        base = self._base.charge_of(holder)
        if base is not None:
            self._removed.setdefault(holder, base)
            self._queues.clear()

    def charge_of(self, holder: str) -> Charge | None:
        if holder in self._added:
            return self._added[holder]
        return None if holder in self._removed else self._base.charge_of(holder)

    def holders(self) -> set[str]:
        return (self._base.holders() - set(self._removed)) | set(self._added)

    def _queue(self, cluster_queue: str) -> tuple[dict[FlavorResource, int], _Shared]:
        """The queue's totals and shared-claim amounts with the changes applied (kept until the
        next change: a decision reads them more than once)."""
        found = self._queues.get(cluster_queue)
        if found is None:
            found = self._queues[cluster_queue] = self._changed_queue(cluster_queue)
        return found

    def _changed_queue(self, cluster_queue: str) -> tuple[dict[FlavorResource, int], _Shared]:
        totals = dict(self._base.per_pod_totals(cluster_queue))
        base_shared = self._base.shared_amounts(cluster_queue)
        shared: _Shared = dict(base_shared)
        touched: set[tuple[str, FlavorResource]] = set()

        def counts(key: tuple[str, FlavorResource]) -> Counter[int]:
            if key not in touched:
                touched.add(key)
                shared[key] = Counter(base_shared.get(key, Counter()))
            return shared[key]

        for sign, changes in ((-1, self._removed), (1, self._added)):
            for charge in changes.values():
                if charge.cluster_queue == cluster_queue:
                    _apply(totals, counts, charge, sign)
        return totals, {key: value for key, value in shared.items() if value}

    def of(self, cluster_queue: str) -> dict[FlavorResource, int]:
        return _sum(*self._queue(cluster_queue))

    def shared_claims(self, cluster_queue: str) -> set[tuple[str, FlavorResource]]:
        return set(self._queue(cluster_queue)[1])

    def copy(self) -> Usage:
        return IndexedUsage({h: c for h in self.holders() if (c := self.charge_of(h)) is not None})
