"""What a pod asks for outside of claims: ordinary requests and DRA-backed extended resources.

Ordinary requests follow Kubernetes' effective-request rule (SPEC §3.4): the
sum of regular containers and restartable (sidecar) init containers, at least
each regular init container plus the sidecars started before it, plus
`spec.overhead`. A container request for `deviceclass.resource.kubernetes.io/<class>`
or for a DeviceClass's `extendedResourceName` is DRA-backed (SPEC §3.3): it is
charged as devices of that class and removed from the ordinary resources.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from quota.deviceclasses import IMPLICIT_EXTENDED_PREFIX
from quota.errors import InvalidQuantity
from quota.fields import FieldReader
from quota.quantity import amount, parse_quantity, sat_add, saturating_amount, whole_quantity

__all__ = ["PodResources", "pod_resources"]

_POD_LEVEL = ("cpu", "memory")


@dataclass(frozen=True)
class PodResources:
    """Effective ordinary requests (quota amounts) and DRA extended-resource devices per class."""

    requests: Mapping[str, int]
    extended_devices: Mapping[str, int]


@dataclass(frozen=True)
class _Container:
    path: str
    requests: Mapping[str, Any]
    restartable: bool


def _check_claims(
    reader: FieldReader, resources: Mapping[str, Any], path: str, entries: Collection[str]
) -> None:
    """Every claim a container uses must be an entry of spec.resourceClaims (as the API
    server validates): a misspelt name would otherwise charge nothing."""
    for j, raw in enumerate(reader.items(resources.get("claims"), f"{path}.claims")):
        here = f"{path}.claims[{j}]"
        name = reader.string(reader.mapping(raw, here).get("name"), f"{here}.name", True)
        if name not in entries:
            known = ", ".join(sorted(entries)) or "none"
            raise reader.fail(
                f"{here}.name",
                f'claim "{name}" not found in spec.resourceClaims (entries: {known})',
            )


def _containers(
    reader: FieldReader, spec: Mapping[str, Any], field: str, entries: Collection[str] | None
) -> list[_Container]:
    out = []
    for i, raw in enumerate(reader.items(spec.get(field), f"spec.{field}")):
        path = f"spec.{field}[{i}]"
        container = reader.mapping(raw, path)
        resources = reader.mapping(container.get("resources"), f"{path}.resources")
        if entries is not None:
            _check_claims(reader, resources, f"{path}.resources", entries)
        limits = reader.mapping(resources.get("limits"), f"{path}.resources.limits")
        requests = dict(limits)  # the API server defaults a missing request to its limit
        requests.update(reader.mapping(resources.get("requests"), f"{path}.resources.requests"))
        restartable = field == "initContainers" and container.get("restartPolicy") == "Always"
        out.append(_Container(f"{path}.resources.requests", requests, restartable))
    return out


def _non_negative(value: Any, ref: str, path: str, saturate: bool = False) -> Decimal:
    try:
        number = parse_quantity(value, ref, path)
    except InvalidQuantity:
        if not saturate:
            raise
        return Decimal(saturating_amount("", value))
    if number < 0:
        if saturate:
            return Decimal(0)
        raise InvalidQuantity(ref, path, f"negative quantity {value!r}")
    return number


def _devices_count(value: Any, ref: str, path: str, saturate: bool) -> int:
    try:
        return whole_quantity(value, ref, path)
    except InvalidQuantity:
        if not saturate:
            raise
        return saturating_amount("", value)


def _extended_class(resource: str, extended_names: Mapping[str, str]) -> str | None:
    if resource.startswith(IMPLICIT_EXTENDED_PREFIX):
        return resource[len(IMPLICIT_EXTENDED_PREFIX) :]
    return extended_names.get(resource)


def _effective(per_container: list[tuple[_Container, dict[str, Decimal]]]) -> dict[str, Decimal]:
    regular: dict[str, Decimal] = {}
    init_peak: dict[str, Decimal] = {}
    sidecars: dict[str, Decimal] = {}
    for container, requests in per_container:
        if container.path.startswith("spec.containers"):
            _accumulate(regular, requests)
        elif container.restartable:
            _accumulate(regular, requests)
            _accumulate(sidecars, requests)
            _maximise(init_peak, sidecars)
        else:
            running = dict(sidecars)
            _accumulate(running, requests)
            _maximise(init_peak, running)
    _maximise(regular, init_peak)
    return regular


def _accumulate(total: dict[str, Decimal], more: Mapping[str, Decimal]) -> None:
    for name, value in more.items():
        total[name] = total.get(name, Decimal(0)) + value


def _maximise(total: dict[str, Decimal], other: Mapping[str, Decimal]) -> None:
    for name, value in other.items():
        if value > total.get(name, Decimal(0)):
            total[name] = value


def _extended_devices(
    per_container: list[tuple[_Container, dict[str, int]]],
) -> dict[str, int]:
    regular: dict[str, int] = {}
    largest_init: dict[str, int] = {}
    for container, devices in per_container:
        if container.path.startswith("spec.containers") or container.restartable:
            for name, value in devices.items():
                regular[name] = sat_add(regular.get(name, 0), value)
        else:
            for name, value in devices.items():
                largest_init[name] = max(largest_init.get(name, 0), value)
    for name, value in largest_init.items():
        regular[name] = max(regular.get(name, 0), value)
    return {name: value for name, value in sorted(regular.items()) if value}


def pod_resources(
    pod: Mapping[str, Any],
    ref: str,
    extended_names: Mapping[str, str],
    claim_entries: Collection[str] | None = None,
    saturate: bool = False,
    *,
    base: str = "",
) -> PodResources:
    """Effective requests of a pod (or pod template).

    `extended_names` maps explicit extended-resource names to the DeviceClass
    backing them (`quota.deviceclasses.extended_resource_classes`). With
    `claim_entries` (the names of spec.resourceClaims), a container claim naming
    no entry is an InvalidObject. A quantity out of Kubernetes' range raises
    InvalidQuantity, unless `saturate` (a live pod, which must never drop out of
    usage): then it is charged as much as an amount holds
    (`quota.quantity.saturating_amount`; a negative one as 0, a fraction of devices
    rounded up).
    """
    reader = FieldReader(ref, base)
    spec = reader.mapping(pod.get("spec"), "spec")
    containers = _containers(reader, spec, "initContainers", claim_entries) + _containers(
        reader, spec, "containers", claim_entries
    )
    ordinary: list[tuple[_Container, dict[str, Decimal]]] = []
    devices: list[tuple[_Container, dict[str, int]]] = []
    for container in containers:
        plain: dict[str, Decimal] = {}
        by_class: dict[str, int] = {}
        for resource, value in container.requests.items():
            path = reader.at(f"{container.path}[{resource}]")
            device_class = _extended_class(resource, extended_names)
            if device_class is None:
                plain[resource] = _non_negative(value, ref, path, saturate)
            else:
                count = _devices_count(value, ref, path, saturate)
                by_class[device_class] = sat_add(by_class.get(device_class, 0), count)
        ordinary.append((container, plain))
        devices.append((container, by_class))
    effective = _effective(ordinary)
    pod_spec_resources = reader.mapping(spec.get("resources"), "spec.resources")
    pod_level = reader.mapping(pod_spec_resources.get("requests"), "spec.resources.requests")
    for resource in _POD_LEVEL:
        if resource in pod_level:
            path = reader.at(f"spec.resources.requests[{resource}]")
            effective[resource] = _non_negative(pod_level[resource], ref, path, saturate)
    for resource, value in reader.mapping(spec.get("overhead"), "spec.overhead").items():
        path = reader.at(f"spec.overhead[{resource}]")
        overhead = _non_negative(value, ref, path, saturate)
        _accumulate(effective, {resource: overhead})
    requests = {
        resource: amount(
            resource, value, ref, reader.at(f"spec.containers[*].resources.requests[{resource}]")
        )
        for resource, value in sorted(effective.items())
    }
    return PodResources(requests, _extended_devices(devices))
