"""The mutating webhook's JSON patch (RFC 6902) for an admitted pod.

It defaults the queue label when the pod resolved through the namespace's
`default` LocalQueue, stamps the recomputed charge annotation, and adds the chosen
flavor's node labels as a nodeSelector. Applying the patch and deciding again
yields an empty patch: every operation is skipped when its effect is present.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from quota.charge import CHARGE_ANNOTATION, QUEUE_LABEL, Charge
from quota.errors import InvalidObject
from quota.verdict import Decision
from quota.waiting import ADMISSION_GATE, is_gated
from quota.workloads import WORKLOAD_KINDS
from webhook.edge.reviewtypes import PatchOp, PatchVerb

__all__ = [
    "covered_pod_patch",
    "escape_pointer",
    "pod_patch",
    "queued_pod_patch",
    "same_charge",
    "suspend_patch",
    "workload_patch",
]


def escape_pointer(key: str) -> str:
    """One JSON-pointer reference token (RFC 6901): `~` -> `~0`, `/` -> `~1`."""
    return key.replace("~", "~0").replace("/", "~1")


def same_charge(existing: str | None, charge: Charge) -> bool:
    """True when an annotation already records this charge (whatever reservation stamped it)."""
    if not existing:
        return False
    try:
        recorded = Charge.from_annotation(existing, "annotation")
    except InvalidObject:
        return False
    return dataclasses.replace(charge, reservation=recorded.reservation) == recorded


def _set_entries(
    parent: Any, parent_path: str, entries: Mapping[str, str], overwrite: bool
) -> list[PatchOp]:
    if not entries:
        return []
    if not isinstance(parent, Mapping):
        op: PatchVerb = "replace" if parent is not None else "add"
        return [{"op": op, "path": parent_path, "value": dict(entries)}]
    ops: list[PatchOp] = []
    for key, value in entries.items():
        if key in parent and (parent[key] == value or not overwrite):
            continue
        verb: PatchVerb = "replace" if key in parent else "add"
        ops.append({"op": verb, "path": f"{parent_path}/{escape_pointer(key)}", "value": value})
    return ops


def _strip_charge(metadata: Mapping[str, Any]) -> list[PatchOp]:
    """A charge annotation on a pod draquota does not manage is someone's forgery: remove it."""
    annotations = metadata.get("annotations")
    if isinstance(annotations, Mapping) and CHARGE_ANNOTATION in annotations:
        path = f"/metadata/annotations/{escape_pointer(CHARGE_ANNOTATION)}"
        return [{"op": "remove", "path": path}]
    return []


def _queue_label(metadata: Mapping[str, Any], decision: Decision) -> list[PatchOp]:
    """The queue label of a pod resolved through its namespace's `default` LocalQueue."""
    if not decision.local_queue_name:
        return []
    labels = {QUEUE_LABEL: decision.local_queue_name}
    return _set_entries(metadata.get("labels"), "/metadata/labels", labels, overwrite=False)


def pod_patch(pod: Mapping[str, Any], decision: Decision) -> list[PatchOp]:
    """The operations that bring `pod` in line with an allowing decision (empty when it is)."""
    metadata = pod.get("metadata")
    metadata = metadata if isinstance(metadata, Mapping) else {}
    if not decision.allowed:
        return []
    if decision.charge is None:
        return _strip_charge(metadata)
    spec = pod.get("spec")
    spec = spec if isinstance(spec, Mapping) else {}
    ops = _queue_label(metadata, decision)
    annotations = metadata.get("annotations")
    existing = annotations.get(CHARGE_ANNOTATION) if isinstance(annotations, Mapping) else None
    if not same_charge(existing if isinstance(existing, str) else None, decision.charge):
        ops += _set_entries(
            annotations,
            "/metadata/annotations",
            {CHARGE_ANNOTATION: decision.charge.to_annotation()},
            overwrite=True,
        )
    ops += _set_entries(
        spec.get("nodeSelector"),
        "/spec/nodeSelector",
        dict(decision.node_selector),
        overwrite=False,
    )
    return ops


def queued_pod_patch(pod: Mapping[str, Any], decision: Decision) -> list[PatchOp]:
    """The operations for a pod that waits in a queueing ClusterQueue: its queue label, draquota's
    scheduling gate, and no charge annotation (it holds no quota until the queue admits it)."""
    metadata = pod.get("metadata")
    metadata = metadata if isinstance(metadata, Mapping) else {}
    ops = _strip_charge(metadata)
    ops += _queue_label(metadata, decision)
    if is_gated(pod):
        return ops
    spec = pod.get("spec")
    gates = spec.get("schedulingGates") if isinstance(spec, Mapping) else None
    gate = {"name": ADMISSION_GATE}
    if isinstance(gates, list):
        return [*ops, {"op": "add", "path": "/spec/schedulingGates/-", "value": gate}]
    op: PatchVerb = "add" if gates is None else "replace"
    return [*ops, {"op": op, "path": "/spec/schedulingGates", "value": [gate]}]


def covered_pod_patch(pod: Mapping[str, Any], node_selector: Mapping[str, str]) -> list[PatchOp]:
    """A pod of a Job admitted as a whole: the Job's flavor nodeSelector (the Job's record
    charges it, so no charge annotation)."""
    metadata = pod.get("metadata")
    spec = pod.get("spec")
    ops = _strip_charge(metadata if isinstance(metadata, Mapping) else {})
    selector = spec.get("nodeSelector") if isinstance(spec, Mapping) else None
    return ops + _set_entries(selector, "/spec/nodeSelector", dict(node_selector), overwrite=False)


def suspend_patch(job: Mapping[str, Any]) -> list[PatchOp]:
    """A Job of a queueing ClusterQueue is created suspended: the queue starts it."""
    spec = job.get("spec")
    if isinstance(spec, Mapping) and spec.get("suspend") is True:
        return []
    return [{"op": "add", "path": "/spec/suspend", "value": True}]


def _at(obj: Any, path: tuple[str, ...]) -> Any:
    for key in path:
        obj = obj.get(key) if isinstance(obj, Mapping) else None
    return obj


def workload_patch(obj: Mapping[str, Any], kind: str) -> list[PatchOp]:
    """A workload labelled with a queue hands the label to its pod template, so that every pod
    it creates goes to the same LocalQueue whether or not its controller copies labels."""
    labels = _at(obj, ("metadata", "labels"))
    queue = labels.get(QUEUE_LABEL) if isinstance(labels, Mapping) else None
    path = WORKLOAD_KINDS.get(kind, ())
    template = _at(obj, path)
    if not isinstance(queue, str) or not queue or not path or not isinstance(template, Mapping):
        return []
    pointer = "/" + "/".join(escape_pointer(p) for p in path)
    metadata = template.get("metadata")
    if not isinstance(metadata, Mapping):
        return [
            {"op": "add", "path": f"{pointer}/metadata", "value": {"labels": {QUEUE_LABEL: queue}}}
        ]
    return _set_entries(
        metadata.get("labels"), f"{pointer}/metadata/labels", {QUEUE_LABEL: queue}, overwrite=True
    )
