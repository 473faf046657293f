"""Which pods hold quota, and what a live pod is charged (SPEC §4, integrity).

Liveness is Kubernetes' ResourceQuota rule (`QuotaV1Pod`): a pod holds quota
until it is Succeeded or Failed, or it was deleted and `deletionTimestamp +
deletionGracePeriodSeconds` has passed. A terminating pod still holds its devices.

A live pod is charged the larger of two amounts, so that nothing its user writes
after admission can lower it:
- its admitted charge: the record draquota wrote when it admitted the pod, keyed
  by the pod's UID (which the API server sets), where users cannot write;
- what its claims cost now: the claims generated for it
  (`status.resourceClaimStatuses`), else its templates, and the named claims it
  references.
The `draquota.io/charge` annotation is never read here: it is informational.
A pod still gated by `draquota.io/admission` and without a record waits in its
queue and holds nothing: the scheduler cannot place it, and only draquota, having
recorded its charge, removes the gate.
A pod with no record (created before draquota was installed, or while its
webhook was bypassed) is charged by recomputation alone.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from typing import Any

from quota.charge import Charge, at_least
from quota.cluster import ClusterView, Obj
from quota.errors import DraquotaError
from quota.objectkeys import object_key
from quota.recharge import recompute_charge
from quota.settings import Settings
from quota.usage import Usage

__all__ = [
    "ADMISSION_GATE",
    "TERMINAL_PHASES",
    "epoch",
    "is_gated",
    "is_live_job",
    "is_live_pod",
    "job_owner",
    "live_pod_charge",
    "pod_key",
    "pod_uid",
    "released_at",
    "usage_from_pods",
]

TERMINAL_PHASES = ("Succeeded", "Failed")
ADMISSION_GATE = "draquota.io/admission"


def _metadata(pod: Obj) -> Mapping[str, Any]:
    metadata = pod.get("metadata")
    return metadata if isinstance(metadata, Mapping) else {}


def pod_key(pod: Obj) -> str:
    """`namespace/name`, the holder of a live pod's usage."""
    return object_key(pod)


def pod_uid(pod: Obj) -> str:
    """The UID the API server gave the pod ("" when the object has none, e.g. a file)."""
    uid = _metadata(pod).get("uid")
    return uid if isinstance(uid, str) else ""


def epoch(timestamp: Any) -> float | None:
    """An RFC 3339 timestamp of the API server in epoch seconds; None if it is not one."""
    if not isinstance(timestamp, str):
        return None
    try:
        return dt.datetime.fromisoformat(timestamp.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def released_at(pod: Obj) -> float | None:
    """When a deleted pod stops holding quota (epoch seconds); None while it holds it for good.

    Like ResourceQuota, a deleted pod without a grace period on record, or with a
    timestamp that cannot be read, keeps holding quota until it is gone.
    """
    metadata = _metadata(pod)
    deleted = epoch(metadata.get("deletionTimestamp"))
    grace = metadata.get("deletionGracePeriodSeconds")
    if deleted is None or isinstance(grace, bool) or not isinstance(grace, int):
        return None
    return deleted + max(grace, 0)


def is_live_pod(pod: Obj, now: float) -> bool:
    """True while the pod holds quota at `now` (epoch seconds)."""
    status = pod.get("status")
    if isinstance(status, Mapping) and status.get("phase") in TERMINAL_PHASES:
        return False
    release = released_at(pod)
    return release is None or now <= release


def is_gated(pod: Obj) -> bool:
    """The pod still carries draquota's scheduling gate: it waits in its queue."""
    spec = pod.get("spec")
    gates = spec.get("schedulingGates") if isinstance(spec, Mapping) else None
    return isinstance(gates, list) and any(
        isinstance(g, Mapping) and g.get("name") == ADMISSION_GATE for g in gates
    )


def is_live_job(job: Obj) -> bool:
    """A Job holds the quota it was admitted with until it finishes or is deleted."""
    if _metadata(job).get("deletionTimestamp"):
        return False
    status = job.get("status")
    conditions = status.get("conditions") if isinstance(status, Mapping) else None
    return not any(
        isinstance(c, Mapping)
        and c.get("type") in ("Complete", "Failed")
        and c.get("status") == "True"
        for c in conditions or ()
    )


def job_owner(pod: Obj) -> str:
    """The UID of the Job that controls the pod ("" when none does)."""
    owners = _metadata(pod).get("ownerReferences")
    for owner in owners if isinstance(owners, list) else ():
        if isinstance(owner, Mapping) and owner.get("controller") and owner.get("kind") == "Job":
            uid = owner.get("uid")
            return uid if isinstance(uid, str) else ""
    return ""


def live_pod_charge(
    pod: Obj,
    state: ClusterView,
    settings: Settings,
    now: float,
    admitted: Charge | None = None,
) -> Charge | None:
    """What a pod holds at `now`; None when it is not live or not managed.

    `admitted` is the pod's admission record (trusted: only draquota writes it).
    It names the queue and flavors; the pod's claims as they are now may raise the
    amounts, never lower them. When the claims cannot be read (a template deleted
    after admission), the record alone is the charge.
    """
    if not is_live_pod(pod, now) or (admitted is None and is_gated(pod)):
        return None
    try:
        current = recompute_charge(pod, state, settings, admitted)
    except DraquotaError:
        return admitted
    if admitted is None or current is None:
        return current or admitted
    return at_least(admitted, current)


def usage_from_pods(
    state: ClusterView,
    settings: Settings,
    now: float,
    records: Mapping[str, Charge] | None = None,
) -> Usage:
    """Usage held by the live pods of the cluster view, keyed by `ns/name`.

    `records` maps pod UIDs to admitted charges. What is derived from the view is kept with
    it (`ClusterView.derived`) for every pod.
    """
    records = records or {}
    usage = Usage()
    for pod in state.list("Pod"):
        charge = live_pod_charge(pod, state, settings, now, records.get(pod_uid(pod)))
        if charge is not None:
            usage.add(pod_key(pod), charge)
    return usage
