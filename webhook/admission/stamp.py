"""What /mutate stamps on a pod and /validate checks is there: the queue label, the charge
annotation (for people to read; /validate decides again and compares), the nodeSelector of
the flavors charged and, in a queueing ClusterQueue, draquota's scheduling gate.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from quota.charge import CHARGE_ANNOTATION, QUEUE_LABEL, Charge
from quota.errors import DraquotaError
from quota.verdict import Decision
from quota.waiting import ADMISSION_GATE, is_gated
from webhook.edge.review import AdmissionRequest

__all__ = [
    "KNOWN_STAMPS",
    "KNOWN_STAMP_BYTES",
    "Stamp",
    "missing_labels",
    "off_flavor_nodes",
    "queue_label_and_charge",
    "stamp_mismatch",
    "stamp_of",
]

# Stamps kept by annotation text (`stamp_of`): the charges of recent workloads. A charge is a
# few hundred bytes; longer texts (up to MAX_ANNOTATION_BYTES) are parsed, never kept.
KNOWN_STAMPS = 1024
KNOWN_STAMP_BYTES = 4096


def queue_label_and_charge(obj: Mapping[str, Any] | None) -> tuple[Any, Any]:
    metadata = (obj or {}).get("metadata")
    if not isinstance(metadata, Mapping):
        return None, None
    labels = metadata.get("labels")
    annotations = metadata.get("annotations")
    return (
        labels.get(QUEUE_LABEL) if isinstance(labels, Mapping) else None,
        annotations.get(CHARGE_ANNOTATION) if isinstance(annotations, Mapping) else None,
    )


@dataclass(frozen=True)
class Stamp:
    """A charge annotation found on a pod under validation (charge None: unparseable)."""

    charge: Charge | None


def stamp_of(
    req: AdmissionRequest, obj: Mapping[str, Any], known: dict[str, Stamp] | None = None
) -> Stamp | None:
    """The charge annotation on `obj` (None: there is none). `known` keeps stamps by the
    annotation's text: every pod of a workload carries the same one."""
    _, annotation = queue_label_and_charge(obj)
    if annotation is None:
        return None
    if known is not None and isinstance(annotation, str) and len(annotation) <= KNOWN_STAMP_BYTES:
        found = known.get(annotation)
        if found is None:
            found = _parsed(annotation, req.ref)
            if len(known) >= KNOWN_STAMPS:
                known.clear()
            known[annotation] = found
        return found
    return _parsed(annotation, req.ref)


def _parsed(annotation: Any, ref: str) -> Stamp:
    try:
        return Stamp(Charge.from_annotation(annotation, ref))
    except (DraquotaError, TypeError, RecursionError):
        return Stamp(None)


def stamp_mismatch(
    req: AdmissionRequest, pod: Mapping[str, Any], stamp: Stamp | None, decision: Decision
) -> str:
    """Why a pod does not carry what /mutate stamps for this decision ("" when it does)."""
    if decision.queued and not is_gated(pod):
        return (
            f"{req.ref}: spec.schedulingGates: must include {ADMISSION_GATE} (ClusterQueue "
            "queues pods): the pod did not pass draquota's mutating webhook; submit it again"
        )
    if decision.charge is None:
        return ""
    if stamp is None:
        return (
            f"{req.ref}: metadata.annotations[{CHARGE_ANNOTATION}]: missing: the pod did not pass "
            "draquota's mutating webhook; submit it again"
        )
    recorded, charge = stamp.charge, decision.charge
    if recorded is not None and recorded.reservation != charge.reservation:
        charge = dataclasses.replace(charge, reservation=recorded.reservation)
    same = recorded == charge
    if not same:
        return (
            f"{req.ref}: metadata.annotations[{CHARGE_ANNOTATION}]: does not match the charge "
            "draquota computes now (the quota changed during admission, or the annotation was "
            "edited): submit the pod again"
        )
    if mismatch := off_flavor_nodes(req, pod, decision.node_selector, "it is"):
        return f"{mismatch}; submit it again"
    return ""


def off_flavor_nodes(
    req: AdmissionRequest, pod: Mapping[str, Any], wanted: Mapping[str, str], whose: str
) -> str:
    """Why the pod does not select every node label of the flavor `whose` charge names ("" when
    it does)."""
    if missing := missing_labels(pod, wanted):
        return (
            f"{req.ref}: spec.nodeSelector: must select the nodes of the flavor {whose} "
            f"charged to ({missing})"
        )
    return ""


def missing_labels(pod: Mapping[str, Any], wanted: Mapping[str, str]) -> str:
    """The node labels of `wanted` the pod's nodeSelector lacks, as `k=v,...` ("" if none)."""
    spec = pod.get("spec")
    selector = spec.get("nodeSelector") if isinstance(spec, Mapping) else None
    selector = selector if isinstance(selector, Mapping) else {}
    missing = [key for key, value in wanted.items() if selector.get(key) != value]
    return ",".join(f"{key}={wanted[key]}" for key in sorted(missing)) if missing else ""
