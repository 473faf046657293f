"""The cluster view and the reservation ledger behind one interface each.

`Backend` keeps a `ClusterState` current; `Ledger` turns decisions into
reservations atomically so that concurrent admissions never over-admit. This
module holds the protocols and the embedded implementations used by
`draquota serve --state DIR`: `StateDirBackend` (a directory of manifests,
optionally watched by polling mtimes) and `MemoryLedger` (an in-process lock).
The live-cluster implementations live in `webhook.kube`.
"""

from __future__ import annotations

import hashlib
import logging
import threading
import time
from collections import Counter
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Protocol, TypeVar, runtime_checkable

from quota.charge import CHARGE_ANNOTATION, Charge, FlavorResource
from quota.claims import claim_references
from quota.cluster import ClusterState, Obj
from quota.decision import Decision
from quota.errors import DraquotaError
from quota.quantity import INT64_MAX
from quota.settings import Settings
from quota.usage import Usage, live_pod_charge, usage_from_pods
from webhook.state import MANIFEST_SUFFIXES, load_state

__all__ = [
    "CHARGE_KINDS",
    "CLAIM_KINDS",
    "QUEUE_KINDS",
    "Backend",
    "IndexedUsage",
    "Ledger",
    "MemoryLedger",
    "StateDirBackend",
    "pod_reservation",
    "reservation_holder",
    "valid_reservation_id",
]

log = logging.getLogger("draquota.backend")

# Kinds every pod's charge depends on: a change to one of them rebuilds usage from all pods.
QUEUE_KINDS = (
    "ClusterQueue",
    "LocalQueue",
    "ResourceFlavor",
    "Namespace",
    "DeviceClass",
)
# Kinds a pod's charge depends on through its own claims: a change recharges the pods using them.
CLAIM_KINDS = ("ResourceClaim", "ResourceClaimTemplate")
CHARGE_KINDS = QUEUE_KINDS + CLAIM_KINDS

_Ref = tuple[str, str | None, str]
_T = TypeVar("_T")


def _claim_refs(pod: Obj) -> set[_Ref]:
    """The claims and templates a pod's charge reads (entries and generated claims)."""
    return set(claim_references(pod, generated=True))


@runtime_checkable
class Backend(Protocol):
    """A cluster view kept current from some source."""

    state: ClusterState

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
    """Usage of live pods plus outstanding reservations, updated atomically."""

    def usage(self) -> Usage: ...

    def admit(
        self, reservation: str, evaluate: Callable[[Usage], Decision], dry_run: bool
    ) -> Decision:
        """Evaluate against current usage; when allowed and not dry_run, hold the charge."""
        ...

    def release(self, reservation: str) -> None: ...


def valid_reservation_id(value: str) -> bool:
    """A reservation id must never collide with a pod holder (`ns/name`)."""
    return 0 < len(value) <= 128 and "/" not in value and value.isprintable()


def reservation_holder(reservation: str, pod_key: str) -> str:
    """The ledger id of one pod's reservation: the admission's reservation id bound to the pod.

    The id in a charge annotation can be copied into other pods (`kubectl get -o yaml` and
    create again); bound to the pod's `ns/name`, copies never share, confirm or release
    each other's reservations, and a retried admission of the same pod reuses its own.
    """
    digest = hashlib.sha256(pod_key.encode()).hexdigest()[:16]
    return f"{reservation[:96]}:{digest}"


def pod_reservation(pod: Mapping[str, Any]) -> str | None:
    """The ledger id a live pod confirms: its annotation's reservation bound to the pod."""
    metadata = pod.get("metadata") or {}
    annotations = metadata.get("annotations") if isinstance(metadata, Mapping) else None
    text = annotations.get(CHARGE_ANNOTATION) if isinstance(annotations, Mapping) else None
    if not isinstance(text, str):
        return None
    key = _pod_key(pod)
    try:
        reservation = Charge.from_annotation(text, key).reservation
    except DraquotaError:
        return None
    return reservation_holder(reservation, key) if reservation else None


def _signature(root: Path) -> tuple[tuple[str, int, int], ...]:
    if root.is_file():
        files = [root]
    else:
        files = sorted(p for p in root.rglob("*") if p.is_file() and p.suffix in MANIFEST_SUFFIXES)
    entries = []
    for path in files:
        try:
            stat = path.stat()
        except OSError:
            continue
        entries.append((str(path), stat.st_mtime_ns, stat.st_size))
    return tuple(entries)


