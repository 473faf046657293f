"""Pods waiting in ClusterQueues with `whenFull: Queue`, and the order they start in.

Such a pod is created with the scheduling gate `draquota.io/admission`: the
scheduler leaves it alone and it holds no quota (SPEC: integrity, a gated pod
without an admission record is charged nothing). The queueing controller admits
waiting workloads one ClusterQueue at a time, in Kueue's order: higher priority
first (the pod's `spec.priority`, which the API server sets from its
PriorityClass), then older first. With StrictFIFO nothing is admitted behind a
head that does not fit; with BestEffortFIFO smaller workloads go past it.

A workload is one pod; a pod group: the pods that carry the same
`draquota.io/pod-group-name` label, admitted only all together, once all
`draquota.io/pod-group-total-count` of them exist (Kueue's convention, under
draquota's own keys); or a Job, created suspended and admitted as a whole.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from quota.charge import QUEUE_LABEL
from quota.cluster import ClusterView, Obj
from quota.livepods import ADMISSION_GATE, is_gated, is_live_job, is_live_pod
from quota.objectkeys import namespace_of, object_key, object_key_of
from quota.queues import STRICT_FIFO, ClusterQueue
from quota.queuetable import QueueTable
from quota.routing import DEFAULT_LOCAL_QUEUE

__all__ = [
    "ADMISSION_GATE",
    "GROUP_LABEL",
    "GROUP_TOTAL_ANNOTATION",
    "Wait",
    "Waiting",
    "admit_in_order",
    "group_of",
    "is_gated",
    "local_queue_key",
    "waiting_among",
    "waiting_in",
    "waiting_jobs",
    "waiting_key",
    "waiting_workloads",
    "waits_in_order",
]

GROUP_LABEL = "draquota.io/pod-group-name"
GROUP_TOTAL_ANNOTATION = "draquota.io/pod-group-total-count"
_MAX_GROUP = 1024


def _mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


@dataclass(frozen=True)
class Waiting:
    """One workload waiting for its ClusterQueue: a pod, or the pods of a group so far.

    `key` is `ns/name` of the pod, or `ns/group-name` of a group; `total` is how many pods
    the workload needs; `problem` says why it can never start as it is ("" when it can).
    """

    key: str
    cluster_queue: str
    priority: int
    created: str
    pods: tuple[Obj, ...]  # a Job's: the Job itself
    total: int = 1
    problem: str = ""
    kind: str = "Pod"
    local_queue: str = ""  # ns/name of the LocalQueue it was submitted to

    @property
    def complete(self) -> bool:
        return len(self.pods) >= self.total

    @property
    def subject(self) -> str:
        if self.kind == "Job":
            return f"job {self.key}"
        if self.total == 1 and len(self.pods) == 1 and not _group(self.pods[0]):
            return f"pod {self.key}"
        return f"pod group {self.key}"

    def order(self) -> tuple[int, str, str]:
        return (-self.priority, self.created, self.key)


def _group(pod: Obj) -> str:
    value = _mapping(_mapping(pod.get("metadata")).get("labels")).get(GROUP_LABEL)
    return value if isinstance(value, str) else ""


def waiting_key(obj: Obj) -> str:
    """The key the queue knows a created pod or Job by (`Waiting.key`): a pod's group's
    `ns/group`, else its own `ns/name`."""
    group = _group(obj) if obj.get("kind") == "Pod" else ""
    return object_key_of(namespace_of(obj), group) if group else object_key(obj)


def group_of(pod: Obj) -> tuple[str, int] | None:
    """The group a pod belongs to, `ns/name`, and its total count from the pod's own
    annotation; None for a pod of no group or one whose annotation is not a valid count
    (the controller then says why the group cannot start)."""
    name = _group(pod)
    if not name:
        return None
    metadata = _mapping(pod.get("metadata"))
    raw = _mapping(metadata.get("annotations")).get(GROUP_TOTAL_ANNOTATION)
    try:
        total = int(raw) if isinstance(raw, str) and len(raw) < 16 else 0
    except ValueError:
        return None
    if not 1 <= total <= _MAX_GROUP:
        return None
    return object_key_of(namespace_of(pod), name), total


def local_queue_key(obj: Obj) -> str:
    """The LocalQueue (`ns/name`) a pod names, or a Job's pods name (its labels under its pod
    template's): its queue label, else `default` of its namespace."""
    metadata = _mapping(obj.get("metadata"))
    labels = _mapping(metadata.get("labels"))
    if obj.get("kind") == "Job":
        labels = _labels_of(obj, _mapping(_mapping(obj.get("spec")).get("template")))
    label = labels.get(QUEUE_LABEL)
    name = label if isinstance(label, str) and label else DEFAULT_LOCAL_QUEUE
    return object_key_of(namespace_of(obj), name)


