"""Builders for test objects, so a case reads as the scenario it is."""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

__all__ = [
    "VERSIONS",
    "claim",
    "claim_template",
    "container",
    "device_class",
    "pod",
    "to_version",
    "v1beta1_path",
]

VERSIONS = ("v1", "v1beta2", "v1beta1")


def _request_in(version: str, request: Mapping[str, Any]) -> dict[str, Any]:
    request = copy.deepcopy(dict(request))
    if version == "v1beta1" and "exactly" in request:
        request.update(request.pop("exactly") or {})
    return request


def to_version(version: str, devices: Mapping[str, Any]) -> dict[str, Any]:
    """`spec.devices` written in the v1 shape, rendered for `version`."""
    out = copy.deepcopy(dict(devices))
    out["requests"] = [_request_in(version, r) for r in devices.get("requests", [])]
    return out


def v1beta1_path(path: str) -> str:
    """The v1beta1 field path of a v1 path (no `exactly` wrapper)."""
    return path.replace(".exactly", "")


def claim(
    name: str,
    devices: Mapping[str, Any],
    namespace: str = "team-a",
    version: str = "v1",
    **status: Any,
) -> dict[str, Any]:
    obj: dict[str, Any] = {
        "apiVersion": f"resource.k8s.io/{version}",
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"devices": to_version(version, devices)},
    }
    if status:
        obj["status"] = status
    return obj


def claim_template(
    name: str, devices: Mapping[str, Any], namespace: str = "team-a", version: str = "v1"
) -> dict[str, Any]:
    return {
        "apiVersion": f"resource.k8s.io/{version}",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"spec": {"devices": to_version(version, devices)}},
    }


def device_class(
    name: str,
    extended_resource_name: str | None = None,
    created: str = "2026-01-01T00:00:00Z",
    version: str = "v1",
) -> dict[str, Any]:
    spec: dict[str, Any] = {"selectors": [{"cel": {"expression": "true"}}]}
    if extended_resource_name:
        spec["extendedResourceName"] = extended_resource_name
    return {
        "apiVersion": f"resource.k8s.io/{version}",
        "kind": "DeviceClass",
        "metadata": {"name": name, "creationTimestamp": created},
        "spec": spec,
    }


def container(
    name: str = "main",
    restart_policy: str | None = None,
    claims: tuple[str, ...] = (),
    **requests: Any,
) -> dict[str, Any]:
    out: dict[str, Any] = {"name": name, "image": "busybox"}
    if requests:
        out["resources"] = {
            "requests": {k.replace("__", "/").replace("_", "-"): v for k, v in requests.items()}
        }
    if claims:
        out.setdefault("resources", {})["claims"] = [{"name": c} for c in claims]
    if restart_policy:
        out["restartPolicy"] = restart_policy
    return out


def pod(
    name: str = "train-0",
    namespace: str = "team-a",
    claims: tuple[Mapping, ...] = (),
    containers: tuple[Mapping, ...] | None = None,
    init: tuple[Mapping, ...] = (),
    labels: Mapping[str, str] | None = None,
    **spec: Any,
) -> dict[str, Any]:
    body: dict[str, Any] = {"containers": list(containers or [container()])}
    if init:
        body["initContainers"] = list(init)
    if claims:
        body["resourceClaims"] = list(claims)
    body.update(spec)
    metadata: dict[str, Any] = {"name": name, "namespace": namespace}
    if labels:
        metadata["labels"] = dict(labels)
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": body}
