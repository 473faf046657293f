"""The charge of a device request in a DeviceCounter or DeviceCapacity resource, by Kueue's
formulas (`pkg/dra/counters.go`, `capacity.go`, v0.19; issue 27).

Matching devices are those of complete pools at their highest generation (all
`resourceSliceCount` slices seen) that the source's driver and `deviceSelector`, the
request's DeviceClass selectors and the request's own selectors all accept.

- Counter: the largest amount of the counter any matching device consumes (from any of
  its counter sets), times `count`.
- Capacity: per matching device publishing the capacity, the request's
  `capacity.requests[name]`, else the capacity's `requestPolicy.default`, else the whole
  capacity, rounded up to the policy (`validValues`: the smallest value at least as large;
  `validRange`: at least `min`, up to `min + n*step`; above every valid value or `max`
  the device cannot serve it); the largest over the devices, times `count`.
- Every amount: a negative one is 0, a fraction rounds up, products saturate at int64.

Beyond Kueue, which refuses them: `allocationMode: All` is charged as all matching
devices (at most 32, the most one request can hold), `firstAvailable` as the largest
charge any alternative could take, `adminAccess` as nothing. No matching device publishes
the counter or capacity: 0, with `unpublished` set so the queue's status can say so.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from decimal import ROUND_CEILING, Decimal
from typing import Any

from quota.allocator.cel import compile_selector
from quota.allocator.devices import CapacityPolicy, Device, Slice, parse_slice
from quota.allocator.errors import AllocationError
from quota.claimspec import ALL, ALLOCATION_RESULTS_MAX_SIZE, ClaimSpec, ExactRequest
from quota.deviceclasses import DeviceClass, parse_device_class
from quota.errors import DraquotaError, InvalidObject
from quota.quantity import INT64_MAX, parse_quantity, sat_add, sat_mul
from quota.sources import DeviceSource

__all__ = [
    "DeviceCatalog",
    "SourceCharge",
    "claim_charge",
    "device_catalog",
    "request_charge",
    "unpublished_sources",
]


@dataclass(frozen=True)
class DeviceCatalog:
    """The devices quota may charge by: those of complete pools at their highest generation,
    and the DeviceClasses by name. `problems` lists objects that did not parse (skipped)."""

    devices: tuple[Device, ...]
    classes: Mapping[str, DeviceClass]
    problems: tuple[str, ...] = ()


@dataclass(frozen=True)
class SourceCharge:
    """An amount in a source's unit; `unpublished`: no matching device has the counter or
    capacity, so the amount is 0 by default, not by measure."""

    amount: int
    unpublished: bool = False


def _complete_pools(slices: Iterable[Slice]) -> list[Slice]:
    """Slices of pools seen whole at their highest generation (Kueue `groupSlicesByPool`)."""
    newest: dict[tuple[str, str], list[Slice]] = {}
    for s in slices:
        kept = newest.setdefault((s.driver, s.pool), [s])
        if kept[0] is s:
            continue
        if s.generation > kept[0].generation:
            newest[(s.driver, s.pool)] = [s]
        elif s.generation == kept[0].generation:
            kept.append(s)
    return [s for kept in newest.values() if len(kept) == kept[0].slice_count for s in kept]


def device_catalog(
    slices: Iterable[Slice | Mapping[str, Any]], classes: Iterable[Mapping[str, Any]]
) -> DeviceCatalog:
    """The catalog of a cluster view's ResourceSlices and DeviceClasses."""
    problems: list[str] = []
    parsed: list[Slice] = []
    for obj in slices:
        try:
            parsed.append(obj if isinstance(obj, Slice) else parse_slice(obj))
        except DraquotaError as exc:
            problems.append(str(exc))
    by_name: dict[str, DeviceClass] = {}
    for obj in classes:
        try:
            device_class = parse_device_class(obj)
        except DraquotaError as exc:
            problems.append(str(exc))
            continue
        by_name[device_class.name] = device_class
    devices = tuple(d for s in _complete_pools(parsed) for d in s.devices)
    return DeviceCatalog(devices, by_name, tuple(problems))


def _accepts(expressions: Iterable[str | None], device: Device) -> bool:
    return all(e is None or compile_selector(e).matches(device.cel) for e in expressions)


def _matching(
    catalog: DeviceCatalog, source: DeviceSource, exact: ExactRequest, where: tuple[str, str]
) -> list[Device]:
    """Devices the source and the request both accept; a CEL error names the request."""
    device_class = catalog.classes.get(exact.device_class_name)
    if device_class is None:
        return []  # charged 0 here; admission reports the missing class
    ref, path = where
    out = []
    for device in catalog.devices:
        if source.driver is not None and device.driver != source.driver:
            continue
        try:
            if (
                _accepts((source.selector,), device)
                and _accepts(device_class.selectors, device)
                and _accepts(exact.selectors, device)
            ):
                out.append(device)
        except AllocationError as exc:
            raise InvalidObject(ref, path, f"device {device.id}: {exc}") from exc
    return out


def _whole(value: Decimal) -> int:
    """Kueue's `SafeValue` for a charge: a fraction rounds up, a negative is 0, int64 caps."""
    if value <= 0:
        return 0
    return min(int(value.to_integral_value(rounding=ROUND_CEILING)), INT64_MAX)


def _counter_amount(devices: Iterable[Device], counter: str) -> Decimal | None:
    values = [
        counters[counter]
        for device in devices
        for _, counters in device.consumes_counters
        if counter in counters
    ]
    return max(values) if values else None