def _queues(pod: Obj, table: QueueTable) -> tuple[str, ClusterQueue] | None:
    """The LocalQueue (`ns/name`) and the queueing ClusterQueue of a pod or Job, if it has them."""
    local = table.local_queues.get(local_queue_key(pod))
    if local is None or isinstance(local, str):
        return None
    queue = table.queues.get(local.cluster_queue)
    return (local.key, queue) if queue is not None and queue.queues else None


def _priority(pod: Obj) -> int:
    value = _mapping(pod.get("spec")).get("priority")
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def _created(pod: Obj) -> str:
    value = _mapping(pod.get("metadata")).get("creationTimestamp")
    return value if isinstance(value, str) else ""


def _total(pods: Sequence[Obj]) -> tuple[int, str]:
    """A group's total count from its pods' annotation, and the problem when it has none."""
    counts = {
        _mapping(_mapping(p.get("metadata")).get("annotations")).get(GROUP_TOTAL_ANNOTATION)
        for p in pods
    }
    if len(counts) != 1:
        return len(pods), f"its pods disagree on annotation {GROUP_TOTAL_ANNOTATION}"
    (raw,) = counts
    try:
        total = int(raw) if isinstance(raw, str) else -1
    except ValueError:
        total = -1
    if not 1 <= total <= _MAX_GROUP:
        return len(pods), (
            f"annotation {GROUP_TOTAL_ANNOTATION} must be a whole number from 1 to {_MAX_GROUP}"
        )
    if len(pods) > total:
        return total, f"it has {len(pods)} pods, more than its total count {total}"
    return total, ""


def waiting_workloads(pods: Iterable[Obj], table: QueueTable) -> dict[str, list[Waiting]]:
    """Gated pods of queueing ClusterQueues as workloads, per ClusterQueue, in queue order.

    `pods` are the live pods to consider (the caller leaves out finished and deleted ones).
    """
    singles: dict[str, list[Waiting]] = {}
    groups: dict[tuple[str, str, str], list[Obj]] = {}
    for pod in pods:
        if not is_gated(pod):
            continue
        queues = _queues(pod, table)
        if queues is None:
            continue
        local, queue = queues
        group = _group(pod)
        if group:
            key = object_key_of(namespace_of(pod), group)
            groups.setdefault((queue.name, local, key), []).append(pod)
            continue
        key = object_key(pod)
        waiting = Waiting(key, queue.name, _priority(pod), _created(pod), (pod,), local_queue=local)
        singles.setdefault(queue.name, []).append(waiting)
    for (queue_name, local, key), members in groups.items():
        members.sort(key=lambda p: (_created(p), str(_mapping(p.get("metadata")).get("name"))))
        total, problem = _total(members)
        waiting = Waiting(
            key,
            queue_name,
            max(_priority(p) for p in members),
            _created(members[0]),
            tuple(members),
            total,
            problem,
            local_queue=local,
        )
        singles.setdefault(queue_name, []).append(waiting)
    for workloads in singles.values():
        workloads.sort(key=Waiting.order)
    return singles


def waiting_jobs(
    jobs: Iterable[Obj], table: QueueTable, priority_classes: Iterable[Obj] = ()
) -> dict[str, list[Waiting]]:
    """Suspended Jobs of queueing ClusterQueues, per ClusterQueue, in queue order.

    `jobs` are the live Jobs to consider. A Job's priority is what the API server would
    give its pods: the value of its pod template's `priorityClassName`, else of the
    `globalDefault` PriorityClass, else 0."""
    classes, default = _priority_values(priority_classes)
    out: dict[str, list[Waiting]] = {}
    for job in jobs:
        spec = _mapping(job.get("spec"))
        if spec.get("suspend") is not True:
            continue
        template = _mapping(spec.get("template"))
        queues = _queues(job, table)
        if queues is None:
            continue
        local, queue = queues
        key = object_key(job)
        name = _mapping(template.get("spec")).get("priorityClassName")
        priority = classes.get(name, default) if isinstance(name, str) else default
        waiting = Waiting(
            key,
            queue.name,
            priority,
            _created(job),
            (job,),
            kind="Job",
            local_queue=local,
        )
        out.setdefault(queue.name, []).append(waiting)
    for workloads in out.values():
        workloads.sort(key=Waiting.order)
    return out


