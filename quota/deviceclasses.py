"""DeviceClasses of any supported resource.k8s.io version and the extended resources they back."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from quota.claimspec import ClaimConfig, api_version_of
from quota.errors import object_ref
from quota.fields import FieldReader

__all__ = [
    "IMPLICIT_EXTENDED_PREFIX",
    "DeviceClass",
    "extended_resource_classes",
    "parse_device_class",
]

# A container request for `deviceclass.resource.kubernetes.io/<class>` asks for devices of <class>.
IMPLICIT_EXTENDED_PREFIX = "deviceclass.resource.kubernetes.io/"


@dataclass(frozen=True)
class DeviceClass:
    """The parts of a DeviceClass that counting and allocation read."""

    name: str
    selectors: tuple[str | None, ...] = ()
    config: tuple[ClaimConfig, ...] = ()
    extended_resource_name: str | None = None
    creation_timestamp: str = ""


def parse_device_class(obj: Mapping[str, Any]) -> DeviceClass:
    """Normalise a DeviceClass object."""
    metadata = obj.get("metadata") or {}
    ref = object_ref("DeviceClass", None, metadata.get("name"))
    api_version_of(obj, ref)
    r = FieldReader(ref)
    name = r.string(metadata.get("name"), "metadata.name", True)
    spec = r.mapping(obj.get("spec"), "spec")
    selectors = r.cel_selectors(spec.get("selectors"), "spec.selectors")
    config = []
    for i, entry in enumerate(r.items(spec.get("config"), "spec.config")):
        entry = r.mapping(entry, f"spec.config[{i}]")
        config.append(ClaimConfig((), r.mapping(entry.get("opaque"), f"spec.config[{i}].opaque")))
    extended = r.string(spec.get("extendedResourceName"), "spec.extendedResourceName") or None
    created = metadata.get("creationTimestamp") or ""
    return DeviceClass(name, selectors, tuple(config), extended, str(created))


def extended_resource_classes(classes: Iterable[DeviceClass]) -> dict[str, str]:
    """Map each explicit `extendedResourceName` to the DeviceClass that backs it.

    When several classes declare the same name, the most recently created one wins,
    ties broken by the smallest name (the scheduler's rule).
    """
    winners: dict[str, DeviceClass] = {}
    for device_class in classes:
        resource = device_class.extended_resource_name
        if not resource:
            continue
        best = winners.get(resource)
        if best is None or _newer(device_class, best):
            winners[resource] = device_class
    return {resource: device_class.name for resource, device_class in winners.items()}


def _newer(a: DeviceClass, b: DeviceClass) -> bool:
    # RFC 3339 timestamps in UTC compare correctly as strings.
    if a.creation_timestamp != b.creation_timestamp:
        return a.creation_timestamp > b.creation_timestamp
    return a.name < b.name
