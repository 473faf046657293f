"""Quota resources charged by what devices hold, not by how many there are (issue 27).

A ClusterQueue resource of `kind: DeviceCounter` is charged the shared counter
(`consumesCounters`, KEP-4815) a matching device consumes, one of `kind: DeviceCapacity`
the consumable capacity (`capacity.requests`, KEP-5075) a request takes. Both name the
DeviceClasses whose requests they charge, and may narrow the devices by driver and by a
CEL `deviceSelector`, as Kueue's `deviceClassMappings[].sources[].counter|capacity` do.
The charge itself is `quota.devicecharge`'s; this module is what such a resource says.

Invariant: a source is the same in every flavor of its queue (a resource is one thing),
and amounts keep the unit style of the `nominalQuota` they were written with, so
messages print `40Gi`, not `42949672960`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from quota.allocator.cel import compile_selector
from quota.allocator.errors import AllocationError
from quota.fields import FieldReader

__all__ = [
    "DEVICE_CAPACITY_KIND",
    "DEVICE_COUNTER_KIND",
    "SOURCE_KINDS",
    "DeviceSource",
    "keep_source",
    "parse_resource_kind",
    "parse_source",
    "unit_in",
    "unit_of",
]

DEVICE_CLASS_KIND = "DeviceClass"
DEVICE_COUNTER_KIND = "DeviceCounter"
DEVICE_CAPACITY_KIND = "DeviceCapacity"
SOURCE_KINDS = (DEVICE_COUNTER_KIND, DEVICE_CAPACITY_KIND)
# The field naming what a source reads, per kind.
_NAME_FIELD: Mapping[str, str] = MappingProxyType(
    {DEVICE_COUNTER_KIND: "counter", DEVICE_CAPACITY_KIND: "capacity"}
)
_SOURCE_FIELDS = ("counter", "capacity", "driver", "deviceSelector")
_BINARY = ("Ki", "Mi", "Gi", "Ti", "Pi", "Ei")
_DECIMAL = ("k", "M", "G", "T", "P", "E")


@dataclass(frozen=True)
class DeviceSource:
    """What a DeviceCounter or DeviceCapacity resource charges.

    `name` is the counter (in the devices' `consumesCounters`) or the capacity (in their
    `capacity`); `driver` None means every driver the classes select; `selector` is the
    optional CEL expression of `deviceSelector`; `unit` is how amounts print ("binary",
    "decimal" or "" for plain numbers).
    """

    kind: str
    name: str
    device_classes: tuple[str, ...]
    driver: str | None = None
    selector: str | None = None
    unit: str = ""

    @property
    def counter(self) -> bool:
        return self.kind == DEVICE_COUNTER_KIND

    def describe(self) -> str:
        """`counter memory of gpu.example.com`, for messages."""
        what = "counter" if self.counter else "capacity"
        return f"{what} {self.name} of {', '.join(self.device_classes)}"

    def same_charge(self, other: DeviceSource) -> bool:
        """Whether two flavors' definitions charge alike (the unit may differ)."""
        return (self.kind, self.name, self.device_classes, self.driver, self.selector) == (
            other.kind,
            other.name,
            other.device_classes,
            other.driver,
            other.selector,
        )


def unit_of(quantity: Any) -> str:
    """The unit style a quantity was written in: `160Gi` binary, `100G` decimal, `8` plain."""
    text = str(quantity).strip()
    if text.endswith(_BINARY):
        return "binary"
    if text.endswith(_DECIMAL):
        return "decimal"
    return ""


def _selector(reader: FieldReader, raw: Any, path: str, problems: list[str]) -> str | None:
    if raw is None:
        return None
    cel = reader.mapping(reader.mapping(raw, path).get("cel"), f"{path}.cel")
    expression = reader.string(cel.get("expression"), f"{path}.cel.expression", True)
    try:
        compile_selector(expression)
    except AllocationError as exc:
        problems.append(f"{path}.cel.expression: {exc}")
    return expression


def parse_source(
    reader: FieldReader,
    entry: Mapping[str, Any],
    kind: str,
    classes: tuple[str, ...],
    path: str,
    problems: list[str],
) -> DeviceSource:
    """The source of a resource entry of `kind` DeviceCounter or DeviceCapacity.

    Malformed fields raise InvalidObject; a missing name or class list, or a field of the
    other kind, is a problem (the CRD's rules), so the queue admits nothing.
    """
    field = _NAME_FIELD[kind]
    other_kind = DEVICE_CAPACITY_KIND if kind == DEVICE_COUNTER_KIND else DEVICE_COUNTER_KIND
    other = _NAME_FIELD[other_kind]
    name = reader.string(entry.get(field), f"{path}.{field}")
    if not name:
        problems.append(f"{path}.{field}: required when kind is {kind}")
    if entry.get(other) is not None:
        problems.append(f"{path}.{other}: only allowed when kind is {other_kind}")
    if not classes:
        problems.append(f"{path}.deviceClassNames: required when kind is {kind}")
    driver = reader.string(entry.get("driver"), f"{path}.driver") or None
    selector = _selector(reader, entry.get("deviceSelector"), f"{path}.deviceSelector", problems)
    return DeviceSource(kind, name, classes, driver, selector, unit_of(entry.get("nominalQuota")))


def parse_resource_kind(
    reader: FieldReader, entry: Mapping[str, Any], path: str, problems: list[str]
) -> tuple[tuple[str, ...], DeviceSource | None]:
    """The DeviceClasses of a ClusterQueue resource entry and, for kind DeviceCounter or
    DeviceCapacity, its source. An unknown kind raises; fields of the wrong kind are
    problems (the CRD's rules)."""
    kind = reader.string(entry.get("kind"), f"{path}.kind")
    names = tuple(
        sorted(set(reader.strings(entry.get("deviceClassNames"), f"{path}.deviceClassNames")))
    )
    if kind not in ("", DEVICE_CLASS_KIND, *SOURCE_KINDS):
        expected = " or ".join((DEVICE_CLASS_KIND, *SOURCE_KINDS))
        raise reader.fail(f"{path}.kind", f"unsupported value {kind!r}: expected {expected}")
    if kind in SOURCE_KINDS:
        return names, parse_source(reader, entry, kind, names, path, problems)
    for key in _SOURCE_FIELDS:
        if entry.get(key) is not None:
            problems.append(
                f"{path}.{key}: only allowed when kind is DeviceCounter or DeviceCapacity"
            )
    if kind == DEVICE_CLASS_KIND and not names:
        problems.append(f"{path}.deviceClassNames: required when kind is DeviceClass")
    if kind != DEVICE_CLASS_KIND and names:
        problems.append(
            f"{path}.deviceClassNames: only allowed when kind is DeviceClass, DeviceCounter "
            "or DeviceCapacity"
        )
    return names, None


def keep_source(
    sources: dict[str, DeviceSource],
    resource: str,
    source: DeviceSource,
    path: str,
    problems: list[str],
) -> None:
    """Record the source of `resource`; a flavor defining it differently is a problem."""
    if not sources.setdefault(resource, source).same_charge(source):
        problems.append(f"{path}: resource {resource} is charged differently in another flavor")


def unit_in(sources: Mapping[str, DeviceSource], resource: str) -> str:
    """How amounts of `resource` print (`quota.messages.format_amount`): its source's unit."""
    source = sources.get(resource)
    return source.unit if source is not None else ""
