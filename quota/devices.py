"""Devices per DeviceClass that one claim spec is charged (SPEC §3.2).

The charge is the worst case the allocator could hand out, so that quota can
never be exceeded whatever it picks:
- ExactCount charges `count`; All charges 32, the most one claim can hold;
- a `firstAvailable` request charges, for every class its alternatives name,
  the largest alternative of that class: any one of them may be chosen;
- adminAccess requests are skipped: admin access does not consume a device.
"""

from __future__ import annotations

from quota.claimspec import ALL, ALLOCATION_RESULTS_MAX_SIZE, ClaimSpec, DeviceRequest, ExactRequest
from quota.quantity import sat_add

__all__ = ["add_devices", "claim_devices", "request_devices"]


def _exact_devices(exact: ExactRequest) -> int:
    if exact.admin_access:
        return 0
    if exact.allocation_mode == ALL:
        return ALLOCATION_RESULTS_MAX_SIZE
    return exact.count


def request_devices(request: DeviceRequest) -> dict[str, int]:
    """Devices per class charged for one request (zero charges are left out)."""
    if request.exactly is not None:
        alternatives = [request.exactly]
    else:
        alternatives = [sub.exact for sub in request.first_available]
    charge: dict[str, int] = {}
    for exact in alternatives:
        devices = _exact_devices(exact)
        if devices > charge.get(exact.device_class_name, 0):
            charge[exact.device_class_name] = devices
    return charge


def add_devices(total: dict[str, int], more: dict[str, int]) -> dict[str, int]:
    """Add `more` into `total` in place, saturating; returns `total`."""
    for device_class, devices in more.items():
        total[device_class] = sat_add(total.get(device_class, 0), devices)
    return total


def claim_devices(spec: ClaimSpec) -> dict[str, int]:
    """Devices per class charged for a whole claim spec: the sum over its requests."""
    total: dict[str, int] = {}
    for request in spec.requests:
        add_devices(total, request_devices(request))
    return dict(sorted(total.items()))
