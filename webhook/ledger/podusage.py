"""`PodUsage`: what the live pods of a cluster view hold, kept incrementally.

Each live pod is charged by `quota.livepods.live_pod_charge` with its admission
record (looked up by UID in the records its ledger hands in). The index follows
the view's change journal: a changed pod is recharged alone, a changed claim or
template recharges the pods that read it, a changed Namespace or LocalQueue
recharges the pods of its namespace, a change to ClusterQueues, flavors or
classes recharges everything. A deleted pod that is still terminating keeps its charge
until `deletionTimestamp + grace`, when a timer recharges it to nothing.

Who owns what: `PodUsage` owns the charges, records, reservations and the usage they add
up to, and reacts to every change; `webhook.ledger.podindex.PodIndex` owns the cached pods and
answers who reads what; `webhook.ledger.jobs.JobSlots` owns the Jobs and which of their pods
hold a slot of their record; `quota.journal.JournalCursor` says what changed since
the last sync; `webhook.ledger.goneuids.GoneUids` remembers UIDs that left;
`webhook.ledger.charges.ChargeCache` shares equal charges.

Not thread-safe: the ledger that owns it calls it under its lock.
"""

from __future__ import annotations

import heapq
import logging
import time
from collections.abc import Callable, Iterable, Mapping

from quota.charge import Charge, within
from quota.claims import CLAIM_KINDS
from quota.cluster import Key, Obj
from quota.errors import DraquotaError
from quota.journal import JournalCursor
from quota.livepods import (
    is_live_job,
    is_live_pod,
    job_owner,
    live_pod_charge,
    pod_key,
    pod_uid,
    released_at,
)
from quota.objectkeys import namespace_or_default
from quota.recharge import recompute_charge
from quota.settings import Settings
from webhook.ledger.charges import ChargeCache
from webhook.ledger.goneuids import GONE_MEMORY_SECONDS, GoneUids
from webhook.ledger.jobs import JobSlots, job_holder
from webhook.ledger.podindex import PodIndex
from webhook.ledger.usageindex import IndexedUsage
from webhook.store.clusterstate import ClusterState

__all__ = [
    "CHARGE_KINDS",
    "CONFIG_KINDS",
    "GLOBAL_KINDS",
    "GONE_MEMORY_SECONDS",
    "NAMESPACE_KINDS",
    "ChargeCache",
    "PodUsage",
    "job_holder",
]

log = logging.getLogger("draquota.usage")

# Kinds every pod's charge depends on: a change to one of them recharges every pod.
GLOBAL_KINDS = ("ClusterQueue", "ResourceFlavor", "DeviceClass")
# Kinds a pod's charge reads only in its own namespace (its LocalQueue; the namespace's labels
# a ClusterQueue's namespaceSelector matches): a change recharges the pods of that namespace.
NAMESPACE_KINDS = ("LocalQueue", "Namespace")
CONFIG_KINDS = GLOBAL_KINDS + NAMESPACE_KINDS
# Kinds a pod's charge depends on through its own claims: a change recharges the pods using them.
CHARGE_KINDS = CONFIG_KINDS + CLAIM_KINDS

# Everything `PodUsage.sync` follows.
_SYNC_KINDS = (*CHARGE_KINDS, "Pod", "Job")


def _namespaces(kind: str, keys: Iterable[Key]) -> set[str]:
    """The namespaces changed LocalQueues or Namespaces (each its own) belong to."""
    return {name if kind == "Namespace" else namespace_or_default(ns) for ns, name in keys}


