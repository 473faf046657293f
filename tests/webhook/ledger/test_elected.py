"""ElectedAdmission: when the elected replica may decide, as a table."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from webhook.kube.lease import Term
from webhook.ledger.elected import ElectedAdmission

WAIT, MAX_LAG = 60.0, 5.0


@dataclass
class Elector:
    current: Term | None

    def leading(self) -> bool:
        return self.current is not None

    def term(self) -> Term | None:
        return self.current


@dataclass(frozen=True)
class Row:
    term: Term | None
    now: float
    lag: float = 0.0
    stopping: bool = False
    reason: str | None = None  # None: may decide
    says: str = ""


ROWS = {
    "not elected": Row(None, 100.0, reason="AdmittingReplicaMoved", says="changed"),
    "elected from nobody: at once": Row(Term(100.0, False), 100.0),
    "taken over: waits out the dead holder's window": Row(
        Term(100.0, True), 130.0, reason="AdmittingReplicaTakingOver", says="in 30s"
    ),
    "taken over: decides once the window passed": Row(Term(100.0, True), 160.0),
    "stopping: hands over": Row(
        Term(100.0, False), 100.0, stopping=True, reason="AdmittingReplicaMoved"
    ),
    "records unwritten too long": Row(
        Term(100.0, False), 100.0, lag=6.0, reason="LedgerUnavailable", says="6s"
    ),
    "records a little behind": Row(Term(100.0, False), 100.0, lag=4.0),
}


@pytest.mark.parametrize("row", ROWS.values(), ids=ROWS.keys())
def test_when_the_elected_replica_decides(row: Row) -> None:
    elected = ElectedAdmission(Elector(row.term), WAIT, MAX_LAG, lambda: row.lag, lambda: row.now)
    if row.stopping:
        elected.stopping()
    refusal = elected.refusal()
    if row.reason is None:
        assert refusal is None
        return
    assert refusal is not None and not refusal.allowed
    assert refusal.reason == row.reason
    assert row.says in refusal.message and refusal.message.endswith("retry")
