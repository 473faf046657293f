"""A pod's demand in the quota resources of one ClusterQueue (DeviceClasses through the
queue's and the global mappings; ordinary resources no group covers are ignored), and the
`Charge` record built from it once flavors are chosen (`charge_record`).

`quota.demand` counts what a pod asks for; this module says what that costs one queue;
`quota.charge` is the record a holder then holds (`Usage.charge_of`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from quota.assignment import Assignment
from quota.charge import Charge
from quota.claims import PodClaim
from quota.demand import PodDemand
from quota.devicecharge import DeviceCatalog, claim_charge
from quota.errors import object_ref
from quota.quantity import sat_add
from quota.queues import ClusterQueue
from quota.queuetable import QueueTable
from quota.routing import Route

__all__ = [
    "Charged",
    "charge_record",
    "charged_in",
    "exceeds",
    "first_flavors",
    "node_labels",
    "node_selector_of",
]


PODS_RESOURCE = "pods"


@dataclass(frozen=True)
class Charged:
    """A demand translated into the quota resources of one queue."""

    per_pod: Mapping[str, int]
    shared: Mapping[str, Mapping[str, int]]
    unmapped: tuple[str, ...]
    asked: Mapping[str, tuple[str, ...]]  # resource -> the DeviceClasses the pod asked
    unpublished: tuple[str, ...] = ()  # counter/capacity resources no matching device has


def charged_in(demand: PodDemand, queue: ClusterQueue, table: QueueTable) -> Charged:
    classes = table.class_resources.get(queue.name, {})
    covered = set(queue.covered())
    # a class charged by a counter or capacity alone (GPU memory, no device count) is mapped
    by_source = {c for source in queue.sources.values() for c in source.device_classes}
    per_pod: dict[str, int] = {}
    unmapped: set[str] = set()
    asked: dict[str, set[str]] = {}

    def add(target: dict[str, int], device_class: str, count: int) -> None:
        resource = classes.get(device_class)
        if resource is None:
            if count and device_class not in by_source:
                unmapped.add(device_class)
            return
        target[resource] = sat_add(target.get(resource, 0), count)
        if count:
            asked.setdefault(resource, set()).add(device_class)

    for resource, value in demand.resources.items():
        if resource in covered and value:
            per_pod[resource] = sat_add(per_pod.get(resource, 0), value)
    if PODS_RESOURCE in covered:
        per_pod[PODS_RESOURCE] = 1
    for device_class, count in demand.devices.items():
        add(per_pod, device_class, count)
    shared: dict[str, dict[str, int]] = {}
    for claim, devices in sorted(demand.shared_claims.items()):
        amounts: dict[str, int] = {}
        for device_class, count in devices.items():
            add(amounts, device_class, count)
        shared[claim] = amounts
    unpublished = _charge_sources(demand, queue, per_pod, shared, asked)
    return Charged(
        {r: v for r, v in sorted(per_pod.items()) if v},
        {c: {r: v for r, v in sorted(a.items()) if v} for c, a in shared.items()},
        tuple(sorted(unmapped)),
        {r: tuple(sorted(names)) for r, names in sorted(asked.items())},
        tuple(sorted(unpublished)),
    )


def _claim_ref(claim: PodClaim) -> tuple[str, str]:
    """(object, path of its spec) of the claim or template a pod claim was read from."""
    if claim.shared:
        return object_ref("ResourceClaim", claim.namespace, claim.claim), "spec"
    return object_ref("ResourceClaimTemplate", claim.namespace, claim.template), "spec.spec"


def _charge_sources(
    demand: PodDemand,
    queue: ClusterQueue,
    per_pod: dict[str, int],
    shared: dict[str, dict[str, int]],
    asked: dict[str, set[str]],
) -> set[str]:
    """Add the counter and capacity charges of the pod's claims (`quota.devicecharge`): a
    template claim's per pod, a shared claim's once, beside its devices. Returns the
    resources no matching device publishes."""
    unpublished: set[str] = set()
    catalog: DeviceCatalog | None = None
    for resource, source in queue.sources.items():
        for claim in demand.claims:
            classes = set(claim.devices) & set(source.device_classes)
            if not classes or demand.catalog is None:
                continue
            catalog = catalog or demand.catalog()
            ref, base = _claim_ref(claim)
            charge = claim_charge(catalog, source, claim.spec, ref, demand.lenient, base)
            target = shared.setdefault(claim.key, {}) if claim.shared else per_pod
            target[resource] = sat_add(target.get(resource, 0), charge.amount)
            if charge.amount:
                asked.setdefault(resource, set()).update(classes)
            if charge.unpublished:
                unpublished.add(resource)
    return unpublished


def charge_record(
    route: Route,
    demand: PodDemand,
    charged: Charged,
    flavors: Mapping[str, str],
    reservation: str,
) -> Charge:
    """The record a pod admitted in `flavors` holds: its per-pod and shared-claim amounts,
    copied so the record shares no mutable state with `charged`."""
    return Charge(
        cluster_queue=route.queue.name,
        local_queue=route.local.key,
        flavors=dict(flavors),
        per_pod=dict(charged.per_pod),
        device_classes=demand.all_devices(),
        shared_claims={c: dict(a) for c, a in charged.shared.items() if a},
        reservation=reservation,
    )


def first_flavors(queue: ClusterQueue, charged: Charged) -> Assignment:
    """Every charged resource in the first flavor of its group (a last-resort record)."""
    wanted = set(charged.per_pod) | {r for a in charged.shared.values() for r in a}
    flavors = {}
    for group in queue.groups:
        if group.flavors:
            flavors.update({r: group.flavors[0].name for r in group.covered if r in wanted})
    return Assignment(flavors)


def node_labels(table: QueueTable, flavors: Mapping[str, str]) -> dict[str, str]:
    labels: dict[str, str] = {}
    for flavor in sorted(set(flavors.values())):
        known = table.flavors.get(flavor)
        if known is not None:
            labels.update(known.node_labels)
    return dict(sorted(labels.items()))


def node_selector_of(table: QueueTable, charge: Charge) -> dict[str, str]:
    """The nodeSelector a pod admitted with `charge` gets: its flavors' node labels."""
    return node_labels(table, charge.flavors)


def exceeds(subject: str, route: Route, assignment: Assignment) -> str:
    return (
        f'{subject} exceeds quota of ClusterQueue "{route.queue.name}" '
        f"(LocalQueue {route.local.key}): {'; '.join(assignment.reasons)}"
    )
