"""`ClusterLedger`: admission records shared by every replica, in QuotaLedger objects.

Admission follows Kubernetes' own ResourceQuota admission: read the active shard
of the queue's cohort (a GET, for the freshest resourceVersion), evaluate against
live pod usage plus the records of pods not seen yet, and if allowed write the
record back with the resourceVersion read as precondition. A 409 Conflict means
another replica got there first: read again and evaluate again, a bounded number
of times, then fail closed. Admissions of one cohort that arrive while its shard is
being written are decided together, in order, and written in one write (group commit,
`_join`).

Invariants that keep usage exact (see `webhook.ledger.reservations` for the shards):
- a record is keyed by the pod's UID; while a pod with that UID is cached, the pod
  counts (charged at least its record) and the record does not count on its own;
- a record whose pod this replica saw leave (deleted, or finished) counts no more,
  and the reconciler deletes it;
- a record whose pod this replica has not seen counts until `reservation_ttl`
  after this replica first saw the record. Each replica measures that age on its
  own monotonic clock, so a replica whose wall clock is wrong cannot make another
  replica's reservations expire early; the reconciler deletes a record only once
  the replica running it judged it expired.

The reconciler also empties sparse shards (`compact`) and deletes empty ones
(`delete_empty`); new shards are created through the ledger's head (see
`webhook.ledger.reservations` for why a shard name must never be the active shard twice,
`webhook.ledger.shardstore` for how). Record writes are paced per ClusterQueue
(`webhook.ledger.writerate`) and counted (`webhook.ledger.counts`).

Longer than 400 lines because `ClusterLedger` is one object: admission, shard sync and
reconciliation share its locks, its caches and the invariants above.
"""

from __future__ import annotations

import dataclasses
import logging
import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from certs.periodic import Periodic
from quota.charge import Charge
from quota.livepods import is_gated
from quota.settings import Settings
from quota.usage import Usage
from quota.verdict import Decision, Verdict
from webhook.edge.runner import offload_if_inline
from webhook.kube.client import ApiError, KubeClient, TransportError
from webhook.kube.resources import QUOTA_LEDGER
from webhook.kube.warmup import WarmUp
from webhook.ledger.counts import LedgerCounts
from webhook.ledger.elected import ElectedAdmission, Elector
from webhook.ledger.podusage import PodUsage
from webhook.ledger.reservations import (
    SHARD_BYTES,
    Reservation,
    Shard,
    head_name,
    head_top,
    ledger_base,
    shard_index,
    shard_name,
)
from webhook.ledger.shardstore import ShardStore
from webhook.ledger.writebehind import WriteBehind
from webhook.ledger.writerate import WriteRate
from webhook.store.backend import SyncedUsage, valid_reservation_id
from webhook.store.clusterstate import ClusterState

__all__ = ["ClusterLedger", "LedgerOptions"]

log = logging.getLogger("draquota.ledger")

# Sparse shards emptied by one reconciler pass (`ClusterLedger.compact`), at most.
_COMPACTED_PER_PASS = 8


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


class _Backend(Protocol):
    state: ClusterState

    def ready(self) -> tuple[bool, str]: ...


