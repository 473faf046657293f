"""Recharging live pods: what a running pod costs now (`recompute_charge`) and whether a
change that makes it cost more still fits (`recheck_pod`). A live pod keeps the queue and
flavors of its admission record, since its nodes were chosen by them.
"""

from __future__ import annotations

from quota.assignment import Assignment, assign_flavors
from quota.charge import Charge, at_least
from quota.cluster import ClusterView, Obj
from quota.demand import pod_demand
from quota.errors import DraquotaError
from quota.flavorfilter import make_flavor_filter
from quota.queuedemand import Charged, charge_record, charged_in, exceeds, first_flavors
from quota.queues import ClusterQueue, LocalQueue
from quota.queuetable import QueueTable, queue_table
from quota.routing import DEFAULT_LOCAL_QUEUE, Route, queue_label, subject_of
from quota.settings import Settings
from quota.usage import Usage
from quota.verdict import Decision, Verdict, deny, refusal
from quota.workloads import Workload, as_workload

__all__ = [
    "recheck_pod",
    "recompute_charge",
]


def recheck_pod(
    pod: Obj,
    state: ClusterView,
    usage: Usage,
    settings: Settings,
    recorded: Charge | None,
) -> Decision:
    """An existing pod whose cost may grow: a resize, or a claim it references re-created.

    `pod` and `state` are as they would be after the change, `usage` leaves the
    pod out, `recorded` is its admission record. The pod keeps its queue and flavors
    (its nodes were chosen by them); what does not grow is always allowed, what grows
    must fit like an admission. The charge of an allowed change is the new record.
    """
    try:
        workload = as_workload(pod)
        table = queue_table(state, settings)
        route = _recorded_route(recorded, table) or _usage_route(workload, table)
        if route is None:
            return Decision(
                Verdict.ADMITTED, "NotManaged", "no LocalQueue: not managed by draquota"
            )
        demand = pod_demand(workload, state, generated=True)
        charged = charged_in(demand, route.queue, table)
        pinned = _recorded_flavors(route.queue, charged, recorded)
        affinity = make_flavor_filter(table, route.queue, workload, (), None, settings, [])
        kept = set(pinned.flavors.values()) if pinned is not None else None

        def kept_flavor(flavor: str) -> str | None:
            if kept is not None and flavor not in kept:
                return f"flavor {flavor}: the pod runs in flavor {', '.join(sorted(kept))}"
            return affinity(flavor)

        assignment = assign_flavors(
            table,
            route.queue,
            usage.of,
            charged.per_pod,
            charged.shared,
            held=frozenset(usage.shared_claims(route.queue.name)),
            flavor_filter=kept_flavor,
            asked=charged.asked,
        )
        flavors = assignment.flavors if assignment.ok else (pinned or Assignment({})).flavors
        charge = charge_record(route, demand, charged, flavors, "")
        if recorded is not None:
            charge = at_least(recorded, charge)
            if charge == at_least(recorded, recorded):
                return Decision(Verdict.ADMITTED, "Admitted", "nothing grows", charge=recorded)
        if not assignment.ok:
            message = exceeds(subject_of(workload), route, assignment)
            return deny("QuotaExceeded", message, queue=route.local.name)
        where = f'ClusterQueue "{route.queue.name}" (LocalQueue {route.local.key})'
        return Decision(
            Verdict.ADMITTED,
            "Admitted",
            f"{subject_of(workload)} still fits {where}",
            charge=charge,
            local_queue_name=route.local.name,
        )
    except DraquotaError as exc:
        return refusal(exc)


def _usage_route(workload: Workload, table: QueueTable) -> Route | None:
    """The queue a running pod is charged to: its LocalQueue's, even if since misconfigured."""
    name = queue_label(workload) or DEFAULT_LOCAL_QUEUE
    local = table.local_queues.get(f"{workload.namespace}/{name}")
    if not isinstance(local, LocalQueue) or local.cluster_queue not in table.queues:
        return None
    return Route(local, table.queues[local.cluster_queue])


def _recorded_route(recorded: Charge | None, table: QueueTable) -> Route | None:
    """The queue an admission record names (trusted: only draquota writes records)."""
    if recorded is None or recorded.local_queue.count("/") != 1:
        return None
    queue = table.queues.get(recorded.cluster_queue)
    if queue is None:
        return None
    namespace, name = recorded.local_queue.split("/", 1)
    return Route(LocalQueue(namespace, name, queue.name), queue)


def _recorded_flavors(
    queue: ClusterQueue, charged: Charged, recorded: Charge | None
) -> Assignment | None:
    """The annotation's flavors, if they are a valid assignment for this demand."""
    if recorded is None or recorded.cluster_queue != queue.name:
        return None
    wanted = set(charged.per_pod) | {r for a in charged.shared.values() for r in a}
    flavors: dict[str, str] = {}
    for group in queue.groups:
        requested = sorted(r for r in group.covered if r in wanted)
        chosen = {recorded.flavors.get(r) for r in requested}
        if not requested:
            continue
        if len(chosen) != 1 or next(iter(chosen)) not in {f.name for f in group.flavors}:
            return None
        flavors.update({r: recorded.flavors[r] for r in requested})
    return Assignment(dict(sorted(flavors.items())))


def recompute_charge(
    pod: Obj,
    state: ClusterView,
    settings: Settings,
    recorded: Charge | None = None,
) -> Charge | None:
    """What a live pod's claims and requests cost now; None when unmanaged.

    `recorded` is the pod's admission record (never a user-written annotation): it
    names the queue the pod was admitted to and the flavors chosen, which are kept
    when valid for the recomputed demand. Without one, the pod's LocalQueue routes
    it. Claims are the ones generated for the pod where they exist. Raises
    NotFound/InvalidObject when the pod's claims cannot be read.
    """
    workload = as_workload(pod)
    table = queue_table(state, settings)
    route = _recorded_route(recorded, table) or _usage_route(workload, table)
    if route is None:
        return None
    # saturate: a live pod with an out-of-range quantity is charged the most, never dropped
    demand = pod_demand(workload, state, generated=True, saturate=True)
    charged = charged_in(demand, route.queue, table)
    assignment = _recorded_flavors(route.queue, charged, recorded)
    if assignment is None:  # no record: the flavor whose nodes the pod is pinned to
        affinity = make_flavor_filter(table, route.queue, workload, (), None, settings, [])
        assignment = assign_flavors(
            table,
            route.queue,
            lambda _q: {},
            charged.per_pod,
            charged.shared,
            flavor_filter=affinity,
            capacity_only=True,
        )
        if not assignment.ok:
            assignment = first_flavors(route.queue, charged)
    return charge_record(route, demand, charged, assignment.flavors, "")
