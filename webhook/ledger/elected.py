"""`ElectedAdmission`: whether this replica may decide an admission that holds quota now.

One replica at a time decides such admissions: the holder of the Lease
(`webhook.kube.lease`); the others forward them to it (`webhook.edge.forwarding`). The holder
decides in memory and writes its records behind (`webhook.ledger.writebehind`), which is
exact only if nobody else decides meanwhile and nothing the previous holder admitted is
missing from its view. Hence the rules, each a refusal the user can act on (submit again):
- not elected (the Lease moved while the request was forwarded): refuse;
- stopping: the records are being written for the next holder: refuse;
- taken over from a holder that stopped renewing: the dead holder's last admissions may
  have no record, but their pods are being created by the API server; wait `takeover_wait`
  from the start of the term (with the lease duration before it, the API server's own
  bound on a request that passed admission: its request timeout) so that they are visible
  as pods before deciding;
- records unwritten for longer than `max_lag`: the API server is not taking them; refuse
  rather than let a crash lose more.
A term taken from nobody (a new Lease, or one its holder released after writing
everything) needs no wait: the ledger reads the active shards once at its first admission
of each cohort in the term (`webhook.ledger.cluster`).

The refusals apply only to decisions that would hold quota: a denial, or a pod admitted to
wait in its queue, is answered by any replica at any time, so that what draquota does not
enforce never waits for an election. On a replica that is not elected such a decision
raises `HeldElsewhere`: the request goes to the elected replica instead.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Protocol

from quota.verdict import Decision, Verdict
from webhook.kube.lease import Term

__all__ = ["ElectedAdmission", "Elector", "HeldElsewhere"]

MOVED = "AdmittingReplicaMoved"
TAKING_OVER = "AdmittingReplicaTakingOver"


class HeldElsewhere(Exception):
    """This replica is not elected, and the request would hold quota: forward it to the
    elected replica (raised before anything changed)."""


class Elector(Protocol):
    def leading(self) -> bool: ...

    def term(self) -> Term | None: ...


class ElectedAdmission:
    """The refusals above for one replica; `stopping()` starts the handover."""

    def __init__(
        self,
        elector: Elector,
        takeover_wait: float,
        max_lag: float,
        lag: Callable[[], float],
        clock: Callable[[], float],
    ) -> None:
        self.elector = elector
        self.takeover_wait = takeover_wait
        self.max_lag = max_lag
        self._lag = lag
        self._clock = clock
        self._stopping = False

    def stopping(self) -> None:
        self._stopping = True

    def term(self) -> Term | None:
        return None if self._stopping else self.elector.term()

    def hold(self, decision: Decision) -> Decision:
        """`decision` if this replica may answer it now; else the refusal (or HeldElsewhere
        when another replica is elected and this one is not stopping)."""
        if not decision.allowed or decision.charge is None:
            return decision
        self.ensure_elected()
        return self.refusal() or decision

    def ensure_elected(self) -> None:
        """HeldElsewhere when another replica is elected (and this one is not stopping)."""
        if not self._stopping and self.elector.term() is None:
            raise HeldElsewhere()

    def refusal(self) -> Decision | None:
        """Why this replica may not decide an admission that holds quota now; None when it
        may."""
        term = self.term()
        if term is None:
            return _refused(
                MOVED,
                "the draquota replica that admits changed while this request was on its way",
            )
        left = self.settled_in(term)
        if left > 0:
            return _refused(
                TAKING_OVER,
                "draquota is taking over admissions from a replica that stopped answering; "
                f"it admits again in {math.ceil(left)}s, once every pod that replica "
                "admitted is visible",
            )
        lag = self._lag()
        if lag > self.max_lag:
            return _refused(
                "LedgerUnavailable",
                f"draquota's admission records have not been written for {lag:.0f}s",
            )
        return None

    def settled_in(self, term: Term) -> float:
        """Seconds until a term may decide (0 when it may)."""
        if not term.taken_over:
            return 0.0
        return max(0.0, term.start + self.takeover_wait - self._clock())


def _refused(reason: str, why: str) -> Decision:
    return Decision(Verdict.DENIED, reason, f"draquota cannot reserve quota now: {why}; retry")
