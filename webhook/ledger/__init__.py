"""The ledger wing: admission records, and the usage they add to, behind one protocol.

A facade over variants, as `quota.allocator` is over its own: `Ledger` states what every
admission path relies on; `webhook.ledger.memory.MemoryLedger` keeps records in memory
(`draquota serve --state DIR`), `webhook.ledger.cluster.ClusterLedger` keeps them in
QuotaLedger objects every replica shares. Both answer their reads from a `UsageView`: their
`PodUsage` (`webhook.ledger.podusage`), caught up with the cluster store under one lock.

Records are keyed by the pod's UID, which the API server sets before it asks the validating
webhook and which no user can choose (`valid_reservation_id`).

This module imports none of the variants, so that each of them imports it without a cycle.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol, TypeVar, runtime_checkable

from quota.charge import Charge
from quota.cluster import Obj
from quota.usage import Usage
from quota.verdict import Decision
from webhook.edge.runner import Offload, offload_if_inline, running_inline

if TYPE_CHECKING:
    from webhook.ledger.podusage import PodUsage

__all__ = [
    "QUICK_CHANGES",
    "Ledger",
    "SyncedUsage",
    "UsageView",
    "usage_without",
    "valid_reservation_id",
    "without_own_holders",
]

# At most this many changes are caught up with on the event loop (short enough not to
# stall other requests); a view further behind is caught up on a worker.
QUICK_CHANGES = 256
_T = TypeVar("_T")


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


class UsageView:
    """A ledger's `PodUsage` and the lock that guards it.

    `with view as pods:` holds `lock` and hands out `pods` caught up (`sync`). A decision on
    the event loop waits for neither: when another thread holds the lock, or catching up
    means charging every pod again (queues changed, a relist) or more than `QUICK_CHANGES`
    changes, it hands over to a worker first (`webhook.edge.runner`). The context is a class
    (not a generator) and holds no state of its own between entering and leaving, so one
    instance serves every thread.

    Invariant: `pods` is read or changed only while `lock` is held.
    """

    __slots__ = ("_behind", "_sync", "lock", "pods")

    def __init__(
        self,
        pods: PodUsage,
        sync: Callable[[], None],
        behind: Callable[[], int | None] | None = None,
    ) -> None:
        self.pods = pods
        self.lock = threading.RLock()
        self._sync = sync  # brings `pods` (and what its ledger keeps with them) up to date
        self._behind = behind or pods.behind  # changes `sync` would apply; None: a rebuild

    def sync(self) -> None:
        """Catch up now, on this thread; the caller holds `lock`."""
        self._sync()

    def __enter__(self) -> PodUsage:
        lock = self.lock
        if not lock.acquire(blocking=False):
            offload_if_inline("the ledger's view is in use")
            lock.acquire()
        try:
            # Measured only on the loop: elsewhere `sync` reads the journal once, itself.
            if running_inline():
                behind = self._behind()
                if behind is None or behind > QUICK_CHANGES:
                    raise Offload("the ledger's view is far behind")
            self._sync()
        except BaseException:
            lock.release()
            raise
        return self.pods

    def __exit__(self, *_: object) -> None:
        self.lock.release()


def without_own_holders(usage: Usage, uid: str, pod: str, existing: bool) -> Usage:
    """`usage`, changed in place, without what the pod being decided holds itself: its
    admission record (a retried admission), and for a pod re-checked in place (`existing`)
    its live charge by name."""
    usage.remove(uid)
    if existing and pod:
        usage.remove(pod)
    return usage


def usage_without(pods: PodUsage, uid: str, pod: str, existing: bool) -> Usage:
    """Usage (a copy-on-write view) without the pod's own holders (`without_own_holders`).
    The caller holds the view until it has decided on it."""
    return without_own_holders(pods.usage.copy(), uid, pod, existing)


class SyncedUsage:
    """The reads both ledgers answer alike, each from `view` caught up first."""

    def __init__(self, view: UsageView) -> None:
        self.view = view

    def _synced(self, read: Callable[[PodUsage], _T]) -> _T:
        with self.view as pods:
            return read(pods)

    def usage(self) -> Usage:
        return self._synced(lambda pods: pods.usage.snapshot())

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
        return len(self.view.pods.unrecorded)
