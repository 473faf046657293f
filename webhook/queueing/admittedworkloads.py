"""The admitted workloads of the cluster, as preemption sees them: what may be evicted, and what
is being evicted already.

A workload is what holds quota and is evicted as one: a pod, the pods of a pod group (grouped
as `quota.waiting` groups waiting pods), or a Job admitted whole (its record, held under
`job_holder`, with the pods of it charged on their own). Each is found through the usage
holders of the ledger, so only what is charged is a candidate, in the ClusterQueue it is
charged to. A holder that is an admission in flight (a record whose pod is not seen yet) is
no workload: it stays in the usage and is never evicted.

Its priority is the pod's `spec.priority` (the API server sets it from the PriorityClass, and
refuses a pod that sets another value itself), the highest of a group's, a Job's template's
PriorityClass value (`quota.waiting` resolves it the same way); never a label. It was
admitted when draquota's `QuotaReserved` condition turned True on it (a pod), when its
`status.startTime` says it started (a Job), else when it was created.

Being evicted (no candidate, and left out of the usage a preemptor is judged on, so that a
victim is never chosen twice, by this leader or the next): a pod with a deletionTimestamp,
a pod draquota marked `DisruptionTarget` (reason `PreemptedByDraquota`) whose eviction has
not landed yet (a PodDisruptionBudget refused it, or a replica died in between), a pod
group of which one pod is either, a pod whose Job is suspended (the Job controller deletes
it), and a suspended Job that still has its record.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from quota.cluster import ClusterView, Obj
from quota.livepods import epoch, job_owner, pod_key, pod_uid
from quota.objectkeys import namespace_of
from quota.preemption import Candidate
from quota.usage import Usage
from quota.waiting import group_of
from quota.waitreport import QUOTA_RESERVED

__all__ = [
    "DISRUPTION_TARGET",
    "JOB_PREFIX",
    "PREEMPTED_ANNOTATION",
    "PREEMPTED_BY_DRAQUOTA",
    "Admitted",
    "Workloads",
    "admitted_workloads",
    "is_deleting",
    "is_marked",
]

DISRUPTION_TARGET = "DisruptionTarget"  # the pod condition Kubernetes reads as "to be evicted"
PREEMPTED_BY_DRAQUOTA = "PreemptedByDraquota"  # its reason when draquota preempts the pod
PREEMPTED_ANNOTATION = "draquota.io/preempted"  # on a Job suspended again for a preemptor
JOB_PREFIX = "Job:"  # `webhook.ledger.podusage.job_holder`'s prefix, and a Job candidate's key's


def _mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _conditions(pod: Obj) -> list[Mapping[str, Any]]:
    found = _mapping(pod.get("status")).get("conditions")
    return [_mapping(c) for c in found] if isinstance(found, list) else []


def is_marked(pod: Obj) -> bool:
    """draquota chose the pod as a victim: its DisruptionTarget condition says so."""
    return any(
        c.get("type") == DISRUPTION_TARGET
        and c.get("status") == "True"
        and c.get("reason") == PREEMPTED_BY_DRAQUOTA
        for c in _conditions(pod)
    )


def is_deleting(obj: Obj) -> bool:
    """The object was deleted and is going (a pod terminating, its grace not over)."""
    return bool(_mapping(obj.get("metadata")).get("deletionTimestamp"))


def _suspended(job: Obj) -> bool:
    return _mapping(job.get("spec")).get("suspend") is True


def _pod_admitted_at(pod: Obj) -> float:
    for condition in _conditions(pod):
        if condition.get("type") == QUOTA_RESERVED and condition.get("status") == "True":
            at = epoch(condition.get("lastTransitionTime"))
            if at is not None:
                return at
    return epoch(_mapping(pod.get("metadata")).get("creationTimestamp")) or 0.0


def _job_admitted_at(job: Obj) -> float:
    started = epoch(_mapping(job.get("status")).get("startTime"))
    return started or epoch(_mapping(job.get("metadata")).get("creationTimestamp")) or 0.0


def _pod_priority(pod: Obj) -> int:
    value = _mapping(pod.get("spec")).get("priority")
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def job_priority(job: Obj, priority_classes: Iterable[Obj]) -> int:
    """What the API server gives the Job's pods: its template's PriorityClass value, else the
    globalDefault's, else 0 (as `quota.waiting.waiting_jobs`)."""
    wanted = _mapping(_mapping(_mapping(job.get("spec")).get("template")).get("spec")).get(
        "priorityClassName"
    )
    named, default = None, 0
    for cls in priority_classes:
        value = cls.get("value")
        if not isinstance(value, int) or isinstance(value, bool):
            continue
        if isinstance(wanted, str) and _mapping(cls.get("metadata")).get("name") == wanted:
            named = value
        if cls.get("globalDefault") is True:
            default = value
    return named if named is not None else default


@dataclass(frozen=True)
class Admitted:
    """One admitted workload: its candidate, its kind ("Pod" or "Job"), and its objects (the
    pods, or the Job then the pods of it charged on their own)."""

    candidate: Candidate
    kind: str
    objects: tuple[Obj, ...]

    @property
    def pods(self) -> tuple[Obj, ...]:
        return self.objects[1:] if self.kind == "Job" else self.objects


