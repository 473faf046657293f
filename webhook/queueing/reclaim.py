"""Reclaim in Reject mode: a pod denied for quota its cohort borrowed is admitted by evicting
the borrowers, when its ClusterQueue's `spec.preemption.reclaimWithinCohort` allows it.

Only reclaim: the victims are chosen by `quota.preemption.choose_victims` with the queue's
policy cut down to reclaimWithinCohort (withinClusterQueue and borrowWithinCohort Never),
so they are workloads of other ClusterQueues of its cohort that use more than their nominal
quota, never of its own queue, never outside the cohort; and the pod must then fit within
its queue's nominal quota (`quota.preemption` reclaims only then; the record's check here
asks it again), so the lender never goes above its nominal quota.

/mutate and dry runs decide as /validate will and evict nothing: the answer is admitted,
with a warning naming what would be evicted. /validate plans on the current usage without
the workloads being evicted already (`webhook.queueing.admittedworkloads`; `plan_preemption` as in
Queue mode): when the pod fits once they are gone, nobody more is chosen, so a create
retried after a replica died between the evictions and the record evicts nobody twice and
loses no preemptor. Otherwise it marks and evicts the victims first (the queue controller's
`Evictor`; its evictions are counted in `draquota_preempted_workloads_total`), then writes
the pod's record with the victims' and the evicting workloads' holders left out of the
usage. A refused or failed eviction denies the pod (the client retries; a marked pod is
evicted again then).

The victims' charges count until their grace ends, as every terminating pod's: meanwhile
the cohort holds both the victims and the preemptor (above the sum of its nominal quotas),
and no other admission can take that overlap, since every other decision counts both.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from quota.charge import Charge, FlavorResource
from quota.cluster import Obj
from quota.decision import Prepared, conclude
from quota.livepods import pod_key
from quota.preemption import Victim
from quota.preemptionpolicy import NEVER
from quota.queues import ClusterQueue
from quota.usage import Usage
from quota.verdict import Decision, Verdict
from quota.waiting import Waiting
from webhook.edge.metrics import Metrics
from webhook.edge.review import AdmissionRequest
from webhook.ledger import Ledger
from webhook.queueing.admittedworkloads import Admitted, admitted_workloads, job_priority
from webhook.queueing.preempting import (
    Evictor,
    Plan,
    evict_victim,
    plan_preemption,
    resume_evictions,
)
from webhook.store.backend import Backend

__all__ = ["Reclaim", "reclaim_only"]


Evaluate = Callable[[Usage], Decision]
_PROBE = "\0reclaim/"  # holders of the preemptor's charges while it is judged


def reclaim_only(queue: ClusterQueue) -> ClusterQueue:
    """`queue` with only its reclaimWithinCohort policy: nothing of its own queue, and no
    borrowing while evicting."""
    policy = dataclasses.replace(
        queue.preemption,
        within_cluster_queue=NEVER,
        borrow_within_cohort=NEVER,
        max_priority_threshold=None,
    )
    return dataclasses.replace(queue, preemption=policy)


def _within_nominal(queue: ClusterQueue, usage: Usage, charges: Iterable[Charge]) -> bool:
    """Whether `queue`, holding `charges` besides `usage`, stays within its nominal quota of
    every flavor-resource they use."""
    probe = usage.copy()
    keys: set[FlavorResource] = set()
    for i, charge in enumerate(charges):
        probe.add(f"{_PROBE}{i}", charge)
        keys.update(charge.flavor_usage())
        for amounts in charge.shared_flavor_usage().values():
            keys.update(amounts)
    used = probe.of(queue.name)
    return all(used.get(key, 0) <= _nominal(queue, key) for key in keys)


def _nominal(queue: ClusterQueue, key: FlavorResource) -> int:
    quota = queue.quota(key)
    return quota.nominal if quota is not None else 0


def _without(usage: Usage, holders: Iterable[str]) -> Usage:
    out = usage.copy()
    for holder in holders:
        out.remove(holder)
    return out


def _mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _preemptor(pod: Obj, queue: str, priority_classes: Iterable[Obj]) -> Waiting:
    """The pod (or Job) as a preemptor: a pod's priority only from `spec.priority`, which the
    API server sets from the PriorityClass (and refuses a pod that sets another value itself);
    a Job's from its template's PriorityClass, as its pods will get it."""
    if pod.get("kind") == "Job":
        priority: Any = job_priority(pod, priority_classes)
    else:
        priority = _mapping(pod.get("spec")).get("priority")
    created = _mapping(pod.get("metadata")).get("creationTimestamp")
    return Waiting(
        pod_key(pod),
        queue,
        priority if isinstance(priority, int) and not isinstance(priority, bool) else 0,
        created if isinstance(created, str) else "",
        (pod,),
    )


def _warning(dry_run: bool, victims: Sequence[Victim], evicting: Sequence[Admitted]) -> str:
    """`reclaimed from ClusterQueue ml: evicted ml/a, ml/b` (dry run: `would reclaim ...`);
    with no new victim, the workloads being evicted already that it counts on."""
    by_queue: dict[str, list[str]] = {}
    for candidate in [v.candidate for v in victims] or [w.candidate for w in evicting]:
        by_queue.setdefault(candidate.cluster_queue, []).append(candidate.key)
    verb = ("evicts" if dry_run else "evicted") if victims else "being evicted already:"
    parts = [f"ClusterQueue {q}: {verb} {', '.join(keys)}" for q, keys in sorted(by_queue.items())]
    return ("would reclaim from " if dry_run else "reclaimed from ") + "; ".join(parts)


class Reclaim:
    """Reject-mode reclaim for the Admission use case (see the module docstring)."""

    def __init__(
        self, backend: Backend, ledger: Ledger, evictor: Evictor, metrics: Metrics | None = None
    ) -> None:
        self.backend = backend
        self.ledger = ledger
        self.evictor = evictor
        self.metrics = metrics

    @staticmethod
    def applies(prepared: Prepared | Decision, denied: Decision) -> bool:
        """A pod created in a Reject-mode queue of a cohort that may reclaim, denied for
        quota."""
        if isinstance(prepared, Decision) or denied.reason != "QuotaExceeded":
            return False
        queue = prepared.route.queue
        return (
            prepared.workload.kind in ("Pod", "Job")
            and prepared.operation == "CREATE"
            and not queue.queues
            and queue.cohort is not None
            and queue.preemption.reclaim_within_cohort != NEVER
        )

    def admit(
        self,
        prepared: Prepared,
        pod: Obj,
        evaluate: Evaluate,
        record: Callable[[Evaluate], Decision],
        dry_run: bool,
        denied: Decision,
        req: AdmissionRequest,
    ) -> Decision:
        """The pod's decision once it reclaims; `denied` when reclaiming cannot make it fit.

        `evaluate` is its decision in a usage; `record(evaluate)` asks the ledger (and writes
        the record unless `dry_run`). The warning goes with the answer to /validate, and to
        /mutate of a dry run only (kubectl shows each distinct warning of either answer)."""
        if not dry_run:
            self.ledger.ensure_elected()  # evictions only by the replica that holds quota
        queue = reclaim_only(prepared.route.queue)
        table = dataclasses.replace(
            prepared.table, queues={**prepared.table.queues, queue.name: queue}
        )
        view = self.backend.state.snapshot()
        preemptor = _preemptor(pod, queue.name, view.list("PriorityClass"))
        usage = self.ledger.usage()
        workloads = admitted_workloads(view, usage)
        cohort = workloads.of(m.name for m in table.members(queue))
        plan = plan_preemption(preemptor, self._trial(prepared, queue), table, cohort, usage)
        if not plan.pending:
            return denied
        if not dry_run:
            refused = resume_evictions(self.evictor, plan.evicting)
            refused += self._evict(preemptor, plan, cohort.candidates)
            if refused:
                return _refused(denied, refused)
        gone = [h for v in plan.victims for h in v.candidate.holders]
        gone += [h for w in plan.evicting for h in w.candidate.holders]

        def without_victims(view: Usage) -> Decision:
            rest = _without(view, gone)
            decision = evaluate(rest)
            if decision.charge is not None and not _within_nominal(queue, rest, [decision.charge]):
                return denied
            return decision

        decision = record(without_victims)
        job = prepared.workload.kind == "Job"  # its pods reclaim, one by one, as they come
        if not decision.allowed or (dry_run and not req.dry_run and not job):
            return decision
        warning = ("its pods " if job else "") + _warning(dry_run, plan.victims, plan.evicting)
        return dataclasses.replace(decision, warnings=(*decision.warnings, warning))

    @staticmethod
    def _trial(
        prepared: Prepared, queue: ClusterQueue
    ) -> Callable[[Usage], tuple[Charge, ...] | None]:
        """The pod's charge in a usage, when it fits there within its nominal quota; a Job's
        pods' charges, each judged as created after the one before (they reclaim so)."""
        workload = prepared.workload
        one = prepared
        if workload.kind == "Job":
            one = prepared.of(dataclasses.replace(workload, kind="Pod", pods=1))
        count = max(1, workload.pods) if workload.kind == "Job" else 1

        def trial(usage: Usage) -> tuple[Charge, ...] | None:
            held, charges = usage.copy(), []
            for i in range(count):
                decision = conclude(one, held)
                if not decision.allowed or decision.charge is None:
                    return None
                charges.append(decision.charge)
                held.add(f"{_PROBE}trial/{i}", decision.charge)
            return tuple(charges) if _within_nominal(queue, usage, charges) else None

        return trial

    def _evict(self, preemptor: Waiting, plan: Plan, found: Sequence[Admitted]) -> list[str]:
        """Evict the plan's victims; why an eviction did not land, per victim that did not."""
        by_key = {w.candidate.key: w for w in found}
        refused: list[str] = []
        for victim in plan.victims:
            workload = by_key[victim.candidate.key]
            refused += evict_victim(
                self.evictor, self.ledger, self.metrics, preemptor, victim, workload, "reclaimed"
            )[1]
        return refused


def _refused(denied: Decision, refused: Sequence[str]) -> Decision:
    message = f"{denied.message}: reclaiming it failed: {'; '.join(refused)}; submit again"
    return dataclasses.replace(denied, verdict=Verdict.DENIED, message=message, charge=None)