class ClusterLedger(SyncedUsage):
    """Ledger over QuotaLedger shards; `start()` runs the reconciler (`webhook.bootstrap`
    attaches the ledger to the backend, which starts it)."""

    blocking_io = True

    def __init__(
        self,
        client: KubeClient,
        backend: _Backend,
        settings: Settings,
        options: LedgerOptions = LedgerOptions(),
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], float] = time.time,
        elector: Elector | None = None,
    ) -> None:
        self.client = client
        self.backend = backend
        self.state = backend.state
        self.settings = settings
        self.options = options
        self.clock = clock
        self.wall = wall
        self._conflicts = 0
        self.counts = LedgerCounts()
        self._store = ShardStore(
            client, self.state, self.counts, options.request_timeout, options.max_attempts
        )
        wait = min(options.write_wait, settings.admission_deadline_seconds / 2)
        self._rate = WriteRate(options.write_rate, options.write_burst, wait, clock=clock)
        self._empty_since: dict[str, float] = {}  # shard -> since when this view saw it empty
        self._view_lock = threading.RLock()  # guards _pods, _records and the fields below
        self._pods = PodUsage(self.state, settings, wall)
        self._records_revision = -1
        self._records: dict[str, Reservation] = {}
        # shard name -> (uid -> entry, sealed, resourceVersion) as this view loaded it
        self._shards: dict[str, tuple[dict[str, Reservation], bool, str]] = {}
        self._holders: dict[str, set[str]] = {}  # uid -> names of the shards holding it
        self._bases: dict[str, dict[str, int]] = {}  # ledger base -> its loaded shards' indexes
        self._tops: dict[str, str] = {}  # ledger base -> its highest loaded shard
        self._first_seen: dict[str, float] = {}  # uid -> when this replica first saw its record
        self._waiting: dict[str, float] = {}  # first_seen of reservations, oldest first
        # uids whose record may be droppable: loaded or changed records, records whose pod
        # left, reservations that ran out. The reconciler checks only these, so a pass costs
        # O(changes since the last pass), not O(records).
        self._candidates: set[str] = set()
        self._locks: dict[str, threading.Lock] = {}
        # Group commit (`_join`): admissions queued per ledger base, and the bases whose
        # queue somebody is deciding; both guarded by _locks_guard.
        self._waiting_for: dict[str, list[_Waiting]] = {}
        self._leading: set[str] = set()
        self._locks_guard = threading.Lock()
        # Records and every pod's charge loaded before readiness: at 100,000 pods that takes
        # tens of seconds, which no admission should wait for. Unloaded, it cannot decide.
        self._warm_up = WarmUp(
            "ledger-warm-up",
            backend,
            self._load,
            "loading admission records and live pod usage",
            ready_on_failure=False,
        )
        self._writes = WriteBehind(self._write_behind, options.flush_interval, clock)
        self._elected: ElectedAdmission | None = None
        if elector is not None:
            self._elected = ElectedAdmission(
                elector,
                options.takeover_wait,
                options.max_unwritten,
                self._writes.oldest_age,
                clock,
            )
        self._read_in_term: dict[str, float] = {}  # ledger base -> term start it was read in
        self._reconciler = Periodic(
            "ledger", options.reconcile_interval, self.reconcile, self._reconciles
        )

    @property
    def conflicts(self) -> int:
        """Writes this replica had refused because another writer was first."""
        return self._conflicts + self._store.conflicts

    # -- Ledger protocol -------------------------------------------------------------

    def admit(
        self,
        uid: str,
        evaluate: Callable[[Usage], Decision],
        dry_run: bool,
        pod: str = "",
        existing: bool = False,
        cluster_queue: str = "",
        behind: bool = False,
    ) -> Decision:
        """With `cluster_queue` (the route, known before deciding) the cohort's lock is taken
        first and the pod decided once under it; without, the decision names the queue and
        is made again only if another admission of this replica wrote the shard meanwhile.

        With an elector, only the elected replica holds quota (`webhook.ledger.elected`: others
        raise HeldElsewhere); with `behind` (a pod created: visible by itself once admitted)
        it answers before the record is written."""
        if not valid_reservation_id(uid):
            raise ValueError(f"invalid admission id {uid!r:.80}")
        if dry_run:
            return self._decide(evaluate, uid, pod, existing)[0]
        if self._elected is not None:
            if self._elected.refusal() is not None:  # answered only if it holds nothing
                return self._elected.hold(self._decide(evaluate, uid, pod, existing)[0])
            if behind and cluster_queue and not existing:
                return self._admit_behind(uid, evaluate, pod, cluster_queue)
        offload_if_inline("a QuotaLedger write")
        mine = _Waiting(uid, pod, evaluate, existing)
        seed: tuple[Decision, Shard] | None = None
        if cluster_queue:
            if self._rate.turn(cluster_queue) is None:
                return self._throttled(cluster_queue)
            if not existing:
                return self._join(ledger_base(self.state, cluster_queue), mine)
            base = ledger_base(self.state, cluster_queue)
        else:  # the decision names the queue, and so the cohort to lock
            decision, shard = self._decide(evaluate, uid, pod, existing)
            if not decision.allowed or decision.charge is None or shard is None:
                return decision
            queue = decision.charge.cluster_queue
            if self._rate.turn(queue) is None:
                return self._throttled(queue)
            base, seed = ledger_base(self.state, queue), (decision, shard)
        with self._lock_for(base):
            self._commit(base, [mine], seed)
        return mine.decision or _unavailable(base, "draquota failed to decide")

    def _admit_behind(
        self, uid: str, evaluate: Callable[[Usage], Decision], pod: str, cluster_queue: str
    ) -> Decision:
        """Decide on this replica's view, hold the charge there at once, write it later."""
        base = ledger_base(self.state, cluster_queue)
        self._read_once_in_term(base)
        with self._view():
            decision = evaluate(self._usage_without(uid, pod, False))
            charge = decision.charge
            if not decision.allowed or charge is None:
                return decision
            if ledger_base(self.state, charge.cluster_queue) != base:
                return _fail_closed(decision, base, "the queue's cohort changed")
            now = self.clock()
            self._pods.set_record(uid, charge)
            self._pods.reserve(uid, charge)
            self._first_seen.setdefault(uid, now)
            self._waiting.setdefault(uid, now)
            entry = Reservation(uid, charge.cluster_queue, pod, charge.to_annotation(), self.wall())
        self._writes.add(base, entry)
        return decision

    def _read_once_in_term(self, base: str) -> None:
        """At the first admission of a cohort in a term, read its shards as the API server has
        them: the records the previous holder wrote may not have reached this view yet."""
        term = self._elected.term() if self._elected is not None else None
        if term is None or self._read_in_term.get(base) == term.start:
            return
        offload_if_inline("reading the ledger after the election")
        with self._lock_for(base):
            if self._read_in_term.get(base) != term.start:
                self._locate(base)
                self._read_in_term[base] = term.start

    def _write_behind(self, base: str, records: list[Reservation]) -> set[str]:
        """Write records decided before (`WriteBehind`); the ids written. A record whose
        queue moved to another cohort meanwhile goes to that cohort's ledger next round."""
        charges = [(r, self._pods.charges.parsed(r.charge, r.parsed_charge)) for r in records]
        batch = [_Waiting(r.id, r.pod, _recorded(c), record=r) for r, c in charges if c]
        with self._lock_for(base):
            self._commit(base, batch)
        written = {w.uid for w in batch if w.decision is not None and w.decision.allowed}
        written |= {r.id for r, c in charges if c is None}  # never: its text was our own
        for record in records:
            moved = ledger_base(self.state, record.cluster_queue)
            if record.id not in written and moved != base:
                self._writes.add(moved, record)
                written.add(record.id)
        return written

    def _reconciles(self) -> bool:
        """The reconciler runs when the view is ready, on the elected replica only (if any):
        its writes would otherwise conflict with the elected replica's."""
        if self._elected is not None and self._elected.term() is None:
            return False
        return self.backend.ready()[0]

    def ensure_elected(self) -> None:
        if self._elected is not None:
            self._elected.ensure_elected()

    def _throttled(self, cluster_queue: str) -> Decision:
        """An admission whose turn to write is further away than the wait allowed."""
        self.counts.records([cluster_queue], "throttled")
        message = (
            f"draquota cannot reserve quota now: ClusterQueue {cluster_queue} is writing "
            f"admission records faster than {self._rate.rate:g} per second; retry"
        )
        return Decision(Verdict.DENIED, "LedgerBusy", message)

    def _join(self, base: str, mine: _Waiting) -> Decision:
        """Group commit: the admissions of a cohort that arrive while its records are being
        written wait together; the first of them then decides and writes them all, in one
        write instead of one each. Everyone returns as soon as its own batch is written."""
        with self._locks_guard:
            self._waiting_for.setdefault(base, []).append(mine)
            leads = base not in self._leading
            self._leading.add(base)
        if not leads:
            mine.wake.wait()  # decided, or made the one to decide the next batch
            if mine.decision is not None:
                return mine.decision
        with self._locks_guard:
            batch = self._waiting_for.pop(base, [])
        try:
            with self._lock_for(base):
                self._commit(base, batch)
        finally:
            for waiting in batch:
                if waiting.decision is None:  # an unexpected error: nobody of it is admitted
                    waiting.decision = _unavailable(base, "draquota failed to decide")
                waiting.wake.set()
            with self._locks_guard:
                after = self._waiting_for.get(base)
                if after:
                    after[0].wake.set()  # it leads the next batch
                else:
                    self._leading.discard(base)
        return mine.decision or _unavailable(base, "draquota failed to decide")

    def _commit(
        self,
        base: str,
        batch: list[_Waiting],
        seed: tuple[Decision, Shard] | None = None,
        outcome: str = "written",
    ) -> None:
        """Decide the batch in order, each admission on the usage with the records of the ones
        before it, and write the allowed records in one write to the active shard; again, all
        of it, after a conflict (the shard then read first). `seed`: a decision of a batch of
        one made before the lock, kept while the shard it saw is still the active one;
        `outcome`: what the records written are counted as."""
        delay, decisions = self.options.retry_delay, None
        for _ in range(self.options.max_attempts):
            if decisions is not None:  # a conflict, or a shard just sealed: the view is behind
                try:
                    self._locate(base)
                except (ApiError, TransportError) as exc:
                    return _settle(batch, base, decisions, str(exc))
            if seed is not None and not self._moved(base, seed[1]):
                decisions, shard = [seed[0]], seed[1]
            else:
                decisions, shard = self._decide_together(base, batch)
            seed = None
            allowed = {
                w.uid: (w.pod, d.charge)
                for w, d in zip(batch, decisions, strict=True)
                if d.allowed and d.charge is not None
            }
            if not allowed:
                return _settle(batch, base, decisions)
            entries = [e for e in shard.entries if e.id not in allowed]
            now = self.wall()
            kept = {w.uid: w.record for w in batch if w.record is not None}
            new = [
                kept.get(uid)
                or Reservation(uid, charge.cluster_queue, pod, charge.to_annotation(), now)
                for uid, (pod, charge) in allowed.items()
            ]
            full = (
                bool(entries) and sum(e.size for e in [*entries, *new]) > self.options.shard_bytes
            )
            queues = [charge.cluster_queue for _, charge in allowed.values()]
            try:
                # with the resourceVersion the decisions saw: a 409 means they are stale, a
                # 404 that the shard they saw is gone (emptied, deleted): a newer one is active
                if shard.resource_version:
                    self._store.write(shard, entries if full else [*entries, *new], sealed=full)
                else:
                    self._store.create(base, shard, new)
            except ApiError as exc:
                if exc.code not in (404, 409):
                    self.counts.records(queues, "error")
                    return _settle(batch, base, decisions, str(exc))
                self.counts.records(queues, "conflict")
                self._conflicts += 1
                time.sleep(delay * (1 + random.random()))
                delay = min(delay * 2, 0.2)
                continue
            except TransportError as exc:
                self.counts.records(queues, "error")
                return _settle(batch, base, decisions, str(exc))
            with self._view_lock:
                self._sync()
            if not full:
                self.counts.records(queues, outcome)
                return _settle(batch, base, decisions)
        if decisions is None:  # max_attempts 0
            decisions = [_unavailable(base, "no attempts allowed") for _ in batch]
        return _settle(batch, base, decisions, "too many concurrent updates")

    def _decide_together(self, base: str, batch: list[_Waiting]) -> tuple[list[Decision], Shard]:
        """Each admission of the batch decided on one view of usage, to which every allowed
        one adds its charge for the ones after it; with the active shard of that view."""
        decisions: list[Decision] = []
        with self._view():
            usage = self._pods.usage.copy()
            for waiting in batch:
                usage.remove(waiting.uid)  # a retried admission: its earlier record
                if waiting.existing and waiting.pod:  # re-checked in place: its live charge
                    usage.remove(waiting.pod)
                try:
                    decision = waiting.evaluate(usage)
                except Exception:  # one admission's failure is its own, not its batch's
                    log.exception("admission %s: deciding failed", waiting.uid)
                    decision = _unavailable(base, "draquota failed to decide")
                charge = decision.charge
                if charge is not None and ledger_base(self.state, charge.cluster_queue) != base:
                    decision = _fail_closed(decision, base, "the queue's cohort changed")
                if decision.allowed and decision.charge is not None:
                    usage.add(waiting.uid, decision.charge)
                decisions.append(decision)
            return decisions, self._active(base)

    def release(self, uids: list[str]) -> None:
        """Delete these records from every shard holding them (read, then rewritten)."""
        drop = set(uids)
        unwritten = self._writes.discard(drop)
        with self._view_lock:
            for uid in unwritten:  # held by this view alone: let go here
                self._pods.unreserve(uid)
                self._pods.set_record(uid, None)
            self._sync()
            names = {n for uid in drop for n in self._holders.get(uid, ())}
        for name in sorted(names):
            self._rewrite(name, lambda e: e.id in drop)
        with self._view_lock:
            self._sync()

    # -- reconciler ------------------------------------------------------------------

    def start(self) -> None:
        self._warm_up.start()
        self._reconciler.start()
        self._writes.start()

    def stop(self) -> None:
        """Admit nothing more, write every record decided, then stop (the Lease is released
        after this, so the next holder finds every record written)."""
        if self._elected is not None:
            self._elected.stopping()
        if not self._writes.stop(self.options.handover):
            log.warning("stopping with %d admission records unwritten", self._writes.unwritten())
        self._reconciler.stop()
        self._warm_up.stop()

    def warming(self) -> str:
        """Why this ledger is not ready to decide yet ("" once it is)."""
        return self._warm_up.warming()

    def _load(self) -> None:
        with self._view_lock:
            self._sync()

    def reconcile(self) -> int:
        """One pass: delete records of pods that left and of pods that never came."""
        with self._view_lock:
            self._sync()
            drop = self._droppable_candidates()
            names = {n for uid in drop for n in self._holders.get(uid, ())}
        dropped = 0
        for name in sorted(n for n in names if shard_index(n) is not None):
            # only the shards holding a record to drop are read and rewritten
            dropped += self._rewrite(name, lambda e: e.id in drop)
        self.compact()
        self.delete_empty()
        return dropped

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
        with self._view_lock:
            self._sync()
            sparse = [name for name in sorted(self._shards) if self._sparse(name)]
        return sum(self._move_out(name) for name in sparse[:_COMPACTED_PER_PASS])

    def _sparse(self, name: str) -> bool:
        entries, sealed, _ = self._shards[name]
        size = sum(entry.size for entry in entries.values())
        small = bool(entries) and 4 * size <= self.options.shard_bytes
        return sealed and small and self._under_head(name)

    def _move_out(self, name: str) -> int:
        """Write the movable records of a sparse shard to the active one, then take them, and
        entries a higher shard overrides, out of it (read again first: it only loses
        entries). How many records moved."""
        base = name.rsplit("-", 1)[0]
        with self._lock_for(base):
            with self._view_lock:
                self._sync()
                entries = list(self._shards.get(name, ({}, False, ""))[0].values())
                moves = [(entry, self._movable(entry)) for entry in entries]
                overridden = {e.id for e in entries if self._winner(e.id) is not e}
            batch = [
                _Waiting(e.id, e.pod, _recorded(charge), existing=True, record=e)
                for e, charge in moves
                if charge is not None and e.id not in overridden
            ]
            if batch:
                self._commit(base, batch, outcome="moved")
            moved = {w.uid for w in batch if w.decision is not None and w.decision.allowed}
            done = moved | overridden
            if done:
                self._store.rewrite(name, lambda e: e.id in done, outcome="")
        return len(moved)

    def _movable(self, entry: Reservation) -> Charge | None:
        """The charge of a record whose pod (or Job) is cached, holds it and is not gated."""
        if not self._pods.holds(entry.id):
            return None
        namespace, _, pod_name = entry.pod.partition("/")
        pod = self.state.get("Pod", namespace, pod_name) if pod_name else None
        if pod is not None and is_gated(pod):
            return None
        return self._pods.charges.parsed(entry.charge, entry.parsed_charge)

    def delete_empty(self) -> int:
        """Delete the shards that have held no record for `empty_grace`, below their head's
        index: never the active shard, nor one a replica may still create. Each DELETE has
        the resourceVersion this view holds as precondition, so a shard written meanwhile
        stays (409) and is looked at again. How many went."""
        now = self.clock()
        with self._view_lock:
            self._sync()
            doomed = [
                (name, self._shards[name][2])
                for name, since in self._empty_since.items()
                if now - since >= self.options.empty_grace and self._below_head(name)
            ]
        deleted = 0
        for name, version in sorted(doomed):
            outcome = self._store.delete(name, version)
            self.counts.deletion(outcome)
            if outcome in ("deleted", "gone"):
                with self._view_lock:
                    self._empty_since.pop(name, None)  # its DELETED event may come later
                deleted += outcome == "deleted"
        return deleted

    def _below_head(self, name: str) -> bool:
        """A loaded, empty shard below its head's index."""
        loaded = self._shards.get(name)
        return loaded is not None and not loaded[0] and self._under_head(name)

    def _under_head(self, name: str) -> bool:
        """A shard below its head's index: never the active one again (a ledger without a head,
        written only by replicas of an older version, keeps all its shards as they are)."""
        index = shard_index(name)
        top = head_top(self.state.get(QUOTA_LEDGER.kind, None, head_name(name.rsplit("-", 1)[0])))
        return index is not None and top is not None and index < top

    def _droppable_candidates(self) -> set[str]:
        """The candidates to drop now; those that will never be (their pod holds them, or the
        record is gone) leave the set, unexpired reservations stay for the next pass."""
        drop: set[str] = set()
        for uid in list(self._candidates):
            if uid not in self._records or self._pods.holds(uid):
                self._candidates.discard(uid)  # a pod that later leaves adds it back
            elif self._droppable(uid):
                drop.add(uid)  # stays a candidate until its record is gone from the view
        return drop

    def _droppable(self, uid: str) -> bool:
        if self._pods.holds(uid):
            return False
        return self._pods.gone(uid) or self._expired(uid)

    def _expired(self, uid: str) -> bool:
        seen = self._first_seen.get(uid)
        return seen is not None and self.clock() - seen > self.settings.reservation_ttl_seconds

    # -- the view --------------------------------------------------------------------

    def _decide(
        self, evaluate: Callable[[Usage], Decision], uid: str, pod: str, existing: bool
    ) -> tuple[Decision, Shard | None]:
        """Evaluate on a copy-on-write view without the pod's own holders; with the decision,
        the active shard of its cohort as that view holds it (what a write must build on)."""
        with self._view():
            decision = evaluate(self._usage_without(uid, pod, existing))
            if decision.charge is None:
                return decision, None
            return decision, self._active(ledger_base(self.state, decision.charge.cluster_queue))

    def _moved(self, base: str, shard: Shard) -> bool:
        """The view's active shard of `base` is no longer the one a decision saw."""
        with self._view_lock:
            self._sync()
            current = self._active(base)
        return (current.name, current.resource_version) != (shard.name, shard.resource_version)

    def _active(self, base: str) -> Shard:
        """The shard of `base` new records go to, as this view has it: the highest one created
        (`_top`), or the one after it when that is sealed (shard 0 for a new ledger). Without a
        resourceVersion it is still to be created: by us (`ShardStore.create`) when it is the
        next one, else by its creator or `_locate`."""
        top = self._top(base)
        if top is None:
            return Shard(shard_name(base, 0))
        name = shard_name(base, top)
        loaded = self._shards.get(name)
        if loaded is None:
            return Shard(name)
        entries, sealed, version = loaded
        if sealed:
            return Shard(shard_name(base, top + 1))
        return Shard(name, tuple(entries.values()), sealed, version)

    def _top(self, base: str) -> int | None:
        """The index of the shard of `base` created last, as this view knows it: its head's,
        or its highest shard loaded when that is higher (a head this view has not caught up
        with, a ledger written by replicas of an older version). None for a new ledger."""
        head = head_top(self.state.get(QUOTA_LEDGER.kind, None, head_name(base)))
        name = self._tops.get(base)
        loaded = self._bases[base][name] if name is not None else None
        return max((i for i in (head, loaded) if i is not None), default=None)

    def _place(self, base: str, name: str, index: int | None) -> None:
        """`name` is a loaded shard of `base` at `index` (None: no longer loaded). The highest
        is kept as it changes: a cohort has hundreds of shards at 100,000 pods, and every
        admission asks for its active one."""
        shards = self._bases.setdefault(base, {})
        shards.pop(name, None)
        top = self._tops.get(base)
        if index is not None:
            shards[name] = index
            if top is None or index > shards.get(top, -1):
                self._tops[base] = name
        elif name == top:  # rare: the highest shard went away
            self._tops.pop(base)
            if shards:
                self._tops[base] = max(shards, key=shards.__getitem__)

    def _behind(self) -> int | None:
        revision = self.state.revision(QUOTA_LEDGER.kind)[0]
        shards = 0
        if revision != self._records_revision:
            changed = self.state.changed_since(QUOTA_LEDGER.kind, self._records_revision)
            if changed is None:
                return None
            shards = len(changed)
        pods = self._pods.behind()
        # a changed shard is read whole: count it as its records, up to about 40
        return None if pods is None else pods + 40 * shards

    def _sync(self) -> None:
        """Bring pod usage and records up to date (under the view lock).

        Records first: a pod is then charged once, with its record (on start, or after a
        relist, that halves the work; a pod with a record also skips the flavor search). A
        new record's reservation is taken after the pods, so that the record of a pod
        already cached never counts a second time, not even for a moment."""
        revision = self.state.revision(QUOTA_LEDGER.kind)[0]
        reservations: dict[str, Charge] = {}
        if revision != self._records_revision:
            reservations = self._load_records(self._records_revision)
            self._records_revision = revision
        self._pods.sync()
        for uid, charge in reservations.items():
            self._pods.reserve(uid, charge)  # a no-op for a pod cached or gone
        self._candidates.update(self._pods.drain_departed())
        now = self.clock()
        while self._waiting:  # oldest first: stop at the first one still in time
            uid, seen = next(iter(self._waiting.items()))
            if self._pods.is_reserved(uid) and now - seen <= self.settings.reservation_ttl_seconds:
                break
            del self._waiting[uid]
            self._pods.unreserve(uid)
            self._candidates.add(uid)

    def _load_records(self, since: int) -> dict[str, Charge]:
        """Apply the shards changed since revision `since` (all of them after a relist); the
        reservations to take for the new records."""
        changed = self.state.changed_since(QUOTA_LEDGER.kind, since)
        if changed is None:  # first load, or a relist: compare every shard
            names = set(self._shards)
            names |= {str(o["metadata"]["name"]) for o in self.state.list(QUOTA_LEDGER.kind)}
        else:
            names = {name for (_, name) in changed}
        touched: set[str] = set()
        for name in names:
            obj = self.state.get(QUOTA_LEDGER.kind, None, name)
            old = self._shards.pop(name, ({}, False, ""))[0]
            shard = Shard.of(obj, old) if obj is not None else None
            fresh = {e.id: e for e in shard.entries} if shard is not None else {}
            index = shard_index(name) if shard is not None else None
            if shard is not None and index is not None:
                self._shards[name] = (fresh, shard.sealed, shard.resource_version)
            self._note_empty(name, shard is not None and index is not None and not fresh)
            self._place(name.rsplit("-", 1)[0], name, index)
            for uid in old.keys() | fresh.keys():
                if old.get(uid) != fresh.get(uid):
                    touched.add(uid)
                    holders = self._holders.setdefault(uid, set())
                    (holders.add if uid in fresh else holders.discard)(name)
        changes: dict[str, Charge | None] = {}
        reservations: dict[str, Charge] = {}
        now = self.clock()
        for uid in touched:
            entry = self._winner(uid)
            if entry is None:
                self._holders.pop(uid, None)
                self._records.pop(uid, None)
                self._first_seen.pop(uid, None)
                self._waiting.pop(uid, None)
                self._pods.unreserve(uid)
                changes[uid] = None
                continue
            previous = self._records.get(uid)
            self._records[uid] = entry
            self._candidates.add(uid)
            if previous is not None and previous.charge == entry.charge:
                continue
            charge = self._pods.charges.parsed(entry.charge, entry.parsed_charge)
            changes[uid] = charge
            if uid not in self._first_seen:
                self._first_seen[uid] = self._waiting[uid] = now
            if charge is not None and not self._expired(uid):
                reservations[uid] = charge
        self._pods.update_records(changes)
        return reservations

    def _note_empty(self, name: str, empty: bool) -> None:
        """Keep when this view first saw the shard without a record, while it has none."""
        if empty:
            self._empty_since.setdefault(name, self.clock())
        else:
            self._empty_since.pop(name, None)

    def _winner(self, uid: str) -> Reservation | None:
        """The entry of the highest shard holding `uid` (a resize writes a newer one)."""
        names = self._holders.get(uid) or set()
        best = max(names, key=lambda n: Shard(n).index, default=None)
        return self._shards[best][0][uid] if best is not None else None

    # -- mechanics -------------------------------------------------------------------

    def _lock_for(self, name: str) -> threading.Lock:
        with self._locks_guard:
            return self._locks.setdefault(name, threading.Lock())

    def _locate(self, base: str) -> None:
        """Bring the shard of `base` created last into the view as the API server has it now
        (after a conflict: the view is behind), with every shard created since the view's
        (sealed now, or deleted: their records count, or are gone).

        The shard is read before the head, and believed only if the head has not moved past
        it since: a shard read at an index the head had left may be one created late, below
        the active one. A shard the head names that does not exist yet is created empty
        (its creator, between its two writes, then conflicts and writes to it as anyone
        else does), and believed on the same terms."""
        for _ in range(self.options.max_attempts):
            with self._view_lock:
                self._sync()
                top = self._top(base)
            if top is None:
                if self._store.read_top(base) is None:
                    return  # a new ledger: its first shard is created through its head
                continue
            shard = self._store.read(shard_name(base, top))
            if self._moved_past(base, top):
                continue
            if not shard.resource_version:
                self._store.create_empty(shard.name)
                if self._moved_past(base, top):
                    continue
            return

    def _moved_past(self, base: str, top: int) -> bool:
        """The head of `base`, read now, names a shard after `top`; the shards in between are
        read into the view then (the next one is read by the caller)."""
        head = self._store.read_top(base)
        if head is None or head <= top:
            return False
        for index in range(top + 1, head):
            self._store.read(shard_name(base, index))
        return True

    def _rewrite(self, name: str, drop: Callable[[Reservation], bool]) -> int:
        """Remove matching entries from one shard, retrying on conflict; how many went."""
        with self._lock_for(name.rsplit("-", 1)[0]):
            return self._store.rewrite(name, drop)

    # -- for /metrics ----------------------------------------------------------------

    def ledger_writes(self) -> dict[tuple[str, str], int]:
        """Records by (ClusterQueue, outcome) this replica wrote, took out, or could not."""
        return self.counts.writes()

    def shard_deletions(self) -> dict[str, int]:
        return self.counts.deletions()

    def ledger_objects(self) -> dict[str, int]:
        """QuotaLedger objects in this replica's view, by ledger base (shards and head)."""
        out: dict[str, int] = {}
        for obj in self.state.list(QUOTA_LEDGER.kind):
            base = str((obj.get("metadata") or {}).get("name") or "").rsplit("-", 1)[0]
            out[base] = out.get(base, 0) + 1
        return out


