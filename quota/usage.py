"""Usage of ClusterQueues: who holds what (SPEC §4).

Holders are pod keys (`ns/name`) or the UIDs of pods whose admission is in
flight. A shared ResourceClaim is charged once per ClusterQueue (and flavor)
however many holders of that queue reference it. What a live pod holds is
worked out in `quota.livepods`.
"""

from __future__ import annotations

from collections.abc import Mapping

from quota.charge import Charge, FlavorResource
from quota.quantity import sat_add

__all__ = ["Usage"]


class Usage:
    """Charges by holder, summed per ClusterQueue on demand."""

    def __init__(self, charges: Mapping[str, Charge] | None = None) -> None:
        self._charges: dict[str, Charge] = dict(charges or {})

    def add(self, holder: str, charge: Charge) -> None:
        """Record (or replace) what `holder` is charged."""
        self._charges[holder] = charge

    def remove(self, holder: str) -> None:
        """Forget a holder; a missing holder is a no-op."""
        self._charges.pop(holder, None)

    def holders(self) -> set[str]:
        """Every holder with a charge."""
        return set(self._charges)

    def charge_of(self, holder: str) -> Charge | None:
        """The charge recorded for a holder."""
        return self._charges.get(holder)

    def of(self, cluster_queue: str) -> dict[FlavorResource, int]:
        """Usage of one ClusterQueue: per-pod parts plus each shared claim once per flavor."""
        total: dict[FlavorResource, int] = {}
        shared: dict[tuple[str, FlavorResource], int] = {}
        for holder in sorted(self._charges):
            charge = self._charges[holder]
            if charge.cluster_queue != cluster_queue:
                continue
            for key, value in charge.flavor_usage().items():
                total[key] = sat_add(total.get(key, 0), value)
            for claim, amounts in charge.shared_flavor_usage().items():
                for key, value in amounts.items():
                    shared[(claim, key)] = max(shared.get((claim, key), 0), value)
        for (_, key), value in sorted(shared.items()):
            total[key] = sat_add(total.get(key, 0), value)
        return dict(sorted(total.items()))

    def shared_claims(self, cluster_queue: str) -> set[tuple[str, FlavorResource]]:
        """(claim, flavor-resource) pairs already charged to a queue."""
        held: set[tuple[str, FlavorResource]] = set()
        for charge in self._charges.values():
            if charge.cluster_queue == cluster_queue:
                for claim, amounts in charge.shared_flavor_usage().items():
                    held.update((claim, key) for key in amounts)
        return held

    def copy(self) -> Usage:
        """An independent copy (charges are immutable and shared)."""
        return Usage(self._charges)

    def __repr__(self) -> str:
        return f"Usage({len(self._charges)} holders)"
