"""`LedgerOptions`: how a `webhook.ledger.cluster.ClusterLedger` retries, paces and cleans up."""

from __future__ import annotations

from dataclasses import dataclass

from webhook.ledger.reservations import SHARD_BYTES

__all__ = ["LedgerOptions"]


@dataclass(frozen=True)
class LedgerOptions:
    max_attempts: int = 20  # reads+writes per admission before failing closed
    retry_delay: float = 0.005  # first pause after a 409, doubled and jittered
    request_timeout: float = 2.0
    reconcile_interval: float = 5.0
    shard_bytes: int = SHARD_BYTES
    # Record writes per second per ClusterQueue on one replica, and at once; an admission
    # waits for its turn at most `write_wait` (and at most half the admission deadline).
    write_rate: float = 200.0
    write_burst: float = 400.0
    write_wait: float = 1.0
    # A shard below its head's index is deleted once it has held no record for this long.
    empty_grace: float = 60.0
    # With an elector (`webhook.ledger.elected`): records of pod admissions are written behind,
    # a cohort's at most once per `flush_interval`; admission stops while one has waited
    # longer than `max_unwritten`; stopping writes what is left within `handover`. A term
    # taken over waits `takeover_wait` before holding quota: a create the dead holder
    # admitted is stored by the API server within its request timeout (60 s by default)
    # of its start, and the term starts at least a lease duration (15 s) after that holder's
    # last admission.
    flush_interval: float = 0.2
    max_unwritten: float = 5.0
    takeover_wait: float = 45.0
    handover: float = 5.0
