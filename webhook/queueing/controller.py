"""The queueing controller: admits pods and Jobs waiting in ClusterQueues with `whenFull: Queue`.

One replica runs it at a time (the caller's `leading`, a Lease in a live cluster).
Each pass takes the gated pods and suspended Jobs of the cluster view, orders them per
ClusterQueue
(`quota.waiting`), and admits what fits through the same ledger as the validating
webhook: the same decision, the same record keyed by the pod's UID, the same
compare-and-swap on the QuotaLedger, so queued admissions and webhook admissions
never over-commit together. A pod group is admitted all or nothing: it is decided as a
whole in memory first, and only a group that fits has its pods' records written, one by
one, released again if one no longer fits (usage changed meanwhile), before any gate is
removed: a group that waits writes nothing, however many passes it waits (a Job that
does not fit neither). Only then does the writer add each pod's flavor nodeSelector and
remove the gate (the validating webhook lets only a recorded pod lose its gate). A
Job is recorded as one charge for the pods it runs at once, under the Job's UID, then
unsuspended with its flavor's nodeSelector in its pod template; its pods, which only
the Job controller may create, are charged by that record until the Job finishes or is
deleted.

A record whose gate removal failed stays: the pod is gated and charged, and the
next pass admits it again (the ledger leaves its own record out of the usage it
decides on), so a crash between the two steps loses nothing.

A workload that does not fit, in a ClusterQueue whose `spec.preemption` allows it, may evict
admitted workloads of its cohort (`webhook.queueing.preempting`, through an `Evictor`). A Job
suspended again for a preemptor (marked with PREEMPTED_ANNOTATION) whose record is still there lost
it to a crash midway: its record is released, never started again.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Protocol

from certs.periodic import Periodic
from quota.charge import Charge
from quota.cluster import Obj
from quota.decision import Prepared, conclude, conclude_job, prepare
from quota.errors import DraquotaError
from quota.flavorfilter import Placer
from quota.livepods import epoch, pod_key, pod_uid
from quota.queuedemand import node_selector_of
from quota.queuetable import QueueTable, queue_table
from quota.settings import Settings
from quota.together import Member, conclude_in_turn
from quota.usage import Usage
from quota.verdict import Decision
from quota.waiting import Waiting, admit_in_order, waiting_in
from quota.workloads import as_workload
from webhook.admission.jobpods import JobPods
from webhook.edge.metrics import Metrics
from webhook.ledger import Ledger
from webhook.ledger.podusage import job_holder
from webhook.queueing.admittedworkloads import PREEMPTED_ANNOTATION
from webhook.queueing.gatedpods import GatedPods
from webhook.queueing.preempting import Evictor, Preemption, Trial
from webhook.store.backend import Backend

__all__ = ["Evictor", "PodWriter", "QueueController", "QueuePass"]

log = logging.getLogger("draquota.queueing")


class PodWriter(Protocol):
    """Where the controller's answers go: the pods themselves, in a live cluster."""

    def admit(self, pod: Obj, node_selector: Mapping[str, str], message: str) -> bool:
        """Show the pod's quota reserved, add the nodeSelector and remove draquota's gate; False if
        that did not all land (the pod is gone or replaced, or a write failed)."""
        ...

    def start(self, job: Obj, node_selector: Mapping[str, str], message: str) -> bool:
        """Add the nodeSelector to the Job's pod template and unsuspend it; False if the Job is
        gone or changed."""
        ...

    def wait(self, obj: Obj, message: str) -> bool:
        """Show the user of a pod or Job why it waits; False if that did not land (the pod is
        gone, admitted meanwhile, or the write failed), so that a later pass tries again."""
        ...


@dataclass
class QueuePass:
    """What one pass did: admitted pods by key, the message of every waiting workload, and the
    victims each preemptor evicted (`ns/name (reason)`, a Job's key `Job:ns/name`)."""

    admitted: list[str] = field(default_factory=list)
    waiting: dict[str, str] = field(default_factory=dict)
    preempted: dict[str, list[str]] = field(default_factory=dict)


