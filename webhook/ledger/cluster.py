"""`ClusterLedger`: admission records shared by every replica, in QuotaLedger objects.

Admission follows Kubernetes' own ResourceQuota admission: read the active shard
of the queue's cohort (a GET, for the freshest resourceVersion), evaluate against
live pod usage plus the records of pods not seen yet, and if allowed write the
record back with the resourceVersion read as precondition. A 409 Conflict means
another replica got there first: read again and evaluate again, a bounded number
of times, then fail closed. Admissions of one cohort that arrive while its shard is
being written are decided together, in order, and written in one write
(`webhook.ledger.groupcommit`).

Invariants that keep usage exact (see `webhook.ledger.reservations` for the shards):
- a record is keyed by the pod's UID; while a pod with that UID is cached, the pod
  counts (charged at least its record) and the record does not count on its own;
- a record whose pod this replica saw leave (deleted, or finished) counts no more,
  and the reconciler deletes it (`webhook.ledger.upkeep`);
- a record whose pod this replica has not seen counts until `reservation_ttl`
  after this replica first saw the record. Each replica measures that age on its
  own monotonic clock (`webhook.ledger.shards`), so a replica whose wall clock is wrong
  cannot make another replica's reservations expire early; the reconciler deletes a
  record only once the replica running it judged it expired.

Who owns what: this class the API I/O of an admission and its retry loop; `RecordView` the
view decisions are made on (pods' usage and the shards loaded, `ShardIndex`), caught up with
the store; `GroupCommit` the lock and queue per cohort; `Upkeep` the reconciler's pass;
`ShardStore` the reads and writes; `WriteRate` the pace of writes per ClusterQueue;
`WriteBehind` and `ElectedAdmission` the elected replica's writes.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable
from typing import Protocol

from certs.periodic import Periodic
from quota.settings import Settings
from quota.usage import Usage
from quota.verdict import Decision, Verdict
from webhook.edge.runner import offload_if_inline
from webhook.kube.client import ApiError, KubeClient, TransportError
from webhook.kube.warmup import WarmUp
from webhook.ledger import SyncedUsage, usage_without, valid_reservation_id
from webhook.ledger.counts import LedgerCounts
from webhook.ledger.elected import ElectedAdmission, Elector
from webhook.ledger.groupcommit import (
    GroupCommit,
    Proposal,
    fail_closed,
    recorded,
    settle,
    unavailable,
)
from webhook.ledger.options import LedgerOptions
from webhook.ledger.recordview import RecordView
from webhook.ledger.reservations import Reservation, Shard
from webhook.ledger.shards import base_of
from webhook.ledger.shardstore import ShardStore
from webhook.ledger.upkeep import Upkeep
from webhook.ledger.writebehind import WriteBehind
from webhook.ledger.writerate import WriteRate
from webhook.store.clusterstate import ClusterState

__all__ = ["ClusterLedger"]

log = logging.getLogger("draquota.ledger")
_DEFAULT_OPTIONS = LedgerOptions()


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
        options: LedgerOptions = _DEFAULT_OPTIONS,
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
        self.store = ShardStore(
            client, self.state, self.counts, options.request_timeout, options.max_attempts
        )
        wait = min(options.write_wait, settings.admission_deadline_seconds / 2)
        self._rate = WriteRate(options.write_rate, options.write_burst, wait, clock=clock)
        self.batches = GroupCommit()
        self.record_view = RecordView(
            self.state, settings, clock, wall, lambda uids: self.upkeep.note(uids)
        )
        self.upkeep = Upkeep(self)
        super().__init__(self.record_view.caught_up)
        # Records and every pod's charge loaded before readiness: at 100,000 pods that takes
        # tens of seconds, which no admission should wait for. Unloaded, it cannot decide.
        self._warm_up = WarmUp(
            "ledger-warm-up",
            backend,
            self.record_view.catch_up,
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
        return self._conflicts + self.store.conflicts

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
            return self.record_view.decide(evaluate, uid, pod, existing)[0]
        if self._elected is not None:
            if self._elected.refusal() is not None:  # answered only if it holds nothing
                return self._elected.hold(self.record_view.decide(evaluate, uid, pod, existing)[0])
            if behind and cluster_queue and not existing:
                return self._admit_behind(uid, evaluate, pod, cluster_queue)
        offload_if_inline("a QuotaLedger write")
        mine = Proposal(uid, pod, evaluate, existing)
        seed: tuple[Decision, Shard] | None = None
        if cluster_queue:
            if self._rate.turn(cluster_queue) is None:
                return self._throttled(cluster_queue)
            if not existing:
                return self.batches.join(self.record_view.base(cluster_queue), mine, self.commit)
            base = self.record_view.base(cluster_queue)
        else:  # the decision names the queue, and so the cohort to lock
            decision, shard = self.record_view.decide(evaluate, uid, pod, existing)
            if not decision.allowed or decision.charge is None or shard is None:
                return decision
            queue = decision.charge.cluster_queue
            if self._rate.turn(queue) is None:
                return self._throttled(queue)
            base, seed = self.record_view.base(queue), (decision, shard)
        with self.batches.lock(base):
            self.commit(base, [mine], seed=seed)
        return mine.decision or unavailable(base, "draquota failed to decide")

    def _admit_behind(
        self, uid: str, evaluate: Callable[[Usage], Decision], pod: str, cluster_queue: str
    ) -> Decision:
        """Decide on this replica's view, hold the charge there at once, write it later."""
        base = self.record_view.base(cluster_queue)
        self._read_once_in_term(base)
        with self.view as pods:
            decision = evaluate(usage_without(pods, uid, pod, False))
            charge = decision.charge
            if not decision.allowed or charge is None:
                return decision
            if self.record_view.base(charge.cluster_queue) != base:
                return fail_closed(decision, base, "the queue's cohort changed")
            pods.set_record(uid, charge)
            pods.reserve(uid, charge)
            self.record_view.index.decided(uid, self.clock())
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
        with self.batches.lock(base):
            if self._read_in_term.get(base) != term.start:
                self.store.locate(base, lambda: self.record_view.caught_up_top(base))
                self._read_in_term[base] = term.start

    def _write_behind(self, base: str, records: list[Reservation]) -> set[str]:
        """Write records decided before (`WriteBehind`); the ids written. A record whose
        queue moved to another cohort meanwhile goes to that cohort's ledger next round."""
        parsed = self.view.pods.charges.parsed
        charges = [(r, parsed(r.charge, r.parsed_charge)) for r in records]
        batch = [Proposal(r.id, r.pod, recorded(c), record=r) for r, c in charges if c]
        with self.batches.lock(base):
            self.commit(base, batch)
        written = {p.uid for p in batch if p.decision is not None and p.decision.allowed}
        written |= {r.id for r, c in charges if c is None}  # never: its text was our own
        for record in records:
            moved = self.record_view.base(record.cluster_queue)
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

    def commit(
        self,
        base: str,
        batch: list[Proposal],
        outcome: str = "written",
        seed: tuple[Decision, Shard] | None = None,
    ) -> None:
        """Decide the batch in order, each admission on the usage with the records of the ones
        before it, and write the allowed records in one write to the active shard; again, all
        of it, after a conflict (the shard then read first). The caller holds the base's lock.
        `outcome`: what the records written are counted as; `seed`: a decision of a batch of
        one made before the lock, kept while the shard it saw is still the active one."""
        delay, decisions = self.options.retry_delay, None
        for _ in range(self.options.max_attempts):
            if decisions is not None:  # a conflict, or a shard just sealed: the view is behind
                try:
                    self.store.locate(base, lambda: self.record_view.caught_up_top(base))
                except (ApiError, TransportError) as exc:
                    return settle(batch, base, decisions, str(exc))
            if seed is not None and not self.record_view.moved(base, seed[1]):
                decisions, shard = [seed[0]], seed[1]
            else:
                decisions, shard = self.record_view.decide_together(base, batch)
            seed = None
            allowed = {
                p.uid: (p.pod, d.charge)
                for p, d in zip(batch, decisions, strict=True)
                if d.allowed and d.charge is not None
            }
            if not allowed:
                return settle(batch, base, decisions)
            now = self.wall()
            kept = {p.uid: p.record for p in batch if p.record is not None}
            new = [
                kept.get(uid)
                or Reservation(uid, charge.cluster_queue, pod, charge.to_annotation(), now)
                for uid, (pod, charge) in allowed.items()
            ]
            queues = [charge.cluster_queue for _, charge in allowed.values()]
            try:
                # with the resourceVersion the decisions saw: a 409 means they are stale, a
                # 404 that the shard they saw is gone (emptied, deleted): a newer one is active
                full = self.store.append(base, shard, new, self.options.shard_bytes)
            except ApiError as exc:
                if exc.code not in (404, 409):
                    self.counts.records(queues, "error")
                    return settle(batch, base, decisions, str(exc))
                self.counts.records(queues, "conflict")
                self._conflicts += 1
                time.sleep(delay * (1 + random.random()))
                delay = min(delay * 2, 0.2)
                continue
            except TransportError as exc:
                self.counts.records(queues, "error")
                return settle(batch, base, decisions, str(exc))
            self.record_view.catch_up()
            if not full:
                self.counts.records(queues, outcome)
                return settle(batch, base, decisions)
        if decisions is None:  # max_attempts 0
            decisions = [unavailable(base, "no attempts allowed") for _ in batch]
        return settle(batch, base, decisions, "too many concurrent updates")

    def release(self, uids: list[str]) -> None:
        """Delete these records from every shard holding them (read, then rewritten)."""
        drop = set(uids)
        unwritten = self._writes.discard(drop)
        with self.view.lock:
            pods = self.view.pods
            for uid in unwritten:  # held by this view alone: let go here
                pods.unreserve(uid)
                pods.set_record(uid, None)
            self.record_view.sync()
            names = {n for uid in drop for n in self.record_view.index.holders(uid)}
        for name in sorted(names):
            with self.batches.lock(base_of(name)):
                self.store.rewrite(name, lambda e: e.id in drop)
        self.record_view.catch_up()

    # -- lifecycle and the reconciler ----------------------------------------------------

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

    def reconcile(self) -> int:
        """One reconciler pass (`Upkeep.reconcile`); how many records were deleted."""
        return self.upkeep.reconcile()

    def top(self, base: str) -> int | None:
        """The index of the shard of `base` created last, as this view knows it (None for a
        new ledger)."""
        with self.view.lock:
            return self.record_view.top(base)

    # -- for /metrics ----------------------------------------------------------------

    def ledger_writes(self) -> dict[tuple[str, str], int]:
        """Records by (ClusterQueue, outcome) this replica wrote, took out, or could not."""
        return self.counts.writes()

    def shard_deletions(self) -> dict[str, int]:
        return self.counts.deletions()

    def ledger_objects(self) -> dict[str, int]:
        """QuotaLedger objects in this replica's view, by ledger base (shards and head)."""
        return self.record_view.objects()
