"""`KubeEvictor`: the queueing controller's evictions, written to the API server.

A victim pod is marked first: its `DisruptionTarget` condition (status True, reason
`PreemptedByDraquota`, the preemption message) on the status subresource, and an Event
`Preempted` with the same message. Then it is evicted through the Eviction API (POST
`pods/NAME/eviction`, policy/v1, with the pod's UID as precondition, so that a pod that took
its name is never evicted), which honours PodDisruptionBudgets: a refusal (429) is returned
to the controller, which evicts the pod again on a later pass. The API server's eviction
sets the condition's reason to `EvictionByEvictionAPI`; draquota's reason and message are
written back, so that the pod says why it was evicted until it is gone.

A victim Job is suspended again in one update: `spec.suspend` true and the annotation
PREEMPTED_ANNOTATION (the preemption message), which tells a later pass that a record the
Job still has was meant to go; an Event `Preempted` on the Job says why.

Every write goes through `KubePodWriter`'s retry on conflict (read again, change the fresh
copy, write again) and its Events (one per object and reason, counted).
"""

from __future__ import annotations

import datetime as dt
from collections import OrderedDict
from collections.abc import Mapping
from typing import Any

from quota.cluster import Obj
from quota.livepods import pod_uid
from quota.objectkeys import namespace_of
from webhook.kube.client import ApiError, TransportError
from webhook.kube.podwriter import KubePodWriter, log
from webhook.kube.resources import JOB, POD
from webhook.queueing.admittedworkloads import (
    DISRUPTION_TARGET,
    PREEMPTED_ANNOTATION,
    PREEMPTED_BY_DRAQUOTA,
    is_marked,
)

__all__ = ["PREEMPTED", "KubeEvictor"]

PREEMPTED = "Preempted"  # the Event's reason (Kueue's)
_TIMEOUT = (2.0, 5.0)
_REMEMBERED = 4096


def _now() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _path(obj: Obj, kind: str = "Pod") -> str:
    metadata = _mapping(obj.get("metadata"))
    resource = JOB if kind == "Job" else POD
    return resource.path(namespace_of(obj), str(metadata.get("name")))


def _with_target(pod: Obj, message: str) -> Obj:
    """The pod with draquota's DisruptionTarget condition; itself when it has it already."""
    status = dict(_mapping(pod.get("status")))
    conditions = [dict(_mapping(c)) for c in status.get("conditions") or ()]
    index = next((i for i, c in enumerate(conditions) if c.get("type") == DISRUPTION_TARGET), None)
    old = conditions[index] if index is not None else {}
    new = {
        "type": DISRUPTION_TARGET,
        "status": "True",
        "reason": PREEMPTED_BY_DRAQUOTA,
        "message": message[:32768],
    }
    if all(old.get(key) == value for key, value in new.items()):
        return pod
    new["lastTransitionTime"] = old.get("lastTransitionTime") or _now()
    if old.get("status") != "True":
        new["lastTransitionTime"] = _now()
    if index is None:
        conditions.append(new)
    else:
        conditions[index] = new
    return {**pod, "status": {**status, "conditions": conditions}}


def _message(pod: Obj) -> str:
    for condition in map(_mapping, _mapping(pod.get("status")).get("conditions") or ()):
        if condition.get("type") == DISRUPTION_TARGET:
            return str(condition.get("message") or "")
    return ""


def _suspended(job: Obj, message: str) -> Obj:
    spec = dict(_mapping(job.get("spec")))
    metadata = dict(_mapping(job.get("metadata")))
    annotations = dict(_mapping(metadata.get("annotations")))
    if spec.get("suspend") is True and PREEMPTED_ANNOTATION in annotations:
        return job
    annotations[PREEMPTED_ANNOTATION] = message[:1024]
    spec["suspend"] = True
    return {**job, "metadata": {**metadata, "annotations": annotations}, "spec": spec}


class KubeEvictor(KubePodWriter):
    """The pod writer that also evicts (one thread: the controller's)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._messages: OrderedDict[str, str] = OrderedDict()  # pod UID -> its mark's message

    def mark(self, pod: Obj, message: str) -> bool:
        """DisruptionTarget on the pod's status, then the Event; True when the pod is gone."""
        current = self._read(POD, pod)
        if current is None:
            return True  # gone: nothing left to evict
        if is_marked(current):
            message = _message(current) or message  # a former leader's choice stands
        written = self._update(
            _path(current) + "/status",
            current,
            lambda p: _with_target(p, message),
            lambda: self._read(POD, pod),
        )
        if written is None:
            return False
        self._remember(pod_uid(pod), message)
        if written.changed:
            self._record(written.obj, POD, PREEMPTED, message)
        return True

    def evict(self, pod: Obj) -> str:
        """POST the Eviction; "" when it landed or the pod is gone, else the API server's why."""
        metadata = _mapping(pod.get("metadata"))
        body = {
            "apiVersion": "policy/v1",
            "kind": "Eviction",
            "metadata": {"name": metadata.get("name"), "namespace": metadata.get("namespace")},
            "deleteOptions": {"preconditions": {"uid": pod_uid(pod)}},
        }
        try:
            self.client.request("POST", _path(pod) + "/eviction", body=body, timeout=_TIMEOUT)
        except ApiError as exc:
            if exc.code in (404, 409):  # gone, or another pod took its name
                return ""
            log.info("pod %s not evicted: %s", _path(pod), exc)
            return exc.message or str(exc)
        except TransportError as exc:
            log.info("pod %s not evicted: %s", _path(pod), exc)
            return str(exc)
        self._restore(pod)
        return ""

    def suspend(self, job: Obj, message: str) -> bool:
        """Suspend the Job, marked preempted, and its Event; False if that did not land."""
        current = self._read(JOB, job)
        if current is None:
            return False
        written = self._update(
            _path(current, "Job"),
            current,
            lambda j: _suspended(j, message),
            lambda: self._read(JOB, job),
        )
        if written is None:
            return False
        if written.changed:
            self._record(written.obj, JOB, PREEMPTED, message)
        return True

    def _restore(self, pod: Obj) -> None:
        """Write draquota's reason back over the Eviction API's (best effort)."""
        message = self._messages.pop(pod_uid(pod), "") or (_message(pod) if is_marked(pod) else "")
        current = self._read(POD, pod)
        if current is None or not message or is_marked(current):
            return
        self._update(
            _path(current) + "/status",
            current,
            lambda p: _with_target(p, message),
            lambda: self._read(POD, pod),
        )

    def _remember(self, uid: str, message: str) -> None:
        self._messages.pop(uid, None)
        self._messages[uid] = message
        while len(self._messages) > _REMEMBERED:
            self._messages.popitem(last=False)
