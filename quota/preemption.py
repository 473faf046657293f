"""Which admitted workloads a pending one evicts so that it fits: Kueue's classic preemption.

The policy is the preemptor's ClusterQueue's (`quota.preemptionpolicy`). Candidates are the
admitted workloads holding some of the flavor-resources the preemptor needs (`needs`):

- of its own queue, when `withinClusterQueue` allows (LowerPriority: strictly lower
  priority; LowerOrNewerEqualPriority: also equal priority admitted after the preemptor
  was created) — reason InClusterQueue;
- of the other queues of its cohort that borrow a needed flavor-resource (use more than
  their nominal quota), when `reclaimWithinCohort` allows (Any: any priority;
  LowerPriority: strictly lower) — reason InCohortReclamation, or
  InCohortReclaimWhileBorrowing when `borrowWithinCohort` let the preemptor borrow.

They are tried in Kueue's order: other queues' first, then lowest priority, then most
recently admitted (then by key, so the choice is deterministic). Victims are taken
greedily until the preemptor fits, skipping a workload whose queue no longer borrows;
then each victim is put back, most important first, when the preemptor still fits
without it (Kueue's fill-back): no victim of the result can be spared alone.

Kueue's heuristics, in order: when every candidate is in the preemptor's queue, it may
borrow once they are gone; with `borrowWithinCohort`, it may borrow while evicting other
queues' workloads of priority below the threshold (and, when its queue is under nominal,
others too, but then it must fit without borrowing); otherwise it reclaims only while its
queue is under nominal in every needed flavor-resource and must then fit *without
borrowing* (within its nominal quota, so the victims could not take it back); failing
that, it evicts only its own queue's candidates and may borrow.

Invariants: nothing when the preemptor already fits or when evicting every allowed
candidate would not make it fit (nothing is evicted in vain); never a workload of a queue
outside the preemptor's cohort; never one of equal or higher priority in its own queue
(but for LowerOrNewerEqualPriority's newer ones); a candidate's holders go together.

`fits` is the caller's verdict on quota (its nominal, borrowing and lending rules) and reads
the usage only through queue totals. Fitting without borrowing is asked of the same
`fits`, in a usage where every other member of the cohort holds exactly its nominal quota
(the cohort then lends the preemptor nothing but its own nominal quota, as
`quota.assignment` computes it).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from quota.charge import Charge, FlavorResource
from quota.preemptionpolicy import ANY, LOWER_OR_NEWER_EQUAL_PRIORITY, LOWER_PRIORITY, NEVER
from quota.queues import ClusterQueue
from quota.queuetable import QueueTable
from quota.usage import Usage

__all__ = [
    "IN_CLUSTER_QUEUE",
    "IN_COHORT_RECLAIM_WHILE_BORROWING",
    "IN_COHORT_RECLAMATION",
    "Candidate",
    "Victim",
    "choose_victims",
]

IN_CLUSTER_QUEUE = "InClusterQueue"
IN_COHORT_RECLAMATION = "InCohortReclamation"
IN_COHORT_RECLAIM_WHILE_BORROWING = "InCohortReclaimWhileBorrowing"
# Holders standing for another member's whole nominal quota (a NUL never starts a pod key).
_NOMINAL_HOLDER = "\0nominal/"


@dataclass(frozen=True)
class Candidate:
    """A workload holding quota that preemption may evict: a pod, a pod group or a Job."""

    key: str  # the workload's key, e.g. "ns/name" or "Job:ns/name"
    holders: tuple[str, ...]  # its usage holders (keys in `Usage`), all evicted together
    cluster_queue: str
    priority: int
    admitted_at: float  # epoch seconds; newer = larger


@dataclass(frozen=True)
class Victim:
    """A candidate to evict, and Kueue's reason (one of the IN_* constants)."""

    candidate: Candidate
    reason: str


@dataclass(frozen=True)
class _Preemptor:
    """The pending workload and the cohort it is judged in."""

    queue: ClusterQueue
    priority: int
    admitted_at: float
    fits: Callable[[Usage], bool]
    needs: frozenset[FlavorResource]
    members: dict[str, ClusterQueue]
    usage: Usage

    def fits_in(self, usage: Usage, borrowing: bool) -> bool:
        """Whether it fits in `usage`; without `borrowing`, also within its nominal quota."""
        if not self.fits(usage):
            return False
        return borrowing or self.fits(_lending_nothing(self, usage))

    def borrows(self, name: str, usage: Usage) -> bool:
        """Whether queue `name` uses more than its nominal quota of a needed one."""
        used = usage.of(name)
        queue = self.members[name]
        return any(used.get(key, 0) > _nominal(queue, key) for key in self.needs)

    def under_nominal(self) -> bool:
        """Kueue's precondition for reclaiming without borrowing: the preemptor's queue uses
        less than its nominal quota of every needed flavor-resource."""
        used = self.usage.of(self.queue.name)
        return all(used.get(key, 0) < _nominal(self.queue, key) for key in self.needs)


def _nominal(queue: ClusterQueue, key: FlavorResource) -> int:
    quota = queue.quota(key)
    return quota.nominal if quota is not None else 0


def _lending_nothing(preemptor: _Preemptor, usage: Usage) -> Usage:
    """`usage` with every other member of the cohort holding exactly its nominal quota."""
    others = set(preemptor.members) - {preemptor.queue.name}
    out = Usage()
    for holder in usage.holders():
        charge = usage.charge_of(holder)
        if charge is not None and charge.cluster_queue not in others:
            out.add(holder, charge)
    for name in sorted(others):
        for group in preemptor.members[name].groups:
            for flavor in group.flavors:
                for resource, quota in flavor.resources.items():
                    out.add(
                        f"{_NOMINAL_HOLDER}{name}/{flavor.name}/{resource}",
                        Charge(name, "-/-", {resource: flavor.name}, {resource: quota.nominal}),
                    )
    return out


