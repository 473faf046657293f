"""Usage of ClusterQueues: who holds what, rebuilt from live pods (SPEC §4).

Holders are pod keys (`ns/name`) or reservation ids of admissions in flight.
A shared ResourceClaim is charged once per ClusterQueue (and flavor) however
many holders of that queue reference it. A live pod's charge is always
recomputed from the pod and the cluster view: its annotation only says which
queue and flavors it was admitted to, and is ignored when it does not match.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from quota.charge import CHARGE_ANNOTATION, Charge, FlavorResource
from quota.cluster import ClusterState, Obj
from quota.errors import DraquotaError, InvalidObject, object_ref
from quota.quantity import sat_add
from quota.settings import Settings

__all__ = ["TERMINAL_PHASES", "Usage", "is_live_pod", "live_pod_charge", "usage_from_pods"]

TERMINAL_PHASES = ("Succeeded", "Failed")


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


def is_live_pod(pod: Obj) -> bool:
    """Not Succeeded/Failed and not being deleted: the pod still holds quota."""
    metadata = pod.get("metadata") or {}
    status = pod.get("status") or {}
    if metadata.get("deletionTimestamp"):
        return False
    return not (isinstance(status, Mapping) and status.get("phase") in TERMINAL_PHASES)


def _annotation(pod: Obj, ref: str) -> Charge | None:
    annotations = (pod.get("metadata") or {}).get("annotations") or {}
    text = annotations.get(CHARGE_ANNOTATION) if isinstance(annotations, Mapping) else None
    if not text:
        return None
    try:
        return Charge.from_annotation(text, ref)
    except InvalidObject:
        return None


def live_pod_charge(pod: Obj, state: ClusterState, settings: Settings) -> Charge | None:
    """What a live pod holds, recomputed; None when it is not live or not managed.

    The queue comes from the pod's label (as at admission). The annotation may
    name the flavors; they are kept only when they are flavors the queue offers
    for those resources, else the assignment is recomputed (first flavor that could
    ever hold the pod). When the pod's claims cannot be read any more (a template
    deleted after the pod was created), the annotation is the only record left and
    is used as is, so that the pod keeps holding quota.
    """
    from quota.decision import recompute_charge  # decision builds on usage

    if not is_live_pod(pod):
        return None
    metadata = pod.get("metadata") or {}
    ref = object_ref("Pod", metadata.get("namespace") or "default", metadata.get("name"))
    recorded = _annotation(pod, ref)
    try:
        return recompute_charge(pod, state, settings, recorded)
    except DraquotaError:
        return recorded


def usage_from_pods(state: ClusterState, settings: Settings) -> Usage:
    """Usage held by the live pods of the cluster view, keyed by `ns/name`."""
    usage = Usage()
    for pod in state.list("Pod"):
        charge = live_pod_charge(pod, state, settings)
        if charge is not None:
            metadata: Mapping[str, Any] = pod.get("metadata") or {}
            usage.add(f"{metadata.get('namespace') or 'default'}/{metadata.get('name')}", charge)
    return usage
