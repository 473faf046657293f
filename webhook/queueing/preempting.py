"""Preemption in Queue mode, carried out: when a waiting workload does not fit and its
ClusterQueue's `spec.preemption` allows it, the admitted workloads of its cohort it evicts.

Victims are chosen by `quota.preemption.choose_victims` (Kueue's classic preemption) among the
admitted workloads of the preemptor's cohort, or of its ClusterQueue when it has none
(`webhook.queueing.admittedworkloads`); nothing outside them is ever a candidate. The workloads
being evicted already are no candidates and are left out of the usage the preemptor is judged on:
when it fits once they are gone, nobody more is evicted, so a victim is never evicted twice
and a new leader, judging the same objects, chooses the same or nothing more.

A victim pod is marked first (`DisruptionTarget`, reason `PreemptedByDraquota`, with Kueue's
message naming the preemptor and the ClusterQueue that reclaimed, and an Event `Preempted`),
all the pods of a group before any is evicted, then evicted through the Eviction API. A
marked pod whose eviction did not land (a PodDisruptionBudget refused it) is evicted again
on a later pass, and the refusal is shown in the preemptor's waiting message. A victim Job
is suspended again, marked with PREEMPTED_ANNOTATION (its pods go, the Job controller
deletes them), and its record released: its terminating pods are then charged on their own
until their grace ends, and it waits again in its queue.

The preemptor waits meanwhile (`Pending the preemption of N workload(s)`, Kueue's words) and
is admitted by a later pass once the victims' charges are released. What it will take is
held for it (`with_holds`): a preemptor later in the same pass does not count on the same
victims, and a workload of another ClusterQueue does not take the freed quota first (holds
of a former pass count for other queues until the preemptor is admitted or gives up). At
most ATTEMPTS_PER_PASS waiting workloads are judged for preemption per pass, in queue order.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from quota.charge import Charge, FlavorResource
from quota.cluster import ClusterView, Obj
from quota.livepods import epoch, job_owner, pod_key, pod_uid
from quota.preemption import (
    IN_CLUSTER_QUEUE,
    IN_COHORT_RECLAIM_WHILE_BORROWING,
    IN_COHORT_RECLAMATION,
    Victim,
    choose_victims,
)
from quota.queuetable import QueueTable
from quota.usage import Usage
from quota.waiting import Waiting
from webhook.edge.metrics import Metrics
from webhook.ledger import Ledger
from webhook.queueing.admittedworkloads import (
    Admitted,
    Workloads,
    admitted_workloads,
    is_deleting,
    is_marked,
)

__all__ = [
    "Evictor",
    "Plan",
    "Preemption",
    "Trial",
    "evict_pods",
    "evict_victim",
    "evict_workload",
    "plan_preemption",
    "preemption_message",
    "resume_evictions",
]

log = logging.getLogger("draquota.queueing")

# What a waiting workload's charges would be in a usage; None when it does not fit there.
Trial = Callable[[Usage], tuple[Charge, ...] | None]

# Kueue's words for its reasons (its HumanReadablePreemptionReasons).
HUMAN_REASONS = {
    IN_CLUSTER_QUEUE: "prioritization in the ClusterQueue",
    IN_COHORT_RECLAMATION: "reclamation within the cohort",
    IN_COHORT_RECLAIM_WHILE_BORROWING: "reclamation within the cohort while borrowing",
}
RESUMED = "Preempted by draquota; its eviction is resumed"
# Workloads judged for preemption per pass: each costs up to two decisions per candidate, and
# a long BestEffortFIFO queue would judge every waiting workload on every pass.
ATTEMPTS_PER_PASS = 32
_HELD = "\0held/"  # holders of what a preemptor will take (a NUL never starts a pod key)


class Evictor(Protocol):
    """Where the controller's evictions go: the pods and Jobs themselves, in a live cluster."""

    def mark(self, pod: Obj, message: str) -> bool:
        """Set the pod's DisruptionTarget condition (reason PreemptedByDraquota) and an Event
        `Preempted` saying `message`; False if that did not land (True if the pod is gone)."""
        ...

    def evict(self, pod: Obj) -> str:
        """Evict the pod through the Eviction API: "" when it is evicted or gone, else why not
        (a PodDisruptionBudget refused it, or the request failed)."""
        ...

    def suspend(self, job: Obj, message: str) -> bool:
        """Suspend the Job again, marked preempted, with an Event `Preempted`; False if that
        did not land."""
        ...


def preemption_message(preemptor: Waiting, reason: str) -> str:
    """What a victim is told, in Kueue's wording, naming the preemptor and its ClusterQueue."""
    obj = preemptor.pods[0]
    uid = pod_uid(obj) or "UNKNOWN"
    job = uid if preemptor.kind == "Job" else (job_owner(obj) or "UNKNOWN")
    return (
        f"Preempted to accommodate a workload (UID: {uid}, JobUID: {job}) due to "
        f"{HUMAN_REASONS.get(reason, 'UNKNOWN')} by ClusterQueue {preemptor.cluster_queue}; "
        f"preemptor: {preemptor.subject}"
    )


