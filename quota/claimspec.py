"""ResourceClaim specs of resource.k8s.io v1, v1beta2 and v1beta1, normalised to one model.

v1 and v1beta2 wrap a plain request in `exactly`; v1beta1 puts those fields on the
request itself and `firstAvailable` beside them. Everything downstream (counting,
the allocator) sees only the frozen dataclasses below. Parsing is strict where a
lenient reading could under-count devices: an unknown allocationMode, a request
with neither `exactly` nor `firstAvailable`, or a missing device class raises
`InvalidObject` with the field path, never a silent zero.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from quota.errors import InvalidObject, UnsupportedValue
from quota.fields import FieldReader

__all__ = [
    "ALLOCATION_RESULTS_MAX_SIZE",
    "DEVICE_REQUESTS_MAX_SIZE",
    "FIRST_AVAILABLE_MAX_SIZE",
    "RESOURCE_VERSIONS",
    "ClaimConfig",
    "ClaimSpec",
    "Constraint",
    "DeviceRequest",
    "ExactRequest",
    "SubRequest",
    "api_version_of",
    "parse_claim_spec",
]

RESOURCE_GROUP = "resource.k8s.io"
RESOURCE_VERSIONS = ("v1", "v1beta2", "v1beta1")
ALLOCATION_RESULTS_MAX_SIZE = 32
DEVICE_REQUESTS_MAX_SIZE = 32
FIRST_AVAILABLE_MAX_SIZE = 8
EXACT_COUNT = "ExactCount"
ALL = "All"


@dataclass(frozen=True)
class ExactRequest:
    """One concrete ask for devices of a class (`exactly`, or a `firstAvailable` entry)."""

    device_class_name: str
    selectors: tuple[str | None, ...] = ()
    allocation_mode: str = EXACT_COUNT
    count: int = 1
    admin_access: bool = False
    tolerations: tuple[Mapping[str, Any], ...] = ()
    capacity: Mapping[str, Any] | None = None


@dataclass(frozen=True)
class SubRequest:
    """A named alternative of a `firstAvailable` request."""

    name: str
    exact: ExactRequest


@dataclass(frozen=True)
class DeviceRequest:
    """A named request: either `exactly` or an ordered list of alternatives."""

    name: str
    exactly: ExactRequest | None = None
    first_available: tuple[SubRequest, ...] = ()


@dataclass(frozen=True)
class Constraint:
    """A `matchAttribute` or `distinctAttribute` constraint over some requests (all if empty)."""

    requests: tuple[str, ...] = ()
    match_attribute: str | None = None
    distinct_attribute: str | None = None


@dataclass(frozen=True)
class ClaimConfig:
    """Opaque driver configuration for some requests (all if empty)."""

    requests: tuple[str, ...]
    opaque: Mapping[str, Any]


@dataclass(frozen=True)
class ClaimSpec:
    """The device part of a ResourceClaim spec."""

    requests: tuple[DeviceRequest, ...] = ()
    constraints: tuple[Constraint, ...] = ()
    config: tuple[ClaimConfig, ...] = ()


def api_version_of(obj: Mapping[str, Any], ref: str) -> str:
    """The resource.k8s.io version of an object (`v1`, `v1beta2`, `v1beta1`), or raise."""
    api_version = obj.get("apiVersion")
    if not api_version:
        return "v1"
    group, _, version = str(api_version).rpartition("/")
    if group != RESOURCE_GROUP or version not in RESOURCE_VERSIONS:
        raise InvalidObject(
            ref,
            "apiVersion",
            f"unsupported value {api_version!r}: draquota serves resource.k8s.io "
            + ", ".join(RESOURCE_VERSIONS),
        )
    return version


def _exact(r: FieldReader, raw: Mapping[str, Any], path: str, admin_allowed: bool) -> ExactRequest:
    prefix = f"{path}." if path else ""
    mode = r.string(raw.get("allocationMode"), f"{prefix}allocationMode") or EXACT_COUNT
    if mode not in (EXACT_COUNT, ALL):
        where = r.at(f"{prefix}allocationMode")
        raise UnsupportedValue(r.ref, where, mode, f'unsupported value "{mode}"')
    count = raw.get("count")
    if mode == ALL:
        count = 0
    elif count is None:
        count = 1
    elif isinstance(count, bool) or not isinstance(count, int):
        raise r.fail(f"{prefix}count", f"must be a whole number, got {count!r}")
    elif count < 0:
        raise r.fail(f"{prefix}count", f"must not be negative, got {count}")
    selectors = r.cel_selectors(raw.get("selectors"), f"{prefix}selectors")
    admin = r.boolean(raw.get("adminAccess"), f"{prefix}adminAccess") if admin_allowed else False
    tolerations = tuple(
        r.mapping(t, f"{prefix}tolerations[{i}]")
        for i, t in enumerate(r.items(raw.get("tolerations"), f"{prefix}tolerations"))
    )
    capacity = raw.get("capacity")
    return ExactRequest(
        device_class_name=r.string(raw.get("deviceClassName"), f"{prefix}deviceClassName", True),
        selectors=selectors,
        allocation_mode=mode,
        count=count,
        admin_access=admin,
        tolerations=tolerations,
        capacity=r.mapping(capacity, f"{prefix}capacity") if capacity is not None else None,
    )


def _subrequests(r: FieldReader, raw: Any, path: str) -> tuple[SubRequest, ...]:
    entries = r.items(raw, path)
    if len(entries) > FIRST_AVAILABLE_MAX_SIZE:
        raise r.fail(
            path, f"too many alternatives: {len(entries)}, at most {FIRST_AVAILABLE_MAX_SIZE}"
        )
    subs = []
    for i, entry in enumerate(entries):
        sub_path = f"{path}[{i}]"
        entry = r.mapping(entry, sub_path)
        name = r.string(entry.get("name"), f"{sub_path}.name", True)
        subs.append(SubRequest(name, _exact(r, entry, sub_path, admin_allowed=False)))
    return tuple(subs)


def _request(r: FieldReader, raw: Any, path: str, version: str) -> DeviceRequest:
    raw = r.mapping(raw, path)
    name = r.string(raw.get("name"), f"{path}.name", True)
    if version == "v1beta1":
        if raw.get("firstAvailable"):
            if raw.get("deviceClassName"):
                raise r.fail(
                    f"{path}.deviceClassName", "must not be set together with firstAvailable"
                )
            subs = _subrequests(r, raw["firstAvailable"], f"{path}.firstAvailable")
            return DeviceRequest(name, first_available=subs)
        return DeviceRequest(name, exactly=_exact(r, raw, path, admin_allowed=True))
    exactly, first = raw.get("exactly"), raw.get("firstAvailable")
    if exactly is not None and first:
        raise r.fail(path, "exactly and firstAvailable are mutually exclusive")
    if exactly is not None:
        exact = _exact(r, r.mapping(exactly, f"{path}.exactly"), f"{path}.exactly", True)
        return DeviceRequest(name, exactly=exact)
    if first:
        return DeviceRequest(name, first_available=_subrequests(r, first, f"{path}.firstAvailable"))
    hint = (
        " (fields directly on the request are the v1beta1 shape)"
        if "deviceClassName" in raw
        else ""
    )
    raise r.fail(path, f"must specify one of exactly or firstAvailable{hint}")


def _constraints(r: FieldReader, raw: Any, path: str) -> tuple[Constraint, ...]:
    out = []
    for i, entry in enumerate(r.items(raw, path)):
        entry = r.mapping(entry, f"{path}[{i}]")
        out.append(
            Constraint(
                requests=r.strings(entry.get("requests"), f"{path}[{i}].requests"),
                match_attribute=r.string(entry.get("matchAttribute"), f"{path}[{i}].matchAttribute")
                or None,
                distinct_attribute=r.string(
                    entry.get("distinctAttribute"), f"{path}[{i}].distinctAttribute"
                )
                or None,
            )
        )
    return tuple(out)


def _config(r: FieldReader, raw: Any, path: str) -> tuple[ClaimConfig, ...]:
    out = []
    for i, entry in enumerate(r.items(raw, path)):
        entry = r.mapping(entry, f"{path}[{i}]")
        requests = r.strings(entry.get("requests"), f"{path}[{i}].requests")
        out.append(ClaimConfig(requests, r.mapping(entry.get("opaque"), f"{path}[{i}].opaque")))
    return tuple(out)


def parse_claim_spec(spec: Any, version: str, ref: str, path: str = "spec") -> ClaimSpec:
    """Normalise a ResourceClaim `spec` (or a template's `spec.spec`) of the given version.

    `ref` names the object for error messages (`ResourceClaim team-a/gpu`), `path` is
    where the spec sits in it.
    """
    r = FieldReader(ref)
    spec = r.mapping(spec, path)
    devices = r.mapping(spec.get("devices"), f"{path}.devices")
    req_path = f"{path}.devices.requests"
    raw_requests = r.items(devices.get("requests"), req_path)
    if len(raw_requests) > DEVICE_REQUESTS_MAX_SIZE:
        raise r.fail(
            req_path, f"too many requests: {len(raw_requests)}, at most {DEVICE_REQUESTS_MAX_SIZE}"
        )
    requests = tuple(
        _request(r, raw, f"{req_path}[{i}]", version) for i, raw in enumerate(raw_requests)
    )
    seen: set[str] = set()
    for i, request in enumerate(requests):
        if request.name in seen:
            raise r.fail(f"{req_path}[{i}].name", f'duplicate request name "{request.name}"')
        seen.add(request.name)
    return ClaimSpec(
        requests=requests,
        constraints=_constraints(r, devices.get("constraints"), f"{path}.devices.constraints"),
        config=_config(r, devices.get("config"), f"{path}.devices.config"),
    )
