"""Case table: the charge of a request in a DeviceCounter or DeviceCapacity resource.

Each row is one behaviour of Kueue's counter and capacity sources (`pkg/dra/counters.go`,
`capacity.go`, v0.19, as documented there and in issue 27), or one of draquota's
extensions (firstAvailable, All, adminAccess), with the amount a user would see charged.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import pytest

from quota.claimspec import parse_claim_spec
from quota.devicecharge import claim_charge, device_catalog
from quota.errors import InvalidObject
from quota.quantity import INT64_MAX
from quota.sources import DEVICE_CAPACITY_KIND, DEVICE_COUNTER_KIND, DeviceSource
from tests.quota.builders import device_class

GPU = "gpu.example.com"
NIC = "nic.example.com"
GI = 2**30
G = 10**9
CLAIM = "ResourceClaimTemplate team-a/claim"
MEMORY = DeviceSource(DEVICE_COUNTER_KIND, "memory", (GPU,), unit="binary")
MODEL_1G = "device.attributes['gpu.example.com'].model == '1g'"
MODEL_3G = "device.attributes['gpu.example.com'].model == '3g'"
MODEL_A100 = "device.attributes['gpu.example.com'].model == 'a100'"
BANDWIDTH = DeviceSource(DEVICE_CAPACITY_KIND, "bandwidth", (NIC,), unit="decimal")


def gpu(name: str, memory: str | None, model: str = "a100", driver: str = GPU) -> dict[str, Any]:
    """A partition consuming `memory` from its GPU's counter set (None: consumes nothing)."""
    out: dict[str, Any] = {"name": name, "attributes": {"model": {"string": model}}}
    if memory is not None:
        out["consumesCounters"] = [
            {"counterSet": "gpu-0", "counters": {"memory": {"value": memory}}}
        ]
    return out


def nic(name: str, value: str = "100G", policy: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """A shareable NIC publishing `bandwidth` with an optional requestPolicy."""
    capacity: dict[str, Any] = {"value": value}
    if policy is not None:
        capacity["requestPolicy"] = dict(policy)
    return {
        "name": name,
        "allowMultipleAllocations": True,
        "capacity": {"bandwidth": capacity},
    }


def pool(
    name: str,
    devices: Sequence[Mapping[str, Any]],
    *,
    driver: str = GPU,
    generation: int = 1,
    slices: int = 1,
    slice_name: str = "",
) -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": slice_name or f"{name}-{generation}"},
        "spec": {
            "driver": driver,
            "pool": {"name": name, "generation": generation, "resourceSliceCount": slices},
            "nodeName": "node-1",
            "devices": list(devices),
        },
    }


def exactly(device_class_name: str = GPU, **fields: Any) -> dict[str, Any]:
    return {"name": "req", "exactly": {"deviceClassName": device_class_name, **fields}}


@dataclass(frozen=True)
class Case:
    id: str
    source: DeviceSource
    slices: Sequence[Mapping[str, Any]]
    requests: Sequence[Mapping[str, Any]]
    amount: int = 0
    unpublished: bool = False
    error: str = ""  # the field an InvalidObject names
    lenient: bool = False
    classes: Sequence[Mapping[str, Any]] = field(default_factory=tuple)