def _needs(charges: Iterable[Charge]) -> frozenset[FlavorResource]:
    keys: set[FlavorResource] = set()
    for charge in charges:
        keys.update(charge.flavor_usage())
        for amounts in charge.shared_flavor_usage().values():
            keys.update(amounts)
    return frozenset(keys)


def _without(usage: Usage, holders: Iterable[str]) -> Usage:
    out = usage.copy()
    for holder in holders:
        out.remove(holder)
    return out


def _holds_needed(usage: Usage, workload: Admitted, needs: frozenset[FlavorResource]) -> bool:
    charges = [c for h in workload.candidate.holders if (c := usage.charge_of(h)) is not None]
    return bool(_needs(charges) & needs)


@dataclass(frozen=True)
class Plan:
    """A preemptor's plan: the victims to evict now, the workloads it waits for that are being
    evicted already, and its charges once they are all gone."""

    victims: tuple[Victim, ...] = ()
    evicting: tuple[Admitted, ...] = ()
    held: tuple[Charge, ...] = ()

    @property
    def pending(self) -> int:
        """How many workloads it waits for."""
        return len(self.victims) + len(self.evicting)


def plan_preemption(
    preemptor: Waiting, trial: Trial, table: QueueTable, cohort: Workloads, usage: Usage
) -> Plan:
    """What `preemptor` evicts of `cohort` (its cohort's workloads) to fit in `usage`.

    Nothing when it fits neither once the workloads being evicted are gone nor by evicting
    more; no new victim when it fits once they are gone."""
    queue = table.queues[preemptor.cluster_queue]
    needs = _needs(trial(Usage()) or ())
    evicting = tuple(w for w in cohort.evicting if _holds_needed(usage, w, needs))
    base = _without(usage, (h for w in cohort.evicting for h in w.candidate.holders))
    charges = trial(base)
    if charges is not None:
        return Plan((), evicting, charges) if evicting else Plan()
    created = epoch(preemptor.created) or 0.0
    candidates = [w.candidate for w in cohort.candidates]

    def fits(view: Usage) -> bool:
        return trial(view) is not None

    victims = choose_victims(
        queue, preemptor.priority, created, fits, needs, table, base, candidates
    )
    if not victims:
        return Plan()
    after = _without(base, (h for v in victims for h in v.candidate.holders))
    return Plan(victims, evicting, trial(after) or ())


@dataclass
class _Pass:
    """What one pass knows: its view, the admitted workloads (built when first needed)."""

    state: ClusterView | None = None
    table: QueueTable | None = None
    workloads: Workloads | None = None
    finished: set[str] = field(default_factory=set)  # evicting workloads resumed this pass
    attempts: int = 0


