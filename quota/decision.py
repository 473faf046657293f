"""The admission decision for a Pod or a pod-template workload (SPEC §4).

Pod -> LocalQueue (label `draquota.io/queue-name`, else `default` in the
namespace; none: not managed) -> ClusterQueue (must exist, be valid and select
the namespace) -> quota resources (DeviceClasses through the queue's and the
global mappings; ordinary resources no group covers are ignored) -> flavors and
cohort arithmetic against live usage. Workloads (Job, Deployment, ...) are
checked against the most the queue could ever hold, for one pod and for the
pods a Job runs at once.

`decide` never raises for bad input: a malformed object is a 400 decision, a
missing object a 403 decision naming it. It is pure and deterministic.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

from quota.assignment import (
    Assignment,
    FlavorFilter,
    PreferringFilter,
    assign_flavors,
    flavor_matches_pod,
)
from quota.charge import QUEUE_LABEL, Charge, at_least, times
from quota.claims import PodClaim
from quota.cluster import ClusterState, Obj
from quota.demand import PodDemand, pod_demand
from quota.derived import DerivedCache
from quota.errors import DraquotaError, NotFound
from quota.quantity import sat_add
from quota.queues import ClusterQueue, LocalQueue, QueueTable, namespace_selected, queue_table
from quota.settings import Settings
from quota.usage import Usage
from quota.workloads import Workload, as_workload

__all__ = [
    "DEFAULT_LOCAL_QUEUE",
    "Decision",
    "PlacementLike",
    "Placer",
    "Prepared",
    "conclude",
    "conclude_job",
    "decide",
    "node_selector_of",
    "prepare",
    "recheck_pod",
    "recompute_charge",
]

DEFAULT_LOCAL_QUEUE = "default"
PODS_RESOURCE = "pods"


class PlacementLike(Protocol):
    """What a placer answers (quota.placement.Placement fits)."""

    @property
    def ok(self) -> bool: ...
    @property
    def reason(self) -> str: ...
    @property
    def node(self) -> str | None: ...


# claims of one pod, node labels to restrict to (None: any node) -> placement
Placer = Callable[[Sequence[PodClaim], Mapping[str, str] | None], PlacementLike]


@dataclass(frozen=True)
class Decision:
    """Allowed or denied, with an HTTP-style code, a CamelCase reason and a message."""

    allowed: bool
    code: int
    reason: str
    message: str = ""
    warnings: tuple[str, ...] = ()
    charge: Charge | None = None
    node_selector: Mapping[str, str] = field(default_factory=dict)
    queue_name: str | None = None
    queued: bool = False  # allowed into a queueing ClusterQueue: the pod waits, gated
    shortfall: str = ""  # of a QuotaExceeded denial: what is missing, in which flavors


def _deny(reason: str, message: str, code: int = 403, queue: str | None = None) -> Decision:
    return Decision(False, code, reason, message, queue_name=queue)


@dataclass(frozen=True)
class _Route:
    local: LocalQueue
    queue: ClusterQueue


def _subject(workload: Workload) -> str:
    """How a denial names the object: a pod whose name a controller generates is named after
    its owner, since `par4-` or `par4-x7k2p` means nothing to the user who made the Job."""
    subject = f"{workload.kind.lower()} {workload.namespace}/{workload.name}"
    metadata = workload.pod.get("metadata") or {}
    generated = metadata.get("generateName")
    if workload.kind != "Pod" or not isinstance(generated, str) or not generated:
        return subject
    name = metadata.get("name")
    if not isinstance(name, str) or not name or name == generated:
        subject = f"pod {workload.namespace}/{generated}<generated>"
    else:
        subject = f"{subject} (generated name)"
    owners = metadata.get("ownerReferences")
    owner = (
        next((o for o in owners if isinstance(o, Mapping) and o.get("controller")), None)
        if isinstance(owners, list)
        else None
    )
    if owner is None:
        return subject
    return f"{subject} of {owner.get('kind')} {workload.namespace}/{owner.get('name')}"


def _queue_label(workload: Workload) -> str:
    labels = (workload.pod.get("metadata") or {}).get("labels") or {}
    value = labels.get(QUEUE_LABEL) if isinstance(labels, Mapping) else None
    return value if isinstance(value, str) else ""


def _route(workload: Workload, state: ClusterState, table: QueueTable) -> _Route | Decision | None:
    """The queues of a workload, a denial, or None when it is not managed."""
    subject, namespace = _subject(workload), workload.namespace
    label = _queue_label(workload)
    name = label or DEFAULT_LOCAL_QUEUE
    local = table.local_queues.get(f"{namespace}/{name}")
    if local is None:
        if not label:
            return None
        return _deny(
            "LocalQueueNotFound",
            f"{subject}: LocalQueue {namespace}/{name} not found (label {QUEUE_LABEL})",
            queue=name,
        )
    if isinstance(local, str):
        return _deny("InvalidLocalQueue", f"{subject}: {local}", queue=name)
    where = f'ClusterQueue "{local.cluster_queue}" (LocalQueue {local.key})'
    queue = table.queues.get(local.cluster_queue)
    if local.cluster_queue in table.invalid:
        problem = table.invalid[local.cluster_queue]
        return _deny(
            "InvalidClusterQueue",
            f"{subject}: {where} is invalid and admits nothing: {problem}",
            queue=name,
        )
    if queue is None:
        return _deny(
            "ClusterQueueNotFound",
            f'{subject}: ClusterQueue "{local.cluster_queue}" not found '
            f"(LocalQueue {local.key} points to it)",
            queue=name,
        )
    if not namespace_selected(queue, state.get("Namespace", None, namespace), namespace):
        return _deny(
            "NamespaceNotSelected",
            f"{subject}: namespace {namespace} is not selected by the namespaceSelector of {where}",
            queue=name,
        )
    return _Route(local, queue)


@dataclass(frozen=True)
class _Charged:
    """A demand translated into the quota resources of one queue."""

    per_pod: Mapping[str, int]
    shared: Mapping[str, Mapping[str, int]]
    unmapped: tuple[str, ...]
    asked: Mapping[str, tuple[str, ...]]  # resource -> the DeviceClasses the pod asked


def _charged(demand: PodDemand, queue: ClusterQueue, table: QueueTable) -> _Charged:
    classes = table.class_resources.get(queue.name, {})
    covered = set(queue.covered())
    per_pod: dict[str, int] = {}
    unmapped: set[str] = set()
    asked: dict[str, set[str]] = {}

    def add(target: dict[str, int], device_class: str, count: int) -> None:
        resource = classes.get(device_class)
        if resource is None:
            if count:
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
        shared[claim] = {r: v for r, v in sorted(amounts.items()) if v}
    return _Charged(
        {r: v for r, v in sorted(per_pod.items()) if v},
        shared,
        tuple(sorted(unmapped)),
        {r: tuple(sorted(names)) for r, names in sorted(asked.items())},
    )


def _charge(
    route: _Route,
    demand: PodDemand,
    charged: _Charged,
    flavors: Mapping[str, str],
    reservation: str,
) -> Charge:
    return Charge(
        cluster_queue=route.queue.name,
        local_queue=route.local.key,
        flavors=dict(flavors),
        usage=dict(charged.per_pod),
        device_classes=demand.all_devices(),
        shared_claims={c: dict(a) for c, a in charged.shared.items() if a},
        reservation=reservation,
    )


def _node_labels(table: QueueTable, flavors: Mapping[str, str]) -> dict[str, str]:
    labels: dict[str, str] = {}
    for flavor in sorted(set(flavors.values())):
        known = table.flavors.get(flavor)
        if known is not None:
            labels.update(known.node_labels)
    return dict(sorted(labels.items()))


def node_selector_of(table: QueueTable, charge: Charge) -> dict[str, str]:
    """The nodeSelector a pod admitted with `charge` gets: its flavors' node labels."""
    return _node_labels(table, charge.flavors)


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


