"""ResourceSlices of resource.k8s.io v1, v1beta2 and v1beta1, normalised to one model.

v1beta1 wraps the fields of a device in `basic:`; v1 and v1beta2 put them on the
device. Parsing keeps what the allocator reads: attributes, capacity, counter
consumption, per-device node selection, taints and binding conditions.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any, NamedTuple

from quota.allocator.celtypes import QUANTITY_KEY, semver_value
from quota.claimspec import api_version_of
from quota.errors import object_ref
from quota.fields import FieldReader
from quota.quantity import parse_quantity

__all__ = [
    "CapacityPolicy",
    "Device",
    "DeviceID",
    "Quantity",
    "Slice",
    "cel_input",
    "parse_slice",
    "split_name",
]


class Quantity(NamedTuple):
    """A parsed quantity and the text it was written as (kept for output)."""

    value: Decimal
    text: str


@dataclass(frozen=True)
class CapacityPolicy:
    """`requestPolicy` of a consumable capacity (KEP-5075)."""

    default: Quantity | None = None
    valid_values: tuple[Quantity, ...] = ()
    range_min: Quantity | None = None
    range_max: Quantity | None = None
    range_step: Quantity | None = None
    has_range: bool = False


class DeviceID(NamedTuple):
    """driver/pool/device, the identity of a device across the cluster."""

    driver: str
    pool: str
    device: str

    def __str__(self) -> str:
        return f"{self.driver}/{self.pool}/{self.device}"


@dataclass(frozen=True)
class Device:
    """One device of a slice; `attributes` keys are fully qualified (`domain/name`)."""

    name: str
    driver: str
    pool: str
    attributes: Mapping[str, tuple[str, Any]]
    capacity: Mapping[str, Decimal]
    consumes_counters: tuple[tuple[str, Mapping[str, Decimal]], ...] = ()
    node_name: str = ""
    node_selector: Mapping[str, Any] | None = None
    all_nodes: bool = False
    taints: tuple[Mapping[str, Any], ...] = ()
    binding_conditions: tuple[str, ...] = ()
    binding_failure_conditions: tuple[str, ...] = ()
    binds_to_node: bool = False
    allow_multiple_allocations: bool = False
    # Published capacity name -> (qualified name, value text, request policy).
    capacity_specs: tuple[tuple[str, str, str, CapacityPolicy | None], ...] = ()
    cel: Mapping[str, Any] = field(default_factory=dict, compare=False, repr=False)

    @property
    def id(self) -> DeviceID:
        return DeviceID(self.driver, self.pool, self.name)


@dataclass(frozen=True)
class Slice:
    """A ResourceSlice: which pool it belongs to, which nodes it serves, its devices."""

    name: str
    driver: str
    pool: str
    generation: int
    slice_count: int
    node_name: str = ""
    node_selector: Mapping[str, Any] | None = None
    all_nodes: bool = False
    per_device_node_selection: bool = False
    shared_counters: tuple[tuple[str, Mapping[str, Decimal]], ...] = ()
    devices: tuple[Device, ...] = ()


def split_name(qualified: str, driver: str) -> tuple[str, str]:
    """(domain, name) of an attribute or capacity name; unqualified names are the driver's."""
    domain, sep, name = qualified.partition("/")
    return (domain, name) if sep else (driver, qualified)


def _attribute(r: FieldReader, raw: Any, path: str) -> tuple[str, Any]:
    raw = r.mapping(raw, path)
    for kind in ("int", "bool", "string", "version"):
        if kind in raw and raw[kind] is not None:
            value = raw[kind]
            expected = {"int": int, "bool": bool, "string": str, "version": str}[kind]
            if not isinstance(value, expected) or (kind == "int" and isinstance(value, bool)):
                raise r.fail(f"{path}.{kind}", f"must be a {kind}, got {value!r}")
            return kind, value
    if any(value is not None for value in raw.values()):
        # A type this allocator does not know (e.g. list values): matches no constraint.
        return "list", None
    # No value at all: constraints report it as an unsupported attribute value.
    return "unknown", None


