"""Which flavors of a ClusterQueue can take a pod: node affinity against the flavor's node
labels, and (with a placer) whether the pod's claims can be placed on the flavor's nodes.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import overload

from quota.assignment import FlavorFilter, PreferringFilter, flavor_matches_pod
from quota.claims import PodClaim
from quota.cluster import ClusterView
from quota.placement import Placement
from quota.queues import ClusterQueue
from quota.queuetable import QueueTable
from quota.settings import Settings
from quota.workloads import Workload

__all__ = [
    "Placer",
    "make_flavor_filter",
    "placer_on",
]

# claims of one pod, node labels to restrict to (None: any node) -> placement; every placer
# answers a `Placement`, whose typed fields (`invalid`, `too_complex`, `now`) are read as they are
Placer = Callable[[Sequence[PodClaim], Mapping[str, str] | None], Placement]


@overload
def placer_on(placer: Placer, view: ClusterView) -> Placer: ...
@overload
def placer_on(placer: None, view: ClusterView) -> None: ...
def placer_on(placer: Placer | None, view: ClusterView) -> Placer | None:
    """The placer answering on `view`: one that reads the cluster (it has `on(view)`, as
    `quota.placement.ClusterPlacer` does) is bound to it; any other is as it is."""
    bind = getattr(placer, "on", None)
    return bind(view) if bind is not None else placer


def _group_label_keys(table: QueueTable, queue: ClusterQueue) -> dict[str, frozenset[str]]:
    """Per flavor, the node label keys any flavor of its resource group sets."""
    out: dict[str, frozenset[str]] = {}
    for group in queue.groups:
        keys = frozenset(
            key
            for flavor in group.flavors
            if flavor.name in table.flavors
            for key in table.flavors[flavor.name].node_labels
        )
        out.update({flavor.name: keys for flavor in group.flavors})
    return out


def make_flavor_filter(
    table: QueueTable,
    queue: ClusterQueue,
    workload: Workload,
    claims: Sequence[PodClaim],
    placer: Placer | None,
    settings: Settings,
    warnings: list[str],
    busy: dict[str, str] | None = None,
) -> FlavorFilter:
    """Why a flavor cannot take the pod (None: it can). `busy` collects the flavors whose
    nodes could host the claims only once allocated devices are released, with why."""
    keys = _group_label_keys(table, queue)
    pod_spec = workload.pod.get("spec") or {}
    busy = {} if busy is None else busy

    def check(flavor: str) -> str | None:
        known = table.flavors.get(flavor)
        if known is None:
            return f"flavor {flavor} not found"
        if not flavor_matches_pod(pod_spec, known.node_labels, keys.get(flavor, frozenset())):
            return f"flavor {flavor} doesn't match node affinity"
        if placer is None or settings.placement == "Off" or not claims or not known.node_labels:
            return None
        placement = placer(claims, known.node_labels)
        labels = ",".join(f"{k}={v}" for k, v in known.node_labels.items())
        if placement.ok:
            if not placement.now:
                # fits once devices are released: allowed, not preferred, warned if chosen
                busy[flavor] = f"nodes with labels {labels}: {placement.reason}"
            return None
        if placement.too_complex:
            reason = f"flavor {flavor}: claims on nodes with labels {labels} {placement.reason}"
        else:
            reason = (
                f"flavor {flavor}: claims cannot be placed on nodes with labels {labels}: "
                f"{placement.reason}"
            )
        if settings.placement == "Warn":
            warnings.append(reason)
            return None
        return reason

    return PreferringFilter(check, lambda flavor: flavor not in busy)
