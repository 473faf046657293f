"""The shared DRA structured-parameters allocator (SPEC §5).

`allocate()` answers one question: can these claims get devices together on this
node? It has three distinct outcomes, like the scheduler's allocator:

- a list with one v1 `AllocationResult` dict per claim, in claim order;
- `None`: the claims cannot be placed on this node (not enough free, matching,
  tolerated devices; an incomplete pool; constraints that no combination meets);
- `BudgetExceeded` (a `DraquotaError`): answering needs more search steps or CEL
  cost than the `budget` allows — the claims are too complex to check;
- `AllocationError` (a `DraquotaError`): the input is invalid — a CEL compile or
  runtime error, an unknown device class, more than 32 devices in a claim,
  `All` over an incomplete pool. `InvalidPoolsError` (a subclass) when no
  solution was found and some pool on the node was invalid.

The search follows the kube-scheduler's incubating allocator, so draquota picks
the same devices for the same cluster state and node.
"""

from __future__ import annotations

from collections.abc import Container, Iterable, Mapping, Sequence
from decimal import Decimal
from typing import Any

from quota.allocator.budget import Budget
from quota.allocator.candidates import SelectorMemo
from quota.allocator.devices import Device, DeviceID, Slice, parse_slice
from quota.allocator.errors import AllocationError, BudgetExceeded, InvalidPoolsError
from quota.allocator.pools import Pool, gather_pools
from quota.allocator.result import allocation_result
from quota.allocator.search import Search
from quota.claims import claim_spec_of
from quota.claimspec import ClaimSpec, parse_claim_spec
from quota.deviceclasses import DeviceClass, parse_device_class
from quota.errors import InvalidObject, UnsupportedValue

__all__ = [
    "AllocationError",
    "Budget",
    "BudgetExceeded",
    "Device",
    "DeviceID",
    "InvalidPoolsError",
    "Pool",
    "Slice",
    "allocate",
    "gather_pools",
    "parse_slice",
]


def _slices(slices: Iterable[Slice | Mapping[str, Any]]) -> list[Slice]:
    return [s if isinstance(s, Slice) else parse_slice(s) for s in slices]


def _classes(
    classes: Mapping[str, DeviceClass] | Iterable[DeviceClass | Mapping[str, Any]],
) -> Mapping[str, DeviceClass]:
    if isinstance(classes, Mapping):
        return classes
    parsed = [c if isinstance(c, DeviceClass) else parse_device_class(c) for c in classes]
    return {c.name: c for c in parsed}


def _claim_specs(
    claims: Sequence[ClaimSpec | Mapping[str, Any]], names: Sequence[str] | None
) -> tuple[list[ClaimSpec], list[str]]:
    specs: list[ClaimSpec] = []
    labels: list[str] = []
    for i, claim in enumerate(claims):
        label = names[i] if names is not None else f"claim-{i}"
        if isinstance(claim, ClaimSpec):
            specs.append(claim)
            labels.append(label)
            continue
        metadata = claim.get("metadata") or {}
        if names is None and metadata.get("name"):
            namespace = metadata.get("namespace")
            label = f"{namespace}/{metadata['name']}" if namespace else str(metadata["name"])
        try:
            if claim.get("kind"):
                specs.append(claim_spec_of(claim))
            else:
                specs.append(parse_claim_spec(claim, "v1", f"ResourceClaim {label}"))
        except InvalidObject as exc:
            raise AllocationError(_upstream_reason(exc), label) from exc
        labels.append(label)
    return specs, labels


def _upstream_reason(exc: InvalidObject) -> str:
    """The allocator's wording for claim fields it rejects (the parser's is kept after it),
    built from the error's fields."""
    if isinstance(exc, UnsupportedValue) and exc.path.endswith("allocationMode"):
        return f"unsupported count mode {exc.value} ({exc})"
    if exc.path.endswith("deviceClassName") and exc.reason == "required":
        return f"missing device class name (unsupported request type?) ({exc})"
    return str(exc)


def allocate(
    claims: Sequence[ClaimSpec | Mapping[str, Any]],
    node: Mapping[str, Any] | None,
    slices: Iterable[Slice | Mapping[str, Any]] = (),
    classes: Mapping[str, DeviceClass] | Iterable[DeviceClass | Mapping[str, Any]] = (),
    allocated: Container[DeviceID] = frozenset(),
    *,
    claim_names: Sequence[str] | None = None,
    pools: Sequence[Pool] | None = None,
    memo: SelectorMemo | None = None,
    shared_allocated: Container[DeviceID] = frozenset(),
    allocated_capacity: Mapping[DeviceID, Mapping[str, Decimal]] | None = None,
    budget: Budget | None = None,
) -> list[dict[str, Any]] | None:
    """Allocate devices for all `claims` together on `node` (a Node object; None = no node).

    A claim is a parsed `ClaimSpec`, a ResourceClaim object (any supported version) or a
    v1 ResourceClaim `spec`; a malformed claim raises AllocationError.

    `slices` are ResourceSlice objects (any supported version) or parsed `Slice`s,
    `classes` DeviceClass objects or a name -> DeviceClass mapping, `allocated` the
    IDs of devices already allocated to other claims (admin-access allocations
    excluded). `pools` may replace `slices` when the caller keeps them cached,
    `memo` caches selector results across calls for the same Device objects.
    `claim_names` label claims in error messages. `shared_allocated` are devices
    allocated to claims as shared (results with a shareID) and `allocated_capacity` the
    capacity those allocations consume per device (name -> amount). `budget` bounds
    the work (a default `Budget` when None); pass one budget to several calls to bound
    them together.
    """
    if pools is None:
        pools = gather_pools(_slices(slices), node)
    specs, names = _claim_specs(claims, claim_names)
    search = Search(
        claims=specs,
        claim_names=names,
        node=node,
        pools=pools,
        classes=_classes(classes),
        allocated=allocated,
        memo=memo if memo is not None else {},
        shared_allocated=shared_allocated,
        allocated_capacity=allocated_capacity or {},
        budget=budget if budget is not None else Budget(),
    )
    search.prepare()
    if not search.run():
        invalid = tuple(f"{p.ref}: {p.invalid}" for p in pools if p.invalid)
        if invalid:
            raise InvalidPoolsError(invalid)
        return None
    node_name = str(((node or {}).get("metadata") or {}).get("name") or "")
    results = []
    for ci, spec in enumerate(specs):
        chosen = [
            alternatives[search.selected.get((ci, ri), 0)]
            for ri, alternatives in enumerate(search.requests[ci])
        ]
        results.append(allocation_result(spec, search.results[ci], chosen, node_name, names[ci]))
    return results
