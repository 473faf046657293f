"""`Upkeep`: the reconciler's pass over a `ClusterLedger`'s shards.

- records that count no more are deleted (`reconcile`): of pods this replica saw leave, and
  reservations whose pods never came within `reservation_ttl` of this replica first seeing
  them (`droppable`); only the candidates the view's sync named are looked at, so a pass
  costs O(changes since the last pass), not O(records);
- sparse shards are emptied into the active one (`compact`), a few a pass;
- empty shards below their head's index are deleted after `empty_grace` (`delete_empty`).

A shard is rewritten under its cohort's lock, as every write of this replica is.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Protocol

from quota.charge import Charge
from quota.livepods import is_gated
from quota.settings import Settings
from webhook.ledger.counts import LedgerCounts
from webhook.ledger.groupcommit import GroupCommit, Proposal, recorded
from webhook.ledger.options import LedgerOptions
from webhook.ledger.recordview import RecordView
from webhook.ledger.reservations import Reservation, shard_index
from webhook.ledger.shards import base_of
from webhook.ledger.shardstore import ShardStore
from webhook.store.clusterstate import ClusterState

__all__ = ["COMPACTED_PER_PASS", "Upkeep"]

# Sparse shards emptied by one pass (`Upkeep.compact`), at most.
COMPACTED_PER_PASS = 8


class Kept(Protocol):
    """What the upkeep needs of its ledger (`webhook.ledger.cluster.ClusterLedger`)."""

    record_view: RecordView
    store: ShardStore
    batches: GroupCommit
    state: ClusterState
    settings: Settings
    options: LedgerOptions
    clock: Callable[[], float]
    counts: LedgerCounts

    def commit(self, base: str, batch: list[Proposal], outcome: str = "written") -> None: ...


class Upkeep:
    """The reconciler's state: the UIDs whose record may be droppable."""

    def __init__(self, ledger: Kept) -> None:
        self._ledger = ledger
        self._view = ledger.record_view
        self._candidates: set[str] = set()

    def note(self, uids: Iterable[str]) -> None:
        """These records may be droppable now (loaded or changed, their pod left, their
        reservation ran out): the next pass looks at them."""
        self._candidates.update(uids)

    def reconcile(self) -> int:
        """One pass: delete records of pods that left and of pods that never came; then
        compact and delete empty shards. How many records were deleted."""
        with self._view.synced():
            drop = self._droppable_candidates()
            names = {n for uid in drop for n in self._view.index.holders(uid)}
        dropped = 0
        for name in sorted(n for n in names if shard_index(n) is not None):
            # only the shards holding a record to drop are read and rewritten
            dropped += self._rewrite(name, lambda e: e.id in drop)
        self.compact()
        self.delete_empty()
        return dropped

    def _droppable_candidates(self) -> set[str]:
        """The candidates to drop now; those that will never be (their pod holds them, or the
        record is gone) leave the set, unexpired reservations stay for the next pass."""
        pods, index = self._view.pods, self._view.index
        drop: set[str] = set()
        for uid in list(self._candidates):
            if not index.has_record(uid) or pods.holds(uid):
                self._candidates.discard(uid)  # a pod that later leaves adds it back
            elif self.droppable(uid):
                drop.add(uid)  # stays a candidate until its record is gone from the view
        return drop

    def droppable(self, uid: str) -> bool:
        """Its pod holds no quota, and left or never came in time (the view's lock is held)."""
        ledger = self._ledger
        pods = self._view.pods
        if pods.holds(uid):
            return False
        ttl = ledger.settings.reservation_ttl_seconds
        return pods.gone(uid) or self._view.index.expired(uid, ledger.clock(), ttl)

    def compact(self) -> int:
        """Move the records of sparse shards (sealed, below their head's index, a quarter full
        or less) to the active shard, so that the shards they leave empty are deleted: however
        records come and go, a ledger keeps at most about four times the shards its records
        fill, besides its active shard and its head. A few shards a pass; the records moved.

        Only records of live pods that hold them and wait for nothing are moved (`_movable`).
        Nothing takes those out but a reconciler once their pods leave, so a copy never
        brings back a record taken out meanwhile (a queue taking back a group's records); at
        worst it copies the record of a pod that just left, which counts for no replica that
        saw the pod leave, and is reconciled as the original would have been."""
        ledger = self._ledger
        shard_bytes = ledger.options.shard_bytes
        with self._view.synced():
            sparse = [
                name
                for name in self._view.index.names()
                if self._view.index.sparse(name, shard_bytes) and self._view.under_head(name)
            ]
        return sum(self._move_out(name) for name in sparse[:COMPACTED_PER_PASS])

    def _move_out(self, name: str) -> int:
        """Write the movable records of a sparse shard to the active one, then take them, and
        entries a higher shard overrides, out of it (read again first: it only loses
        entries). How many records moved."""
        ledger, base = self._ledger, base_of(name)
        with ledger.batches.lock(base):
            with self._view.synced():
                entries = self._view.index.entries(name)
                moves = [(entry, self._movable(entry)) for entry in entries]
                overridden = {e.id for e in entries if self._view.index.winner(e.id) is not e}
            batch = [
                Proposal(e.id, e.pod, recorded(charge), existing=True, record=e)
                for e, charge in moves
                if charge is not None and e.id not in overridden
            ]
            if batch:
                ledger.commit(base, batch, outcome="moved")
            moved = {p.uid for p in batch if p.decision is not None and p.decision.allowed}
            done = moved | overridden
            if done:
                ledger.store.rewrite(name, lambda e: e.id in done, outcome="")
        return len(moved)

    def _movable(self, entry: Reservation) -> Charge | None:
        """The charge of a record whose pod (or Job) is cached, holds it and is not gated."""
        pods = self._view.pods
        if not pods.holds(entry.id):
            return None
        namespace, _, pod_name = entry.pod.partition("/")
        pod = self._ledger.state.get("Pod", namespace, pod_name) if pod_name else None
        if pod is not None and is_gated(pod):
            return None
        return pods.charges.parsed(entry.charge, entry.parsed_charge)

    def delete_empty(self) -> int:
        """Delete the shards that have held no record for `empty_grace`, below their head's
        index: never the active shard, nor one a replica may still create. Each DELETE has
        the resourceVersion this view holds as precondition, so a shard written meanwhile
        stays (409) and is looked at again. How many went."""
        ledger = self._ledger
        now = ledger.clock()
        with self._view.synced():
            empty = self._view.index.empty_for(now, ledger.options.empty_grace)
            doomed = [(name, version) for name, version in empty if self._view.under_head(name)]
        deleted = 0
        for name, version in sorted(doomed):
            outcome = ledger.store.delete(name, version)
            ledger.counts.deletion(outcome)
            if outcome in ("deleted", "gone"):
                with self._view.caught_up.lock:
                    self._view.index.forget_empty(name)  # its DELETED event may come later
                deleted += outcome == "deleted"
        return deleted

    def _rewrite(self, name: str, drop: Callable[[Reservation], bool]) -> int:
        """Remove matching entries from one shard, retrying on conflict; how many went."""
        with self._ledger.batches.lock(base_of(name)):
            return self._ledger.store.rewrite(name, drop)
