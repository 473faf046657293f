"""`KubePodWriter`: the queueing controller's writes to pods and Jobs, and their Events.

Admitting a waiting pod is two updates of it. First its condition `QuotaReserved`
(Kueue's name for it) becomes True on the status subresource: the quota is recorded in
the ledger by then. Then the flavor's nodeSelector is added (Kubernetes allows additions
to a gated pod's nodeSelector) and draquota's gate removed. Why a pod waits is the same
condition, False, with the reason as its message. Starting a waiting Job is one update of
the Job: the nodeSelector added to its pod template (allowed while a Job is suspended and
has never run) and `spec.suspend` false; the Job controller owns its conditions. A Job is
started only as the version the queue decided on: one changed meanwhile (its parallelism
raised while it was decided) is not started, and is decided again.

Every update carries the resourceVersion of the copy it was made from, and a 409 Conflict
(the scheduler binding the pod, the resourceclaim controller writing its status, a user)
is retried as client-go's `RetryOnConflict` does: read the object again, make the same
change to the fresh copy, write again, a few times with short back-off. A change that is
already there is not written again. The retry stops when the object is gone or another
object (another UID) took its name.

Admitted always wins over waiting. A waiting message is written only to a copy that still
has the gate and no True `QuotaReserved`; the admission writes True before it removes the
gate. Both writes are conditional on the resourceVersion of the copy they were made from,
so a waiting message lands only while the pod is neither reserved nor ungated, and the
True written after it replaces it; a waiting message computed before the admission (a
slow pass, a leader that lost its Lease) meets a newer resourceVersion, reads again,
finds True or no gate, and stops. A pod left gated with True (its gate removal failed)
still has its record, so the next pass removes the gate and never shows it waiting.

Every change of what a pod or Job shows is also an Event on it, as Kueue records them
(`Pending` with the waiting message, `QuotaReserved` when admitted), so that `kubectl
describe` shows why it waits and when it was admitted. Like client-go's recorder, Events
are aggregated: one Event object per (object UID, reason) with a deterministic name,
created on its first occurrence and updated on later ones (message, `count` + 1,
`lastTimestamp`). The writer remembers the Events it wrote (a bounded LRU, as client-go's
cache); one it does not know yet, or one deleted meanwhile (the API server expires Events
after an hour), is created, and when creating finds one made before (by a former leader)
that one is read and continued.
"""

from __future__ import annotations

import datetime as dt
import logging
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping
from typing import NamedTuple

from quota.cluster import Obj
from quota.livepods import is_gated, pod_uid
from quota.objectkeys import namespace_of
from quota.waiting import ADMISSION_GATE
from quota.waitreport import COMPONENT, PENDING, QUOTA_RESERVED, quota_reserved
from webhook.kube.backoff import Backoff
from webhook.kube.client import ApiError, KubeClient, TransportError
from webhook.kube.resources import EVENT, JOB, POD, ResourceType
from webhook.kube.trim import trimmed_job

__all__ = ["QUOTA_RESERVED", "KubePodWriter", "event_name"]

log = logging.getLogger("draquota.queueing")

ATTEMPTS = 5  # writes of one change, the first included (client-go's DefaultRetry: 5 steps)
EVENTS_REMEMBERED = 4096  # client-go's event cache holds as many
_TIMEOUT = (2.0, 5.0)
_NAME_LIMIT = 253  # a DNS subdomain, which Event names must be

Change = Callable[[Obj], Obj | None]  # the object to write, itself if nothing changes, or None


class Written(NamedTuple):
    """An update that landed: the object as the API server has it, and whether it changed."""

    obj: Obj
    changed: bool


def _now() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _path(kind: ResourceType, obj: Obj) -> str:
    metadata = obj.get("metadata") or {}
    return kind.path(namespace_of(obj), str(metadata.get("name")))


def _reserved(pod: Obj) -> bool:
    return quota_reserved(pod)[0] == "True"


def _with_condition(pod: Obj, reserved: bool, message: str) -> Obj:
    """The pod with its QuotaReserved condition as given; the pod itself when it has it.
    The transition time moves only when the status does (the API conventions)."""
    status = dict(pod.get("status") or {})
    conditions = list(status.get("conditions") or ())
    index = next((i for i, c in enumerate(conditions) if c.get("type") == QUOTA_RESERVED), None)
    old = conditions[index] if index is not None else {}
    new = {
        "type": QUOTA_RESERVED,
        "status": "True" if reserved else "False",
        "reason": QUOTA_RESERVED if reserved else PENDING,
        "message": message[:32768],
    }
    if all(old.get(key) == value for key, value in new.items()):
        return pod
    same_status = old.get("status") == new["status"] and old.get("lastTransitionTime")
    new["lastTransitionTime"] = old["lastTransitionTime"] if same_status else _now()
    if index is None:
        conditions.append(new)
    else:
        conditions[index] = new
    return {**pod, "status": {**status, "conditions": conditions}}