A100 = pool(
    "node-1", [gpu("mig-1g", "5Gi", "1g"), gpu("mig-3g", "20Gi", "3g"), gpu("full", "80Gi")]
)
CASES = [
    # Kueue counters.go: the largest counter any matching device consumes, times count.
    Case("counter-max-over-matching-devices", MEMORY, [A100], [exactly()], 80 * GI),
    Case("counter-times-count", MEMORY, [A100], [exactly(count=2)], 160 * GI),
    Case(
        "counter-request-selector-narrows",
        MEMORY,
        [A100],
        [
            exactly(
                selectors=[{"cel": {"expression": MODEL_1G}}],
                count=8,
            )
        ],
        40 * GI,
    ),
    Case(
        "counter-complete-pools-only",
        MEMORY,
        [A100, pool("node-2", [gpu("big", "160Gi")], slices=2)],
        [exactly()],
        80 * GI,
    ),
    Case(
        "counter-highest-generation-only",
        MEMORY,
        [pool("node-1", [gpu("old", "80Gi")]), pool("node-1", [gpu("new", "10Gi")], generation=2)],
        [exactly()],
        10 * GI,
    ),
    Case(
        "counter-negative-clamps-to-zero",
        MEMORY,
        [pool("node-1", [gpu("odd", "-5Gi")])],
        [exactly(count=3)],
        0,
    ),
    Case(
        "counter-saturates-at-int64",
        MEMORY,
        [pool("node-1", [gpu("huge", "4Ei")])],
        [exactly(count=3)],
        INT64_MAX,
    ),
    Case(
        "counter-fraction-rounds-up-before-count",
        MEMORY,
        [pool("node-1", [gpu("odd", "1500m")])],
        [exactly(count=3)],
        6,
    ),
    Case(
        "counter-unpublished-is-zero-and-flagged",
        DeviceSource(DEVICE_COUNTER_KIND, "cores", (GPU,)),
        [A100],
        [exactly()],
        0,
        unpublished=True,
    ),
    Case(
        "counter-driver-filter",
        DeviceSource(DEVICE_COUNTER_KIND, "memory", (GPU,), driver=GPU),
        [
            A100,
            pool(
                "other", [gpu("x", "640Gi", driver="other.example.com")], driver="other.example.com"
            ),
        ],
        [exactly()],
        80 * GI,
    ),
    Case(
        "counter-device-selector-filter",
        DeviceSource(
            DEVICE_COUNTER_KIND,
            "memory",
            (GPU,),
            selector="device.attributes['gpu.example.com'].model != 'a100'",
        ),
        [A100],
        [exactly()],
        20 * GI,
    ),
    Case(
        "counter-sums-requests-of-a-claim",
        MEMORY,
        [A100],
        [exactly(), {**exactly(count=2), "name": "second"}],
        240 * GI,
    ),
    # Kueue capacity.go: request, else requestPolicy.default, else the whole capacity.
    Case(
        "capacity-explicit-request",
        BANDWIDTH,
        [pool("nics", [nic("eth0")], driver=NIC)],
        [exactly(NIC, capacity={"requests": {"bandwidth": "10G"}})],
        10 * G,
    ),
    Case(
        "capacity-request-policy-default",
        BANDWIDTH,
        [
            pool(
                "nics",
                [nic("eth0", policy={"default": "1G", "validRange": {"min": "1G"}})],
                driver=NIC,
            )
        ],
        [exactly(NIC)],
        1 * G,
    ),
    Case(
        "capacity-whole-capacity-without-request-or-default",
        BANDWIDTH,
        [pool("nics", [nic("eth0")], driver=NIC)],
        [exactly(NIC, count=2)],
        200 * G,
    ),
    Case(
        "capacity-rounds-up-to-valid-values",
        BANDWIDTH,
        [
            pool(
                "nics",
                [nic("eth0", policy={"default": "1G", "validValues": ["1G", "5G", "10G"]})],
                driver=NIC,
            )
        ],
        [exactly(NIC, capacity={"requests": {"bandwidth": "3G"}})],
        5 * G,
    ),
    Case(
        "capacity-rounds-up-to-valid-range-step",
        BANDWIDTH,
        [
            pool(
                "nics",
                [
                    nic(
                        "eth0",
                        policy={
                            "default": "1G",
                            "validRange": {"min": "1G", "max": "20G", "step": "2G"},
                        },
                    )
                ],
                driver=NIC,
            )
        ],
        [exactly(NIC, capacity={"requests": {"bandwidth": "4G"}})],
        5 * G,
    ),
    Case(
        "capacity-valid-range-raises-to-min",
        BANDWIDTH,
        [
            pool(
                "nics",
                [nic("eth0", policy={"default": "1G", "validRange": {"min": "1G"}})],
                driver=NIC,
            )
        ],
        [exactly(NIC, capacity={"requests": {"bandwidth": "500M"}})],
        1 * G,
    ),
    Case(
        "capacity-above-range-maximum-is-an-error",
        BANDWIDTH,
        [
            pool(
                "nics",
                [nic("eth0", policy={"default": "1G", "validRange": {"min": "1G", "max": "20G"}})],
                driver=NIC,
            )
        ],
        [exactly(NIC, capacity={"requests": {"bandwidth": "30G"}})],
        error="spec.spec.devices.requests[0].exactly.capacity.requests.bandwidth",
    ),
    Case(
        "capacity-above-every-valid-value-is-an-error",
        BANDWIDTH,
        [
            pool(
                "nics",
                [nic("eth0", policy={"default": "1G", "validValues": ["1G", "5G"]})],
                driver=NIC,
            )
        ],
        [exactly(NIC, capacity={"requests": {"bandwidth": "6G"}})],
        error="spec.spec.devices.requests[0].exactly.capacity.requests.bandwidth",
    ),
    Case(
        "capacity-device-whose-policy-refuses-is-skipped",
        BANDWIDTH,
        [
            pool(
                "nics",
                [
                    nic(
                        "small", policy={"default": "1G", "validRange": {"min": "1G", "max": "5G"}}
                    ),
                    nic(
                        "large",
                        policy={
                            "default": "1G",
                            "validRange": {"min": "1G", "max": "50G", "step": "4G"},
                        },
                    ),
                ],
                driver=NIC,
            )
        ],
        [exactly(NIC, capacity={"requests": {"bandwidth": "10G"}})],
        13 * G,
    ),
    Case(
        "capacity-max-over-devices",
        BANDWIDTH,
        [pool("nics", [nic("a", "40G"), nic("b", "100G")], driver=NIC)],
        [exactly(NIC)],
        100 * G,
    ),
    Case(
        "capacity-unpublished-is-zero-and-flagged",
        DeviceSource(DEVICE_CAPACITY_KIND, "queues", (NIC,)),
        [pool("nics", [nic("eth0")], driver=NIC)],
        [exactly(NIC)],
        0,
        unpublished=True,
    ),
    Case(
        "capacity-live-pod-above-maximum-charged-as-asked",
        BANDWIDTH,
        [
            pool(
                "nics",
                [nic("eth0", policy={"default": "1G", "validRange": {"min": "1G", "max": "20G"}})],
                driver=NIC,
            )
        ],
        [exactly(NIC, capacity={"requests": {"bandwidth": "30G"}})],
        30 * G,
        lenient=True,
    ),
    # Beyond Kueue, which refuses these requests on counter and capacity paths.
    Case(
        "first-available-charged-its-largest-alternative",
        MEMORY,
        [A100],
        [
            {
                "name": "req",
                "firstAvailable": [
                    {
                        "name": "small",
                        "deviceClassName": GPU,
                        "count": 1,
                        "selectors": [{"cel": {"expression": MODEL_1G}}],
                    },
                    {
                        "name": "mid",
                        "deviceClassName": GPU,
                        "count": 3,
                        "selectors": [{"cel": {"expression": MODEL_3G}}],
                    },
                ],
            }
        ],
        60 * GI,
    ),
    Case(
        "allocation-mode-all-charged-every-matching-device",
        MEMORY,
        [A100],
        [exactly(allocationMode="All")],
        3 * 80 * GI,
    ),
    Case("admin-access-charged-nothing", MEMORY, [A100], [exactly(adminAccess=True)], 0),
    Case("other-device-class-charged-nothing", MEMORY, [A100], [exactly("other.example.com")], 0),
    Case(
        "device-class-selector-narrows",
        MEMORY,
        [A100],
        [exactly()],
        5 * GI,
        classes=[
            {
                **device_class(GPU),
                "spec": {"selectors": [{"cel": {"expression": MODEL_1G}}]},
            }
        ],
    ),
]