class Preemption:
    """The queueing controller's preemption: plans, evictions, and what preemptors hold."""

    def __init__(self, ledger: Ledger, evictor: Evictor, metrics: Metrics | None = None) -> None:
        self.ledger = ledger
        self.evictor = evictor
        self.metrics = metrics
        self._pass = _Pass()
        # workload key -> (its ClusterQueue, what it will take): this pass's, the former pass's
        self._fresh: dict[str, tuple[str, tuple[Charge, ...]]] = {}
        self._former: dict[str, tuple[str, tuple[Charge, ...]]] = {}
        self.chosen: dict[str, tuple[Victim, ...]] = {}  # preemptor key -> this pass's victims

    def begin(self, state: ClusterView, table: QueueTable, waiting: Iterable[str]) -> None:
        """A new pass over `state`; `waiting` are the keys of the workloads still waiting."""
        keys = set(waiting)
        self._former = {k: v for k, v in self._fresh.items() if k in keys}
        self._fresh = {}
        self._pass = _Pass(state, table)
        self.chosen = {}

    def with_holds(self, usage: Usage, workload: Waiting) -> Usage:
        """`usage` with what other preemptors will take: those of this pass, and those of the
        former pass in other ClusterQueues; a copy when there are any (a ledger may decide a
        batch of admissions on one view)."""
        held = [
            (f"{_HELD}{key}/{i}", charge)
            for key, (queue, charges) in [*self._former.items(), *self._fresh.items()]
            if key != workload.key and (key in self._fresh or queue != workload.cluster_queue)
            for i, charge in enumerate(charges)
        ]
        if not held:
            return usage
        view = usage.copy()
        for holder, charge in held:
            view.add(holder, charge)
        return view

    def admitted(self, workload: Waiting) -> None:
        self._fresh.pop(workload.key, None)
        self._former.pop(workload.key, None)

    def attempt(self, workload: Waiting, trial: Trial, why: str) -> str:
        """Preempt for a workload that does not fit (`why`): the message it waits with."""
        table, state = self._pass.table, self._pass.state
        queue = table.queues.get(workload.cluster_queue) if table is not None else None
        if table is None or state is None or queue is None or not queue.preemption.enabled:
            return why
        if self._pass.attempts >= ATTEMPTS_PER_PASS:
            return why  # tried on a later pass, once those before it are admitted
        self._pass.attempts += 1
        if self._pass.workloads is None:
            self._pass.workloads = admitted_workloads(state, self.ledger.usage())
        cohort = self._pass.workloads.of(m.name for m in table.members(queue))
        usage = self.ledger.usage()
        for key, (_, charges) in self._fresh.items():
            for i, charge in enumerate(charges):
                if key != workload.key:
                    usage.add(f"{_HELD}{key}/{i}", charge)
        plan = plan_preemption(workload, trial, table, cohort, usage)
        if not plan.pending:
            self.admitted(workload)  # holds nothing
            return why
        refused = self._resume(plan.evicting) + self._evict(workload, plan.victims)
        if plan.victims:
            self.chosen[workload.key] = plan.victims
        self._fresh[workload.key] = (workload.cluster_queue, plan.held)
        text = f"Pending the preemption of {plan.pending} workload(s)"
        return f"{text} (eviction refused: {'; '.join(refused)})" if refused else text

    def _evict(self, preemptor: Waiting, victims: Sequence[Victim]) -> list[str]:
        """Evict the victims; why an eviction did not land, per victim that did not."""
        workloads = self._pass.workloads
        assert workloads is not None
        found = {w.candidate.key: w for w in workloads.candidates}
        refused: list[str] = []
        for victim in victims:
            workload = found[victim.candidate.key]
            landed, why = evict_victim(
                self.evictor, self.ledger, self.metrics, preemptor, victim, workload, "preempted"
            )
            refused += why
            if landed:
                workloads.evicted(workload)
                self._pass.finished.add(workload.candidate.key)
        return refused

    def _resume(self, evicting: Sequence[Admitted]) -> list[str]:
        """Evict again the pods of workloads being evicted that are still not deleted (their
        eviction was refused, or a former leader stopped midway), once per pass."""
        todo = [w for w in evicting if w.candidate.key not in self._pass.finished]
        self._pass.finished.update(w.candidate.key for w in todo)
        return resume_evictions(self.evictor, todo)


def evict_victim(
    evictor: Evictor,
    ledger: Ledger,
    metrics: Metrics | None,
    preemptor: Waiting,
    victim: Victim,
    workload: Admitted,
    verb: str,
) -> tuple[bool, list[str]]:
    """Evict one victim for `preemptor` (`evict_workload`), counted in
    `draquota_preempted_workloads_total` and logged as `verb` once it landed."""
    message = preemption_message(preemptor, victim.reason)
    landed, refused = evict_workload(evictor, ledger, workload, message)
    if landed:
        if metrics is not None:
            metrics.preempted(victim.candidate.cluster_queue, victim.reason)
        log.info(
            "%s %s of ClusterQueue %s for %s (%s)",
            verb,
            victim.candidate.key,
            victim.candidate.cluster_queue,
            preemptor.subject,
            victim.reason,
        )
    return landed, refused


def evict_workload(
    evictor: Evictor, ledger: Ledger, workload: Admitted, message: str
) -> tuple[bool, list[str]]:
    """Evict one victim: a Job suspended again and its record released, or its pods marked
    then evicted. (False: a Job that was not suspended), and why what did not land."""
    if workload.kind == "Job":
        job = workload.objects[0]
        if not evictor.suspend(job, message):
            return False, [f"job {pod_key(job)} not suspended"]
        ledger.release([pod_uid(job)])
        return True, []
    return True, evict_pods(evictor, workload.pods, message)


def evict_pods(evictor: Evictor, pods: Sequence[Obj], message: str) -> list[str]:
    """Mark every pod, then evict them: a group is evicted whole, even across a crash. Why an
    eviction did not land, per pod."""
    marked = [p for p in pods if is_marked(p) or evictor.mark(p, message)]
    refused = []
    for pod in marked:
        why = evictor.evict(pod)
        if why:
            log.info("eviction of pod %s refused: %s", pod_key(pod), why)
            refused.append(f"pod {pod_key(pod)}: {why}")
    if len(marked) < len(pods):
        refused.append(f"{len(pods) - len(marked)} pod(s) not marked")
    return refused


def resume_evictions(evictor: Evictor, evicting: Iterable[Admitted]) -> list[str]:
    """Evict again the marked pods of workloads being evicted that are not deleting yet (their
    eviction was refused, or a replica stopped midway); a Job's pods are the Job controller's
    to delete, and an unmarked workload is deleting by someone else's hand."""
    refused: list[str] = []
    for workload in evicting:
        if workload.kind == "Job" or not any(is_marked(p) for p in workload.pods):
            continue
        left = [p for p in workload.pods if not is_deleting(p)]
        refused += evict_pods(evictor, left, RESUMED)
    return refused
