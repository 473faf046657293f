"""DeviceTaintRules: cluster objects that add a taint to the devices they select (KEP-5055).

The scheduler treats a taint from a rule like one the driver published, so
placement applies the rules to the parsed slices before allocating.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from quota.allocator.cel import compile_selector
from quota.allocator.devices import Device, Slice
from quota.allocator.errors import AllocationError
from quota.deviceclasses import DeviceClass
from quota.errors import object_ref
from quota.fields import FieldReader

__all__ = ["TaintRule", "apply_taint_rules", "parse_taint_rule"]


@dataclass(frozen=True)
class TaintRule:
    """Which devices a rule selects, and the taint it adds."""

    name: str
    taint: Mapping[str, Any]
    driver: str = ""
    pool: str = ""
    device: str = ""
    device_class: str = ""
    selectors: tuple[str, ...] = ()


def parse_taint_rule(obj: Mapping[str, Any]) -> TaintRule:
    """Normalise a DeviceTaintRule object (any served version)."""
    metadata = obj.get("metadata") or {}
    r = FieldReader(object_ref("DeviceTaintRule", None, metadata.get("name")))
    spec = r.mapping(obj.get("spec"), "spec")
    selector = r.mapping(spec.get("deviceSelector"), "spec.deviceSelector")
    taint = r.mapping(spec.get("taint"), "spec.taint")
    r.string(taint.get("key"), "spec.taint.key", True)
    r.string(taint.get("effect"), "spec.taint.effect", True)
    expressions = []
    for i, entry in enumerate(r.items(selector.get("selectors"), "spec.deviceSelector.selectors")):
        cel = r.mapping(r.mapping(entry, f"spec.deviceSelector.selectors[{i}]").get("cel"), "")
        path = f"spec.deviceSelector.selectors[{i}].cel.expression"
        expressions.append(r.string(cel.get("expression"), path, True))
    return TaintRule(
        name=r.string(metadata.get("name"), "metadata.name", True),
        taint=taint,
        driver=r.string(selector.get("driver"), "spec.deviceSelector.driver"),
        pool=r.string(selector.get("pool"), "spec.deviceSelector.pool"),
        device=r.string(selector.get("device"), "spec.deviceSelector.device"),
        device_class=r.string(
            selector.get("deviceClassName"), "spec.deviceSelector.deviceClassName"
        ),
        selectors=tuple(expressions),
    )


def _selects(rule: TaintRule, device: Device, classes: Mapping[str, DeviceClass]) -> bool:
    if rule.driver and rule.driver != device.driver:
        return False
    if rule.pool and rule.pool != device.pool:
        return False
    if rule.device and rule.device != device.name:
        return False
    expressions: list[str | None] = list(rule.selectors)
    if rule.device_class:
        device_class = classes.get(rule.device_class)
        if device_class is None:
            return False
        expressions = [*device_class.selectors, *expressions]
    try:
        return all(e is not None and compile_selector(e).matches(device.cel) for e in expressions)
    except AllocationError:
        return False  # a rule whose selector fails on a device does not taint it


def apply_taint_rules(
    s: Slice, rules: Sequence[TaintRule], classes: Mapping[str, DeviceClass]
) -> Slice:
    """The slice with each device's taints extended by the rules that select it."""
    changed = False
    devices = []
    for device in s.devices:
        extra = tuple(rule.taint for rule in rules if _selects(rule, device, classes))
        if extra:
            device = dataclasses.replace(device, taints=(*device.taints, *extra))
            changed = True
        devices.append(device)
    return dataclasses.replace(s, devices=tuple(devices)) if changed else s
