"""Where a workload just submitted to a queueing ClusterQueue will stand, and why it waits.

A pod created into a ClusterQueue with `whenFull: Queue` is allowed gated; the queueing
controller's next pass (`webhook.queueing.controller.QueueController`) admits it or leaves it
waiting with a message. The user who runs `kubectl create` should not have to wait for that pass to
learn the answer: `wait_at_submit` plays the pass over the queue's waiting workloads in the
controller's order (`quota.waiting.waits_in_order`), admitting each one that fits against
usage plus what the workloads before it took, exactly as the controller does: a pod after
the other, a pod group all or nothing (its message in the group's numbers,
`quota.decision.conclude_group`), a Job whole (`quota.decision.conclude_job`). A workload
that already holds its charge (admitted by a pass that has not ungated it yet) only waits
for that pass to finish. tests/webhook/admission/test_submitwait.py checks against the controller
itself that both give the same answer.

The cost is bounded by the workloads waiting in that one ClusterQueue: the caller passes
them, prepared (`prepared_of`), and nothing else of the cluster is read.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from quota.charge import Charge, FlavorResource
from quota.cluster import Obj
from quota.decision import Prepared, conclude, conclude_group, conclude_job
from quota.livepods import pod_key
from quota.quantity import sat_add
from quota.queues import ClusterQueue
from quota.usage import Usage
from quota.verdict import Decision
from quota.waiting import Wait, Waiting, waits_in_order

__all__ = ["wait_at_submit", "wait_warning"]

PrepareOf = Callable[[Obj], "Prepared | Decision"]


class _Added(Usage):
    """`base` with the charges of this pass added on top; `base` is never changed (a ledger may
    hand the same usage to the next admission of its batch)."""

    def __init__(self, base: Usage) -> None:
        super().__init__()
        self._base = base

    def charge_of(self, holder: str) -> Charge | None:
        return self._charges.get(holder) or self._base.charge_of(holder)

    def holders(self) -> set[str]:
        return self._base.holders() | set(self._charges)

    def of(self, cluster_queue: str) -> dict[FlavorResource, int]:
        total = dict(self._base.of(cluster_queue))
        added = [c for c in self._charges.values() if c.cluster_queue == cluster_queue]
        if not added:
            return total
        held = self._base.shared_claims(cluster_queue)
        shared: dict[tuple[str, FlavorResource], int] = {}  # a shared claim counts once
        for charge in added:
            for key, value in charge.flavor_usage().items():
                total[key] = sat_add(total.get(key, 0), value)
            for claim, amounts in charge.shared_flavor_usage().items():
                for key, value in amounts.items():
                    if (claim, key) not in held:
                        shared[(claim, key)] = max(shared.get((claim, key), 0), value)
        for (_, key), value in sorted(shared.items()):
            total[key] = sat_add(total.get(key, 0), value)
        return dict(sorted(total.items()))

    def shared_claims(self, cluster_queue: str) -> set[tuple[str, FlavorResource]]:
        return self._base.shared_claims(cluster_queue) | super().shared_claims(cluster_queue)

    def absorb(self, other: _Added) -> None:
        """Keep what `other`, a trial on top of this one, added."""
        self._charges.update(other._charges)


def _why(decision: Decision) -> str:
    return decision.shortfall or decision.message


def _holds(workload: Waiting, usage: Usage, job_holder: Callable[[str], str]) -> bool:
    if workload.kind == "Job":
        return usage.charge_of(job_holder(workload.key)) is not None
    return all(usage.charge_of(pod_key(pod)) is not None for pod in workload.pods)


def _try(
    workload: Waiting, prepared_of: PrepareOf, admitted: _Added, job_holder: Callable[[str], str]
) -> str:
    """Admit `workload` on top of `admitted` as the controller would: "" or why it waits."""
    if workload.kind == "Job":
        (job,) = workload.pods
        decision = conclude_job(prepared_of(job), admitted)
        if not decision.allowed or decision.charge is None:
            return _why(decision)
        admitted.add(job_holder(workload.key), decision.charge)
        return ""
    trial = _Added(admitted)
    for pod in workload.pods:
        decision = conclude(prepared_of(pod), trial, enqueue=False)
        if not decision.allowed or decision.charge is None:
            return _group_why(workload, prepared_of, admitted) or _why(decision)
        trial.add(pod_key(pod), decision.charge)
    admitted.absorb(trial)
    return ""


def _group_why(workload: Waiting, prepared_of: PrepareOf, usage: Usage) -> str:
    """What a group of pods lacks as a whole ("" for a single pod)."""
    if len(workload.pods) < 2:
        return ""
    prepared = [prepared_of(pod) for pod in workload.pods]
    pods = [p for p in prepared if isinstance(p, Prepared)]
    if len(pods) < len(prepared):
        return ""
    return conclude_group(pods, usage, workload.subject).shortfall


def wait_at_submit(
    queue: ClusterQueue,
    workloads: Sequence[Waiting],
    key: str,
    prepared_of: PrepareOf,
    usage: Usage,
    job_holder: Callable[[str], str],
) -> Wait | None:
    """Why the workload `key` among `workloads` (those waiting in `queue`, in queue order) waits
    after the controller's next pass, and where it then stands; None when that pass admits it.

    `prepared_of` gives the prepared decision of a waiting pod or Job, `usage` is what the
    cluster holds now (it is not changed), `job_holder` names the usage holder of a Job
    admitted whole."""

    def admit(workload: Waiting) -> str:
        if _holds(workload, usage, job_holder):
            return ""
        prepared = prepared_of(workload.pods[0]) if len(workload.pods) == 1 else None
        alike = _alike(prepared)
        if alike in short and workload.key != key:
            return "(as before)"  # a message nobody reads: only `key`'s is returned
        why = _try(workload, prepared_of, admitted, job_holder)
        if why and alike is not None:
            short[alike] = prepared  # kept alive: its ids are not reused during the pass
        return why

    admitted = _Added(usage)
    # What did not fit once does not fit later in the pass, which only adds usage: a queue
    # of many alike pods is decided once per shape, not once per pod.
    short: dict[tuple[int, ...], Prepared | Decision | None] = {}
    return waits_in_order(queue, workloads, admit).get(key)


def _alike(prepared: Prepared | Decision | None) -> tuple[int, ...] | None:
    """What makes a single pod or a Job fit or not: its demand and flavor answers, which
    prepared decisions of alike objects share (`Prepared.of`); None for a group."""
    if not isinstance(prepared, Prepared):
        return None
    return (id(prepared.charged), id(prepared.answers), prepared.workload.pods)


def wait_warning(wait: Wait) -> str:
    """The warning `kubectl create` prints for a workload that waits: `waits in ClusterQueue
    research, position 2: waiting for quota: ...`."""
    where = f"waits in ClusterQueue {wait.cluster_queue}"
    if wait.position:
        where += f", position {wait.position}"
    return f"{where}: {wait.why}"