def _priority_values(priority_classes: Iterable[Obj]) -> tuple[dict[str, int], int]:
    """PriorityClass values by name, and the global default's (0 when none)."""
    values: dict[str, int] = {}
    default = 0
    for cls in priority_classes:
        name, value = _mapping(cls.get("metadata")).get("name"), cls.get("value")
        if isinstance(name, str) and isinstance(value, int) and not isinstance(value, bool):
            values[name] = value
            if cls.get("globalDefault") is True:
                default = value
    return values, default


def _labels_of(job: Obj, template: Mapping[str, Any]) -> Mapping[str, Any]:
    """The Job's labels under its pod template's, as the Job's pods get them."""
    labels = _mapping(_mapping(job.get("metadata")).get("labels"))
    return {**labels, **_mapping(_mapping(template.get("metadata")).get("labels"))}


def waiting_in(
    state: ClusterView, table: QueueTable, now: float, gated: Iterable[Obj] | None = None
) -> dict[str, list[Waiting]]:
    """Every workload waiting in the cluster view, per queueing ClusterQueue, in queue order:
    its gated live pods and its suspended live Jobs (nothing is read when no queue queues).
    `gated`: the view's gated pods when the caller keeps them (else every pod is looked at)."""
    if not any(queue.queues for queue in table.queues.values()):
        return {}
    pods = state.list("Pod") if gated is None else gated
    return waiting_among(pods, state.list("Job"), table, state.list("PriorityClass"), now)


def waiting_among(
    pods: Iterable[Obj],
    jobs: Iterable[Obj],
    table: QueueTable,
    priority_classes: Iterable[Obj],
    now: float,
) -> dict[str, list[Waiting]]:
    """The workloads the gated live pods and suspended live Jobs among `pods` and `jobs` make,
    per queueing ClusterQueue, in queue order."""
    gated = (p for p in pods if is_gated(p) and is_live_pod(p, now))
    waiting = waiting_workloads(gated, table)
    live = (j for j in jobs if is_live_job(j))
    for name, suspended in waiting_jobs(live, table, priority_classes).items():
        waiting[name] = sorted([*waiting.get(name, ()), *suspended], key=Waiting.order)
    return waiting


@dataclass(frozen=True)
class Wait:
    """Why a workload is left waiting after a pass, and where it stands: `position` among the
    complete workloads left waiting in its ClusterQueue, in the order they start in (0 for one
    that is passed over: a group whose pods do not all exist yet, or one that cannot start)."""

    why: str
    cluster_queue: str
    position: int = 0
    of: int = 0

    @property
    def message(self) -> str:
        """What the pod's condition and Event say."""
        if not self.position:
            return self.why
        where = f"position {self.position} of {self.of} in ClusterQueue {self.cluster_queue}"
        return f"{self.why}; {where}"


def waits_in_order(
    queue: ClusterQueue,
    workloads: Sequence[Waiting],
    admit: Callable[[Waiting], str],
) -> dict[str, Wait]:
    """Try the workloads of `queue` in order; `admit` admits one and answers "" or why it
    must wait. Why each workload left waiting waits, by key.

    A group whose pods do not all exist yet is passed over without blocking anyone, as
    in Kueue, where such a group is not a workload yet.
    """
    waiting: dict[str, Wait] = {}
    queued: list[tuple[str, str]] = []  # (key, why) of complete workloads left waiting
    head = ""
    for workload in workloads:
        if workload.problem:
            why = f"{workload.subject} cannot start: {workload.problem}"
            waiting[workload.key] = Wait(why, queue.name)
        elif not workload.complete:
            why = (
                f"waiting for the pods of {workload.subject}: {len(workload.pods)} of "
                f"{workload.total} exist"
            )
            waiting[workload.key] = Wait(why, queue.name)
        elif head:
            queued.append((workload.key, f"waiting behind {head} (StrictFIFO)"))
        elif why := admit(workload):
            queued.append((workload.key, f"waiting for quota: {why}"))
            if queue.queueing_strategy == STRICT_FIFO:
                head = workload.subject
    for position, (key, why) in enumerate(queued, 1):
        waiting[key] = Wait(why, queue.name, position, len(queued))
    return waiting


def admit_in_order(
    queue: ClusterQueue,
    workloads: Sequence[Waiting],
    admit: Callable[[Waiting], str],
) -> dict[str, str]:
    """`waits_in_order`, as the message each workload left waiting should show, by key."""
    return {key: wait.message for key, wait in waits_in_order(queue, workloads, admit).items()}