@dataclass
class Workloads:
    """The admitted workloads of the cluster: those preemption may evict, those being evicted."""

    candidates: list[Admitted] = field(default_factory=list)
    evicting: list[Admitted] = field(default_factory=list)

    def evicted(self, workload: Admitted) -> None:
        """`workload` was chosen as a victim: from now on it is being evicted."""
        kept = [w for w in self.candidates if w is not workload]
        if len(kept) < len(self.candidates):
            self.candidates = kept
            self.evicting.append(workload)

    def of(self, members: Iterable[str]) -> Workloads:
        """Only the workloads charged to these ClusterQueues."""
        names = set(members)
        return Workloads(
            [w for w in self.candidates if w.candidate.cluster_queue in names],
            [w for w in self.evicting if w.candidate.cluster_queue in names],
        )


@dataclass
class _Builder:
    state: ClusterView
    usage: Usage
    jobs: dict[str, tuple[Obj, list[str], list[Obj]]] = field(default_factory=dict)  # by UID
    pods: dict[str, list[tuple[str, Obj]]] = field(default_factory=dict)  # by workload key

    def job(self, holder: str) -> None:
        namespace, name = holder.removeprefix(JOB_PREFIX).split("/", 1)
        job = self.state.get("Job", namespace, name)
        if job is not None:
            self.jobs[pod_uid(job)] = (job, [holder], [])

    def pod(self, holder: str) -> None:
        namespace, name = holder.split("/", 1)
        pod = self.state.get("Pod", namespace, name)
        if pod is None:
            return
        group = group_of(pod)
        key = group[0] if group is not None else pod_key(pod)
        self.pods.setdefault(key, []).append((holder, pod))

    def owning_job(self, pod: Obj) -> Obj | None:
        owner = job_owner(pod)
        if not owner:
            return None
        if owner in self.jobs:
            return self.jobs[owner][0]
        refs = _mapping(pod.get("metadata")).get("ownerReferences") or ()
        for ref in map(_mapping, refs if isinstance(refs, list) else ()):
            if ref.get("uid") == owner:
                namespace = namespace_of(pod)
                job = self.state.get("Job", namespace, str(ref.get("name")))
                return job if job is not None and pod_uid(job) == owner else None
        return None


def admitted_workloads(state: ClusterView, usage: Usage) -> Workloads:
    """Every admitted workload charged in `usage`, grouped and sorted by key."""
    build = _Builder(state, usage)
    holders = sorted(usage.holders())
    for holder in holders:
        if holder.startswith(JOB_PREFIX):
            build.job(holder)
        elif "/" in holder:
            build.pod(holder)
    classes = state.list("PriorityClass")
    out = Workloads()
    loose: dict[str, list[tuple[str, Obj]]] = {}
    for key, members in build.pods.items():
        for holder, pod in members:
            job = build.owning_job(pod)
            if job is not None and pod_uid(job) in build.jobs:
                build.jobs[pod_uid(job)][1].append(holder)
                build.jobs[pod_uid(job)][2].append(pod)
            elif job is not None and _suspended(job):
                out.evicting.append(_pods_workload(usage, key, [(holder, pod)]))
            else:
                loose.setdefault(key, []).append((holder, pod))
    for key, members in sorted(loose.items()):
        workload = _pods_workload(usage, key, members)
        pods = [p for _, p in members]
        stopping = any(is_deleting(p) or is_marked(p) for p in pods)
        (out.evicting if stopping else out.candidates).append(workload)
    for job, job_holders, pods in build.jobs.values():
        workload = _job_workload(usage, job, job_holders, pods, classes)
        (out.evicting if _suspended(job) else out.candidates).append(workload)
    out.candidates.sort(key=lambda w: w.candidate.key)
    out.evicting.sort(key=lambda w: w.candidate.key)
    return out


def _cluster_queue(usage: Usage, holders: Iterable[str]) -> str:
    queues = {c.cluster_queue for h in holders if (c := usage.charge_of(h)) is not None}
    return min(queues) if queues else ""


def _pods_workload(usage: Usage, key: str, members: list[tuple[str, Obj]]) -> Admitted:
    holders = tuple(h for h, _ in members)
    pods = tuple(p for _, p in members)
    candidate = Candidate(
        key,
        holders,
        _cluster_queue(usage, holders),
        max(_pod_priority(p) for p in pods),
        max(_pod_admitted_at(p) for p in pods),
    )
    return Admitted(candidate, "Pod", pods)


def _job_workload(
    usage: Usage, job: Obj, holders: list[str], pods: list[Obj], classes: Iterable[Obj]
) -> Admitted:
    candidate = Candidate(
        f"{JOB_PREFIX}{pod_key(job)}",
        tuple(holders),
        _cluster_queue(usage, holders[:1]),
        job_priority(job, classes),
        _job_admitted_at(job),
    )
    return Admitted(candidate, "Job", (job, *pods))
