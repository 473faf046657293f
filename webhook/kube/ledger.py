"""`ClusterLedger`: admission records shared by every replica, in QuotaLedger objects.

Admission follows Kubernetes' own ResourceQuota admission: read the active shard
of the queue's cohort (a GET, for the freshest resourceVersion), evaluate against
live pod usage plus the records of pods not seen yet, and if allowed write the
record back with the resourceVersion read as precondition. A 409 Conflict means
another replica got there first: read again and evaluate again, a bounded number
of times, then fail closed.

Invariants that keep usage exact (see `webhook.kube.reservations` for the shards):
- a record is keyed by the pod's UID; while a pod with that UID is cached, the pod
  counts (charged at least its record) and the record does not count on its own;
- a record whose pod this replica saw leave (deleted, or finished) counts no more,
  and the reconciler deletes it;
- a record whose pod this replica has not seen counts until `reservation_ttl`
  after this replica first saw the record. Each replica measures that age on its
  own monotonic clock, so a replica whose wall clock is wrong cannot make another
  replica's reservations expire early; the reconciler deletes a record only once
  the replica running it judged it expired.
"""

from __future__ import annotations

import dataclasses
import logging
import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from quota.charge import Charge
from quota.cluster import ClusterState, Obj
from quota.decision import Decision
from quota.settings import Settings
from quota.usage import Usage
from webhook.backend import valid_reservation_id
from webhook.kube.client import ApiError, KubeClient, TransportError
from webhook.kube.periodic import Periodic
from webhook.kube.reservations import (
    SHARD_BYTES,
    Reservation,
    Shard,
    ledger_base,
    ledger_object,
    shard_name,
    shards_of,
)
from webhook.kube.resources import QUOTA_LEDGER
from webhook.podusage import PodUsage

__all__ = ["ClusterLedger", "LedgerOptions"]

log = logging.getLogger("draquota.ledger")


@dataclass(frozen=True)
class LedgerOptions:
    max_attempts: int = 20  # reads+writes per admission before failing closed
    retry_delay: float = 0.005  # first pause after a 409, doubled and jittered
    request_timeout: float = 2.0
    reconcile_interval: float = 5.0
    shard_bytes: int = SHARD_BYTES


class _Backend(Protocol):
    state: ClusterState

    def ready(self) -> tuple[bool, str]: ...

    def attach(self, component: Any) -> None: ...


