"""What the pod cache keeps of each pod: only the fields draquota's decisions read.

A real pod object is several kilobytes (managed fields, env, volumes, probes, status
conditions, container statuses); a cluster holds tens of thousands of them. The cache
keeps identity, the queue label, liveness, claims, requests and node selection, what the
queueing controller orders by (scheduling gates, priority, creation time, pod group), and
nothing else. tests/webhook/kube/test_trim.py charges every fixture pod both ways and
checks the answers agree, so that a field a decision starts to read cannot be trimmed
away unnoticed.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from quota.charge import QUEUE_LABEL
from quota.waiting import GROUP_LABEL, GROUP_TOTAL_ANNOTATION

__all__ = ["trimmed_pod"]

_METADATA = (
    "name",
    "namespace",
    "generateName",
    "uid",
    "resourceVersion",
    "creationTimestamp",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
)
_SPEC = (
    "resourceClaims",
    "overhead",
    "resources",
    "nodeSelector",
    "nodeName",
    "schedulingGates",
    "priority",
)
_LABELS = (QUEUE_LABEL, GROUP_LABEL)
_ANNOTATIONS = (GROUP_TOTAL_ANNOTATION,)
_CONTAINER = ("name", "resources", "restartPolicy")
_STATUS = ("phase", "resourceClaimStatuses")


def _pick(obj: Any, keys: tuple[str, ...]) -> dict[str, Any]:
    if not isinstance(obj, Mapping):
        return {}
    return {key: obj[key] for key in keys if key in obj}


def _containers(items: Any) -> Any:
    if not isinstance(items, list):
        return items
    return [_pick(c, _CONTAINER) if isinstance(c, Mapping) else c for c in items]


def trimmed_pod(pod: Mapping[str, Any]) -> dict[str, Any]:
    """The pod as the cache keeps it (anything malformed is kept as is, for the decision to
    report)."""
    metadata = pod.get("metadata")
    spec = pod.get("spec")
    kept_meta = _pick(metadata, _METADATA)
    if isinstance(metadata, Mapping):
        for field, keys in (("labels", _LABELS), ("annotations", _ANNOTATIONS)):
            if kept := _pick(metadata.get(field), keys):
                kept_meta[field] = kept
    kept_spec = _pick(spec, _SPEC)
    if isinstance(spec, Mapping):
        for field in ("containers", "initContainers"):
            if field in spec:
                kept_spec[field] = _containers(spec[field])
        affinity = spec.get("affinity")
        if isinstance(affinity, Mapping) and "nodeAffinity" in affinity:
            kept_spec["affinity"] = {"nodeAffinity": affinity["nodeAffinity"]}
    out: dict[str, Any] = {
        "apiVersion": pod.get("apiVersion", "v1"),
        "kind": pod.get("kind", "Pod"),
        "metadata": kept_meta if isinstance(metadata, Mapping) else metadata,
        "spec": kept_spec if isinstance(spec, Mapping) else spec,
    }
    status = _pick(pod.get("status"), _STATUS)
    if status:
        out["status"] = status
    return out
