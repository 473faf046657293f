"""The admission decision for a Pod or a pod-template workload (SPEC §4).

A workload is routed to its queues (`quota.routing`), its demand translated into the
queue's quota resources (`quota.charging`) and every flavor judged (`quota.flavorfilter`)
by `prepare`; `conclude` then does the flavor and cohort arithmetic against live usage.
Workloads (Job, Deployment, ...) are checked against the most the queue could ever hold,
for one pod and for the pods a Job runs at once.

`decide` never raises for bad input: a malformed object is an INVALID decision, a
missing object a DENIED decision naming it. It is pure and deterministic.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from quota.assignment import Assignment, PreferringFilter, assign_flavors
from quota.charge import Charge, times
from quota.charging import Charged, charge_of, charged_in, exceeds, first_flavors, node_labels
from quota.cluster import ClusterView, ViewSource
from quota.demand import PodDemand, pod_demand
from quota.derived import DerivedCache
from quota.errors import DraquotaError
from quota.flavorfilter import Placer, make_flavor_filter, placer_on
from quota.queuetable import QueueTable, queue_table
from quota.routing import Route, route_of, subject_of
from quota.settings import Settings
from quota.usage import Usage
from quota.verdict import Decision, Verdict, deny, refusal
from quota.workloads import Workload, as_workload

__all__ = [
    "Prepared",
    "conclude",
    "conclude_job",
    "decide",
    "prepare",
]


def _prepare(
    workload: Workload,
    state: ClusterView,
    settings: Settings,
    placer: Placer | None,
    operation: str,
    cache: DerivedCache | None,
) -> Prepared | Decision:
    table = queue_table(state, settings, cache=cache)
    route = route_of(workload, state, table)
    if route is None:
        return Decision(Verdict.ADMITTED, "NotManaged", "no LocalQueue: not managed by draquota")
    if isinstance(route, Decision):
        return route
    subject, name = subject_of(workload), route.local.name
    where = f'ClusterQueue "{route.queue.name}" (LocalQueue {route.local.key})'
    demand = pod_demand(workload, state, cache=cache)
    charged = charged_in(demand, route.queue, table)
    warnings: list[str] = []
    busy_everywhere = ""  # why no node of the cluster can host the claims right now
    if charged.unmapped:
        listed = ", ".join(charged.unmapped)
        noun = "device class" if len(charged.unmapped) == 1 else "device classes"
        text = f"{noun} {listed} not mapped to any resource of {where}"
        if settings.unmapped_device_class != "Ignore":
            return deny("UnmappedDeviceClass", f"{subject}: {text}", queue=name)
        warnings.append(f"{text}: not charged")
    if placer is not None and settings.placement != "Off" and demand.claims:
        placement = placer(demand.claims, None)
        if getattr(placement, "invalid", False):
            return deny("InvalidObject", f"{subject}: {placement.reason}", queue=name, invalid=True)
        if getattr(placement, "too_complex", False):
            text = f"{subject}: claims {placement.reason}"
            if settings.placement == "Enforce":
                return deny("TooComplex", text, queue=name)
            warnings.append(text)
        elif not placement.ok:
            text = f"{subject}: claims cannot be placed on any node: {placement.reason}"
            if settings.placement == "Enforce":
                return deny("Unplaceable", text, queue=name)
            warnings.append(text)
        elif not getattr(placement, "now", True):
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
        demand,
        charged,
        tuple(warnings),
        answers,
        notes,
        busy,
        busy_everywhere,
        operation,
    )


@dataclass(frozen=True)
class Prepared:
    """Everything a decision needs that does not depend on usage: the queue, the demand,
    and how every flavor of the queue answers for the pod (node affinity, placement).

    `prepare` builds it outside the ledger's lock; `conclude` is the quota arithmetic
    against usage, done under it (again after a conflict)."""

    workload: Workload
    table: QueueTable
    route: Route
    demand: PodDemand
    charged: Charged
    warnings: tuple[str, ...]
    answers: Mapping[str, str | None]  # flavor -> why it cannot take the pod (None: it can)
    notes: Mapping[str, tuple[str, ...]]  # flavor -> warnings that count if it is tried
    busy: Mapping[str, str]  # flavors whose nodes can host the claims only later, and why
    busy_everywhere: str  # why no node at all can host them right now ("" when some can)
    operation: str = "CREATE"
    # (flavors) -> (charge, nodeSelector): shared by every copy `of` makes, so the pods of a
    # workload hold one Charge object (and its annotation text) per flavor assignment.
    _charges: dict[tuple[tuple[str, str], ...], tuple[Charge, dict[str, str]]] = field(
        default_factory=dict, compare=False, repr=False
    )

    @property
    def subject(self) -> str:
        return subject_of(self.workload)

    def of(self, workload: Workload) -> Prepared:
        """The same preparation for another workload that asks for the same (its messages name
        `workload`); built field by field, since dataclasses.replace costs more than the rest."""
        return Prepared(
            workload,
            self.table,
            self.route,
            self.demand,
            self.charged,
            self.warnings,
            self.answers,
            self.notes,
            self.busy,
            self.busy_everywhere,
            self.operation,
            self._charges,
        )

    def charged_to(self, flavors: Mapping[str, str]) -> tuple[Charge, dict[str, str]]:
        """The pod's charge in `flavors` and the nodeSelector that pins it there."""
        key = tuple(flavors.items())
        found = self._charges.get(key)
        if found is None:
            charge = charge_of(self.route, self.demand, self.charged, flavors, "")
            found = self._charges[key] = (charge, node_labels(self.table, flavors))
        return found

    @property
    def where(self) -> str:
        return f'ClusterQueue "{self.route.queue.name}" (LocalQueue {self.route.local.key})'

    def flavor_filter(self, warnings: list[str]) -> PreferringFilter:
        """The flavor answers, adding a tried flavor's notes to `warnings`."""

        def check(flavor: str) -> str | None:
            warnings.extend(self.notes.get(flavor, ()))
            return self.answers.get(flavor, f"flavor {flavor} not found")

        return PreferringFilter(check, lambda flavor: flavor not in self.busy)

    def busy_warning(self, flavors: Collection[str] | None) -> str:
        """The warning that the pod waits for devices to be released ("" when it need not):
        no node can host the claims now, or none of the chosen flavor's nodes can."""
        if not self.busy_everywhere and not self.busy:
            return ""
        text = f"{self.subject}: claims cannot be placed on the devices free right now"
        if self.busy_everywhere:
            return (
                f"{text}, the pod waits until allocated devices are released: "
                f"{self.busy_everywhere}"
            )
        for flavor in sorted(flavors or ()):
            if flavor in self.busy:
                return (
                    f"{text} of flavor {flavor}, the pod waits until allocated devices are "
                    f"released: {self.busy[flavor]}"
                )
        return ""