def _rounded(base: Decimal, policy: CapacityPolicy | None) -> Decimal | None:
    """`base` rounded up to the policy; None when above every valid value or the maximum."""
    if policy is None:
        return base
    if policy.valid_values:
        return next((v.value for v in policy.valid_values if v.value >= base), None)
    if not policy.has_range:
        return base
    # Kueue works on whole units here (SafeValue) before it rounds.
    value = Decimal(_whole(base))
    if policy.range_min is not None:
        low = Decimal(_whole(policy.range_min.value))
        value = max(value, low)
        step = _whole(policy.range_step.value) if policy.range_step is not None else 0
        if step > 0 and (value - low) % step:
            value = low + ((value - low) // step + 1) * step
    if policy.range_max is not None and value > _whole(policy.range_max.value):
        return None
    return value


def _requested(exact: ExactRequest, name: str, where: tuple[str, str]) -> Decimal | None:
    requests = (exact.capacity or {}).get("requests") or {}
    if name not in requests:
        return None
    ref, path = where
    return parse_quantity(requests[name], ref, f"{path}.capacity.requests.{name}")


def _capacity_amount(
    devices: Iterable[Device], exact: ExactRequest, name: str, where: tuple[str, str], lenient: bool
) -> Decimal | None:
    requested = _requested(exact, name, where)
    published = rounded = False
    best = Decimal(0)
    for device in devices:
        spec = next((c for c in device.capacity_specs if name in (c[0], c[1])), None)
        if spec is None:
            continue
        published = True
        _, qualified, _, policy = spec
        if requested is not None:
            base = requested
        elif policy is not None and policy.default is not None:
            base = policy.default.value
        else:
            base = device.capacity[qualified]
        value = _rounded(base, policy)
        if value is None and lenient:
            value = base  # a live pod is charged what it asked, never dropped
        if value is not None:
            best = value if not rounded else max(best, value)
            rounded = True
    if not published:
        return None
    if not rounded:
        ref, path = where
        raise InvalidObject(
            ref,
            f"{path}.capacity.requests.{name}",
            f"{requested} is more than any matching device's requestPolicy allows for "
            f"capacity {name}",
        )
    return best


def _exact_charge(
    catalog: DeviceCatalog,
    source: DeviceSource,
    exact: ExactRequest,
    where: tuple[str, str],
    lenient: bool,
) -> SourceCharge:
    if exact.admin_access or exact.device_class_name not in source.device_classes:
        return SourceCharge(0)
    devices = _matching(catalog, source, exact, where)
    count = exact.count
    if exact.allocation_mode == ALL:
        count = min(len(devices), ALLOCATION_RESULTS_MAX_SIZE)
    if source.counter:
        value = _counter_amount(devices, source.name)
    else:
        value = _capacity_amount(devices, exact, source.name, where, lenient)
    if value is None:
        return SourceCharge(0, unpublished=bool(devices))
    return SourceCharge(sat_mul(_whole(value), count))


def request_charge(
    catalog: DeviceCatalog,
    source: DeviceSource,
    alternatives: Iterable[ExactRequest],
    where: tuple[str, str],
    lenient: bool = False,
) -> SourceCharge:
    """The charge of one request (its `exactly`, or each `firstAvailable` alternative: the
    largest). `where` is (object, field path) of the request for errors; with `lenient`
    (a live pod) a capacity request no device allows is charged as asked instead of
    raising InvalidObject.
    """
    best = SourceCharge(0)
    for exact in alternatives:
        charge = _exact_charge(catalog, source, exact, where, lenient)
        if charge.amount > best.amount or (charge.unpublished and not best.amount):
            best = charge
    return best


def claim_charge(
    catalog: DeviceCatalog,
    source: DeviceSource,
    spec: ClaimSpec,
    ref: str,
    lenient: bool = False,
    base: str = "spec",
) -> SourceCharge:
    """The charge of a whole claim spec: the sum over its requests (`ref` names the claim,
    `base` is where the spec sits in it: `spec.spec` in a template)."""
    total, unpublished = 0, False
    for i, request in enumerate(spec.requests):
        path = f"{base}.devices.requests[{i}]"
        if request.exactly is not None:
            alternatives: tuple[ExactRequest, ...] = (request.exactly,)
            path += ".exactly"
        else:
            alternatives = tuple(sub.exact for sub in request.first_available)
        charge = request_charge(catalog, source, alternatives, (ref, path), lenient)
        total = sat_add(total, charge.amount)
        unpublished = unpublished or charge.unpublished
    return SourceCharge(total, unpublished and not total)


def _publishes(device: Device, source: DeviceSource) -> bool:
    if source.counter:
        return any(source.name in counters for _, counters in device.consumes_counters)
    return any(source.name in (c[0], c[1]) for c in device.capacity_specs)


def unpublished_sources(catalog: DeviceCatalog, sources: Mapping[str, DeviceSource]) -> list[str]:
    """`gpu-memory: no device of gpu.example.com publishes counter memory`, for each source no
    device of its classes (their selectors, its driver and deviceSelector) publishes: its
    resource is charged 0, which an admin should hear about rather than find out."""
    out = []
    for resource, source in sorted(sources.items()):
        found = False
        for name in source.device_classes:
            exact = ExactRequest(name)
            try:
                devices = _matching(catalog, source, exact, ("", ""))
            except InvalidObject:
                continue  # a selector failing on some device: admission reports it
            if any(_publishes(d, source) for d in devices):
                found = True
                break
        if not found:
            what = "counter" if source.counter else "capacity"
            classes = ", ".join(source.device_classes)
            out.append(f"{resource}: no device of {classes} publishes {what} {source.name}")
    return out