class ClusterLedger:
    """Ledger over QuotaLedger shards; `start()` runs the reconciler (KubeBackend does it)."""

    blocking_io = True

    def __init__(
        self,
        client: KubeClient,
        backend: _Backend,
        settings: Settings,
        options: LedgerOptions = LedgerOptions(),
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], float] = time.time,
    ) -> None:
        self.client = client
        self.backend = backend
        self.state = backend.state
        self.settings = settings
        self.options = options
        self.clock = clock
        self.wall = wall
        self.conflicts = 0
        self._view_lock = threading.RLock()  # guards _pods, _records and the fields below
        self._pods = PodUsage(self.state, settings, wall)
        self._records_revision: tuple[int, ...] = (-1,)
        self._records: dict[str, Reservation] = {}
        self._parsed: dict[tuple[str, str], Charge | None] = {}
        self._first_seen: dict[str, float] = {}  # uid -> when this replica first saw its record
        self._locks: dict[str, threading.Lock] = {}
        self._locks_guard = threading.Lock()
        self._reconciler = Periodic(
            "ledger", options.reconcile_interval, self.reconcile, lambda: backend.ready()[0]
        )
        backend.attach(self)

    # -- Ledger protocol -------------------------------------------------------------

    def usage(self) -> Usage:
        with self._view_lock:
            self._sync()
            return self._pods.usage.snapshot()

    def records(self) -> dict[str, Charge]:
        """Admission records by pod UID, as this replica sees them."""
        with self._view_lock:
            self._sync()
            return dict(self._pods.records())

    def record(self, uid: str) -> Charge | None:
        """The admission record of the pod with this UID."""
        with self._view_lock:
            self._sync()
            return self._pods.records().get(uid)

    def users(self, kind: str, namespace: str, name: str) -> list[Obj]:
        """Cached pods whose charge reads this claim or template."""
        with self._view_lock:
            self._sync()
            return self._pods.users(kind, namespace, name)

    def admit(
        self,
        uid: str,
        evaluate: Callable[[Usage], Decision],
        dry_run: bool,
        pod: str = "",
        existing: bool = False,
    ) -> Decision:
        if not valid_reservation_id(uid):
            raise ValueError(f"invalid admission id {uid!r:.80}")
        decision = self._evaluate(evaluate, uid, pod, existing)
        if dry_run or decision.charge is None:
            return decision
        base = ledger_base(self.state, decision.charge.cluster_queue)
        delay = self.options.retry_delay
        with self._lock_for(base):
            index = self._active_index(base)
            for _ in range(self.options.max_attempts):
                try:
                    shard = self._read(shard_name(base, index))
                except (ApiError, TransportError) as exc:
                    return _fail_closed(decision, base, str(exc))
                if shard.sealed:
                    index += 1
                    continue
                decision = self._evaluate(evaluate, uid, pod, existing)
                if not decision.allowed or decision.charge is None:
                    return decision
                if ledger_base(self.state, decision.charge.cluster_queue) != base:
                    return _fail_closed(decision, base, "the queue's cohort changed")
                entry = Reservation(
                    uid,
                    decision.charge.cluster_queue,
                    pod,
                    decision.charge.to_annotation(),
                    self.wall(),
                )
                entries = [e for e in shard.entries if e.id != uid]
                full = sum(e.size() for e in entries) + entry.size() > self.options.shard_bytes
                try:
                    self._write(shard, entries if full else [*entries, entry], sealed=full)
                except ApiError as exc:
                    if exc.code != 409:
                        return _fail_closed(decision, base, str(exc))
                    self.conflicts += 1
                    time.sleep(delay * (1 + random.random()))
                    delay = min(delay * 2, 0.2)
                    continue
                except TransportError as exc:
                    return _fail_closed(decision, base, str(exc))
                if full:
                    index += 1
                    continue
                with self._view_lock:
                    self._sync()
                return decision
        return _fail_closed(decision, base, "too many concurrent updates")

    # -- reconciler ------------------------------------------------------------------

    def start(self) -> None:
        self._reconciler.start()

    def stop(self) -> None:
        self._reconciler.stop()

    def reconcile(self) -> int:
        """One pass: delete records of pods that left and of pods that never came."""
        with self._view_lock:
            self._sync()
            drop = {uid for uid in self._records if self._droppable(uid)}
        if not drop:
            return 0
        dropped = 0
        for shards in shards_of(self.state.list(QUOTA_LEDGER.kind)).values():
            for shard in shards:
                if any(e.id in drop for e in shard.entries):
                    dropped += self._rewrite(shard.name, lambda e: e.id in drop)
        return dropped

    def _droppable(self, uid: str) -> bool:
        if self._pods.holds(uid):
            return False
        return self._pods.gone(uid) or self._expired(uid)

    def _expired(self, uid: str) -> bool:
        seen = self._first_seen.get(uid)
        return seen is not None and self.clock() - seen > self.settings.reservation_ttl_seconds

    # -- the view --------------------------------------------------------------------

    def _evaluate(
        self, evaluate: Callable[[Usage], Decision], uid: str, pod: str, existing: bool
    ) -> Decision:
        """Evaluate on a copy-on-write view without the pod's own holders."""
        with self._view_lock:
            self._sync()
            view = self._pods.usage.copy()
            view.remove(uid)
            if existing and pod:
                view.remove(pod)
            return evaluate(view)

    def _sync(self) -> None:
        """Bring pod usage and records up to date (under the view lock)."""
        self._pods.sync()
        revision = self.state.revision(QUOTA_LEDGER.kind)
        if revision != self._records_revision:
            self._records_revision = revision
            self._load_records()
        for uid in list(self._pods.reserved()):
            if self._expired(uid):
                self._pods.unreserve(uid)

    def _load_records(self) -> None:
        """Records by UID from the cached shards (a later shard's entry replaces an earlier)."""
        records: dict[str, Reservation] = {}
        for shards in shards_of(self.state.list(QUOTA_LEDGER.kind)).values():
            for shard in shards:
                records.update((e.id, e) for e in shard.entries)
        now = self.clock()
        changes: dict[str, Charge | None] = {}
        for uid in self._records.keys() - records.keys():
            changes[uid] = None
            self._first_seen.pop(uid, None)
            self._pods.unreserve(uid)
        for uid, entry in records.items():
            old = self._records.get(uid)
            if old is not None and old.charge == entry.charge:
                continue
            charge = self._charge_of(entry)
            changes[uid] = charge
            self._first_seen.setdefault(uid, now)
            if charge is not None and not self._expired(uid):
                self._pods.reserve(uid, charge)
        self._records = records
        self._pods.update_records(changes)

    def _charge_of(self, entry: Reservation) -> Charge | None:
        key = (entry.id, entry.charge)
        if key not in self._parsed:
            if len(self._parsed) > 4 * len(self._records) + 1024:
                self._parsed.clear()
            self._parsed[key] = entry.parsed_charge()
        return self._parsed[key]

    # -- mechanics -------------------------------------------------------------------

    def _lock_for(self, name: str) -> threading.Lock:
        with self._locks_guard:
            return self._locks.setdefault(name, threading.Lock())

    def _active_index(self, base: str) -> int:
        shards = shards_of(self.state.list(QUOTA_LEDGER.kind)).get(base, [])
        return shards[-1].index if shards else 0

    def _read(self, name: str) -> Shard:
        """The shard as the API server has it now; the cache takes it too."""
        timeout = (self.options.request_timeout, self.options.request_timeout)
        try:
            obj = self.client.request("GET", QUOTA_LEDGER.path(name=name), timeout=timeout)
        except ApiError as exc:
            if exc.code == 404:
                return Shard(name)
            raise
        self._remember(obj)
        return Shard.of(obj)

    def _remember(self, obj: dict[str, Any]) -> None:
        obj.setdefault("kind", QUOTA_LEDGER.kind)
        obj.setdefault("apiVersion", QUOTA_LEDGER.api_version)
        self.state.upsert(obj)

    def _write(self, shard: Shard, entries: list[Reservation], sealed: bool = False) -> None:
        """Create or update with the resourceVersion read; ApiError 409 when someone was first."""
        timeout = (self.options.request_timeout, self.options.request_timeout)
        body = ledger_object(shard, entries, sealed)
        if not shard.resource_version:
            written = self.client.request("POST", QUOTA_LEDGER.path(), body=body, timeout=timeout)
        else:
            path = QUOTA_LEDGER.path(name=shard.name)
            written = self.client.request("PUT", path, body=body, timeout=timeout)
        self._remember(written)

    def _rewrite(self, name: str, drop: Callable[[Reservation], bool]) -> int:
        """Remove matching entries from one shard, retrying on conflict; how many went."""
        with self._lock_for(name.rsplit("-", 1)[0]):
            for _ in range(self.options.max_attempts):
                try:
                    shard = self._read(name)
                    if not shard.resource_version:
                        return 0
                    kept = [e for e in shard.entries if not drop(e)]
                    if len(kept) == len(shard.entries):
                        return 0
                    self._write(shard, kept, shard.sealed)
                    return len(shard.entries) - len(kept)
                except ApiError as exc:
                    if exc.code != 409:
                        log.warning("ledger %s: %s", name, exc)
                        return 0
                    self.conflicts += 1
                except TransportError as exc:
                    log.warning("ledger %s: %s", name, exc)
                    return 0
        return 0


def _fail_closed(decision: Decision, name: str, why: str) -> Decision:
    return dataclasses.replace(
        decision,
        allowed=False,
        code=403,
        reason="LedgerUnavailable",
        message=f"draquota cannot reserve quota now: QuotaLedger {name}: {why}; retry",
        charge=None,
    )
