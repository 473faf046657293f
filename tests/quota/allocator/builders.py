"""Builders for allocator test objects, mirroring the upstream shared test table's fixtures."""

from __future__ import annotations

from typing import Any

from quota.claimspec import ClaimSpec, parse_claim_spec

__all__ = [
    "CLASS_A",
    "CLASS_B",
    "DRIVER_A",
    "DRIVER_B",
    "NODE_1",
    "NODE_2",
    "claim",
    "device",
    "device_class",
    "local_selector",
    "node",
    "node_selector",
    "request",
    "result",
    "slice_",
    "subrequest",
]

DRIVER_A, DRIVER_B = "driver-a", "driver-b"
CLASS_A, CLASS_B = "class-a", "class-b"
NODE_1, NODE_2 = "node-1", "node-2"


def node(name: str = NODE_1, region: str = "region-1") -> dict[str, Any]:
    return {"kind": "Node", "metadata": {"name": name, "labels": {"region": region}}}


def device_class(
    name: str, driver: str, config: list | None = None, selectors: list[str] | None = None
) -> dict[str, Any]:
    exprs = selectors if selectors is not None else [f'device.driver == "{driver}"']
    spec: dict[str, Any] = {"selectors": [{"cel": {"expression": e}} for e in exprs]}
    if config:
        spec["config"] = [{"opaque": c} for c in config]
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceClass",
        "metadata": {"name": name},
        "spec": spec,
    }


def device(name: str, **fields: Any) -> dict[str, Any]:
    out: dict[str, Any] = {"name": name}
    attrs = fields.pop("attrs", None)
    if attrs:
        out["attributes"] = {
            k: {_kind(v): v} if not isinstance(v, dict) else v for k, v in attrs.items()
        }
    caps = fields.pop("capacity", None)
    if caps:
        out["capacity"] = {k: {"value": v} for k, v in caps.items()}
    out.update(fields)
    return out


def _kind(value: Any) -> str:
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int):
        return "int"
    return "string"


def slice_(
    name: str,
    pool: str,
    driver: str = DRIVER_A,
    devices: list | None = None,
    node_name: str | None = NODE_1,
    generation: int = 1,
    count: int = 1,
    **spec: Any,
) -> dict[str, Any]:
    body: dict[str, Any] = {
        "driver": driver,
        "pool": {"name": pool, "generation": generation, "resourceSliceCount": count},
        "devices": [device(d) if isinstance(d, str) else d for d in devices or []],
    }
    if (
        node_name
        and not any(k in spec for k in ("nodeSelector", "allNodes", "perDeviceNodeSelection"))
        and "sharedCounters" not in spec
    ):
        body["nodeName"] = node_name
    body.update(spec)
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": name},
        "spec": body,
    }


def request(name: str, cls: str = CLASS_A, count: int | None = 1, **fields: Any) -> dict[str, Any]:
    exact: dict[str, Any] = {"deviceClassName": cls}
    if fields.get("allocationMode") == "All":
        count = None
    if count is not None:
        exact["count"] = count
    selectors = fields.pop("selectors", None)
    if selectors:
        exact["selectors"] = [{"cel": {"expression": s}} for s in selectors]
    exact.update(fields)
    return {"name": name, "exactly": exact}


def subrequest(
    name: str, cls: str = CLASS_A, count: int | None = 1, **fields: Any
) -> dict[str, Any]:
    sub = request(name, cls, count, **fields)
    return {"name": name, **sub["exactly"]}


def claim(
    *requests: dict, constraints: list | None = None, config: list | None = None
) -> ClaimSpec:
    devices: dict[str, Any] = {"requests": list(requests)}
    if constraints:
        devices["constraints"] = constraints
    if config:
        devices["config"] = config
    return parse_claim_spec({"devices": devices}, "v1", "ResourceClaim test/claim")


def result(
    request: str, device: str, pool: str = "pool-1", driver: str = DRIVER_A, **extra: Any
) -> dict[str, Any]:
    return {"request": request, "driver": driver, "pool": pool, "device": device, **extra}


def local_selector(name: str = NODE_1) -> dict[str, Any]:
    return {
        "nodeSelectorTerms": [
            {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [name]}]}
        ]
    }


def node_selector(key: str = "region", value: str = "region-1") -> dict[str, Any]:
    return {
        "nodeSelectorTerms": [
            {"matchExpressions": [{"key": key, "operator": "In", "values": [value]}]}
        ]
    }