def _waiting(pod: Obj, message: str) -> Obj | None:
    """The waiting message on a pod that still waits; None on one admitted meanwhile."""
    if not is_gated(pod) or _reserved(pod):
        return None
    return _with_condition(pod, False, message)


def _ungated(pod: Obj, node_selector: Mapping[str, str]) -> Obj:
    spec = dict(pod.get("spec") or {})
    gates = spec.get("schedulingGates") or []
    kept = [g for g in gates if g.get("name") != ADMISSION_GATE]
    selector = {**(spec.get("nodeSelector") or {}), **node_selector}
    if kept == gates and selector == (spec.get("nodeSelector") or {}):
        return pod
    spec["schedulingGates"] = kept
    if selector:
        spec["nodeSelector"] = selector
    return {**pod, "spec": spec}


def _as_decided(job: Obj) -> Obj:
    """What the queue decided a Job on: its spec as the cache keeps it (`trimmed_job`), apart
    from `suspend` and the nodeSelector of its pod template, which starting it sets."""
    spec = dict(trimmed_job(job).get("spec") or {})
    spec.pop("suspend", None)
    template = dict(spec.get("template") or {})
    pod_spec = {k: v for k, v in (template.get("spec") or {}).items() if k != "nodeSelector"}
    return {**spec, "template": {**template, "spec": pod_spec}}


def _started(job: Obj, node_selector: Mapping[str, str], decided: Obj) -> Obj | None:
    """The Job unsuspended with the flavor's nodeSelector; None when it is no longer the
    version the queue decided on (say its parallelism was raised meanwhile)."""
    if _as_decided(job) != _as_decided(decided):
        return None
    spec = dict(job.get("spec") or {})
    template = dict(spec.get("template") or {})
    pod_spec = dict(template.get("spec") or {})
    selector = {**(pod_spec.get("nodeSelector") or {}), **node_selector}
    if spec.get("suspend") is False and selector == (pod_spec.get("nodeSelector") or {}):
        return job
    if selector:
        pod_spec["nodeSelector"] = selector
    spec.update(suspend=False, template={**template, "spec": pod_spec})
    return {**job, "spec": spec}


def _suspended(job: Obj) -> bool:
    return bool((job.get("spec") or {}).get("suspend"))


def _waited(obj: Obj) -> str:
    """How long the object waited since it was created, for an admission's Event; "" if unknown."""
    created = str((obj.get("metadata") or {}).get("creationTimestamp") or "")
    try:
        since = dt.datetime.fromisoformat(created.replace("Z", "+00:00"))
    except ValueError:
        return ""
    seconds = (dt.datetime.now(dt.UTC) - since).total_seconds()
    return f" after waiting {seconds:.0f}s" if seconds >= 0 else ""


def event_name(obj: Obj, reason: str) -> str:
    """The one Event of `obj` for `reason`: `<name>.<uid prefix>.<reason>`, a DNS subdomain of at
    most 253 characters (a long object name is cut, and the cut never ends in `.` or `-`)."""
    metadata = obj.get("metadata") or {}
    suffix = f".{(pod_uid(obj) or '0')[:8]}.{reason.lower()}"
    name = str(metadata.get("name") or "")[: _NAME_LIMIT - len(suffix)].rstrip(".-")
    return f"{name}{suffix}"


def _event(obj: Obj, kind: ResourceType, reason: str, message: str) -> Obj:
    metadata = obj.get("metadata") or {}
    namespace = namespace_of(obj)
    now = _now()
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"name": event_name(obj, reason), "namespace": namespace},
        "involvedObject": {
            "apiVersion": kind.api_version,
            "kind": kind.kind,
            "name": metadata.get("name"),
            "namespace": namespace,
            "uid": pod_uid(obj),
        },
        "reason": reason,
        "message": message[:1024],
        "type": "Normal",
        "source": {"component": COMPONENT},
        "reportingComponent": COMPONENT,
        "firstTimestamp": now,
        "lastTimestamp": now,
        "count": 1,
    }


def _repeated(current: Obj, fresh: Obj) -> Obj:
    """The Event once more: its latest message, one more in `count`, the time of this one."""
    count = current.get("count")
    return {
        **current,
        "message": fresh["message"],
        "count": (count if isinstance(count, int) and count > 0 else 1) + 1,
        "lastTimestamp": fresh["lastTimestamp"],
        "type": fresh["type"],
        "source": fresh["source"],
        "reportingComponent": fresh["reportingComponent"],
    }