@pytest.mark.parametrize("case", [pytest.param(c, id=c.id) for c in CASES])
def test_charge(case: Case) -> None:
    slices, classes = (
        copy.deepcopy(list(case.slices)),
        list(case.classes)
        or [
            device_class(GPU),
            device_class(NIC),
        ],
    )
    before = copy.deepcopy((slices, classes))
    catalog = device_catalog(slices, classes)
    spec = parse_claim_spec({"devices": {"requests": list(case.requests)}}, "v1", CLAIM)
    if case.error:
        with pytest.raises(InvalidObject) as failure:
            claim_charge(catalog, case.source, spec, CLAIM, case.lenient, "spec.spec")
        assert (failure.value.obj, failure.value.path) == (CLAIM, case.error)
        return
    charge = claim_charge(catalog, case.source, spec, CLAIM, case.lenient, "spec.spec")
    assert (charge.amount, charge.unpublished) == (case.amount, case.unpublished)
    again = claim_charge(device_catalog(slices, classes), case.source, spec, CLAIM, case.lenient)
    assert again == charge  # deterministic
    assert (slices, classes) == before  # inputs untouched


def test_catalog_skips_malformed_slices_and_names_them() -> None:
    broken = pool("node-1", [{"name": "x", "capacity": {"memory": {"value": "lots"}}}])
    catalog = device_catalog([broken, A100], [device_class(GPU)])
    assert len(catalog.devices) == 3
    assert len(catalog.problems) == 1 and "ResourceSlice node-1-1" in catalog.problems[0]
