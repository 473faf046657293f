"""`PodUsage`: what the live pods of a cluster view hold, kept incrementally.

Each live pod is charged by `quota.livepods.live_pod_charge` with its admission
record (looked up by UID in the records its ledger hands in). The index follows
the view's change journal: a changed pod is recharged alone, a changed claim or
template recharges the pods that read it, a changed Namespace or LocalQueue
recharges the pods of its namespace, a change to ClusterQueues, flavors or
classes recharges everything. A deleted pod that is still terminating keeps its charge
until `deletionTimestamp + grace`, when a timer recharges it to nothing.

Not thread-safe: the ledger that owns it calls it under its lock.

Longer than 400 lines because `PodUsage` is one incremental index: every journal handler
updates the same maps, and reads best next to the others.
"""

from __future__ import annotations

import heapq
import logging
import time
import weakref
from collections.abc import Callable, Mapping
from functools import partial
from typing import Any

from quota.charge import Charge, share, within
from quota.claims import CLAIM_KINDS, claim_references
from quota.cluster import Obj
from quota.derived import DerivedCache
from quota.errors import DraquotaError
from quota.jobrecords import covered_keys, holds_slot, slots
from quota.livepods import (
    is_live_job,
    is_live_pod,
    job_owner,
    live_pod_charge,
    pod_key,
    pod_uid,
    released_at,
)
from quota.recharge import recompute_charge
from quota.settings import Settings
from webhook.clusterstate import ClusterState
from webhook.usageindex import IndexedUsage