@dataclass
class _Waiting:
    """An admission queued for its cohort's lock; `decision` is set by whoever decides it."""

    uid: str
    pod: str
    evaluate: Callable[[Usage], Decision]
    existing: bool = False  # a pod re-checked in place: decided without its live charge too
    record: Reservation | None = None  # an entry moved as it is (`compact`)
    decision: Decision | None = None
    wake: threading.Event = dataclasses.field(default_factory=threading.Event)


def _settle(batch: list[_Waiting], base: str, decisions: list[Decision], failure: str = "") -> None:
    """Hand every admission of a batch its decision; with `failure`, every allowed one fails
    closed instead (its record was not written)."""
    for waiting, decision in zip(batch, decisions, strict=True):
        waiting.decision = (
            _fail_closed(decision, base, failure) if failure and decision.allowed else decision
        )


def _recorded(charge: Charge) -> Callable[[Usage], Decision]:
    """The decision of a record moved or written behind: what it was admitted for, whatever
    the usage now."""
    return lambda _usage: Decision(Verdict.ADMITTED, "Admitted", charge=charge)


def _unavailable(name: str, why: str) -> Decision:
    return _fail_closed(Decision(Verdict.DENIED, "", ""), name, why)


def _fail_closed(decision: Decision, name: str, why: str) -> Decision:
    return dataclasses.replace(
        decision,
        verdict=Verdict.DENIED,
        reason="LedgerUnavailable",
        message=f"draquota cannot reserve quota now: QuotaLedger {name}: {why}; retry",
        charge=None,
    )