def _uses(usage: Usage, candidate: Candidate, needs: frozenset[FlavorResource]) -> bool:
    """Whether the candidate's holders hold a needed flavor-resource, all in its queue."""
    charges = [usage.charge_of(holder) for holder in candidate.holders]
    held = [c for c in charges if c is not None]
    if any(c.cluster_queue != candidate.cluster_queue for c in held):
        return False  # a holder charged elsewhere: evicting it would free another queue
    keys = {key for c in held for key in c.flavor_usage()}
    keys.update(
        key for c in held for amounts in c.shared_flavor_usage().values() for key in amounts
    )
    return bool(keys & needs)


def _allowed(preemptor: _Preemptor, candidate: Candidate) -> bool:
    """The policy's verdict on one candidate (its queue borrowing is checked apart)."""
    policy = preemptor.queue.preemption
    if candidate.cluster_queue == preemptor.queue.name:
        if candidate.priority < preemptor.priority:
            return policy.within_cluster_queue != NEVER
        return (
            policy.within_cluster_queue == LOWER_OR_NEWER_EQUAL_PRIORITY
            and candidate.priority == preemptor.priority
            and candidate.admitted_at > preemptor.admitted_at
        )
    if policy.reclaim_within_cohort == ANY:
        return True
    return (
        policy.reclaim_within_cohort == LOWER_PRIORITY and candidate.priority < preemptor.priority
    )


def _candidates(preemptor: _Preemptor, workloads: Iterable[Candidate]) -> list[Candidate]:
    """The allowed candidates holding what the preemptor needs, in Kueue's order."""
    own = preemptor.queue.name
    found = [
        c
        for c in workloads
        if c.cluster_queue in preemptor.members
        and (c.cluster_queue == own or preemptor.borrows(c.cluster_queue, preemptor.usage))
        and _allowed(preemptor, c)
        and _uses(preemptor.usage, c, preemptor.needs)
    ]
    return sorted(found, key=lambda c: (c.cluster_queue == own, c.priority, -c.admitted_at, c.key))


def _evict(usage: Usage, candidate: Candidate) -> None:
    for holder in candidate.holders:
        usage.remove(holder)


def _restore(usage: Usage, candidate: Candidate, original: Usage) -> None:
    for holder in candidate.holders:
        charge = original.charge_of(holder)
        if charge is not None:
            usage.add(holder, charge)


def _minimal(
    preemptor: _Preemptor, candidates: Sequence[Candidate], borrowing: bool, below: int | None
) -> tuple[Victim, ...]:
    """Greedy removal in order until the preemptor fits, then Kueue's fill-back.

    `below` is borrowWithinCohort's bound: another queue's workload under it may be evicted
    while the preemptor borrows; one at or above it forbids borrowing from then on."""
    left = preemptor.usage.copy()
    chosen: list[Victim] = []
    for candidate in candidates:
        reason = IN_CLUSTER_QUEUE
        if candidate.cluster_queue != preemptor.queue.name:
            if not preemptor.borrows(candidate.cluster_queue, left):
                continue  # reclaimed enough from that queue already
            reason = IN_COHORT_RECLAMATION
            if below is not None and candidate.priority < below:
                reason = IN_COHORT_RECLAIM_WHILE_BORROWING
            elif below is not None:
                borrowing = False
        _evict(left, candidate)
        chosen.append(Victim(candidate, reason))
        if preemptor.fits_in(left, borrowing):
            break
    else:
        return ()
    for victim in reversed(chosen[:-1]):  # the last one was needed, whatever comes back
        _restore(left, victim.candidate, preemptor.usage)
        if preemptor.fits_in(left, borrowing):
            chosen.remove(victim)
        else:
            _evict(left, victim.candidate)
    return tuple(chosen)


def choose_victims(
    queue: ClusterQueue,
    priority: int,
    admitted_at: float,
    fits: Callable[[Usage], bool],
    needs: frozenset[FlavorResource],
    table: QueueTable,
    usage: Usage,
    candidates: Sequence[Candidate],
) -> tuple[Victim, ...]:
    """The workloads to evict so that a pending workload of `queue` fits, in eviction order;
    () when it fits already or preemption cannot make it fit (then nothing is evicted).

    `priority` and `admitted_at` (its creation time) are the preemptor's; `fits` tells
    whether it fits in a usage; `needs` are the flavor-resources it would use; `candidates`
    are every admitted workload of the cohort (filtered here)."""
    if fits(usage) or queue.problems:
        return ()
    members = {m.name: m for m in table.members(queue)} | {queue.name: queue}
    preemptor = _Preemptor(queue, priority, admitted_at, fits, needs, members, usage)
    found = _candidates(preemptor, candidates)
    own = [c for c in found if c.cluster_queue == queue.name]
    if len(own) == len(found):
        return _minimal(preemptor, found, True, None)
    below = queue.preemption.borrow_threshold(priority)
    if below is not None:
        if not preemptor.under_nominal():
            found = [c for c in found if c.cluster_queue == queue.name or c.priority < below]
        return _minimal(preemptor, found, True, below)
    if preemptor.under_nominal():
        victims = _minimal(preemptor, found, False, None)
        if victims:
            return victims
    return _minimal(preemptor, own, True, None)
