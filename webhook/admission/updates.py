"""What an UPDATE request changes that draquota checks: a pod's resources, a Job's suspend
flag and how many pods it runs at once, draquota's scheduling gate on a pod.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from quota.errors import DraquotaError
from quota.waiting import is_gated
from quota.workloads import as_workload
from webhook.edge.review import AdmissionRequest

__all__ = ["grown", "resources_of", "resumed", "suspended", "ungated"]


def resources_of(pod: Mapping[str, Any] | None) -> list[Any]:
    spec = (pod or {}).get("spec")
    if not isinstance(spec, Mapping):
        return []
    return [
        [c.get("resources") for c in spec.get(group) or () if isinstance(c, Mapping)]
        for group in ("containers", "initContainers")
    ] + [spec.get("overhead")]


def suspended(job: Mapping[str, Any]) -> bool:
    spec = job.get("spec")
    return isinstance(spec, Mapping) and spec.get("suspend") is True


def grown(req: AdmissionRequest) -> bool:
    """The update makes the Job run more pods at once."""
    try:
        return as_workload(req.object or {}).pods > as_workload(req.old_object or {}).pods
    except DraquotaError:
        return False


def resumed(req: AdmissionRequest) -> bool:
    """The update unsuspends the Job."""
    old, new = req.old_object, req.object
    return (
        isinstance(old, Mapping)
        and isinstance(new, Mapping)
        and suspended(old)
        and not suspended(new)
    )


def ungated(req: AdmissionRequest) -> bool:
    """The update removes draquota's scheduling gate."""
    old, new = req.old_object, req.object
    return (
        isinstance(old, Mapping)
        and isinstance(new, Mapping)
        and is_gated(old)
        and not is_gated(new)
    )
