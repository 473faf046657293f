"""`JobPods`: whether a pod of a Job admitted as a whole is covered by the Job's record.

The Job controller creates a Job's pods; the Job's record covers at most `slots` of them at
a time, each at most its share (`quota.jobrecords`). A pod it creates beyond that (a
replacement beside pods still terminating, a pod of a template made larger since) is
admitted as a pod of its own: it waits gated in its queue, or is denied. The pods this
replica covered are remembered until its cache shows them, so that pods created at once
are not all counted against the same free slot.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

from quota.charge import Charge, share, within
from quota.cluster import Obj
from quota.errors import DraquotaError
from quota.jobrecords import slots
from quota.livepods import is_live_job, job_owner, pod_uid
from quota.objectkeys import namespace_of
from quota.recharge import recompute_charge
from quota.settings import Settings
from webhook.ledger import Ledger
from webhook.store.backend import Backend

__all__ = ["JobPods"]

# how long a covered pod is counted before this replica's cache shows it
REMEMBERED_SECONDS = 60.0
REMEMBERED_JOBS = 1024  # past this many Jobs, the expired ones are forgotten at once


def _owner_name(pod: Mapping[str, Any], uid: str) -> str:
    metadata = pod.get("metadata")
    owners = metadata.get("ownerReferences") if isinstance(metadata, Mapping) else None
    for owner in owners if isinstance(owners, list) else ():
        if isinstance(owner, Mapping) and owner.get("uid") == uid:
            name = owner.get("name")
            return name if isinstance(name, str) else ""
    return ""


class JobPods:
    """Answers for the pods of Jobs admitted as a whole; thread-safe."""

    def __init__(
        self,
        backend: Backend,
        ledger: Ledger,
        settings: Settings,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.backend = backend
        self.ledger = ledger
        self.settings = settings
        self.clock = clock
        self._lock = threading.Lock()
        self._recent: dict[str, dict[str, float]] = {}  # Job uid -> pod uid -> forget at

    def job_of(self, pod: Mapping[str, Any]) -> tuple[Obj, Charge] | None:
        """The live Job admitted as a whole that controls the pod, and its record."""
        owner = job_owner(pod)
        record = self.ledger.record(owner) if owner else None
        if record is None:
            return None
        namespace = namespace_of(pod)
        job = self.backend.state.get("Job", namespace, _owner_name(pod, owner))
        if job is None or pod_uid(job) != owner or not is_live_job(job):
            return None
        return job, record

    def beyond(self, pod: Mapping[str, Any], job: Obj, record: Charge) -> str:
        """Why the Job's record does not cover the pod ("" when it does): every slot is
        held, or the pod asks for more than one pod's share. A pod still gated is asked
        about as if its gate were gone."""
        room = slots(record, job)
        if self._holding(pod, pod_uid(job)) >= room:
            return f"its Job's record covers {room} pod(s) at a time, and as many hold it"
        per_pod = share(record, room)
        try:
            charge = recompute_charge(pod, self.backend.state.snapshot(), self.settings, per_pod)
        except DraquotaError as exc:
            return str(exc)
        if charge is not None and not within(charge, per_pod):
            return "it asks for more than each pod of its Job was admitted with"
        return ""

    def covered(self, pod: Mapping[str, Any], job: Obj) -> None:
        """The pod was admitted under its Job's record: count it until the cache shows it."""
        uid = pod_uid(pod)
        if not uid:
            return
        now = self.clock()
        with self._lock:
            if len(self._recent) > REMEMBERED_JOBS:  # Jobs that made no pod since
                for owner in [o for o, r in self._recent.items() if max(r.values()) < now]:
                    del self._recent[owner]
            self._recent.setdefault(pod_uid(job), {})[uid] = now + REMEMBERED_SECONDS

    def _holding(self, pod: Mapping[str, Any], owner: str) -> int:
        """Pods of the Job holding a slot now, besides this one: cached, and covered here
        but not cached yet."""
        uid = pod_uid(pod)
        held = self.ledger.held_slots(owner, uid)
        with self._lock:
            recent = dict(self._recent.get(owner, {}))
        now = self.clock()
        unseen = {u for u, at in recent.items() if at >= now and u != uid}
        unseen = {u for u in unseen if not self.ledger.knows(u)}
        with self._lock:
            kept = self._recent.get(owner, {})
            for known in [u for u in kept if u not in unseen and u != uid]:
                del kept[known]
            if not kept:
                self._recent.pop(owner, None)
        return held + len(unseen)