def _decide_workload(c: Prepared, queued: bool = False) -> Decision:
    """A pod-template workload: can its pods (a Job: those running at once) ever fit? With
    `queued`, a pod that will wait in its queue: can it ever fit there?"""
    warnings = list(c.warnings)
    assignment = assign_flavors(
        c.table,
        c.route.queue,
        lambda _q: {},
        c.charged.per_pod,
        c.charged.shared,
        flavor_filter=c.flavor_filter(warnings),
        pods=max(1, c.workload.pods),
        capacity_only=True,
        asked=c.charged.asked,
    )
    name = c.route.local.name
    if not assignment.ok:
        return deny("QuotaExceeded", exceeds(c.subject, c.route, assignment), queue=name)
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
    cache: DerivedCache | None = None,
) -> Prepared | Decision:
    """The part of a decision that does not depend on usage (see `Prepared`), or the
    decision itself when that part already settles it: not managed, invalid, a
    missing object, unplaceable, unmapped classes. `cache`: what is derived from
    `state` is kept there between calls (`quota.derived`).

    Everything is read from one view of `state` (`state.snapshot()`), placements
    included: a change to the cluster meanwhile is not half seen."""
    if operation == "DELETE":
        return Decision(Verdict.ADMITTED, "NotManaged", "deletions are not checked")
    view = state.snapshot()
    try:
        return _prepare(as_workload(obj), view, settings, placer_on(placer, view), operation, cache)
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
    queued = enqueue and prepared.route.queue.queues and prepared.operation == "CREATE"
    if prepared.workload.kind != "Pod":
        return _decide_workload(prepared, queued=queued and prepared.workload.kind == "Job")
    if queued:
        return _decide_workload(prepared, queued=True)
    return _decide_pod(prepared, usage)


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
    charge = charge_of(c.route, c.demand, c.charged, assignment.flavors, "")
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
    *,
    cache: DerivedCache | None = None,
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
    return conclude(prepare(obj, state, settings, placer, operation, cache=cache), usage)
