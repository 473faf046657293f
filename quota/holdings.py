"""What the holders of each queue hold: counts per ClusterQueue and LocalQueue, and the usage
of each LocalQueue (Kueue's LocalQueue `flavorsUsage`).

Usage is indexed per ClusterQueue (`quota.usage`); a LocalQueue's share is worked out here
in one pass over the charges, with the same rule: per-pod parts are summed, and a shared
claim counts once per LocalQueue at the largest amount any of its holders records. So the
usage of a ClusterQueue's LocalQueues can add up to more than the ClusterQueue's own when
two LocalQueues share a claim (each of them holds it).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field

from quota.charge import FlavorResource
from quota.quantity import sat_add
from quota.usage import Usage

__all__ = ["Holdings", "holdings"]


@dataclass(frozen=True)
class Holdings:
    """Holders (pods, and admissions whose pods are not seen yet) per ClusterQueue and per
    LocalQueue `ns/name`, and what each LocalQueue's holders hold."""

    cluster_queues: Mapping[str, int] = field(default_factory=dict)
    local_queues: Mapping[str, int] = field(default_factory=dict)
    local_usage: Mapping[str, Mapping[FlavorResource, int]] = field(default_factory=dict)


def holdings(usage: Usage) -> Holdings:
    """Counts and LocalQueue usage of every holder of `usage`, in one pass."""
    cluster_queues: Counter[str] = Counter()
    local_queues: Counter[str] = Counter()
    totals: dict[str, dict[FlavorResource, int]] = {}
    shared: dict[tuple[str, str, FlavorResource], int] = {}  # (local queue, claim, key)
    for holder in usage.holders():  # order-free: saturating sums and maxima
        charge = usage.charge_of(holder)
        if charge is None:
            continue
        local = charge.local_queue
        cluster_queues[charge.cluster_queue] += 1
        local_queues[local] += 1
        total = totals.setdefault(local, {})
        for key, value in charge.flavor_usage().items():
            total[key] = sat_add(total.get(key, 0), value)
        for claim, amounts in charge.shared_flavor_usage().items():
            for key, value in amounts.items():
                shared[(local, claim, key)] = max(shared.get((local, claim, key), 0), value)
    for (local, _, key), value in sorted(shared.items()):
        total = totals.setdefault(local, {})
        total[key] = sat_add(total.get(key, 0), value)
    return Holdings(
        cluster_queues=dict(cluster_queues),
        local_queues=dict(local_queues),
        local_usage={local: dict(sorted(total.items())) for local, total in totals.items()},
    )
