"""The v1 AllocationResult of one claim: device results, config, node selector."""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from typing import Any

from quota.allocator.errors import AllocationError
from quota.allocator.requests import Request
from quota.allocator.tentative import Pick
from quota.claimspec import ClaimSpec

__all__ = ["allocation_result"]


def _share_id(claim: str, pick: Pick, index: int) -> str:
    # Upstream draws a random UUID; a name-based one keeps results reproducible.
    key = f"{claim}/{pick.request.result_name}/{pick.candidate.device.id}/{index}"
    return str(uuid.uuid5(uuid.NAMESPACE_URL, f"draquota:{key}"))


def _device_result(pick: Pick, claim: str, index: int) -> dict[str, Any]:
    device = pick.candidate.device
    out: dict[str, Any] = {
        "request": pick.request.result_name,
        "driver": device.driver,
        "pool": device.pool,
        "device": device.name,
    }
    if pick.request.exact.admin_access:
        out["adminAccess"] = True
    if pick.request.exact.tolerations:
        out["tolerations"] = [dict(t) for t in pick.request.exact.tolerations]
    if pick.consumed is not None:
        out["shareID"] = _share_id(claim, pick, index)
        if pick.consumed:
            out["consumedCapacity"] = {name: q.text for name, q in pick.consumed.values()}
    if device.binding_conditions:
        out["bindingConditions"] = list(device.binding_conditions)
    if device.binding_failure_conditions:
        out["bindingFailureConditions"] = list(device.binding_failure_conditions)
    return out


def _config(spec: ClaimSpec, chosen: Sequence[Request]) -> list[dict[str, Any]]:
    config: list[dict[str, Any]] = []
    # Class config: once per class, naming every request that used the class.
    by_class: dict[str, list[dict[str, Any]]] = {}
    for request in chosen:
        name = request.device_class.name
        if name in by_class:
            for entry in by_class[name]:
                entry["requests"].append(request.result_name)
            continue
        entries = [
            {"source": "FromClass", "requests": [request.result_name], "opaque": dict(c.opaque)}
            for c in request.device_class.config
        ]
        by_class[name] = entries
        config.extend(entries)
    chosen_names = {r.name for r in chosen} | {r.result_name for r in chosen}
    for claim_config in spec.config:
        if not claim_config.requests or any(name in chosen_names for name in claim_config.requests):
            config.append(
                {
                    "source": "FromClaim",
                    "requests": list(claim_config.requests),
                    "opaque": dict(claim_config.opaque),
                }
            )
    # An entry that covers every request of the claim applies to all: requests is cleared.
    top = [r.name for r in chosen]
    for entry in config:
        names = set(entry["requests"])
        if names and all(r.name in names or r.result_name in names for r in chosen) and top:
            entry["requests"] = []
    for entry in config:
        if not entry["requests"]:
            del entry["requests"]
    return config


def _node_selector(picks: Sequence[Pick], node_name: str) -> dict[str, Any] | None:
    fields: list[Mapping[str, Any]] = []
    expressions: list[Mapping[str, Any]] = []
    for pick in picks:
        s, device = pick.candidate.slice, pick.candidate.device
        if s.per_device_node_selection:
            local, selector = device.node_name, device.node_selector
        else:
            local, selector = s.node_name, s.node_selector
        if device.binds_to_node and not local:
            local = node_name
        if local:
            return {
                "nodeSelectorTerms": [
                    {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [local]}]}
                ]
            }
        terms = (selector or {}).get("nodeSelectorTerms") or ()
        if len(terms) > 1:
            raise AllocationError(f"unsupported ResourceSlice nodeSelector with {len(terms)} terms")
        if terms:
            _merge(terms[0].get("matchFields") or (), fields)
            _merge(terms[0].get("matchExpressions") or (), expressions)
    if not fields and not expressions:
        return None
    term: dict[str, Any] = {}
    if expressions:
        term["matchExpressions"] = [dict(r) for r in expressions]
    if fields:
        term["matchFields"] = [dict(r) for r in fields]
    return {"nodeSelectorTerms": [term]}


def _merge(source: Sequence[Mapping[str, Any]], into: list[Mapping[str, Any]]) -> None:
    for req in source:
        values = set(req.get("values") or ())
        if not any(
            r.get("key") == req.get("key")
            and r.get("operator") == req.get("operator")
            and set(r.get("values") or ()) == values
            for r in into
        ):
            into.append(req)


def allocation_result(
    spec: ClaimSpec,
    picks: Sequence[Pick],
    chosen: Sequence[Request],
    node_name: str,
    claim: str = "",
) -> dict[str, Any]:
    """The v1 AllocationResult for one claim (`nodeSelector` omitted when any node will do)."""
    devices: dict[str, Any] = {
        "results": [_device_result(p, claim, i) for i, p in enumerate(picks)]
    }
    config = _config(spec, chosen)
    if config:
        devices["config"] = config
    result: dict[str, Any] = {"devices": devices}
    selector = _node_selector(picks, node_name)
    if selector is not None:
        result["nodeSelector"] = selector
    return result