class StateDirBackend:
    """`--state DIR`: the cluster is a directory of manifests, reloaded when files change."""

    blocking_io = False

    def __init__(self, root: Path, watch_interval: float | None = None) -> None:
        self.root = root
        self.watch_interval = watch_interval
        self._signature = _signature(root)
        self.state = load_state(root)
        self._error = ""
        self._reloads = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        if self.watch_interval and self._thread is None:
            self._stop.clear()
            self._thread = threading.Thread(target=self._watch, name="state-dir-watch", daemon=True)
            self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None

    def ready(self) -> tuple[bool, str]:
        return (not self._error, self._error)

    def fetch(self, kind: str, namespace: str | None, name: str) -> Mapping[str, Any] | None:
        return None

    def relists(self) -> Mapping[str, int]:
        """Reloads of the directory, for the metrics."""
        return {"state-dir": self._reloads}

    def poll(self) -> bool:
        """Reload when a file changed since the last look; True when it did."""
        signature = _signature(self.root)
        if signature == self._signature:
            return False
        self._signature = signature
        self.reload()
        return True

    def reload(self) -> None:
        """Load the directory again and replace each kind whose objects changed."""
        try:
            fresh = load_state(self.root)
        except (DraquotaError, OSError) as exc:
            self._error = f"state directory {self.root} is invalid: {exc}"
            log.error("state reload failed", extra={"error": str(exc)})
            return
        for kind in sorted(set(fresh.kinds()) | set(self.state.kinds())):
            objects = fresh.list(kind)
            if objects != self.state.list(kind):
                self.state.replace_kind(kind, objects)
        self._error = ""
        self._reloads += 1
        log.info("state reloaded", extra={"root": str(self.root)})

    def _watch(self) -> None:
        assert self.watch_interval
        while not self._stop.wait(self.watch_interval):
            try:
                self.poll()
            except Exception:  # the watcher must survive anything a half-written file does
                log.exception("state watch failed")


_Shared = dict[tuple[str, FlavorResource], Counter[int]]


def _apply(
    totals: dict[FlavorResource, int],
    shared: Callable[[tuple[str, FlavorResource]], Counter[int]],
    charge: Charge,
    sign: int,
) -> None:
    """Add (sign 1) or take back (sign -1) one charge's contribution to a queue's index."""
    for key, value in charge.flavor_usage().items():
        totals[key] = totals.get(key, 0) + sign * value
        if not totals[key]:
            del totals[key]
    for claim, amounts in charge.shared_flavor_usage().items():
        for key, value in amounts.items():
            counts = shared((claim, key))
            counts[value] += sign
            if counts[value] <= 0:
                del counts[value]


def _sum(totals: Mapping[FlavorResource, int], shared: Mapping[Any, Counter[int]]) -> dict:
    total = dict(totals)
    for (_, key), amounts in shared.items():
        if amounts:
            total[key] = total.get(key, 0) + max(amounts)
    return {key: min(value, INT64_MAX) for key, value in sorted(total.items())}


class IndexedUsage(Usage):
    """Usage with per-queue totals kept on add/remove, so `of()` costs O(resources of a queue).

    `Usage.of` sums every holder per call; with thousands of live pods and
    reservations that would be the hot path's cost. This index gives the same
    answers: per-pod parts are summed, and each shared claim counts once per queue
    at the largest amount any holder records for it (a multiset of amounts keeps
    removal exact). Saturation at int64 is applied when read, so removal never
    drifts. `copy()` is a copy-on-write overlay (O(1)), valid while this usage is
    not modified — the decision takes one inside the ledger's lock; `snapshot()`
    is an independent copy.
    """

    def __init__(self, charges: Mapping[str, Charge] | None = None) -> None:
        self._totals: dict[str, dict[FlavorResource, int]] = {}
        self._shared: dict[str, _Shared] = {}
        super().__init__()
        for holder, charge in (charges or {}).items():
            self.add(holder, charge)

    @classmethod
    def of_usage(cls, usage: Usage) -> IndexedUsage:
        """An indexed, independent copy of any Usage."""
        charges = {h: c for h in usage.holders() if (c := usage.charge_of(h)) is not None}
        return cls(charges)

    def add(self, holder: str, charge: Charge) -> None:
        self.remove(holder)
        super().add(holder, charge)
        self._index(charge, 1)

    def remove(self, holder: str) -> None:
        old = self.charge_of(holder)
        if old is not None:
            super().remove(holder)
            self._index(old, -1)

    def of(self, cluster_queue: str) -> dict[FlavorResource, int]:
        return _sum(self._totals.get(cluster_queue, {}), self._shared.get(cluster_queue, {}))

    def shared_claims(self, cluster_queue: str) -> set[tuple[str, FlavorResource]]:
        return set(self._shared.get(cluster_queue, {}))

    def copy(self) -> Usage:
        return _Overlay(self)

    def snapshot(self) -> IndexedUsage:
        return IndexedUsage.of_usage(self)

    def _index(self, charge: Charge, sign: int) -> None:
        shared = self._shared.setdefault(charge.cluster_queue, {})
        _apply(
            self._totals.setdefault(charge.cluster_queue, {}),
            lambda key: shared.setdefault(key, Counter()),
            charge,
            sign,
        )
        for key in [key for key, counts in shared.items() if not counts]:
            del shared[key]