def _flavor_filter(
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
            if not getattr(placement, "now", True):
                # fits once devices are released: allowed, not preferred, warned if chosen
                busy[flavor] = f"nodes with labels {labels}: {placement.reason}"
            return None
        if getattr(placement, "too_complex", False):
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


def _exceeds(subject: str, route: _Route, assignment: Assignment) -> str:
    return (
        f'{subject} exceeds quota of ClusterQueue "{route.queue.name}" '
        f"(LocalQueue {route.local.key}): {'; '.join(assignment.reasons)}"
    )


def _prepare(
    workload: Workload,
    state: ClusterState,
    settings: Settings,
    placer: Placer | None,
    operation: str,
    cache: DerivedCache | None,
) -> Prepared | Decision:
    table = queue_table(state, settings, cache=cache)
    route = _route(workload, state, table)
    if route is None:
        return Decision(True, 200, "NotManaged", "no LocalQueue: not managed by draquota")
    if isinstance(route, Decision):
        return route
    subject, name = _subject(workload), route.local.name
    where = f'ClusterQueue "{route.queue.name}" (LocalQueue {route.local.key})'
    demand = pod_demand(workload, state, cache=cache)
    charged = _charged(demand, route.queue, table)
    warnings: list[str] = []
    busy_everywhere = ""  # why no node of the cluster can host the claims right now
    if charged.unmapped:
        listed = ", ".join(charged.unmapped)
        noun = "device class" if len(charged.unmapped) == 1 else "device classes"
        text = f"{noun} {listed} not mapped to any resource of {where}"
        if settings.unmapped_device_class != "Ignore":
            return _deny("UnmappedDeviceClass", f"{subject}: {text}", queue=name)
        warnings.append(f"{text}: not charged")
    if placer is not None and settings.placement != "Off" and demand.claims:
        placement = placer(demand.claims, None)
        if getattr(placement, "invalid", False):
            return _deny("InvalidObject", f"{subject}: {placement.reason}", code=400, queue=name)
        if getattr(placement, "too_complex", False):
            text = f"{subject}: claims {placement.reason}"
            if settings.placement == "Enforce":
                return _deny("TooComplex", text, queue=name)
            warnings.append(text)
        elif not placement.ok:
            text = f"{subject}: claims cannot be placed on any node: {placement.reason}"
            if settings.placement == "Enforce":
                return _deny("Unplaceable", text, queue=name)
            warnings.append(text)
        elif not getattr(placement, "now", True):
            busy_everywhere = placement.reason
    busy: dict[str, str] = {}
    lazy = _flavor_filter(
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
    route: _Route
    demand: PodDemand
    charged: _Charged
    warnings: tuple[str, ...]
    answers: Mapping[str, str | None]  # flavor -> why it cannot take the pod (None: it can)
    notes: Mapping[str, tuple[str, ...]]  # flavor -> warnings that count if it is tried
    busy: Mapping[str, str]  # flavors whose nodes can host the claims only later, and why
    busy_everywhere: str  # why no node at all can host them right now ("" when some can)
    operation: str = "CREATE"

    @property
    def subject(self) -> str:
        return _subject(self.workload)

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
        return _deny("QuotaExceeded", _exceeds(c.subject, c.route, assignment), queue=name)
    if waiting := c.busy_warning(None):
        warnings.append(waiting)
    if queued:
        return Decision(
            True, 200, "Queued", f"{c.subject} waits in {c.where}", tuple(sorted(set(warnings))),
            queue_name=name, queued=True,
        )  # fmt: skip
    return Decision(
        True, 200, "Admitted", f"{c.subject} fits {c.where}", tuple(sorted(set(warnings))),
        queue_name=name,
    )  # fmt: skip


def _decide_pod(c: Prepared, live: Usage) -> Decision:
    """A pod against live usage (the ledger leaves out the pod's own record: a retry counts
    once; a pod of the same name held by another pod is not left out)."""
    queue, charged = c.route.queue, c.charged
    warnings = list(c.warnings)
    assignment = assign_flavors(
        c.table,
        queue,
        live.of,
        charged.per_pod,
        charged.shared,
        held=frozenset(live.shared_claims(queue.name)),
        flavor_filter=c.flavor_filter(warnings),
        asked=charged.asked,
    )
    if not assignment.ok:
        message = _exceeds(c.subject, c.route, assignment)
        if c.operation != "UPDATE":
            denial = _deny("QuotaExceeded", message, queue=c.route.local.name)
            return replace(denial, shortfall="; ".join(assignment.reasons))
        warnings.append(f"{message} (existing pod: update allowed)")
        fallback = assign_flavors(
            c.table, queue, lambda _q: {}, charged.per_pod, charged.shared, capacity_only=True
        )
        assignment = fallback if fallback.ok else _first_flavors(queue, charged)
    if assignment.borrowing:
        warnings.append(f"{c.subject} borrows quota from cohort {queue.cohort}")
    if waiting := c.busy_warning(assignment.flavors.values()):
        warnings.append(waiting)
    return Decision(
        allowed=True,
        code=200,
        reason="Admitted",
        message=f"{c.subject} admitted to {c.where}",
        warnings=tuple(sorted(set(warnings))),
        charge=_charge(c.route, c.demand, charged, assignment.flavors, ""),
        node_selector=_node_labels(c.table, assignment.flavors),
        queue_name=c.route.local.name,
    )


def _first_flavors(queue: ClusterQueue, charged: _Charged) -> Assignment:
    """Every charged resource in the first flavor of its group (a last-resort record)."""
    wanted = set(charged.per_pod) | {r for a in charged.shared.values() for r in a}
    flavors = {}
    for group in queue.groups:
        if group.flavors:
            flavors.update({r: group.flavors[0].name for r in group.covered if r in wanted})
    return Assignment(flavors)


def prepare(
    obj: Mapping[str, Any],
    state: ClusterState,
    settings: Settings,
    placer: Placer | None = None,
    operation: str = "CREATE",
    *,
    cache: DerivedCache | None = None,
) -> Prepared | Decision:
    """The part of a decision that does not depend on usage (see `Prepared`), or the
    decision itself when that part already settles it: not managed, invalid (400), a
    missing object (403), unplaceable, unmapped classes. `cache`: what is derived from
    `state` is kept there between calls (`quota.derived`)."""
    if operation == "DELETE":
        return Decision(True, 200, "NotManaged", "deletions are not checked")
    try:
        return _prepare(as_workload(obj), state, settings, placer, operation, cache)
    except NotFound as exc:
        kind = "ClaimNotFound" if exc.kind.startswith("ResourceClaim") else "NotFound"
        return _deny(kind, _sentence(str(exc)))
    except DraquotaError as exc:
        return _deny("InvalidObject", _sentence(str(exc)), code=400)


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
    assignment = assign_flavors(
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
    if not assignment.ok:
        denial = _deny("QuotaExceeded", _exceeds(c.subject, c.route, assignment))
        return replace(
            denial, queue_name=c.route.local.name, shortfall="; ".join(assignment.reasons)
        )
    charge = _charge(c.route, c.demand, c.charged, assignment.flavors, "")
    return Decision(
        allowed=True,
        code=200,
        reason="Admitted",
        message=f"{c.subject} ({pods} pods) admitted to {c.where}",
        warnings=tuple(sorted(set(warnings))),
        charge=times(charge, pods),
        node_selector=_node_labels(c.table, assignment.flavors),
        queue_name=c.route.local.name,
    )


def decide(
    obj: Mapping[str, Any],
    state: ClusterState,
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


def recheck_pod(
    pod: Obj,
    state: ClusterState,
    usage: Usage,
    settings: Settings,
    recorded: Charge | None,
    *,
    cache: DerivedCache | None = None,
) -> Decision:
    """An existing pod whose cost may grow: a resize, or a claim it references re-created.

    `pod` and `state` are as they would be after the change, `usage` leaves the
    pod out, `recorded` is its admission record. The pod keeps its queue and flavors
    (its nodes were chosen by them); what does not grow is always allowed, what grows
    must fit like an admission. The charge of an allowed change is the new record.
    `cache` as in `prepare`.
    """
    try:
        workload = as_workload(pod)
        table = queue_table(state, settings, cache=cache)
        route = _recorded_route(recorded, table) or _usage_route(workload, table)
        if route is None:
            return Decision(True, 200, "NotManaged", "no LocalQueue: not managed by draquota")
        demand = pod_demand(workload, state, generated=True, cache=cache)
        charged = _charged(demand, route.queue, table)
        pinned = _recorded_flavors(route.queue, charged, recorded)
        affinity = _flavor_filter(table, route.queue, workload, (), None, settings, [])
        kept = set(pinned.flavors.values()) if pinned is not None else None

        def flavor_filter(flavor: str) -> str | None:
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
            flavor_filter=flavor_filter,
            asked=charged.asked,
        )
        flavors = assignment.flavors if assignment.ok else (pinned or Assignment({})).flavors
        charge = _charge(route, demand, charged, flavors, "")
        if recorded is not None:
            charge = at_least(recorded, charge)
            if charge == at_least(recorded, recorded):
                return Decision(True, 200, "Admitted", "nothing grows", charge=recorded)
        if not assignment.ok:
            message = _exceeds(_subject(workload), route, assignment)
            return _deny("QuotaExceeded", message, queue=route.local.name)
        where = f'ClusterQueue "{route.queue.name}" (LocalQueue {route.local.key})'
        return Decision(
            True,
            200,
            "Admitted",
            f"{_subject(workload)} still fits {where}",
            charge=charge,
            queue_name=route.local.name,
        )
    except NotFound as exc:
        kind = "ClaimNotFound" if exc.kind.startswith("ResourceClaim") else "NotFound"
        return _deny(kind, _sentence(str(exc)))
    except DraquotaError as exc:
        return _deny("InvalidObject", _sentence(str(exc)), code=400)


def _sentence(message: str) -> str:
    """Kubernetes message style: errors start with the object (`Pod ns/name`), lowercased."""
    return message[:1].lower() + message[1:]


def _usage_route(workload: Workload, table: QueueTable) -> _Route | None:
    """The queue a running pod is charged to: its LocalQueue's, even if since misconfigured."""
    name = _queue_label(workload) or DEFAULT_LOCAL_QUEUE
    local = table.local_queues.get(f"{workload.namespace}/{name}")
    if not isinstance(local, LocalQueue) or local.cluster_queue not in table.queues:
        return None
    return _Route(local, table.queues[local.cluster_queue])


def _recorded_route(recorded: Charge | None, table: QueueTable) -> _Route | None:
    """The queue an admission record names (trusted: only draquota writes records)."""
    if recorded is None or recorded.local_queue.count("/") != 1:
        return None
    queue = table.queues.get(recorded.cluster_queue)
    if queue is None:
        return None
    namespace, name = recorded.local_queue.split("/", 1)
    return _Route(LocalQueue(namespace, name, queue.name), queue)


def _recorded_flavors(
    queue: ClusterQueue, charged: _Charged, recorded: Charge | None
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
    state: ClusterState,
    settings: Settings,
    recorded: Charge | None = None,
    *,
    cache: DerivedCache | None = None,
) -> Charge | None:
    """What a live pod's claims and requests cost now; None when unmanaged.

    `recorded` is the pod's admission record (never a user-written annotation): it
    names the queue the pod was admitted to and the flavors chosen, which are kept
    when valid for the recomputed demand. Without one, the pod's LocalQueue routes
    it. Claims are the ones generated for the pod where they exist. Raises
    NotFound/InvalidObject when the pod's claims cannot be read. `cache` as in `prepare`.
    """
    workload = as_workload(pod)
    table = queue_table(state, settings, cache=cache)
    route = _recorded_route(recorded, table) or _usage_route(workload, table)
    if route is None:
        return None
    # saturate: a live pod with an out-of-range quantity is charged the most, never dropped
    demand = pod_demand(workload, state, generated=True, saturate=True, cache=cache)
    charged = _charged(demand, route.queue, table)
    assignment = _recorded_flavors(route.queue, charged, recorded)
    if assignment is None:  # no record: the flavor whose nodes the pod is pinned to
        affinity = _flavor_filter(table, route.queue, workload, (), None, settings, [])
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
            assignment = _first_flavors(route.queue, charged)
    return _charge(route, demand, charged, assignment.flavors, "")
