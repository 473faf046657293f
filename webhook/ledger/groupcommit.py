"""Group commit: the admissions of one cohort that arrive while its records are being written
are queued, then decided together, in order, and written in one write.

`GroupCommit` owns a lock per ledger base and the batches queued for it; what "deciding"
and "writing" mean is the caller's (`commit`, `Proposal.evaluate`). `decide_together` is
how a batch is decided: each proposal on one usage, to which every allowed one adds its
charge for the ones after it.

Invariants: a base has at most one leader at a time, who takes the whole queue as its batch
under the base's lock; every proposal of a batch ends with a decision (an allowed one only
once its record is written), and its `done` event set.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass

from quota.charge import Charge
from quota.usage import Usage
from quota.verdict import Decision, Verdict
from webhook.ledger import without_own_holders
from webhook.ledger.reservations import Reservation

__all__ = [
    "GroupCommit",
    "Proposal",
    "decide_together",
    "fail_closed",
    "recorded",
    "settle",
    "unavailable",
]

log = logging.getLogger("draquota.ledger")


@dataclass
class Proposal:
    """An admission proposed for its cohort's next batch; `decision` is set by whoever decides
    it."""

    uid: str
    pod: str
    evaluate: Callable[[Usage], Decision]
    existing: bool = False  # a pod re-checked in place: decided without its live charge too
    record: Reservation | None = None  # an entry moved as it is (`compact`)
    decision: Decision | None = None
    done: threading.Event = dataclasses.field(default_factory=threading.Event)


class GroupCommit:
    """A lock per ledger base, and the proposals queued for it."""

    def __init__(self) -> None:
        self._guard = threading.Lock()  # guards the three fields below
        self._locks: dict[str, threading.Lock] = {}
        self._queued: dict[str, list[Proposal]] = {}
        self._leading: set[str] = set()  # bases whose queue somebody is deciding

    def lock(self, base: str) -> threading.Lock:
        """The lock of `base`: held by whoever writes its shards from this replica."""
        with self._guard:
            return self._locks.setdefault(base, threading.Lock())

    def queued(self, base: str) -> list[str]:
        """The UIDs queued for the next batch of `base`, in order of arrival."""
        with self._guard:
            return [proposal.uid for proposal in self._queued.get(base, [])]

    def join(
        self, base: str, mine: Proposal, commit: Callable[[str, list[Proposal]], None]
    ) -> Decision:
        """Queue `mine` for `base`; the first of a queue then runs `commit` on all of it (under
        the base's lock), in one write instead of one each. Everyone returns as soon as its own
        batch is decided."""
        with self._guard:
            self._queued.setdefault(base, []).append(mine)
            leads = base not in self._leading
            self._leading.add(base)
        if not leads:
            mine.done.wait()  # decided, or made the one to decide the next batch
            if mine.decision is not None:
                return mine.decision
        with self._guard:
            batch = self._queued.pop(base, [])
        try:
            with self.lock(base):
                commit(base, batch)
        finally:
            for proposal in batch:
                if proposal.decision is None:  # an unexpected error: nobody of it is admitted
                    proposal.decision = unavailable(base, "draquota failed to decide")
                proposal.done.set()
            with self._guard:
                after = self._queued.get(base)
                if after:
                    after[0].done.set()  # it leads the next batch
                else:
                    self._leading.discard(base)
        return mine.decision or unavailable(base, "draquota failed to decide")


def decide_together(
    batch: list[Proposal], usage: Usage, base: str, base_of: Callable[[str], str]
) -> list[Decision]:
    """Each proposal decided on `usage` (changed: the caller hands in a copy) without its own
    holders, with the charges of the allowed ones before it added; a decision for a queue
    outside `base` (`base_of` a ClusterQueue: its cohort moved meanwhile) fails closed."""
    decisions: list[Decision] = []
    for proposal in batch:
        without_own_holders(usage, proposal.uid, proposal.pod, proposal.existing)
        try:
            decision = proposal.evaluate(usage)
        except Exception:  # one admission's failure is its own, not its batch's
            log.exception("admission %s: deciding failed", proposal.uid)
            decision = unavailable(base, "draquota failed to decide")
        charge = decision.charge
        if charge is not None and base_of(charge.cluster_queue) != base:
            decision = fail_closed(decision, base, "the queue's cohort changed")
        if decision.allowed and decision.charge is not None:
            usage.add(proposal.uid, decision.charge)
        decisions.append(decision)
    return decisions


def settle(batch: list[Proposal], base: str, decisions: list[Decision], failure: str = "") -> None:
    """Hand every proposal of a batch its decision; with `failure`, every allowed one fails
    closed instead (its record was not written)."""
    for proposal, decision in zip(batch, decisions, strict=True):
        proposal.decision = (
            fail_closed(decision, base, failure) if failure and decision.allowed else decision
        )


def recorded(charge: Charge) -> Callable[[Usage], Decision]:
    """The decision of a record moved or written behind: what it was admitted for, whatever
    the usage now."""
    return lambda _usage: Decision(Verdict.ADMITTED, "Admitted", charge=charge)


def unavailable(name: str, why: str) -> Decision:
    """A denial because the ledger could not decide or write (`fail_closed`)."""
    return fail_closed(Decision(Verdict.DENIED, "", ""), name, why)


def fail_closed(decision: Decision, name: str, why: str) -> Decision:
    """`decision` denied, because QuotaLedger `name` could not be written (`why`)."""
    return dataclasses.replace(
        decision,
        verdict=Verdict.DENIED,
        reason="LedgerUnavailable",
        message=f"draquota cannot reserve quota now: QuotaLedger {name}: {why}; retry",
        charge=None,
    )