class _Overlay(Usage):
    """Changes on top of an IndexedUsage that must stay unmodified while the overlay lives."""

    def __init__(self, base: IndexedUsage) -> None:
        super().__init__()
        self._base = base
        self._removed: dict[str, Charge] = {}
        self._added: dict[str, Charge] = {}

    def add(self, holder: str, charge: Charge) -> None:
        self.remove(holder)
        self._added[holder] = charge

    def remove(self, holder: str) -> None:
        if self._added.pop(holder, None) is not None:
            return
        base = self._base.charge_of(holder)
        if base is not None:
            self._removed.setdefault(holder, base)

    def charge_of(self, holder: str) -> Charge | None:
        if holder in self._added:
            return self._added[holder]
        return None if holder in self._removed else self._base.charge_of(holder)

    def holders(self) -> set[str]:
        return (self._base.holders() - set(self._removed)) | set(self._added)

    def _queue(self, cluster_queue: str) -> tuple[dict[FlavorResource, int], _Shared]:
        totals = dict(self._base._totals.get(cluster_queue, {}))
        base_shared = self._base._shared.get(cluster_queue, {})
        shared: _Shared = dict(base_shared)
        touched: set[tuple[str, FlavorResource]] = set()

        def counts(key: tuple[str, FlavorResource]) -> Counter[int]:
            if key not in touched:
                touched.add(key)
                shared[key] = Counter(base_shared.get(key, Counter()))
            return shared[key]

        for sign, changes in ((-1, self._removed), (1, self._added)):
            for charge in changes.values():
                if charge.cluster_queue == cluster_queue:
                    _apply(totals, counts, charge, sign)
        return totals, {key: value for key, value in shared.items() if value}

    def of(self, cluster_queue: str) -> dict[FlavorResource, int]:
        return _sum(*self._queue(cluster_queue))

    def shared_claims(self, cluster_queue: str) -> set[tuple[str, FlavorResource]]:
        return set(self._queue(cluster_queue)[1])

    def copy(self) -> Usage:
        return IndexedUsage({h: c for h in self.holders() if (c := self.charge_of(h)) is not None})