class PodUsage:
    """Usage of live pods by `ns/name`, plus which UIDs are live, and which are gone."""

    def __init__(
        self,
        state: ClusterState,
        settings: Settings,
        wall: Callable[[], float] = time.time,
    ) -> None:
        self._state = state
        self._settings = settings
        self._wall = wall
        self.usage = IndexedUsage()
        self.charges = ChargeCache()
        self._records: dict[str, Charge] = {}
        self._pods = PodIndex()
        self._gone = GoneUids()
        self._releases: list[tuple[float, str]] = []  # (release time, key) of terminating pods
        self._cursor = JournalCursor(state)
        self._config_revision: tuple[int, ...] = ()
        self._synced: tuple[int, ...] = ()  # revision(*_SYNC_KINDS) the last sync caught up with
        self._synced_generation = -1  # the generation of the view that sync read last
        self._reserved: dict[str, Charge] = {}  # uid -> charge of an admission whose pod is unseen
        self._departed: list[str] = []  # uids of recorded pods that stopped holding quota
        self.unrecorded: set[str] = set()  # keys of managed live pods without a record
        self._jobs = JobSlots()
        self.rebuild()

    # -- queries -------------------------------------------------------------------

    def holds(self, uid: str) -> bool:
        """A cached pod (or Job) with this UID holds quota now (its record counts with it)."""
        key = self._pods.key_of(uid)
        if key is None and (job := self._jobs.key_of(uid)) is not None:
            key = job_holder(job)
        return key is not None and self.usage.charge_of(key) is not None

    def gone(self, uid: str) -> bool:
        """A pod or Job with this UID was seen and holds no quota any more (deleted or
        finished)."""
        key = self._pods.key_of(uid)
        if key is None and (job := self._jobs.key_of(uid)) is not None:
            found = self._jobs.job(job)
            return found is None or not is_live_job(found)
        pod = self._pods.get(key) if key is not None else None
        if pod is None:
            return uid in self._gone
        return not is_live_pod(pod, self._wall())

    def records(self) -> Mapping[str, Charge]:
        return self._records

    def users(self, kind: str, namespace: str, name: str) -> list[Obj]:
        """The cached pods whose charge reads this claim or template (named or generated)."""
        pods = (self._pods.get(key) for key in self._pods.readers((kind, namespace, name)))
        return [pod for pod in pods if pod is not None]

    def reserved(self) -> dict[str, Charge]:
        """Reservations still counted on their own (their pods not seen yet)."""
        return dict(self._reserved)

    def is_reserved(self, uid: str) -> bool:
        return uid in self._reserved

    def drain_departed(self) -> list[str]:
        """UIDs of pods with a record that left or stopped holding quota since the last call."""
        departed, self._departed = self._departed, []
        return departed

    # -- updates -------------------------------------------------------------------

    def reserve(self, uid: str, charge: Charge) -> None:
        """Count an admission whose pod is not in the view yet (until it is, or `unreserve`)."""
        if self.holds(uid) or self.gone(uid):
            return
        self._reserved[uid] = charge
        self.usage.add(uid, charge)

    def unreserve(self, uid: str) -> None:
        if self._reserved.pop(uid, None) is not None:
            self.usage.remove(uid)

    def set_record(self, uid: str, charge: Charge | None) -> None:
        """Set (or with None, drop) one pod's admission record."""
        self.update_records({uid: charge})

    def update_records(self, changes: Mapping[str, Charge | None]) -> None:
        """Apply record changes; recharges the cached pods whose record changed."""
        for uid, charge in changes.items():
            if self._records.get(uid) == charge:
                continue
            if charge is None:
                self._records.pop(uid, None)
            else:
                self._records[uid] = charge
            if (key := self._pods.key_of(uid)) is not None:
                self._recharge([key])
            if (job := self._jobs.key_of(uid)) is not None:
                self._charge_job(job)

    def sync(self) -> None:
        """Catch up with the view's changes and with terminating pods whose grace ran out."""
        generation = self._state.generation  # read first: later changes show next time
        if generation != self._synced_generation:
            seen = self._state.revision(*_SYNC_KINDS)
            if seen != self._synced:
                self._catch_up()
                self._synced = seen
            self._synced_generation = generation
        self._release_due()
        self._gone.forget_before(self._wall())

    def _catch_up(self) -> None:
        if self._state.revision(*GLOBAL_KINDS) != self._config_revision:
            self.rebuild()
            return
        for key, pod in self._cursor.changed("Pod", self._pods.keys()):
            self._pod_changed(key, pod)
        for kind in NAMESPACE_KINDS:
            keys = self._cursor.take(kind)
            if keys is None:
                self.rebuild()  # a relist of the kind: every namespace may have changed
                return
            for namespace in sorted(_namespaces(kind, keys)):  # recharge their pods
                self._recharge(self._pods.in_namespace(namespace))
        for kind in CLAIM_KINDS:
            self._claims_changed(kind, self._cursor.take(kind))
        for key, job in self._cursor.changed("Job", self._jobs.keys()):
            self._job_changed(key, job)

    def behind(self) -> int | None:
        """About how many pods and objects the next `sync` handles; None when it charges every
        pod again (queues or classes changed, or a relist). Reads the journal only."""
        if self._state.generation == self._synced_generation:
            return 0
        if self._state.revision(*_SYNC_KINDS) == self._synced:
            return 0
        if self._state.revision(*GLOBAL_KINDS) != self._config_revision:
            return None
        total = 0
        for kind in ("Pod", *NAMESPACE_KINDS, *CLAIM_KINDS, "Job"):
            keys = self._cursor.peek(kind)
            if keys is None:
                return None
            if kind in NAMESPACE_KINDS:  # every pod of the namespace is charged again
                total += sum(self._pods.count_in(n) for n in _namespaces(kind, keys))
            total += len(keys)
        return total

    def rebuild(self) -> None:
        """Charge every pod again (queues or classes changed, or on start)."""
        self._config_revision = self._state.revision(*GLOBAL_KINDS)
        self._cursor.mark("Pod", *NAMESPACE_KINDS, *CLAIM_KINDS, "Job")
        current = {pod_key(pod): pod for pod in self._state.list("Pod")}
        jobs = {pod_key(job): job for job in self._state.list("Job")}
        for uid in self._pods.departed_from(current) + self._jobs.departed_from(jobs):
            self._left(uid)
        self.usage = IndexedUsage(self._reserved)
        self._pods, self._jobs = PodIndex(), JobSlots()
        self._releases, self.unrecorded = [], set()
        for key, job in jobs.items():
            self._job_changed(key, job)
        for key, pod in current.items():
            self._pod_changed(key, pod)

    # -- mechanics -----------------------------------------------------------------

    def _claims_changed(self, kind: str, keys: list[Key] | None) -> None:
        """Recharge the pods reading a changed claim or template (on a relist, every one)."""
        refs = (
            self._pods.refs(kind)
            if keys is None
            else [(kind, namespace_or_default(namespace), name) for namespace, name in keys]
        )
        for ref in refs:
            self._recharge(self._pods.readers(ref))

    def _pod_changed(self, key: str, pod: Obj | None) -> None:
        if pod is not None and self._pods.refresh(key, pod):  # nothing to recharge
            if owner := job_owner(pod):
                self._jobs.add_pod(owner, key, pod)
            return
        self._forget(key, still=pod_uid(pod) if pod is not None else "")
        if pod is None:
            return
        self._pods.add(key, pod)
        self._gone.back(pod_uid(pod))
        if owner := job_owner(pod):
            self._jobs.add_pod(owner, key, pod)
        self._charge(key, pod)

    def _forget(self, key: str, still: str = "") -> None:
        """Drop a pod from the index (`still`: the UID of the pod that replaces it at once)."""
        old, left = self._pods.remove(key, still)
        if old is None:
            return
        self._recharge(self._jobs.remove_pod(job_owner(old), key, self._records, self._wall()))
        if left:
            self._left(left)
        self.usage.remove(key)
        self.unrecorded.discard(key)

    def _left(self, uid: str) -> None:
        self._gone.left(uid, self._wall())
        if uid in self._records:
            self._departed.append(uid)

    def _covered(self, key: str, pod: Obj, record: Charge | None, now: float) -> bool:
        """The pod is one its Job's record covers, within its share: the record charges it."""
        owner = job_owner(pod)
        if not owner:
            return False
        self._recharge(self._jobs.update_slot(owner, key, pod, self._records, now))
        if record is not None or not self._jobs.covers(owner, key, self._records, now):
            return False
        slot = self._jobs.share(owner, self._records)
        if slot is None:
            return False
        try:
            current = recompute_charge(pod, self._state.snapshot(), self._settings)
        except DraquotaError:
            return True  # its claims cannot be read: the record charges it, as a pod's own does
        return current is None or within(current, slot)

    def held_slots(self, job: str, besides: str) -> int:
        """Cached pods of the Job with UID `job` holding a slot of its record now, but the pod
        with UID `besides`."""
        return self._jobs.held_slots(job, besides, self._records, self._wall())

    def knows(self, uid: str) -> bool:
        """A pod with this UID is cached, or a pod or Job with it was and is gone."""
        return self._pods.key_of(uid) is not None or uid in self._gone

    def _charge(self, key: str, pod: Obj) -> None:
        uid, now = pod_uid(pod), self._wall()
        record = self._records.get(uid) if uid else None
        if self._covered(key, pod, record, now):
            self.usage.remove(key)
            self.unrecorded.discard(key)
            self._release_later(key, pod)  # its slot frees when its grace ends
            return
        try:
            charge = live_pod_charge(pod, self._state.snapshot(), self._settings, now, record)
        except DraquotaError as exc:  # a malformed pod keeps its record, if it has one
            log.warning("cannot charge live pod", extra={"pod": key, "error": str(exc)})
            charge = record if is_live_pod(pod, now) else None
        self.usage.remove(key)
        self.unrecorded.discard(key)
        if charge is not None and charge is not record:
            charge = self.charges.shared(charge)
        if charge is None:
            if record is not None:
                self._departed.append(uid)
            return
        self.usage.add(key, charge)
        if uid:
            self.unreserve(uid)  # the pod counts now, with its record
        if record is None:
            self.unrecorded.add(key)
        self._release_later(key, pod)

    def _release_later(self, key: str, pod: Obj) -> None:
        release = released_at(pod)
        if release is not None:
            heapq.heappush(self._releases, (release, key))

    def _job_changed(self, key: str, job: Obj | None) -> None:
        if left := self._jobs.put(key, job):
            self._left(left)
            self._recharge_owned(left)
        self.usage.remove(job_holder(key))
        if job is None:
            return
        self._gone.back(pod_uid(job))
        self._charge_job(key)

    def _charge_job(self, key: str) -> None:
        """A Job with a record holds it while it is live; its pods are covered by it."""
        job = self._jobs.job(key)
        if job is None:
            return
        uid = pod_uid(job)
        record = self._records.get(uid) if uid else None
        self.usage.remove(job_holder(key))
        if record is not None and is_live_job(job):
            self.usage.add(job_holder(key), record)
            self.unreserve(uid)
        elif record is not None:
            self._departed.append(uid)
        self._recharge_owned(uid)

    def _recharge_owned(self, uid: str) -> None:
        self._recharge(self._jobs.forget_cover(uid))  # the Job or its record changed

    def _recharge(self, keys: list[str]) -> None:
        for key in keys:
            if (pod := self._pods.get(key)) is not None:
                self._charge(key, pod)

    def _release_due(self) -> None:
        now = self._wall()
        while self._releases and self._releases[0][0] < now:
            _, key = heapq.heappop(self._releases)
            pod = self._pods.get(key)
            held = self.usage.charge_of(key) is not None or self._jobs.holding(key)
            if pod is not None and held:
                self._charge(key, pod)
