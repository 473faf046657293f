"""The admission decision for a Pod or a pod-template workload (SPEC §4).

A workload is routed to its queues (`quota.routing`), its demand translated into the
queue's quota resources (`quota.queuedemand`) and every flavor judged (`quota.flavorfilter`)
by `prepare`; `conclude` then does the flavor and cohort arithmetic against live usage.
Workloads (Job, Deployment, ...) are checked against the most the queue could ever hold,
for one pod and for the pods a Job runs at once. A Job created into a ClusterQueue that
rejects (`whenFull: Reject`) is also checked against usage (`decide_job_now`): its pods
would be denied one by one as the Job controller creates them. Deployments, CronJobs and
the other templates are not: their pods come later, in numbers that change (scaling, a
rollout's surge, a schedule), and a replica controller retries until quota frees up.

`decide` never raises for bad input: a malformed object is an INVALID decision, a
missing object a DENIED decision naming it. It is pure and deterministic.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from quota.assignment import Assignment, assign_flavors
from quota.charge import times
from quota.cluster import ClusterView, ViewSource
from quota.demand import existing_pod_demand, pod_demand
from quota.errors import DraquotaError
from quota.flavorfilter import Placer, make_flavor_filter, placer_on
from quota.hints import class_hint, foreign_label_warning
from quota.prepared import Prepared
from quota.quantity import sat_add
from quota.queuedemand import charge_record, charged_in, exceeds, first_flavors, node_labels
from quota.queuetable import queue_table
from quota.routing import route_of, subject_of
from quota.settings import Settings
from quota.usage import Usage
from quota.verdict import Decision, Verdict, deny, refusal
from quota.waiting import group_of
from quota.workloads import Workload, as_workload

__all__ = [
    "Prepared",
    "conclude",
    "conclude_group",
    "conclude_job",
    "decide",
    "decide_job_now",
    "prepare",
]


def _prepare(
    workload: Workload,
    state: ClusterView,
    settings: Settings,
    placer: Placer | None,
    operation: str,
    generated: bool = False,
) -> Prepared | Decision:
    table = queue_table(state, settings)
    route = route_of(workload, state, table)
    label_warning = foreign_label_warning((workload.pod.get("metadata") or {}).get("labels"))
    warnings: list[str] = [label_warning] if label_warning else []
    if route is None:
        message = "no LocalQueue: not managed by draquota"
        return Decision(Verdict.ADMITTED, "NotManaged", message, tuple(warnings))
    if isinstance(route, Decision):
        return route
    subject, name = subject_of(workload), route.local.name
    where = f'ClusterQueue "{route.queue.name}" (LocalQueue {route.local.key})'
    demand = existing_pod_demand(workload, state) if generated else pod_demand(workload, state)
    charged = charged_in(demand, route.queue, table)
    busy_everywhere = ""  # why no node of the cluster can host the claims right now
    if charged.unmapped:
        noun = "device class" if len(charged.unmapped) == 1 else "device classes"
        text = f"{noun} {', '.join(charged.unmapped)} not mapped to any resource of {where}"
        existing = [c for c in charged.unmapped if state.get("DeviceClass", None, c) is not None]
        mapped = table.class_resources.get(route.queue.name, {})
        hint = class_hint(charged.unmapped, mapped, existing)
        if settings.unmapped_device_class != "Ignore":
            return deny("UnmappedDeviceClass", f"{subject}: {text}{hint}", queue=name)
        warnings.append(f"{text}: not charged{hint}")
    if placer is not None and settings.placement != "Off" and demand.claims:
        placement = placer(demand.claims, None)
        if placement.invalid:
            return deny("InvalidObject", f"{subject}: {placement.reason}", queue=name, invalid=True)
        if placement.too_complex:
            text = f"{subject}: claims {placement.reason}"
            if settings.placement == "Enforce":
                return deny("TooComplex", text, queue=name)
            warnings.append(text)
        elif not placement.ok:
            text = f"{subject}: claims cannot be placed on any node: {placement.reason}"
            if settings.placement == "Enforce":
                return deny("Unplaceable", text, queue=name)
            warnings.append(text)
        elif not placement.now:
            busy_everywhere = placement.reason
    busy: dict[str, str] = {}
    lazy = make_flavor_filter(
        table, route.queue, workload, demand.claims, placer, settings, warnings, busy
    )
    # Every flavor is judged now, outside any lock: what is left for the ledger's lock is
    # arithmetic. A flavor's notes (placement warnings under Warn) count only if it is tried.
    answers: dict[str, str | None] = {}
    notes: dict[str, tuple[str, ...]] = {}
    for group in route.queue.groups:
        for flavor in group.flavors:
            if flavor.name not in answers:
                mark = len(warnings)
                answers[flavor.name] = lazy(flavor.name)
                notes[flavor.name] = tuple(warnings[mark:])
                del warnings[mark:]
    return Prepared(
        workload,
        table,
        route,
        replace(demand, catalog=None),  # charged already: kept, it would keep `state` alive
        charged,
        tuple(warnings),
        answers,
        notes,
        busy,
        busy_everywhere,
        operation,
    )


def _decide_workload(c: Prepared, queued: bool = False) -> Decision:
    """A pod-template workload: can its pods (a Job: those running at once) ever fit? With
    `queued`, a pod that will wait in its queue: can it ever fit there, with all the pods of
    its group (`draquota.io/pod-group-total-count` of them, each charged as this one)? A
    group that never fits would wait forever: its pods are denied as they are created."""
    warnings = list(c.warnings)
    pods, subject = max(1, c.workload.pods), c.subject
    group = group_of(c.workload.pod) if queued and c.workload.kind == "Pod" else None
    if group is not None and group[1] > 1:
        pods, subject = group[1], f"{subject}: pod group {group[0]} of {group[1]} pods"
    assignment = assign_flavors(
        c.table,
        c.route.queue,
        lambda _q: {},
        c.charged.per_pod,
        c.charged.shared,
        flavor_filter=c.flavor_filter(warnings),
        pods=pods,
        capacity_only=True,
        asked=c.charged.asked,
    )
    name = c.route.local.name
    if not assignment.ok:
        return deny("QuotaExceeded", exceeds(subject, c.route, assignment), queue=name)
    if waiting := c.busy_warning(None):
        warnings.append(waiting)
    notes = tuple(sorted(set(warnings)))
    if queued:
        message = f"{c.subject} waits in {c.where}"
        return Decision(
            Verdict.ADMITTED, "Queued", message, notes, local_queue_name=name, queued=True
        )
    return Decision(
        Verdict.ADMITTED, "Admitted", f"{c.subject} fits {c.where}", notes, local_queue_name=name
    )


def _against_usage(c: Prepared, usage: Usage, warnings: list[str], pods: int = 1) -> Assignment:
    """Flavors for `pods` pods alike against `usage`, shared claims the queue holds already
    counting nothing more (the notes of flavors tried go to `warnings`)."""
    return assign_flavors(
        c.table,
        c.route.queue,
        usage.of,
        c.charged.per_pod,
        c.charged.shared,
        held=frozenset(usage.shared_claims(c.route.queue.name)),
        flavor_filter=c.flavor_filter(warnings),
        pods=pods,
        asked=c.charged.asked,
    )


def _quota_exceeded(c: Prepared, assignment: Assignment) -> Decision:
    denial = deny(
        "QuotaExceeded", exceeds(c.subject, c.route, assignment), queue=c.route.local.name
    )
    return replace(denial, shortfall="; ".join(assignment.reasons))


def _decide_pod(c: Prepared, live: Usage) -> Decision:
    """A pod against live usage (the ledger leaves out the pod's own record: a retry counts
    once; a pod of the same name held by another pod is not left out)."""
    queue, charged = c.route.queue, c.charged
    warnings = list(c.warnings)
    assignment = _against_usage(c, live, warnings)
    if not assignment.ok:
        if c.operation != "UPDATE":
            return _quota_exceeded(c, assignment)
        message = exceeds(c.subject, c.route, assignment)
        warnings.append(f"{message} (existing pod: update allowed)")
        fallback = assign_flavors(
            c.table, queue, lambda _q: {}, charged.per_pod, charged.shared, capacity_only=True
        )
        assignment = fallback if fallback.ok else first_flavors(queue, charged)
    if assignment.borrowing:
        warnings.append(f"{c.subject} borrows quota from cohort {queue.cohort}")
    if waiting := c.busy_warning(assignment.flavors.values()):
        warnings.append(waiting)
    charge, node_selector = c.charged_to(assignment.flavors)
    return Decision(
        verdict=Verdict.ADMITTED,
        reason="Admitted",
        message=f"{c.subject} admitted to {c.where}",
        warnings=tuple(sorted(set(warnings))),
        charge=charge,
        node_selector=node_selector,
        local_queue_name=c.route.local.name,
    )


def prepare(
    obj: Mapping[str, Any],
    state: ViewSource,
    settings: Settings,
    placer: Placer | None = None,
    operation: str = "CREATE",
    *,
    generated: bool = False,
) -> Prepared | Decision:
    """The part of a decision that does not depend on usage (see `Prepared`), or the
    decision itself when that part already settles it: not managed, invalid, a
    missing object, unplaceable, unmapped classes. What is derived from `state` is kept
    with its view (`ClusterView.derived`). `generated`: a pod that exists
    (one waiting in its queue) is charged by the claims generated for it too, never less
    than what it will be allocated.

    Everything is read from one view of `state` (`state.snapshot()`), placements
    included: a change to the cluster meanwhile is not half seen."""
    if operation == "DELETE":
        return Decision(Verdict.ADMITTED, "NotManaged", "deletions are not checked")
    view = state.snapshot()
    try:
        workload = as_workload(obj)
        placer = placer_on(placer, view)
        return _prepare(workload, view, settings, placer, operation, generated)
    except DraquotaError as exc:
        return refusal(exc)


def conclude(prepared: Prepared | Decision, usage: Usage, enqueue: bool = True) -> Decision:
    """The quota arithmetic of a prepared decision against `usage` (cheap: no parsing, no
    placement); a settled decision is returned as it is.

    A pod created in a ClusterQueue with `whenFull: Queue` is not checked against usage:
    it is queued (`Decision.queued`) if it could ever fit, and the queueing controller
    admits it later, with `enqueue` False."""
    if isinstance(prepared, Decision):
        return prepared
    created = prepared.operation == "CREATE"
    queued = enqueue and prepared.route.queue.queues and created
    kind = prepared.workload.kind
    if kind == "Job" and created and not queued and not prepared.workload.suspended:
        return decide_job_now(prepared, usage)
    if kind != "Pod":
        return _decide_workload(prepared, queued=queued and kind == "Job")
    if queued:
        return _decide_workload(prepared, queued=True)
    return _decide_pod(prepared, usage)


def decide_job_now(prepared: Prepared | Decision, usage: Usage) -> Decision:
    """A Job that starts at once (in a ClusterQueue with `whenFull: Reject`, not suspended):
    admitted only if the pods it runs at once (min(parallelism, completions)) fit `usage` now,
    in one flavor assignment, as each of them would be checked when the Job controller creates
    it. Else it is denied with the quota message its pods would get, instead of being accepted
    and failing to create pods for as long as the queue stays full. Nothing is charged: its
    pods are, as they are created. A Job that could never fit is denied as `conclude` denies
    any workload (with the arithmetic `3 pods x 2 = 6 > maximum capacity 4`)."""
    if isinstance(prepared, Decision):
        return prepared
    ever = _decide_workload(prepared)
    if not ever.allowed:
        return ever
    c, pods = prepared, max(1, prepared.workload.pods)
    warnings = list(ever.warnings)
    assignment = _against_usage(c, usage, warnings, pods)
    if not assignment.ok:
        return _quota_exceeded(c, assignment)
    if assignment.borrowing:
        warnings.append(f"{c.subject} borrows quota from cohort {c.route.queue.cohort}")
    return Decision(
        Verdict.ADMITTED,
        "Admitted",
        f"{c.subject} ({pods} pods) fits {c.where} now",
        tuple(sorted(set(warnings))),
        local_queue_name=c.route.local.name,
    )


def conclude_group(pods: Sequence[Prepared], usage: Usage, subject: str) -> Decision:
    """The pods of a pod group as one demand against `usage`: their per-pod amounts summed,
    each shared claim once, in flavors every pod accepts. It says why a group waits in the
    group's numbers (`requested 3` for three one-GPU pods, where a pod's own check says 1).
    Admitted means the group fits as a whole; it carries no charge (each pod's record is
    its own). `pods` are prepared in the same ClusterQueue; at least one."""
    first = pods[0]
    per_pod: dict[str, int] = {}
    shared: dict[str, Mapping[str, int]] = {}
    asked: dict[str, set[str]] = {}
    for pod in pods:
        for resource, value in pod.charged.per_pod.items():
            per_pod[resource] = sat_add(per_pod.get(resource, 0), value)
        shared.update(pod.charged.shared)
        for resource, names in pod.charged.asked.items():
            asked.setdefault(resource, set()).update(names)

    def excluded(flavor: str) -> str | None:
        return next((why for pod in pods if (why := _answer(pod, flavor))), None)

    queue = first.route.queue
    assignment = assign_flavors(
        first.table,
        queue,
        usage.of,
        per_pod,
        shared,
        held=frozenset(usage.shared_claims(queue.name)),
        flavor_filter=excluded,
        asked=asked,
    )
    if not assignment.ok:
        message = exceeds(subject, first.route, assignment)
        denial = deny("QuotaExceeded", message, queue=first.route.local.name)
        return replace(denial, shortfall="; ".join(assignment.reasons))
    return Decision(Verdict.ADMITTED, "Admitted", f"{subject} fits {first.where}")


def _answer(prepared: Prepared, flavor: str) -> str | None:
    return prepared.answers.get(flavor, f"flavor {flavor} not found")


def conclude_job(prepared: Prepared | Decision, usage: Usage) -> Decision:
    """A Job of a queueing ClusterQueue admitted as a whole against `usage`: the pods it runs
    at once (min(parallelism, completions)) in one flavor assignment, charged together."""
    if isinstance(prepared, Decision):
        return prepared
    c, pods = prepared, max(1, prepared.workload.pods)
    warnings = list(c.warnings)
    assignment = _against_usage(c, usage, warnings, pods)
    if not assignment.ok:
        return _quota_exceeded(c, assignment)
    charge = charge_record(c.route, c.demand, c.charged, assignment.flavors, "")
    return Decision(
        verdict=Verdict.ADMITTED,
        reason="Admitted",
        message=f"{c.subject} ({pods} pods) admitted to {c.where}",
        warnings=tuple(sorted(set(warnings))),
        charge=times(charge, pods),
        node_selector=node_labels(c.table, assignment.flavors),
        local_queue_name=c.route.local.name,
    )


def decide(
    obj: Mapping[str, Any],
    state: ViewSource,
    usage: Usage,
    settings: Settings,
    placer: Placer | None = None,
    operation: str = "CREATE",
) -> Decision:
    """Decide whether a Pod or pod-template workload may be admitted: `prepare`, then
    `conclude` against `usage`.

    A Pod is checked against the live `usage` (which its caller, the ledger, hands
    in without the pod's own record) and gets a charge; a workload is checked
    against the most its queue could ever hold and gets none. An UPDATE of an
    existing pod is never denied for quota (that would block its finalizers); it is
    allowed with a warning. A pod's status and deletion fields are not read: on
    create the API server resets them, so they never exempt a pod.
    """
    return conclude(prepare(obj, state, settings, placer, operation), usage)