__all__ = [
    "CHARGE_KINDS",
    "CONFIG_KINDS",
    "GLOBAL_KINDS",
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

_Ref = tuple[str, str | None, str]
# how long the UID of a pod that stopped holding quota is remembered
GONE_MEMORY_SECONDS = 600.0


def _same_pod(old: Obj | None, new: Obj) -> bool:
    """The same object, or the same version of it (the API server's resourceVersion changes
    with every write, so equal versions of one UID are equal pods)."""
    if old is None:
        return False
    if old is new:
        return True
    version = _metadata(new).get("resourceVersion")
    return (
        bool(version)
        and version == _metadata(old).get("resourceVersion")
        and pod_uid(old) == pod_uid(new)
    )


def _metadata(obj: Obj) -> Mapping[str, Any]:
    metadata = obj.get("metadata")
    return metadata if isinstance(metadata, Mapping) else {}


class ChargeCache:
    """One Charge object per distinct charge, by its annotation text, while anything holds it.

    Pods stamped from one template are charged alike: 100,000 pods hold a few hundred
    distinct charges, and one object each (about 1 KB) instead of one per pod and one per
    record saves about 200 MiB at that size. Entries go when no pod or record holds them.
    """

    def __init__(self) -> None:
        self._by_text: weakref.WeakValueDictionary[str, Charge] = weakref.WeakValueDictionary()

    def parsed(self, text: str, parse: Callable[[], Charge | None]) -> Charge | None:
        """The charge an annotation text records (`parse` runs only for a text not held)."""
        found = self._by_text.get(text)
        if found is None:
            found = parse()
            if found is not None:
                self._by_text[text] = found
        return found

    def shared(self, charge: Charge) -> Charge:
        """The object held for an equal charge, or this one from now on."""
        text = charge.to_annotation()
        found = self._by_text.get(text)
        if found is None:
            self._by_text[text] = charge
            return charge
        return found


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
        self._cache = DerivedCache()  # what charging derives from the cluster view, between pods
        self.usage = IndexedUsage()
        self.charges = ChargeCache()
        self._records: dict[str, Charge] = {}
        self._pods: dict[str, Obj] = {}
        self._uids: dict[str, str] = {}  # uid -> key, for every cached pod with a UID
        self._gone: dict[str, float] = {}  # uid -> when its pod left the view
        self._releases: list[tuple[float, str]] = []  # (release time, key) of terminating pods
        self._users: dict[_Ref, set[str]] = {}  # claim or template -> keys of pods reading it
        self._by_namespace: dict[str, set[str]] = {}  # namespace -> keys of its cached pods
        self._revisions: dict[str, int] = {}
        self._config_revision: tuple[int, ...] = ()
        self._synced: tuple[int, ...] = ()  # revision(*_SYNC_KINDS) the last sync caught up with
        self._synced_generation = -1  # the generation of the view that sync read last
        self._reserved: dict[str, Charge] = {}  # uid -> charge of an admission whose pod is unseen
        self._departed: list[str] = []  # uids of recorded pods that stopped holding quota
        self.unrecorded: set[str] = set()  # keys of managed live pods without a record
        self._jobs: dict[str, Obj] = {}  # ns/name -> cached Job
        self._job_uids: dict[str, str] = {}  # uid -> ns/name of every cached Job
        self._owned: dict[str, set[str]] = {}  # Job uid -> keys of the pods it controls
        self._holding: dict[str, bool] = {}  # key -> the pod holds a slot of its Job's record
        self._covers: dict[str, frozenset[str]] = {}  # Job uid -> keys its record covers
        self.rebuild()

    # -- queries -------------------------------------------------------------------

    def holds(self, uid: str) -> bool:
        """A cached pod (or Job) with this UID holds quota now (its record counts with it)."""
        key = self._uids.get(uid)
        if key is None and uid in self._job_uids:
            key = job_holder(self._job_uids[uid])
        return key is not None and self.usage.charge_of(key) is not None

    def gone(self, uid: str) -> bool:
        """A pod or Job with this UID was seen and holds no quota any more (deleted or
        finished)."""
        key = self._uids.get(uid)
        if key is None and uid in self._job_uids:
            return not is_live_job(self._jobs[self._job_uids[uid]])
        if key is None:
            return uid in self._gone
        return not is_live_pod(self._pods[key], self._wall())

    def records(self) -> Mapping[str, Charge]:
        return self._records

    def users(self, kind: str, namespace: str, name: str) -> list[Obj]:
        """The cached pods whose charge reads this claim or template (named or generated)."""
        keys = sorted(self._users.get((kind, namespace, name), ()))
        return [self._pods[key] for key in keys if key in self._pods]

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
            key = self._uids.get(uid)
            if key is not None:
                self._charge(key, self._pods[key])
            if uid in self._job_uids:
                self._charge_job(self._job_uids[uid])

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
        self._forget_gone()

    def _catch_up(self) -> None:
        if self._state.revision(*GLOBAL_KINDS) != self._config_revision:
            self.rebuild()
            return
        self._apply_changes("Pod", self._pod_changed)
        for kind in NAMESPACE_KINDS:
            if not self._namespaces_changed(kind):
                self.rebuild()  # a relist of the kind: every namespace may have changed
                break
        for kind in CLAIM_KINDS:
            self._apply_changes(kind, partial(self._claim_changed, kind))
        self._apply_job_changes()

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
            seen = self._revisions.get(kind, 0)
            if self._state.revision(kind)[0] == seen:
                continue
            keys = self._state.changed_since(kind, seen)
            if keys is None:
                return None
            if kind in NAMESPACE_KINDS:  # every pod of the namespace is charged again
                names = {name if kind == "Namespace" else (ns or "default") for ns, name in keys}
                total += sum(len(self._by_namespace.get(n, ())) for n in names)
            total += len(keys)
        return total

    def rebuild(self) -> None:
        """Charge every pod again (queues or classes changed, or on start)."""
        self._config_revision = self._state.revision(*GLOBAL_KINDS)
        for kind in ("Pod", *NAMESPACE_KINDS, *CLAIM_KINDS):
            self._revisions[kind] = self._state.revision(kind)[0]
        current = {pod_key(pod): pod for pod in self._state.list("Pod")}
        for key, old in self._pods.items():
            uid = pod_uid(old)
            if uid and (key not in current or pod_uid(current[key]) != uid):
                self._left(uid)
        self._revisions["Job"] = self._state.revision("Job")[0]
        jobs = {pod_key(job): job for job in self._state.list("Job")}
        for key, old in self._jobs.items():
            uid = pod_uid(old)
            if uid and (key not in jobs or pod_uid(jobs[key]) != uid):
                self._left(uid)
        self.usage = IndexedUsage(self._reserved)
        self._pods, self._uids, self._users, self._by_namespace = {}, {}, {}, {}
        self._jobs, self._job_uids, self._owned = {}, {}, {}
        self._holding, self._covers = {}, {}
        self._releases, self.unrecorded = [], set()
        for key, job in jobs.items():
            self._job_changed(key, job)
        for key, pod in current.items():
            self._pod_changed(key, pod)

    # -- mechanics -----------------------------------------------------------------

    def _apply_changes(self, kind: str, changed: Callable[[str, Obj | None], None]) -> None:
        seen = self._revisions.get(kind, 0)
        now = self._state.revision(kind)[0]
        if now == seen:
            return
        self._revisions[kind] = now
        keys = self._state.changed_since(kind, seen)
        if keys is None:  # a relist: compare everything
            if kind != "Pod":
                for ref in list(self._users):
                    if ref[0] == kind:
                        self._claim_changed(kind, f"{ref[1]}/{ref[2]}")
                return
            current = {pod_key(pod): pod for pod in self._state.list("Pod")}
            for key in self._pods.keys() - current.keys():
                self._pod_changed(key, None)
            for key, pod in current.items():
                self._pod_changed(key, pod)
            return
        for namespace, name in sorted(keys, key=lambda k: (k[0] or "", k[1])):
            key = f"{namespace or 'default'}/{name}"
            changed(key, self._state.get(kind, namespace, name) if kind == "Pod" else None)

    def _namespaces_changed(self, kind: str) -> bool:
        """Recharge the pods of every namespace a changed object of `kind` belongs to (a
        Namespace is its own); False when the journal cannot tell which (a relist)."""
        seen = self._revisions.get(kind, 0)
        now = self._state.revision(kind)[0]
        if now == seen:
            return True
        keys = self._state.changed_since(kind, seen)
        if keys is None:
            return False
        self._revisions[kind] = now
        namespaces = {name if kind == "Namespace" else (ns or "default") for ns, name in keys}
        for namespace in sorted(namespaces):
            for key in sorted(self._by_namespace.get(namespace, ())):
                self._charge(key, self._pods[key])
        return True

    def _claim_changed(self, kind: str, key: str, _claim: Obj | None = None) -> None:
        namespace, name = key.split("/", 1)
        for user in sorted(self._users.get((kind, namespace, name), ())):
            pod = self._pods.get(user)
            if pod is not None:
                self._charge(user, pod)

    def _pod_changed(self, key: str, pod: Obj | None) -> None:
        if pod is not None and _same_pod(self._pods.get(key), pod):
            self._pods[key] = pod  # a relist's copy of an unchanged pod: nothing to recharge
            return
        self._forget(key, still=pod_uid(pod) if pod is not None else "")
        if pod is None:
            return
        self._pods[key] = pod
        self._by_namespace.setdefault(key.split("/", 1)[0], set()).add(key)
        uid = pod_uid(pod)
        if uid:
            self._uids[uid] = key
            self._gone.pop(uid, None)
        for ref in claim_references(pod, generated=True):
            self._users.setdefault(ref, set()).add(key)
        if owner := job_owner(pod):
            self._owned.setdefault(owner, set()).add(key)
        self._charge(key, pod)

    def _forget(self, key: str, still: str = "") -> None:
        """Drop a pod from the index (`still`: the UID of the pod that replaces it at once)."""
        old = self._pods.pop(key, None)
        if old is None:
            return
        namespace = key.split("/", 1)[0]
        keys = self._by_namespace.get(namespace)
        if keys is not None:
            keys.discard(key)
            if not keys:
                del self._by_namespace[namespace]
        for ref in claim_references(old, generated=True):
            users = self._users.get(ref)
            if users is not None:
                users.discard(key)
                if not users:
                    del self._users[ref]
        owner = job_owner(old)
        if owner and (owned := self._owned.get(owner)) is not None:
            owned.discard(key)
            if not owned:
                del self._owned[owner]
        if self._holding.pop(key, False) and owner:
            self._slot_changed(owner, key)
        uid = pod_uid(old)
        if uid and uid != still and self._uids.get(uid) == key:
            del self._uids[uid]
            self._left(uid)
        self.usage.remove(key)
        self.unrecorded.discard(key)

    def _left(self, uid: str) -> None:
        self._gone.pop(uid, None)  # re-inserted at the end: the dict stays oldest first
        self._gone[uid] = self._wall()
        if uid in self._records:
            self._departed.append(uid)

    def _job_record(self, owner: str) -> tuple[Charge, Obj] | None:
        """The record and object of the live Job admitted as a whole with this UID."""
        key = self._job_uids.get(owner) if owner else None
        record = self._records.get(owner) if key is not None else None
        if key is None or record is None or not is_live_job(self._jobs[key]):
            return None
        return record, self._jobs[key]

    def _cover(self, owner: str) -> frozenset[str]:
        """The keys of the pods the Job's record covers now (`quota.jobrecords`); kept until a
        pod of the Job takes or gives up a slot, or the Job or its record changes."""
        cover = self._covers.get(owner)
        if cover is None:
            found = self._job_record(owner)
            keys = self._owned.get(owner, ())
            pods = [(k, self._pods[k]) for k in keys if k in self._pods]
            cover = (
                covered_keys(found[0], found[1], pods, self._records, self._wall())
                if found is not None
                else frozenset()
            )
            self._covers[owner] = cover
        return cover

    def _slot_changed(self, owner: str, key: str) -> None:
        """A pod of the Job took or gave up a slot: recharge the other pods whose cover moved."""
        before = self._covers.pop(owner, None)
        if before is None:
            return
        for moved in sorted(before ^ self._cover(owner)):
            if moved != key and (pod := self._pods.get(moved)) is not None:
                self._charge(moved, pod)

    def _covered(self, key: str, pod: Obj, record: Charge | None, now: float) -> bool:
        """The pod is one its Job's record covers, within its share: the record charges it."""
        owner = job_owner(pod)
        if not owner:
            return False
        holding = holds_slot(pod, self._records, now)
        if self._holding.get(key) != holding:
            self._holding[key] = holding
            self._slot_changed(owner, key)
        if record is not None or key not in self._cover(owner):
            return False
        found = self._job_record(owner)
        if found is None:
            return False
        try:
            current = recompute_charge(
                pod, self._state.snapshot(), self._settings, cache=self._cache
            )
        except DraquotaError:
            return True  # its claims cannot be read: the record charges it, as a pod's own does
        return current is None or within(current, share(found[0], slots(*found)))

    def held_slots(self, job: str, besides: str) -> int:
        """Cached pods of the Job with UID `job` holding a slot of its record now, but the pod
        with UID `besides`."""
        now = self._wall()
        pods = [self._pods[key] for key in self._owned.get(job, ()) if key in self._pods]
        return sum(1 for p in pods if pod_uid(p) != besides and holds_slot(p, self._records, now))

    def knows(self, uid: str) -> bool:
        """A pod with this UID is cached, or a pod or Job with it was and is gone."""
        return uid in self._uids or uid in self._gone

    def _charge(self, key: str, pod: Obj) -> None:
        uid, now = pod_uid(pod), self._wall()
        record = self._records.get(uid) if uid else None
        if self._covered(key, pod, record, now):
            self.usage.remove(key)
            self.unrecorded.discard(key)
            self._release_later(key, pod)  # its slot frees when its grace ends
            return
        try:
            charge = live_pod_charge(
                pod, self._state.snapshot(), self._settings, now, record, cache=self._cache
            )
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

    def _apply_job_changes(self) -> None:
        seen, now = self._revisions.get("Job", 0), self._state.revision("Job")[0]
        if now == seen:
            return
        self._revisions["Job"] = now
        keys = self._state.changed_since("Job", seen)
        if keys is None:  # a relist: compare every Job
            current = {pod_key(job): job for job in self._state.list("Job")}
            for key in self._jobs.keys() - current.keys():
                self._job_changed(key, None)
            for key, job in current.items():
                self._job_changed(key, job)
            return
        for namespace, name in sorted(keys, key=lambda k: (k[0] or "", k[1])):
            self._job_changed(
                f"{namespace or 'default'}/{name}", self._state.get("Job", namespace, name)
            )

    def _job_changed(self, key: str, job: Obj | None) -> None:
        old = self._jobs.pop(key, None)
        old_uid = pod_uid(old) if old is not None else ""
        if old_uid and (job is None or pod_uid(job) != old_uid):
            self._job_uids.pop(old_uid, None)
            self._left(old_uid)
            self._recharge_owned(old_uid)
        self.usage.remove(job_holder(key))
        if job is None:
            return
        self._jobs[key] = job
        if uid := pod_uid(job):
            self._job_uids[uid] = key
            self._gone.pop(uid, None)
        self._charge_job(key)

    def _charge_job(self, key: str) -> None:
        """A Job with a record holds it while it is live; its pods are covered by it."""
        job = self._jobs[key]
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
        self._covers.pop(uid, None)  # the Job or its record changed: who it covers too
        for pod_key_ in sorted(self._owned.get(uid, ())):
            if (pod := self._pods.get(pod_key_)) is not None:
                self._charge(pod_key_, pod)

    def _release_due(self) -> None:
        now = self._wall()
        while self._releases and self._releases[0][0] < now:
            _, key = heapq.heappop(self._releases)
            pod = self._pods.get(key)
            held = self.usage.charge_of(key) is not None or self._holding.get(key)
            if pod is not None and held:
                self._charge(key, pod)

    def _forget_gone(self) -> None:
        """Forget UIDs gone longer than GONE_MEMORY_SECONDS, oldest first: O(forgotten)."""
        horizon = self._wall() - GONE_MEMORY_SECONDS
        while self._gone:
            uid, at = next(iter(self._gone.items()))
            if at >= horizon:
                return
            del self._gone[uid]


def job_holder(key: str) -> str:
    """The usage holder of the Job `ns/name` admitted as a whole (no pod key contains `:`,
    so a pod named like the Job is never mistaken for it)."""
    return f"Job:{key}"
