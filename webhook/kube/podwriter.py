"""`KubePodWriter`: the queueing controller's writes to pods and Jobs.

Admitting a waiting pod is one update of the pod: the flavor's nodeSelector added
(Kubernetes allows additions to a gated pod's nodeSelector) and draquota's gate
removed, with the resourceVersion read as precondition. Why a pod waits, or that it
was admitted, is the pod condition `QuotaReserved` (Kueue's name for it), written to
the status subresource so that `kubectl describe pod` shows it. Starting a waiting
Job is one update of the Job: the nodeSelector added to its pod template (allowed
while a Job is suspended and has never run) and `spec.suspend` false. Why a Job waits
is an Event on it (reason `Pending`), since the Job controller owns its conditions.
"""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Mapping
from typing import Any

from quota.cluster import Obj
from quota.livepods import pod_uid
from quota.waiting import ADMISSION_GATE
from webhook.kube.client import ApiError, KubeClient, TransportError
from webhook.kube.resources import ResourceType

__all__ = ["QUOTA_RESERVED", "KubePodWriter"]

log = logging.getLogger("draquota.queueing")

POD = ResourceType("Pod", "", "v1", "pods", True)
JOB = ResourceType("Job", "batch", "v1", "jobs", True)
EVENT = ResourceType("Event", "", "v1", "events", True)
QUOTA_RESERVED = "QuotaReserved"
_TIMEOUT = (2.0, 5.0)


def _now() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _condition(reserved: bool, message: str) -> dict[str, Any]:
    return {
        "type": QUOTA_RESERVED,
        "status": "True" if reserved else "False",
        "reason": "QuotaReserved" if reserved else "Pending",
        "message": message[:32768],
        "lastTransitionTime": _now(),
    }


def _ungated(pod: Obj, node_selector: Mapping[str, str]) -> Obj:
    spec = dict(pod.get("spec") or {})
    gates = [g for g in spec.get("schedulingGates") or () if g.get("name") != ADMISSION_GATE]
    spec["schedulingGates"] = gates
    if node_selector:
        spec["nodeSelector"] = {**(spec.get("nodeSelector") or {}), **node_selector}
    return {**pod, "spec": spec}


class KubePodWriter:
    """Writes the controller's answers to the API server."""

    def __init__(self, client: KubeClient) -> None:
        self.client = client

    def admit(self, pod: Obj, node_selector: Mapping[str, str], message: str) -> bool:
        current = self._get(pod)
        if current is None:
            return False
        path = POD.path(current["metadata"]["namespace"], current["metadata"]["name"])
        try:
            written = self.client.request(
                "PUT", path, body=_ungated(current, node_selector), timeout=_TIMEOUT
            )
        except (ApiError, TransportError) as exc:
            # a 409, or the webhook not seeing the record yet: the next pass tries again
            log.info("pod %s not ungated yet: %s", path, exc)
            return False
        self._set_condition(written, _condition(True, message))
        return True

    def start(self, job: Obj, node_selector: Mapping[str, str], message: str) -> bool:
        current = self._get(job, JOB)
        if current is None:
            return False
        spec = dict(current.get("spec") or {})
        template = dict(spec.get("template") or {})
        pod_spec = dict(template.get("spec") or {})
        if node_selector:
            pod_spec["nodeSelector"] = {**(pod_spec.get("nodeSelector") or {}), **node_selector}
        spec.update(suspend=False, template={**template, "spec": pod_spec})
        path = JOB.path(current["metadata"]["namespace"], current["metadata"]["name"])
        try:
            self.client.request("PUT", path, body={**current, "spec": spec}, timeout=_TIMEOUT)
        except (ApiError, TransportError) as exc:
            log.info("job %s not started yet: %s", path, exc)
            return False
        self._event(current, "QuotaReserved", "Normal", message)
        return True

    def wait(self, obj: Obj, message: str) -> None:
        if obj.get("kind") == "Job":
            self._event(obj, "Pending", "Normal", message)
            return
        current = self._get(obj)
        if current is not None:
            self._set_condition(current, _condition(False, message))

    def _event(self, obj: Obj, reason: str, kind: str, message: str) -> None:
        metadata = obj.get("metadata") or {}
        namespace = metadata.get("namespace") or "default"
        now = _now()
        event = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"generateName": f"{metadata.get('name')}.", "namespace": namespace},
            "involvedObject": {
                "apiVersion": obj.get("apiVersion", "batch/v1"),
                "kind": obj.get("kind", "Job"),
                "name": metadata.get("name"),
                "namespace": namespace,
                "uid": metadata.get("uid"),
            },
            "reason": reason,
            "message": message[:1024],
            "type": kind,
            "source": {"component": "draquota"},
            "firstTimestamp": now,
            "lastTimestamp": now,
            "count": 1,
        }
        try:
            self.client.request("POST", EVENT.path(namespace), body=event, timeout=_TIMEOUT)
        except (ApiError, TransportError) as exc:
            log.info("event on %s/%s not written: %s", namespace, metadata.get("name"), exc)

    def _get(self, obj: Obj, kind: ResourceType = POD) -> Obj | None:
        """The object as the API server has it now; None when it is gone or another object
        took its name."""
        metadata = obj.get("metadata") or {}
        path = kind.path(metadata.get("namespace") or "default", str(metadata.get("name")))
        try:
            current = self.client.request("GET", path, timeout=_TIMEOUT)
        except (ApiError, TransportError) as exc:
            log.info("pod %s not read: %s", path, exc)
            return None
        return current if pod_uid(current) == pod_uid(obj) else None

    def _set_condition(self, pod: Obj, condition: dict[str, Any]) -> None:
        status = dict(pod.get("status") or {})
        kept = [c for c in status.get("conditions") or () if c.get("type") != QUOTA_RESERVED]
        status["conditions"] = [*kept, condition]
        metadata = pod["metadata"]
        path = POD.path(metadata["namespace"], metadata["name"]) + "/status"
        try:
            self.client.request("PUT", path, body={**pod, "status": status}, timeout=_TIMEOUT)
        except (ApiError, TransportError) as exc:
            log.info("pod %s condition not written: %s", path, exc)