class QueueController:
    """Admits waiting pods in queue order; `run_once` is one pass, `start` runs them every
    `interval` seconds while `leading()` and the cluster view is ready."""

    def __init__(
        self,
        backend: Backend,
        ledger: Ledger,
        settings: Settings,
        placer: Placer | None,
        writer: PodWriter,
        leading: Callable[[], bool] = lambda: True,
        interval: float = 1.0,
        wall: Callable[[], float] = time.time,
        metrics: Metrics | None = None,
        evictor: Evictor | None = None,
    ) -> None:
        self.backend = backend
        self.ledger = ledger
        self.settings = settings
        self.placer = placer
        self.writer = writer
        self.leading = leading
        self.wall = wall
        self.metrics = metrics
        self.passes = 0
        # condition writes per pass: when one admission moves a long queue up, the positions
        # of the rest are brought up to date over the next passes, not in one burst
        self.max_writes = 100
        self._writes = 0
        self._shown: dict[str, str] = {}  # uid -> the waiting message the API server shows
        self._gated = GatedPods(backend.state)
        self._jobs = JobPods(backend, ledger, settings)
        self._passes = Periodic("queueing", interval, self._pass)
        # without an evictor (a what-if that evicts nothing), nothing is preempted
        self._preemption = Preemption(ledger, evictor, metrics) if evictor is not None else None

    def start(self) -> None:
        self._passes.start()

    def stop(self) -> None:
        self._passes.stop()

    def _pass(self) -> None:
        if not self.leading() or not self.backend.ready()[0]:
            self._shown.clear()  # a new leader writes every message once
            return
        self.run_once()

    def run_once(self) -> QueuePass:
        """Admit what fits, in order, in every queueing ClusterQueue."""
        state = self.backend.state.snapshot()
        table = queue_table(state, self.settings)
        done = QueuePass()
        self._writes = 0
        waiting = waiting_in(state, table, self.wall(), self._gated.pods())
        uids = {pod_uid(p) for workloads in waiting.values() for w in workloads for p in w.pods}
        self._shown = {uid: m for uid, m in self._shown.items() if uid in uids}
        if self._preemption is not None:
            keys = (w.key for workloads in waiting.values() for w in workloads)
            self._preemption.begin(state, table, keys)
        for name, workloads in sorted(waiting.items()):
            workloads = [w for w in workloads if not self._release_recorded(w, table, done)]
            workloads = [w for w in workloads if not self._under_job(w, table, done)]
            messages = admit_in_order(table.queues[name], workloads, lambda w: self._admit(w, done))
            done.waiting.update(messages)
            for workload in workloads:
                if workload.key in messages:
                    self._show(workload, messages[workload.key])
        if self._preemption is not None:
            for key, victims in self._preemption.chosen.items():
                done.preempted[key] = [f"{v.candidate.key} ({v.reason})" for v in victims]
        self.passes += 1
        return done

    def _release_recorded(self, workload: Waiting, table: QueueTable, done: QueuePass) -> bool:
        """A workload whose every gated pod (or whose Job) already has its record was admitted
        by an earlier pass that did not finish (a crash, a conflict, a group partly ungated):
        ungate or start it again, outside the queue's order. True when that was the case."""
        records = [self.ledger.record(pod_uid(obj)) for obj in workload.pods]
        if not records or any(r is None for r in records):
            return False
        if workload.kind == "Job" and (
            not _recorded_as_is(workload.pods[0], records[0]) or _preempted(workload.pods[0])
        ):
            self.ledger.release([pod_uid(workload.pods[0])])  # another version, or preempted
            return False
        message = f"admitted by ClusterQueue {workload.cluster_queue}"
        for obj, record in zip(workload.pods, records, strict=True):
            assert record is not None
            selector = node_selector_of(table, record)
            write = self.writer.start if workload.kind == "Job" else self.writer.admit
            if write(obj, selector, message):
                done.admitted.append(workload.key if workload.kind == "Job" else pod_key(obj))
                self._shown.pop(pod_uid(obj), None)
        return True

    def _under_job(self, workload: Waiting, table: QueueTable, done: QueuePass) -> bool:
        """A pod its Job created beyond the Job's record waits as a pod of its own; once the
        record has room for it again (a pod before it finished or its grace ended), it runs
        under the record: ungated with the Job's flavor, no record of its own. True then."""
        if workload.kind != "Pod" or len(workload.pods) != 1:
            return False
        (pod,) = workload.pods
        found = self._jobs.job_of(pod)
        if found is None or self._jobs.beyond(pod, *found):
            return False
        message = f"admitted by ClusterQueue {workload.cluster_queue} under its Job's record"
        if self.writer.admit(pod, node_selector_of(table, found[1]), message):
            done.admitted.append(pod_key(pod))
            self._shown.pop(pod_uid(pod), None)
        return True

    def _admit(self, workload: Waiting, done: QueuePass) -> str:
        """Record every pod of the workload, or none; then ungate them. "" or why it waits.

        The group is decided in memory first (`conclude_in_turn`): one that does not fit
        writes nothing, however many passes it waits."""
        if workload.kind == "Job":
            return self._admit_job(workload, done)
        members = [Member(pod_uid(p), pod_key(p), self._prepare(p)) for p in workload.pods]
        first = members[0]
        ahead = self.ledger.admit(
            first.uid,
            lambda usage: conclude_in_turn(members, self._held(usage, workload), workload.subject),
            True,  # decided only: nothing is written
            first.holder,
            existing=True,
            cluster_queue=workload.cluster_queue,
        )
        if not ahead.allowed or ahead.charge is None:
            return self._preempt(workload, _group_trial(members, workload.subject), ahead)
        recorded: list[tuple[Obj, Decision]] = []
        for pod, member in zip(workload.pods, members, strict=True):
            decision = self._record(member)
            if not decision.allowed or decision.charge is None:  # usage changed meanwhile
                if recorded:
                    self.ledger.release([pod_uid(p) for p, _ in recorded])
                return decision.shortfall or decision.message
            recorded.append((pod, decision))
        message = f"admitted by ClusterQueue {workload.cluster_queue}"
        ungated = [p for p, d in recorded if self.writer.admit(p, d.node_selector, message)]
        for pod in ungated:
            done.admitted.append(pod_key(pod))
            self._shown.pop(pod_uid(pod), None)
        if len(ungated) == len(recorded):  # else the next pass ungates the rest, and counts
            log.info("admitted %s to ClusterQueue %s", workload.subject, workload.cluster_queue)
            self._observe(workload)
        return ""

    def _held(self, usage: Usage, workload: Waiting) -> Usage:
        """The ledger's view with what preemptors will take, for any other workload."""
        return usage if self._preemption is None else self._preemption.with_holds(usage, workload)

    def _preempt(self, workload: Waiting, trial: Trial, decision: Decision) -> str:
        """Why a workload that does not fit waits, once it preempted what its queue allows."""
        why = decision.shortfall or decision.message
        return why if self._preemption is None else self._preemption.attempt(workload, trial, why)

    def _admit_job(self, workload: Waiting, done: QueuePass) -> str:
        """Record the Job's pods running at once as one charge, then unsuspend it. A Job that
        does not fit is decided only: nothing is written."""
        (job,) = workload.pods
        prepared = self._prepare(job)

        def decide(dry_run: bool) -> Decision:
            return self.ledger.admit(
                pod_uid(job),
                lambda usage: conclude_job(prepared, self._held(usage, workload)),
                dry_run,
                job_holder(workload.key),  # its holder: a pod of the Job's name is another one
                existing=True,  # the Job is cached: its record counts with it, never on its own
                cluster_queue=workload.cluster_queue,
            )

        decision = decide(dry_run=True)
        if decision.allowed and decision.charge is not None:
            decision = decide(dry_run=False)
        if not decision.allowed or decision.charge is None:
            return self._preempt(workload, _job_trial(prepared), decision)
        message = f"admitted by ClusterQueue {workload.cluster_queue}"
        if not self.writer.start(job, decision.node_selector, message):
            # Not started as decided (changed meanwhile, or gone): decided again next pass.
            self.ledger.release([pod_uid(job)])
            return ""
        done.admitted.append(workload.key)
        self._shown.pop(pod_uid(job), None)
        self._observe(workload)
        log.info("admitted %s to ClusterQueue %s", workload.subject, workload.cluster_queue)
        return ""

    def _observe(self, workload: Waiting) -> None:
        if self._preemption is not None:
            self._preemption.admitted(workload)
        created = epoch(workload.created)
        if self.metrics is not None and created is not None:
            self.metrics.observe_wait(workload.cluster_queue, self.wall() - created)

    def _prepare(self, obj: Obj) -> Prepared | Decision:
        """A waiting pod is charged by the claims generated for it too (`prepare`)."""
        state, settings, placer = self.backend.state, self.settings, self.placer
        generated = obj.get("kind") != "Job"
        return prepare(obj, state, settings, placer, "CREATE", generated=generated)

    def _record(self, member: Member) -> Decision:
        prepared = member.prepared
        return self.ledger.admit(
            member.uid,
            lambda usage: conclude(prepared, usage, enqueue=False),
            False,
            member.holder,
            existing=True,  # the gated pod is cached; a retry leaves its own record out
            cluster_queue=prepared.route.queue.name if isinstance(prepared, Prepared) else "",
        )

    def _show(self, workload: Waiting, message: str) -> None:
        for pod in workload.pods:
            uid = pod_uid(pod)
            if self._shown.get(uid) != message and self._writes < self.max_writes:
                self._writes += 1
                if self.writer.wait(pod, message):
                    self._shown[uid] = message


def _group_trial(members: list[Member], subject: str) -> Trial:
    """The pods' charges in a usage, decided one after another as the ledger records them."""

    def trial(usage: Usage) -> tuple[Charge, ...] | None:
        view = usage.copy()
        if not conclude_in_turn(members, view, subject).allowed:
            return None
        return tuple(c for m in members if (c := view.charge_of(m.uid)) is not None)

    return trial


def _job_trial(prepared: Prepared | Decision) -> Trial:
    """The Job's one charge in a usage."""

    def trial(usage: Usage) -> tuple[Charge, ...] | None:
        decision = conclude_job(prepared, usage)
        return (decision.charge,) if decision.allowed and decision.charge else None

    return trial


def _preempted(job: Obj) -> bool:
    annotations = (job.get("metadata") or {}).get("annotations") or {}
    return PREEMPTED_ANNOTATION in annotations


def _recorded_as_is(job: Obj, record: Charge | None) -> bool:
    """The Job runs no more pods at once than its record was written for."""
    if record is None or not record.pods:
        return True
    try:
        return as_workload(job).pods <= record.pods
    except DraquotaError:
        return False
