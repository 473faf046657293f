"""`KubePodWriter`: the queueing controller's writes to pods.

Admitting a waiting pod is one update of the pod: the flavor's nodeSelector added
(Kubernetes allows additions to a gated pod's nodeSelector) and draquota's gate
removed, with the resourceVersion read as precondition. Why a pod waits, or that it
was admitted, is the pod condition `QuotaReserved` (Kueue's name for it), written to
the status subresource so that `kubectl describe pod` shows it.
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

    def wait(self, pod: Obj, message: str) -> None:
        current = self._get(pod)
        if current is not None:
            self._set_condition(current, _condition(False, message))

    def _get(self, pod: Obj) -> Obj | None:
        """The pod as the API server has it now; None when it is gone or another pod took its
        name."""
        metadata = pod.get("metadata") or {}
        path = POD.path(metadata.get("namespace") or "default", str(metadata.get("name")))
        try:
            current = self.client.request("GET", path, timeout=_TIMEOUT)
        except (ApiError, TransportError) as exc:
            log.info("pod %s not read: %s", path, exc)
            return None
        return current if pod_uid(current) == pod_uid(pod) else None

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
