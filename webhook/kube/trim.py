"""What the pod cache keeps of each pod: only the fields draquota's decisions read.

A real pod object is several kilobytes (managed fields, env, volumes, probes, status
conditions, container statuses); a cluster holds tens of thousands of them. The cache
keeps identity, the queue label, liveness, claims, requests and node selection, what the
queueing controller orders by (scheduling gates, priority, creation time, pod group), what
preemption reads (the QuotaReserved and DisruptionTarget conditions; a Job's start time and
preempted annotation), and nothing else. tests/webhook/kube/test_trim.py charges every
fixture pod both ways and checks the answers agree, so that a field a decision starts to
read cannot be trimmed away unnoticed.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from typing import Any

from quota.charge import QUEUE_LABEL
from quota.waiting import GROUP_LABEL, GROUP_TOTAL_ANNOTATION
from quota.waitreport import QUOTA_RESERVED
from webhook.queueing.admittedworkloads import DISRUPTION_TARGET, PREEMPTED_ANNOTATION

__all__ = ["trimmed", "trimmed_job", "trimmed_pod"]

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
    "priorityClassName",
)
_LABELS = (QUEUE_LABEL, GROUP_LABEL)
_ANNOTATIONS = (GROUP_TOTAL_ANNOTATION,)
_CONTAINER = ("name", "resources", "restartPolicy")
_JOB_METADATA = ("name", "namespace", "uid", "resourceVersion", "creationTimestamp")
_JOB_ANNOTATIONS = (PREEMPTED_ANNOTATION,)
_CONDITION_TYPES = (QUOTA_RESERVED, DISRUPTION_TARGET)
# a waiting message is long and read from its Event; why a pod is evicted is kept
_CONDITION = ("type", "status", "reason", "lastTransitionTime", "message")
_JOB_SPEC = ("suspend", "parallelism", "completions")
_STATUS = ("phase", "resourceClaimStatuses")


def _pick(obj: Any, keys: tuple[str, ...]) -> dict[str, Any]:
    if not isinstance(obj, Mapping):
        return {}
    return {key: obj[key] for key in keys if key in obj}


def _controller(owners: list[Any]) -> list[dict[str, Any]]:
    """The controlling owner (a Job's pods are covered by the Job's admission)."""
    return [
        _pick(o, ("apiVersion", "kind", "name", "uid", "controller"))
        for o in owners
        if isinstance(o, Mapping) and o.get("controller")
    ][:1]


def _containers(items: Any) -> Any:
    if not isinstance(items, list):
        return items
    return [_pick(c, _CONTAINER) if isinstance(c, Mapping) else c for c in items]


# Values unique to one pod: sharing them would only grow the interned table.
_UNIQUE = frozenset(
    {"uid", "resourceVersion", "creationTimestamp", "deletionTimestamp", "resourceClaimName"}
)
_UNIQUE_IN_METADATA = _UNIQUE | {"name", "generateName"}


def _shared(obj: Any, key: str = "", unique: frozenset[str] = _UNIQUE) -> Any:
    """`obj` (found under `key`) with its repeated strings (namespace, node, queue, container
    and claim entry names, resource names and quantities, phase) shared between pods through
    `sys.intern`: about 450 bytes less per cached pod. A string under a key in `unique` is
    one pod's own and is left alone."""
    if isinstance(obj, dict):
        inner = _UNIQUE_IN_METADATA if key == "metadata" else _UNIQUE
        return {k: _shared(v, k, inner) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_shared(v, key, unique) for v in obj]
    if isinstance(obj, str) and key not in unique:
        return sys.intern(obj)
    return obj


def trimmed_pod(pod: Mapping[str, Any]) -> dict[str, Any]:
    """The pod as the cache keeps it, its repeated strings shared (anything malformed is
    kept as is, for the decision to report)."""
    shared: dict[str, Any] = _shared(_trimmed_pod(pod))  # a new dict already: no copy
    return shared


def _trimmed_pod(pod: Mapping[str, Any]) -> dict[str, Any]:
    metadata = pod.get("metadata")
    spec = pod.get("spec")
    kept_meta = _pick(metadata, _METADATA)
    if isinstance(metadata, Mapping):
        for field, keys in (("labels", _LABELS), ("annotations", _ANNOTATIONS)):
            if kept := _pick(metadata.get(field), keys):
                kept_meta[field] = kept
        owners = metadata.get("ownerReferences")
        if isinstance(owners, list) and (controller := _controller(owners)):
            kept_meta["ownerReferences"] = controller
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
    if conditions := _kept_conditions(pod.get("status")):
        status["conditions"] = conditions
    if status:
        out["status"] = status
    return out


def _kept_conditions(status: Any) -> list[dict[str, Any]]:
    """The conditions preemption reads: when draquota admitted the pod (QuotaReserved) and
    whether it marked the pod to be evicted (DisruptionTarget)."""
    conditions = status.get("conditions") if isinstance(status, Mapping) else None
    if not isinstance(conditions, list):
        return []
    return [
        _pick(c, _CONDITION if c.get("type") == DISRUPTION_TARGET else _CONDITION[:-1])
        for c in conditions
        if isinstance(c, Mapping) and c.get("type") in _CONDITION_TYPES
    ]


def trimmed_job(job: Mapping[str, Any]) -> dict[str, Any]:
    """A Job as the cache keeps it: identity, queue label, suspension, how many pods run at
    once, its pod template (trimmed like a pod) and whether it finished."""
    metadata = job.get("metadata")
    spec = job.get("spec")
    kept_meta = _pick(metadata, _JOB_METADATA)
    if isinstance(metadata, Mapping) and (labels := _pick(metadata.get("labels"), _LABELS)):
        kept_meta["labels"] = labels
    if isinstance(metadata, Mapping) and (
        annotations := _pick(metadata.get("annotations"), _JOB_ANNOTATIONS)
    ):
        kept_meta["annotations"] = annotations
    kept_spec = _pick(spec, _JOB_SPEC)
    template = spec.get("template") if isinstance(spec, Mapping) else None
    if isinstance(template, Mapping):
        pod = trimmed_pod({"metadata": template.get("metadata") or {}, **template})
        kept_spec["template"] = {"metadata": pod["metadata"], "spec": pod["spec"]}
    status = job.get("status")
    conditions = status.get("conditions") if isinstance(status, Mapping) else None
    out: dict[str, Any] = {
        "apiVersion": job.get("apiVersion", "batch/v1"),
        "kind": job.get("kind", "Job"),
        "metadata": kept_meta if isinstance(metadata, Mapping) else metadata,
        "spec": kept_spec if isinstance(spec, Mapping) else spec,
    }
    if isinstance(conditions, list):
        out["status"] = {
            "conditions": [
                _pick(c, ("type", "status")) for c in conditions if isinstance(c, Mapping)
            ]
        }
    if isinstance(status, Mapping) and "startTime" in status:  # when it was admitted
        out.setdefault("status", {})["startTime"] = status["startTime"]
    return out


def trimmed(obj: Mapping[str, Any]) -> dict[str, Any] | None:
    """The cached form of a pod or a Job; None for other kinds (kept whole)."""
    kind = obj.get("kind")
    if kind == "Pod":
        return trimmed_pod(obj)
    if kind == "Job":
        return trimmed_job(obj)
    return None