def _capacity(r: FieldReader, raw: Any, path: str) -> Decimal:
    if isinstance(raw, Mapping):
        return parse_quantity(raw.get("value"), r.ref, f"{path}.value")
    return parse_quantity(raw, r.ref, path)


def _quantity(r: FieldReader, raw: Any, path: str) -> Quantity | None:
    if raw is None:
        return None
    return Quantity(parse_quantity(raw, r.ref, path), str(raw))


def _policy(r: FieldReader, raw: Any, path: str) -> CapacityPolicy | None:
    if not isinstance(raw, Mapping):
        return None
    policy = r.mapping(raw.get("requestPolicy"), f"{path}.requestPolicy")
    if not policy:
        return None
    p = f"{path}.requestPolicy"
    valid_range = policy.get("validRange")
    bounds = r.mapping(valid_range, f"{p}.validRange")
    return CapacityPolicy(
        default=_quantity(r, policy.get("default"), f"{p}.default"),
        valid_values=tuple(
            q
            for i, v in enumerate(r.items(policy.get("validValues"), f"{p}.validValues"))
            if (q := _quantity(r, v, f"{p}.validValues[{i}]")) is not None
        ),
        range_min=_quantity(r, bounds.get("min"), f"{p}.validRange.min"),
        range_max=_quantity(r, bounds.get("max"), f"{p}.validRange.max"),
        range_step=_quantity(r, bounds.get("step"), f"{p}.validRange.step"),
        has_range=valid_range is not None,
    )


def _counters(r: FieldReader, raw: Any, path: str) -> tuple[tuple[str, Mapping[str, Decimal]], ...]:
    out = []
    for i, entry in enumerate(r.items(raw, path)):
        entry = r.mapping(entry, f"{path}[{i}]")
        name = r.string(
            entry.get("name") or entry.get("counterSet"), f"{path}[{i}].counterSet", True
        )
        counters = r.mapping(entry.get("counters"), f"{path}[{i}].counters")
        values = {
            counter: parse_quantity(
                r.mapping(value, f"{path}[{i}].counters.{counter}").get("value"),
                r.ref,
                f"{path}[{i}].counters.{counter}.value",
            )
            for counter, value in counters.items()
        }
        out.append((name, values))
    return tuple(out)


def cel_input(
    driver: str,
    attributes: Mapping[str, tuple[str, Any]],
    capacity: Mapping[str, Decimal],
    multi: bool,
) -> dict[str, Any]:
    """The `device` variable CEL selectors see."""
    attrs: dict[str, dict[str, Any]] = {}
    for qualified, (kind, value) in attributes.items():
        if kind in ("unknown", "list"):
            continue
        domain, name = split_name(qualified, driver)
        attrs.setdefault(domain, {})[name] = (
            semver_value(value, False) if kind == "version" else value
        )
    caps: dict[str, dict[str, Any]] = {}
    for qualified, number in capacity.items():
        domain, name = split_name(qualified, driver)
        text = "0" if number == 0 else format(number.normalize(), "f")
        caps.setdefault(domain, {})[name] = {QUANTITY_KEY: text}
    return {
        "driver": driver,
        "allowMultipleAllocations": multi,
        "attributes": attrs,
        "capacity": caps,
    }


def _qualify(name: str, driver: str) -> str:
    domain, short = split_name(name, driver)
    return f"{domain}/{short}"


