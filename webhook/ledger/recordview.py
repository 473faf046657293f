"""`RecordView`: a `ClusterLedger`'s view of its records and of the pods' usage.

The view is the pods' usage (`PodUsage`) and the QuotaLedger records (`ShardIndex`),
guarded by one lock (`caught_up`, a `UsageView`) and caught up with the cluster store on
each use: the shards changed since the last sync come from the store's journal
(`quota.journal`), and a changed shard is read whole. Decisions are made on it, each with
the active shard of its cohort as the view holds it: what a write must build on.

Records first: a pod is then charged once, with its record (on start, or after a relist,
that halves the work; a pod with a record also skips the flavor search). A new record's
reservation is taken after the pods, so that the record of a pod already cached never
counts a second time, not even for a moment.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager

from quota.charge import Charge
from quota.journal import JournalCursor
from quota.settings import Settings
from quota.usage import Usage
from quota.verdict import Decision
from webhook.kube.resources import QUOTA_LEDGER
from webhook.ledger import UsageView, usage_without
from webhook.ledger.groupcommit import Proposal, decide_together
from webhook.ledger.podusage import PodUsage
from webhook.ledger.reservations import Shard, head_name, head_top, ledger_base, shard_index
from webhook.ledger.shards import ShardIndex, base_of
from webhook.store.clusterstate import ClusterState

__all__ = ["RecordView"]

# A changed shard is read whole: `behind` counts it as about this many records.
_RECORDS_PER_SHARD = 40


class RecordView:
    """Follows the QuotaLedger objects and the pods of one store into `index` and `pods`;
    `note` hears of the records that may be droppable after each sync (`Upkeep.note`)."""

    def __init__(
        self,
        state: ClusterState,
        settings: Settings,
        clock: Callable[[], float],
        wall: Callable[[], float],
        note: Callable[[Iterable[str]], None],
    ) -> None:
        self._state = state
        self._ttl = settings.reservation_ttl_seconds  # a reservation counts this long unseen
        self._clock = clock
        self._note = note
        self._cursor = JournalCursor(state)
        self.index = ShardIndex()
        self.pods = PodUsage(state, settings, wall)
        self.caught_up = UsageView(self.pods, self.sync, self.behind)

    # -- following the store (under the lock) ------------------------------------------

    def behind(self) -> int | None:
        """About how many pods and records the next `sync` handles; None when it charges every
        pod again. Reads the journal only."""
        shards = self._cursor.peek(QUOTA_LEDGER.kind)
        pods = self.pods.behind()
        if shards is None or pods is None:
            return None
        return pods + _RECORDS_PER_SHARD * len(shards)

    def sync(self) -> None:
        """Catch up (the caller holds the lock); `note` the records that may be droppable
        now: loaded or changed, whose pod left, whose reservation ran out or whose pod came."""
        candidates: set[str] = set()
        reservations = self._load_records(candidates)
        self.pods.sync()
        for uid, charge in reservations.items():
            self.pods.reserve(uid, charge)  # a no-op for a pod cached or gone
        candidates.update(self.pods.drain_departed())
        lapsed = self.index.lapsed(self._clock(), self._ttl, self.pods.is_reserved)
        for uid in lapsed:
            self.pods.unreserve(uid)
        candidates.update(lapsed)
        self._note(candidates)

    def _load_records(self, candidates: set[str]) -> dict[str, Charge]:
        """Apply the shards changed since the last sync (all of them after a relist); the
        reservations to take for the new records."""
        keys = self._cursor.take(QUOTA_LEDGER.kind)
        if keys == []:
            return {}
        if keys is None:  # first load, or a relist: compare every shard
            names = set(self.index.names())
            names |= {str(o["metadata"]["name"]) for o in self._state.list(QUOTA_LEDGER.kind)}
        else:
            names = {name for (_, name) in keys}
        now = self._clock()
        loaded = ((name, self._state.get(QUOTA_LEDGER.kind, None, name)) for name in names)
        changes: dict[str, Charge | None] = {}
        reservations: dict[str, Charge] = {}
        for uid, entry, charge_changed in self.index.apply(loaded, now):
            if entry is None:
                self.pods.unreserve(uid)
                changes[uid] = None
                continue
            candidates.add(uid)
            if not charge_changed:
                continue
            charge = self.pods.charges.parsed(entry.charge, entry.parsed_charge)
            changes[uid] = charge
            if charge is not None and not self.index.expired(uid, now, self._ttl):
                reservations[uid] = charge
        self.pods.update_records(changes)
        return reservations

    # -- deciding on the view ----------------------------------------------------------

    def base(self, cluster_queue: str) -> str:
        """The ledger base of a ClusterQueue (`ledger_base`), as the store has it now."""
        return ledger_base(self._state, cluster_queue)

    def decide(
        self, evaluate: Callable[[Usage], Decision], uid: str, pod: str, existing: bool
    ) -> tuple[Decision, Shard | None]:
        """Evaluate on a copy-on-write view without the pod's own holders; with the decision,
        the active shard of its cohort as that view holds it."""
        with self.caught_up as pods:
            decision = evaluate(usage_without(pods, uid, pod, existing))
            if decision.charge is None:
                return decision, None
            return decision, self.active(self.base(decision.charge.cluster_queue))

    def decide_together(self, base: str, batch: list[Proposal]) -> tuple[list[Decision], Shard]:
        """The batch decided on one view of usage (`decide_together`), with the active shard
        of that view."""
        with self.caught_up as pods:
            decisions = decide_together(batch, pods.usage.copy(), base, self.base)
            return decisions, self.active(base)

    @contextmanager
    def synced(self) -> Iterator[None]:
        """The view's lock held, caught up now on this thread: no hand-over to a worker, for
        the threads that write and reconcile (a decision on the loop enters `caught_up`)."""
        with self.caught_up.lock:
            self.sync()
            yield

    def moved(self, base: str, shard: Shard) -> bool:
        """The view's active shard of `base`, caught up, is no longer the one a decision saw."""
        with self.synced():
            current = self.active(base)
        return (current.name, current.resource_version) != (shard.name, shard.resource_version)

    def catch_up(self) -> None:
        """Catch up now, on this thread (no hand-over to a worker)."""
        with self.synced():
            pass

    def caught_up_top(self, base: str) -> int | None:
        """`top`, caught up first (what `ShardStore.locate` starts from)."""
        with self.synced():
            return self.top(base)

    # -- where a cohort's records go (under the lock) ----------------------------------

    def head(self, base: str) -> int | None:
        """The index the head of `base` says was created last, as the store has it."""
        return head_top(self._state.get(QUOTA_LEDGER.kind, None, head_name(base)))

    def top(self, base: str) -> int | None:
        """The index of the shard of `base` created last, as the view knows it."""
        return self.index.top(base, self.head(base))

    def active(self, base: str) -> Shard:
        """The shard of `base` new records go to (`ShardIndex.active`). Without a
        resourceVersion it is still to be created: by us (`ShardStore.create`) when it is the
        next one, else by its creator or `ShardStore.locate`."""
        return self.index.active(base, self.head(base))

    def under_head(self, name: str) -> bool:
        """A shard below its head's index: never the active one again (a ledger without a head,
        written only by replicas of an older version, keeps all its shards as they are)."""
        index = shard_index(name)
        top = self.head(base_of(name))
        return index is not None and top is not None and index < top

    def objects(self) -> dict[str, int]:
        """QuotaLedger objects in the store, by ledger base (shards and head)."""
        out: dict[str, int] = {}
        for obj in self._state.list(QUOTA_LEDGER.kind):
            base = base_of(str((obj.get("metadata") or {}).get("name") or ""))
            out[base] = out.get(base, 0) + 1
        return out