class MemoryLedger:
    """The embedded ledger: usage kept incrementally behind one in-process lock.

    Usage = live pods' recomputed charges + outstanding reservations. Pod changes
    are applied per pod (the hot path never re-scans all pods); a change to a kind
    charges depend on (queues, claims, classes) rebuilds usage once. A reservation
    is released when a pod carrying its id in the charge annotation appears, or
    after `settings.reservation_ttl_seconds`. Per admission: O(1) amortised
    bookkeeping plus the decision itself; pod changes cost O(changed pods), read from
    `ClusterState.changed_since`.
    """

    blocking_io = False

    def __init__(
        self,
        state: ClusterState,
        settings: Settings,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._state = state
        self._settings = settings
        self._clock = clock
        self._lock = threading.RLock()
        # reservation id -> (expires at, charge); insertion order is expiry order (constant ttl)
        self._reservations: dict[str, tuple[float, Charge]] = {}
        self._pods: dict[str, Obj] = {}
        self._pod_revision: tuple[int, ...] = ()
        self._queue_revision: tuple[int, ...] = ()
        self._claim_revisions: dict[str, int] = {}
        self._users: dict[
            _Ref, set[str]
        ] = {}  # claim or template -> pod keys whose charge reads it
        self._usage = IndexedUsage()
        self._rebuild()

    def usage(self) -> Usage:
        with self._lock:
            self._sync()
            return self._usage.snapshot()

    def with_usage(self, read: Callable[[Usage], _T]) -> _T:
        """Call `read` with a copy-on-write view of the usage (O(1), unlike `usage()`, which
        copies every holder); the view is valid only inside the call, which holds the lock."""
        with self._lock:
            self._sync()
            return read(self._usage.copy())

    def reservations(self) -> dict[str, Charge]:
        """Outstanding reservations (a snapshot)."""
        with self._lock:
            self._sync()
            return {rid: charge for rid, (_, charge) in self._reservations.items()}

    def admit(
        self, reservation: str, evaluate: Callable[[Usage], Decision], dry_run: bool
    ) -> Decision:
        if not valid_reservation_id(reservation):
            raise ValueError(f"invalid reservation id {reservation!r:.80}")
        with self._lock:
            self._sync()
            if dry_run:
                return evaluate(self._usage)
            # A retried request must not count against itself.
            if self._reservations.pop(reservation, None) is not None:
                self._usage.remove(reservation)
            decision = evaluate(self._usage)
            if decision.allowed and decision.charge is not None:
                expires = self._clock() + self._settings.reservation_ttl_seconds
                self._usage.add(reservation, decision.charge)
                self._reservations[reservation] = (expires, decision.charge)
            return decision

    def release(self, reservation: str) -> None:
        with self._lock:
            if self._reservations.pop(reservation, None) is not None:
                self._usage.remove(reservation)

    def _sync(self) -> None:
        if self._state.revision(*QUEUE_KINDS) != self._queue_revision:
            self._rebuild()
        else:
            if self._state.revision("Pod") != self._pod_revision:
                self._apply_pod_changes()
            for kind in CLAIM_KINDS:
                if self._state.revision(kind)[0] != self._claim_revisions.get(kind, 0):
                    self._apply_claim_changes(kind)
        self._expire()

    def _rebuild(self) -> None:
        self._queue_revision = self._state.revision(*QUEUE_KINDS)
        self._claim_revisions = {kind: self._state.revision(kind)[0] for kind in CLAIM_KINDS}
        self._pod_revision = self._state.revision("Pod")
        self._usage = IndexedUsage.of_usage(usage_from_pods(self._state, self._settings))
        self._pods = {}
        self._users = {}
        for pod in self._state.list("Pod"):
            key = _pod_key(pod)
            self._pods[key] = pod
            self._track_refs(key, pod)
            self._release_for(pod)
        for rid, (_, charge) in self._reservations.items():
            self._usage.add(rid, charge)

    def _apply_claim_changes(self, kind: str) -> None:
        seen = self._claim_revisions.get(kind, 0)
        self._claim_revisions[kind] = self._state.revision(kind)[0]
        changed = self._state.changed_since(kind, seen)
        if changed is None:
            self._rebuild()
            return
        for namespace, name in changed:
            for key in sorted(self._users.get((kind, namespace, name), ())):
                pod = self._pods.get(key)
                if pod is not None:
                    self._charge_pod(key, pod)

    def _track_refs(self, key: str, pod: Obj) -> None:
        for ref in _claim_refs(pod):
            self._users.setdefault(ref, set()).add(key)

    def _apply_pod_changes(self) -> None:
        """Recharge the pods changed since the last look: from the state's journal, O(changes);
        by comparing every pod only when the journal cannot tell (a relist)."""
        seen = self._pod_revision[0] if self._pod_revision else 0
        self._pod_revision = self._state.revision("Pod")
        changed = self._state.changed_since("Pod", seen)
        if changed is None:
            current = {_pod_key(pod): pod for pod in self._state.list("Pod")}
            for key in self._pods.keys() - current.keys():
                self._pod_changed(key, None)
            for key, pod in current.items():
                self._pod_changed(key, pod)
            return
        for namespace, name in changed:
            self._pod_changed(
                f"{namespace or 'default'}/{name}", self._state.get("Pod", namespace, name)
            )

    def _pod_changed(self, key: str, pod: Obj | None) -> None:
        if pod is not None and self._pods.get(key) is pod:
            return
        self._untrack(key)
        if pod is None:
            self._pods.pop(key, None)
            self._usage.remove(key)
            return
        self._pods[key] = pod
        self._track_refs(key, pod)
        self._charge_pod(key, pod)

    def _untrack(self, key: str) -> None:
        old = self._pods.get(key)
        for ref in _claim_refs(old) if old is not None else ():
            users = self._users.get(ref)
            if users is not None:
                users.discard(key)
                if not users:
                    del self._users[ref]

    def _charge_pod(self, key: str, pod: Obj) -> None:
        self._usage.remove(key)
        try:
            charge = live_pod_charge(pod, self._state, self._settings)
        except DraquotaError as exc:
            log.warning("cannot charge live pod", extra={"pod": key, "error": str(exc)})
            charge = None
        if charge is not None:
            self._usage.add(key, charge)
        self._release_for(pod)

    def _release_for(self, pod: Obj) -> None:
        holder = pod_reservation(pod)
        if holder and self._reservations.pop(holder, None) is not None:
            self._usage.remove(holder)

    def _expire(self) -> None:
        now = self._clock()
        while self._reservations:
            rid, (expires, _) = next(iter(self._reservations.items()))
            if expires > now:
                return
            del self._reservations[rid]
            self._usage.remove(rid)


def _pod_key(pod: Obj) -> str:
    metadata = pod.get("metadata") or {}
    return f"{metadata.get('namespace') or 'default'}/{metadata.get('name')}"