def _device(r: FieldReader, raw: Any, path: str, driver: str, pool: str, version: str) -> Device:
    raw = r.mapping(raw, path)
    name = r.string(raw.get("name"), f"{path}.name", True)
    body, body_path = raw, path
    if version == "v1beta1":
        body, body_path = r.mapping(raw.get("basic"), f"{path}.basic"), f"{path}.basic"
    attributes = {
        _qualify(key, driver): _attribute(r, value, f"{body_path}.attributes.{key}")
        for key, value in r.mapping(body.get("attributes"), f"{body_path}.attributes").items()
    }
    capacity = {
        _qualify(key, driver): _capacity(r, value, f"{body_path}.capacity.{key}")
        for key, value in r.mapping(body.get("capacity"), f"{body_path}.capacity").items()
    }
    raw_capacity = r.mapping(body.get("capacity"), f"{body_path}.capacity")
    capacity_specs = tuple(
        (
            key,
            _qualify(key, driver),
            str(value.get("value") if isinstance(value, Mapping) else value),
            _policy(r, value, f"{body_path}.capacity.{key}"),
        )
        for key, value in raw_capacity.items()
    )
    multi = r.boolean(body.get("allowMultipleAllocations"), f"{body_path}.allowMultipleAllocations")
    selector = body.get("nodeSelector")
    try:
        cel = cel_input(driver, attributes, capacity, multi)
    except ValueError as exc:
        raise r.fail(f"{body_path}.attributes", str(exc)) from exc
    return Device(
        name=name,
        driver=driver,
        pool=pool,
        attributes=attributes,
        capacity=capacity,
        consumes_counters=_counters(
            r, body.get("consumesCounters"), f"{body_path}.consumesCounters"
        ),
        node_name=r.string(body.get("nodeName"), f"{body_path}.nodeName"),
        node_selector=r.mapping(selector, f"{body_path}.nodeSelector") if selector else None,
        all_nodes=r.boolean(body.get("allNodes"), f"{body_path}.allNodes"),
        taints=tuple(
            r.mapping(t, f"{body_path}.taints")
            for t in r.items(body.get("taints"), f"{body_path}.taints")
        ),
        binding_conditions=r.strings(
            body.get("bindingConditions"), f"{body_path}.bindingConditions"
        ),
        binding_failure_conditions=r.strings(
            body.get("bindingFailureConditions"), f"{body_path}.bindingFailureConditions"
        ),
        binds_to_node=r.boolean(body.get("bindsToNode"), f"{body_path}.bindsToNode"),
        allow_multiple_allocations=multi,
        capacity_specs=capacity_specs,
        cel=cel,
    )


def parse_slice(obj: Mapping[str, Any]) -> Slice:
    """Normalise a ResourceSlice object; malformed fields raise InvalidObject with the path."""
    metadata = obj.get("metadata") or {}
    ref = object_ref("ResourceSlice", None, metadata.get("name"))
    version = api_version_of(obj, ref)
    r = FieldReader(ref)
    spec = r.mapping(obj.get("spec"), "spec")
    driver = r.string(spec.get("driver"), "spec.driver", True)
    pool = r.mapping(spec.get("pool"), "spec.pool")
    pool_name = r.string(pool.get("name"), "spec.pool.name", True)
    generation = pool.get("generation") or 0
    count = pool.get("resourceSliceCount") or 0
    for value, path in (
        (generation, "spec.pool.generation"),
        (count, "spec.pool.resourceSliceCount"),
    ):
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise r.fail(path, f"must be a non-negative integer, got {value!r}")
    selector = spec.get("nodeSelector")
    devices = tuple(
        _device(r, raw, f"spec.devices[{i}]", driver, pool_name, version)
        for i, raw in enumerate(r.items(spec.get("devices"), "spec.devices"))
    )
    return Slice(
        name=r.string(metadata.get("name"), "metadata.name", True),
        driver=driver,
        pool=pool_name,
        generation=generation,
        slice_count=count,
        node_name=r.string(spec.get("nodeName"), "spec.nodeName"),
        node_selector=r.mapping(selector, "spec.nodeSelector") if selector else None,
        all_nodes=r.boolean(spec.get("allNodes"), "spec.allNodes"),
        per_device_node_selection=r.boolean(
            spec.get("perDeviceNodeSelection"), "spec.perDeviceNodeSelection"
        ),
        shared_counters=_counters(r, spec.get("sharedCounters"), "spec.sharedCounters"),
        devices=devices,
    )
