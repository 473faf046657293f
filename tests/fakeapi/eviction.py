"""The fake API server's Eviction subresource (POST `pods/NAME/eviction`, policy/v1)."""

from __future__ import annotations

from tests.fakeapi.store import ApiError, Obj, Resource, Store

__all__ = ["evict"]


def evict(store: Store, res: Resource, namespace: str, name: str, body: Obj, refused: str) -> Obj:
    """Answer an Eviction as the API server does: 429 TooManyRequests with `refused` when that
    is set (a PodDisruptionBudget in the way), 404 for a pod that is gone, 409 when the UID
    precondition names another pod; else the pod gets `DisruptionTarget` (reason
    EvictionByEvictionAPI) and is deleted gracefully: a deletionTimestamp, kept until its grace
    ends (no kubelet here to end it)."""
    if res.kind != "Pod":
        raise ApiError(404, "NotFound", f"{res.plural} have no eviction subresource")
    if refused:
        raise ApiError(429, "TooManyRequests", refused)
    pod = store.get(res, namespace, name)
    wanted = ((body.get("deleteOptions") or {}).get("preconditions") or {}).get("uid")
    if wanted and wanted != pod["metadata"]["uid"]:
        raise ApiError(
            409,
            "Conflict",
            f'Operation cannot be fulfilled on pods "{name}": Precondition failed: '
            f"UID in precondition: {wanted}, UID in object meta: {pod['metadata']['uid']}",
        )
    status = pod.setdefault("status", {})
    kept = [c for c in status.get("conditions") or () if c.get("type") != "DisruptionTarget"]
    target = {"type": "DisruptionTarget", "status": "True", "reason": "EvictionByEvictionAPI"}
    status["conditions"] = [*kept, {**target, "message": "Eviction API: evicting"}]
    pod["metadata"]["deletionTimestamp"] = "2026-01-01T00:10:00Z"
    pod["metadata"]["deletionGracePeriodSeconds"] = 30
    store.update(res, namespace, name, pod)
    return {"kind": "Status", "apiVersion": "v1", "status": "Success", "code": 201}
