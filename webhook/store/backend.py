"""The cluster view and the reservation ledger behind one interface each.

`Backend` keeps a `ClusterState` current; `Ledger` turns decisions into
admission records atomically so that concurrent admissions never over-admit.
Records are keyed by the pod's UID, which the API server sets before it asks
the validating webhook and which no user can choose. This module holds the
protocols, what both ledgers share (`SyncedUsage`) and the in-process ledger of
`draquota serve --state DIR` (`MemoryLedger`); the directory backend is
`webhook.store.statedir`, the live-cluster implementations are in `webhook.kube`.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any, Protocol, TypeVar, runtime_checkable

from quota.charge import Charge
from quota.cluster import Obj
from quota.settings import Settings
from quota.usage import Usage
from quota.verdict import Decision
from webhook.edge.runner import Offload, offload_if_inline, running_inline
from webhook.ledger.podusage import PodUsage
from webhook.store.clusterstate import ClusterState

__all__ = [
    "Backend",
    "Ledger",
    "MemoryLedger",
    "SyncedUsage",
    "valid_reservation_id",
]

log = logging.getLogger("draquota.backend")
# At most this many changes are caught up with on the event loop (about a millisecond of
# work); a view further behind is caught up on a worker.
QUICK_CHANGES = 256
_T = TypeVar("_T")


@runtime_checkable
class Backend(Protocol):
    """A cluster view kept current from some source."""

    state: ClusterState
    blocking_io: bool  # fetch() may wait on the network

    def start(self) -> None: ...

    def stop(self) -> None: ...

    def ready(self) -> tuple[bool, str]:
        """(True, "") when caches are synced and fresh, else (False, why)."""
        ...

    def fetch(self, kind: str, namespace: str | None, name: str) -> Mapping[str, Any] | None:
        """One GET on a cache miss (a claim or template created a moment ago); None if absent."""
        ...


@runtime_checkable
class Ledger(Protocol):
    """Usage of live pods plus admissions in flight, updated atomically."""

    blocking_io: bool  # admit() may wait on the network

    def usage(self) -> Usage: ...

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
        """Evaluate against current usage without the pod's own holders; when allowed and not
        dry_run, record the charge as pod `uid`'s admitted charge (`pod`: its `ns/name`;
        `existing`: the pod exists and is re-checked, e.g. a resize; `cluster_queue`: the
        ClusterQueue the pod was routed to, when known before deciding, so that a ledger
        locking per cohort can lock first and decide once; `behind`: the admitted object is
        visible by itself once created, so the record may be written after the answer)."""
        ...

    def record(self, uid: str) -> Charge | None:
        """The admission record of the pod with this UID."""
        ...

    def release(self, uids: list[str]) -> None:
        """Delete these admission records (the queue takes back a group it could not start)."""
        ...

    def ensure_elected(self) -> None:
        """Raise `webhook.ledger.elected.HeldElsewhere` when another replica is the one that
        holds quota (before acting for an admission, e.g. evicting to reclaim for it)."""
        ...

    def users(self, kind: str, namespace: str, name: str) -> list[Obj]:
        """Cached pods whose charge reads this claim or template."""
        ...

    def held_slots(self, job: str, besides: str) -> int:
        """Cached pods of the Job with UID `job` that hold a slot of its record now, the pod
        with UID `besides` left out (`quota.jobrecords`)."""
        ...

    def knows(self, uid: str) -> bool:
        """A pod with this UID is cached, or a pod or Job with it was and is gone."""
        ...


def valid_reservation_id(value: str) -> bool:
    """A record id (a pod UID) can never be mistaken for a pod holder (`ns/name`)."""
    return 0 < len(value) <= 128 and "/" not in value and value.isprintable()


class SyncedUsage:
    """What both ledgers answer from their `PodUsage`: each read catches up first, under the
    lock that guards it (`_view_lock`)."""

    _pods: PodUsage
    _view_lock: threading.RLock

    def _sync(self) -> None:
        raise NotImplementedError

    def _view(self) -> _CaughtUp:
        """`with self._view():` the view, locked and caught up. A decision on the event loop
        waits for neither: when another thread holds the lock, or catching up means charging
        every pod again (queues changed, a relist), it hands over to a worker first
        (`webhook.edge.runner`)."""
        return _CaughtUp(self)

    def _behind(self) -> int | None:
        """Changes the next `_sync` applies; None when it rebuilds."""
        return self._pods.behind()

    def _synced(self, read: Callable[[PodUsage], _T]) -> _T:
        with self._view():
            return read(self._pods)

    def usage(self) -> Usage:
        return self._synced(lambda pods: pods.usage.snapshot())

    def _usage_without(self, uid: str, pod: str, existing: bool) -> Usage:
        """Usage (a copy-on-write view) without the pod's own holders: its admission record,
        and for a pod re-checked in place (`existing`) its live charge by name. The caller
        holds `_view()` until it has decided on the view."""
        view = self._pods.usage.copy()
        view.remove(uid)
        if existing and pod:
            view.remove(pod)
        return view

    def records(self) -> dict[str, Charge]:
        """Admission records by pod UID (a snapshot)."""
        return self._synced(lambda pods: dict(pods.records()))

    def record(self, uid: str) -> Charge | None:
        """The admission record of the pod with this UID."""
        return self._synced(lambda pods: pods.records().get(uid))

    def users(self, kind: str, namespace: str, name: str) -> list[Obj]:
        """Cached pods whose charge reads this claim or template."""
        return self._synced(lambda pods: pods.users(kind, namespace, name))

    def held_slots(self, job: str, besides: str) -> int:
        """Cached pods of the Job with UID `job` that hold a slot of its record now, the pod
        with UID `besides` left out (`quota.jobrecords`)."""
        return self._synced(lambda pods: pods.held_slots(job, besides))

    def knows(self, uid: str) -> bool:
        """A pod with this UID is cached, or a pod or Job with it was and is gone."""
        return self._synced(lambda pods: pods.knows(uid))

    def unrecorded_pods(self) -> int:
        """Managed live pods charged without an admission record (for the metrics)."""
        return len(self._pods.unrecorded)


class _CaughtUp:
    """The context of `SyncedUsage._view` (a class: a generator's context costs an admission
    about 2 µs more, on every decision)."""

    __slots__ = ("_ledger",)

    def __init__(self, ledger: SyncedUsage) -> None:
        self._ledger = ledger

    def __enter__(self) -> None:
        ledger = self._ledger
        lock = ledger._view_lock
        if not lock.acquire(blocking=False):
            offload_if_inline("the ledger's view is in use")
            lock.acquire()
        try:
            # Measured only on the loop: elsewhere `_sync` reads the journal once, itself.
            if running_inline():
                behind = ledger._behind()
                if behind is None or behind > QUICK_CHANGES:
                    raise Offload("the ledger's view is far behind")
            ledger._sync()
        except BaseException:
            lock.release()
            raise

    def __exit__(self, *_: object) -> None:
        self._ledger._view_lock.release()


class MemoryLedger(SyncedUsage):
    """The embedded ledger: admission records in memory, behind one in-process lock.

    Usage = live pods (each charged the larger of its record and its claims now)
    + admissions whose pods have not appeared yet. A record lives while its pod
    holds quota; an admission whose pod never appears stops counting after
    `settings.reservation_ttl_seconds`.
    """

    blocking_io = False

    def __init__(
        self,
        state: ClusterState,
        settings: Settings,
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], float] = time.time,
    ) -> None:
        self._settings = settings
        self._clock = clock
        self._view_lock = threading.RLock()
        self._pods = PodUsage(state, settings, wall)
        # uid -> expiry of admissions whose pods are unseen; insertion order is expiry order
        self._expiry: dict[str, float] = {}

    def reservations(self) -> dict[str, Charge]:
        """Admissions whose pods have not appeared yet (a snapshot)."""
        return self._synced(lambda pods: pods.reserved())

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
        if not valid_reservation_id(uid):
            raise ValueError(f"invalid admission id {uid!r:.80}")
        with self._view():
            decision = evaluate(self._usage_without(uid, pod, existing))
            if dry_run or not decision.allowed or decision.charge is None:
                return decision
            self._pods.set_record(uid, decision.charge)
            if not existing:
                self._pods.reserve(uid, decision.charge)
                self._expiry.pop(uid, None)
                self._expiry[uid] = self._clock() + self._settings.reservation_ttl_seconds
            return decision

    def ensure_elected(self) -> None:
        """The embedded ledger is the only one: always elected."""

    def release(self, uids: list[str]) -> None:
        with self._view_lock:
            for uid in uids:
                self._expiry.pop(uid, None)
                self._pods.unreserve(uid)
                self._pods.set_record(uid, None)

    def _sync(self) -> None:
        self._pods.sync()
        now = self._clock()
        while self._expiry:
            uid, expires = next(iter(self._expiry.items()))
            if self._pods.is_reserved(uid) and expires > now:
                break
            del self._expiry[uid]
            if self._pods.is_reserved(uid):  # its pod never came
                self._pods.unreserve(uid)
                self._pods.set_record(uid, None)
        departed = self._pods.drain_departed()
        if departed:
            self._pods.update_records(dict.fromkeys(departed))