class KubePodWriter:
    """Writes the controller's answers to the API server (one thread: the controller's)."""

    def __init__(self, client: KubeClient, sleep: Callable[[float], None] = time.sleep) -> None:
        self.client = client
        self.sleep = sleep
        self._events: OrderedDict[str, Obj] = OrderedDict()  # path -> the Event as last written

    def admit(self, pod: Obj, node_selector: Mapping[str, str], message: str) -> bool:
        """QuotaReserved True, then the gate removed; True when both landed."""
        current = self._read(POD, pod)
        if current is None:
            return False
        path = _path(POD, current)
        reserved = self._update(
            path + "/status",
            current,
            lambda p: _with_condition(p, True, message),
            lambda: self._read(POD, pod),
        )
        if reserved is None:
            return False
        if reserved.changed:
            self._record(reserved.obj, POD, QUOTA_RESERVED, message + _waited(reserved.obj))
        ungated = self._update(
            path, reserved.obj, lambda p: _ungated(p, node_selector), lambda: self._read(POD, pod)
        )
        return ungated is not None

    def start(self, job: Obj, node_selector: Mapping[str, str], message: str) -> bool:
        """Unsuspend the Job, only as the version `job` the queue decided on; True when it
        runs so."""
        current = self._read(JOB, job)
        if current is None:
            return False
        started = self._update(
            _path(JOB, current),
            current,
            lambda j: _started(j, node_selector, job),
            lambda: self._read(JOB, job),
        )
        if started is None:
            return False
        if started.changed:
            self._record(started.obj, JOB, QUOTA_RESERVED, message + _waited(started.obj))
        return True

    def wait(self, obj: Obj, message: str) -> bool:
        """Show why the pod or Job waits; True when the API server shows it."""
        if obj.get("kind") == "Job":
            job = self._read(JOB, obj)
            return job is not None and _suspended(job) and self._record(job, JOB, PENDING, message)
        current = self._read(POD, obj)
        if current is None:
            return False
        written = self._update(
            _path(POD, current) + "/status",
            current,
            lambda p: _waiting(p, message),
            lambda: self._read(POD, obj),
        )
        if written is None:
            return False
        if written.changed:
            self._record(written.obj, POD, PENDING, message)
        return True

    # -- updates with retry on conflict ------------------------------------------------

    def _update(
        self, path: str, current: Obj, change: Change, read: Callable[[], Obj | None]
    ) -> Written | None:
        """PUT `change(current)` to `path`, on 409 Conflict `change` applied to a fresh `read()`.

        None when it did not land: `change` refused, the object is gone (read gave None), or
        the API server answered another error or kept conflicting."""
        backoff = Backoff(initial=0.02, maximum=0.2)
        for attempt in range(1, ATTEMPTS + 1):
            body = change(current)
            if body is None:
                return None
            if body == current:
                return Written(current, False)
            try:
                return Written(self.client.request("PUT", path, body=body, timeout=_TIMEOUT), True)
            except ApiError as exc:
                if exc.code != 409 or attempt == ATTEMPTS:
                    log.info("%s not written: %s", path, exc)
                    return None
            except TransportError as exc:  # the next pass tries again
                log.info("%s not written: %s", path, exc)
                return None
            self.sleep(backoff.next())
            fresh = read()
            if fresh is None:
                return None
            current = fresh
        return None

    def _read(self, kind: ResourceType, obj: Obj) -> Obj | None:
        """The object as the API server has it now; None when it is gone or another object
        took its name."""
        path = _path(kind, obj)
        try:
            current = self.client.request("GET", path, timeout=_TIMEOUT)
        except (ApiError, TransportError) as exc:
            log.info("%s not read: %s", path, exc)
            return None
        return current if pod_uid(current) == pod_uid(obj) else None

    # -- Events, one per object and reason -----------------------------------------------

    def _record(self, obj: Obj, kind: ResourceType, reason: str, message: str) -> bool:
        """The Event of `obj` for `reason` says `message`: created, or updated once more."""
        fresh = _event(obj, kind, reason, message)
        path = EVENT.path(fresh["metadata"]["namespace"], fresh["metadata"]["name"])
        known = self._events.pop(path, None)
        written = self._repeat(path, known, fresh) if known is not None else None
        if written is None:  # not known here, deleted or expired meanwhile, or not written
            written = self._create(fresh)
        if written is None:
            return False
        self._events[path] = written
        while len(self._events) > EVENTS_REMEMBERED:
            self._events.popitem(last=False)
        return True

    def _create(self, fresh: Obj) -> Obj | None:
        namespace, name = fresh["metadata"]["namespace"], fresh["metadata"]["name"]
        path = EVENT.path(namespace, name)
        try:
            return self.client.request("POST", EVENT.path(namespace), body=fresh, timeout=_TIMEOUT)
        except ApiError as exc:
            if exc.code == 409:  # made before this writer knew it (a former leader): continue it
                current = self._read_event(path)
                return self._repeat(path, current, fresh) if current is not None else None
            log.info("event %s not written: %s", path, exc)
        except TransportError as exc:
            log.info("event %s not written: %s", path, exc)
        return None

    def _repeat(self, path: str, current: Obj, fresh: Obj) -> Obj | None:
        written = self._update(
            path, current, lambda e: _repeated(e, fresh), lambda: self._read_event(path)
        )
        return written.obj if written is not None else None

    def _read_event(self, path: str) -> Obj | None:
        try:
            return self.client.request("GET", path, timeout=_TIMEOUT)
        except (ApiError, TransportError) as exc:
            log.info("event %s not read: %s", path, exc)
            return None
