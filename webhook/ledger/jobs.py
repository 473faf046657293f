"""`JobSlots`: the cached Jobs, the pods each controls, and which of them its record covers.

A Job admitted as a whole holds its admission record (under `job_holder`) while it is live;
the record covers at most `slots` of its pods at a time, the oldest that hold a slot
(`quota.jobrecords`), and those pods are charged nothing of their own. `PodUsage` charges
pods and Jobs; this class only keeps the Job side of the index and answers which pods are
covered, so that `PodUsage` can recharge the pods whose cover moved.

Records and the time are handed in by the caller on every call that reads them (they are
`PodUsage`'s), so this class does no I/O and reads no clock. Not thread-safe, as
`PodUsage`.

Invariants: a cover is computed only from the Job, the record and the pods cached now, and
dropped when any of them may have changed it (`put`, `forget_cover`, a pod taking or giving
up a slot); `_pods` holds only non-empty maps; `_uids` and `_jobs` name the same Jobs.
"""

from __future__ import annotations

from collections.abc import KeysView, Mapping

from quota.charge import Charge, share
from quota.cluster import Obj
from quota.jobrecords import covered_keys, holds_slot, slots
from quota.livepods import is_live_job, pod_uid

__all__ = ["JobSlots", "job_holder"]


def job_holder(key: str) -> str:
    """The usage holder of the Job `ns/name` admitted as a whole (no pod key contains `:`,
    so a pod named like the Job is never mistaken for it)."""
    return f"Job:{key}"


class JobSlots:
    """Jobs by `ns/name`, their pods by Job UID, and the slots those pods hold."""

    def __init__(self) -> None:
        self._jobs: dict[str, Obj] = {}  # ns/name -> cached Job
        self._uids: dict[str, str] = {}  # uid -> ns/name of every cached Job with a UID
        self._pods: dict[str, dict[str, Obj]] = {}  # Job uid -> pod key -> pod it controls
        self._holding: dict[str, bool] = {}  # pod key -> it holds a slot of its Job's record
        self._covers: dict[str, frozenset[str]] = {}  # Job uid -> pod keys its record covers

    # -- the Jobs --------------------------------------------------------------------

    def key_of(self, uid: str) -> str | None:
        """The `ns/name` of the cached Job with this UID."""
        return self._uids.get(uid)

    def job(self, key: str) -> Obj | None:
        return self._jobs.get(key)

    def keys(self) -> KeysView[str]:
        return self._jobs.keys()

    def departed_from(self, current: Mapping[str, Obj]) -> list[str]:
        """UIDs of the cached Jobs that `current` (every Job by `ns/name`) no longer has."""
        return [
            uid
            for key, old in self._jobs.items()
            if (uid := pod_uid(old)) and (key not in current or pod_uid(current[key]) != uid)
        ]

    def put(self, key: str, job: Obj | None) -> str:
        """Cache the Job at `key` (None: it was deleted); the UID of a Job that left with it
        ("" when none did). The covers of both Jobs are dropped."""
        old = self._jobs.pop(key, None)
        left = pod_uid(old) if old is not None else ""
        uid = pod_uid(job) if job is not None else ""
        if left == uid:
            left = ""
        if left:
            self._uids.pop(left, None)
            self._covers.pop(left, None)
        if job is not None:
            self._jobs[key] = job
            if uid:
                self._uids[uid] = key
                self._covers.pop(uid, None)
        return left

    def forget_cover(self, uid: str) -> list[str]:
        """The Job or its record changed: whom its record covers is found again when asked.
        The keys of its pods, sorted: their charges may change with it."""
        self._covers.pop(uid, None)
        return sorted(self._pods.get(uid, ()))

    # -- their pods ------------------------------------------------------------------

    def add_pod(self, owner: str, key: str, pod: Obj) -> None:
        """A pod the Job with UID `owner` controls is cached (or a newer copy of it)."""
        self._pods.setdefault(owner, {})[key] = pod

    def remove_pod(
        self, owner: str, key: str, records: Mapping[str, Charge], now: float
    ) -> list[str]:
        """The pod left the cache; the keys of the other pods whose cover moved with it."""
        pods = self._pods.get(owner)
        if pods is not None:
            pods.pop(key, None)
            if not pods:
                del self._pods[owner]
        if self._holding.pop(key, False) and owner:
            return self._slot_changed(owner, key, records, now)
        return []

    def update_slot(
        self, owner: str, key: str, pod: Obj, records: Mapping[str, Charge], now: float
    ) -> list[str]:
        """Note whether the pod holds a slot of its Job's record now; the keys of the other
        pods whose cover moved when it took or gave up its slot."""
        holding = holds_slot(pod, records, now)
        if self._holding.get(key) == holding:
            return []
        self._holding[key] = holding
        return self._slot_changed(owner, key, records, now)

    def holding(self, key: str) -> bool:
        """The pod held a slot of its Job's record when last noted."""
        return self._holding.get(key, False)

    def covers(self, owner: str, key: str, records: Mapping[str, Charge], now: float) -> bool:
        """The record of the live Job with UID `owner` covers the pod at `key`."""
        return key in self._cover(owner, records, now)

    def share(self, owner: str, records: Mapping[str, Charge]) -> Charge | None:
        """What one covered pod of the live Job with UID `owner` may hold of its record."""
        found = self._record(owner, records)
        return share(found[0], slots(*found)) if found is not None else None

    def held_slots(self, job: str, besides: str, records: Mapping[str, Charge], now: float) -> int:
        """Cached pods of the Job with UID `job` holding a slot of its record now, but the
        pod with UID `besides`."""
        pods = self._pods.get(job, {}).values()
        return sum(1 for p in pods if pod_uid(p) != besides and holds_slot(p, records, now))

    # -- mechanics -------------------------------------------------------------------

    def _record(self, owner: str, records: Mapping[str, Charge]) -> tuple[Charge, Obj] | None:
        """The record and object of the live Job admitted as a whole with this UID."""
        key = self._uids.get(owner) if owner else None
        record = records.get(owner) if key is not None else None
        if key is None or record is None or not is_live_job(self._jobs[key]):
            return None
        return record, self._jobs[key]

    def _cover(self, owner: str, records: Mapping[str, Charge], now: float) -> frozenset[str]:
        """The keys of the pods the Job's record covers now; kept until a pod of the Job takes
        or gives up a slot, or the Job or its record changes."""
        cover = self._covers.get(owner)
        if cover is None:
            found = self._record(owner, records)
            pods = self._pods.get(owner, {}).items()
            cover = (
                covered_keys(found[0], found[1], pods, records, now)
                if found is not None
                else frozenset()
            )
            self._covers[owner] = cover
        return cover

    def _slot_changed(
        self, owner: str, key: str, records: Mapping[str, Charge], now: float
    ) -> list[str]:
        """A pod of the Job took or gave up a slot: the other pods whose cover moved."""
        before = self._covers.pop(owner, None)
        if before is None:
            return []
        return sorted(moved for moved in before ^ self._cover(owner, records, now) if moved != key)
