"""The allocator's case table, mirroring scenarios of the upstream shared test table.

Expected results are derived from the KEP rules (structured parameters, prioritized
list, partitionable devices, device taints), not copied from any implementation.
`expect` is a list of AllocationResult dicts (one per claim), None for "cannot be
placed", or an `Error(substring)` for invalid input.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from quota.claimspec import ClaimSpec
from tests.quota.allocator.builders import (
    CLASS_A,
    CLASS_B,
    DRIVER_A,
    DRIVER_B,
    NODE_1,
    NODE_2,
    claim,
    device,
    device_class,
    local_selector,
    node,
    node_selector,
    request,
    result,
    slice_,
    subrequest,
)

__all__ = ["CASES", "CC_CASES", "MORE_CASES", "SHARE_ID", "Case", "Error"]


@dataclass(frozen=True)
class Error:
    """Invalid input: allocate() raises AllocationError whose message contains `text`."""

    text: str


@dataclass(frozen=True)
class Case:
    id: str
    claims: tuple[ClaimSpec, ...]
    slices: tuple[dict, ...] = ()
    expect: Any = None
    classes: tuple[dict, ...] = (
        device_class(CLASS_A, DRIVER_A),
        device_class(CLASS_B, DRIVER_B),
    )
    allocated: tuple[tuple[str, str, str], ...] = ()
    node: dict = field(default_factory=node)
    shared: tuple[tuple[str, str, str], ...] = ()
    capacity: dict = field(default_factory=dict)


def alloc(
    *results: dict, selector: dict | None = None, config: list | None = None, local: bool = True
) -> dict:
    devices: dict[str, Any] = {"results": list(results)}
    if config:
        devices["config"] = config
    out: dict[str, Any] = {"devices": devices}
    if selector is not None:
        out["nodeSelector"] = selector
    elif local:
        out["nodeSelector"] = local_selector()
    return out


def ints(n: int, **attrs: Any) -> list[dict]:
    return [device(f"device-{i}", **attrs) for i in range(n)]


GI = "Gi"
SMALL = device("device-1", capacity={"memory": "1Gi"})
LARGE = device("device-2", capacity={"memory": "2Gi"})
MEM_GE_1 = 'device.capacity["driver-a"].memory.compareTo(quantity("1Gi")) >= 0'
MEM_GE_2 = 'device.capacity["driver-a"].memory.compareTo(quantity("2Gi")) >= 0'
ONE = slice_("slice-1", "pool-1", devices=["device-1"])
TWO = slice_("slice-1", "pool-1", devices=["device-1", "device-2"])

COUNTER_SLICE = slice_(
    "counters",
    "pool-1",
    count=2,
    node_name=None,
    nodeName=NODE_1,
    sharedCounters=[{"name": "gpu-0", "counters": {"memory": {"value": "8Gi"}}}],
    devices=[],
)


def partition(name: str, memory: str) -> dict:
    return device(
        name, consumesCounters=[{"counterSet": "gpu-0", "counters": {"memory": {"value": memory}}}]
    )


def partitions(*devices: dict, count: int = 2, counters: dict | None = None) -> tuple[dict, ...]:
    counter_slice = COUNTER_SLICE
    if counters is not None:
        counter_slice = slice_(
            "counters",
            "pool-1",
            count=count,
            node_name=None,
            nodeName=NODE_1,
            sharedCounters=[counters],
            devices=[],
        )
    return (counter_slice, slice_("slice-1", "pool-1", count=count, devices=list(devices)))


TAINTED = device(
    "device-1", taints=[{"key": "example.com/taint", "value": "x", "effect": "NoSchedule"}]
)
TAINTED_EXEC = device(
    "device-2", taints=[{"key": "example.com/taint", "value": "x", "effect": "NoExecute"}]
)
TOLERATE = [{"key": "example.com/taint", "operator": "Exists"}]

ATTR_DEVICES = [
    device(
        "device-1",
        attrs={"numa": 1, "model": "a", "fast": True, "driverVersion": {"version": "1.0.0"}},
    ),
    device(
        "device-2",
        attrs={"numa": 1, "model": "a", "fast": True, "driverVersion": {"version": "1.0.0"}},
    ),
]


def with_attr(name: str, **attrs: Any) -> dict:
    return device(name, attrs=attrs)


CASES: tuple[Case, ...] = (
    Case("empty", (), expect=[]),
    Case("simple", (claim(request("req-0")),), (ONE,), [alloc(result("req-0", "device-1"))]),
    Case(
        "other-node",
        (claim(request("req-0")),),
        (
            slice_("slice-1", "pool-1", driver=DRIVER_B, devices=["device-1"]),
            slice_("slice-2", "pool-2", devices=["device-2"], node_name=NODE_2),
        ),
        [alloc(result("req-0", "device-2", pool="pool-2"), selector=local_selector(NODE_2))],
        node=node(NODE_2),
    ),
    Case(
        "small-and-large",
        (claim(request("req-0", selectors=[MEM_GE_1]), request("req-1", selectors=[MEM_GE_2])),),
        (slice_("slice-1", "pool-1", devices=[SMALL, LARGE]),),
        [alloc(result("req-0", "device-1"), result("req-1", "device-2"))],
    ),
    Case(
        "small-and-large-backtrack-requests",
        (claim(request("req-0", selectors=[MEM_GE_1]), request("req-1", selectors=[MEM_GE_2])),),
        (slice_("slice-1", "pool-1", devices=[LARGE, SMALL]),),
        [alloc(result("req-0", "device-1"), result("req-1", "device-2"))],
    ),
    Case(
        "small-and-large-backtrack-claims",
        (
            claim(request("req-0", selectors=[MEM_GE_1])),
            claim(request("req-1", selectors=[MEM_GE_2])),
        ),
        (slice_("slice-1", "pool-1", devices=[LARGE, SMALL]),),
        [alloc(result("req-0", "device-1")), alloc(result("req-1", "device-2"))],
    ),
    Case(
        "devices-split-across-different-slices",
        (claim(request("req-0", count=2)),),
        (
            slice_("slice-1", "pool-1", devices=["device-1"]),
            slice_("slice-2", "pool-2", devices=["device-2"]),
        ),
        [alloc(result("req-0", "device-1"), result("req-0", "device-2", pool="pool-2"))],
    ),
    Case(
        "obsolete-slice",
        (claim(request("req-0", count=2)),),
        (
            slice_("slice-1", "pool-1", devices=["device-1"], count=2),
            slice_("slice-2", "pool-1", devices=["device-2"], count=2, generation=2),
        ),
        None,
    ),
    Case(
        "duplicate-slice",
        (claim(request("req-0")),),
        (
            slice_("slice-1", "pool-1", devices=["device-1"], count=2),
            slice_("slice-2", "pool-1", devices=["device-1"], count=2),
        ),
        Error("invalid resource pools were encountered"),
    ),
    Case("no-slices", (claim(request("req-0")),), (), None),
    Case("not-enough-suitable-devices", (claim(request("req-0", count=2)),), (ONE,), None),
    Case(
        "no-classes",
        (claim(request("req-0")),),
        (ONE,),
        Error("could not retrieve device class class-a"),
        classes=(),
    ),
    Case(
        "unknown-class",
        (claim(request("req-0", cls="unknown-class")),),
        (ONE,),
        Error("could not retrieve device class unknown-class"),
    ),
    Case(
        "unknown-selector",
        (
            claim(
                request("req-0", selectors=None)
                | {"exactly": {"deviceClassName": CLASS_A, "selectors": [{}]}}
            ),
        ),
        (ONE,),
        Error("CEL expression empty (unsupported selector type?)"),
    ),
    Case(
        "unknown-constraint",
        (claim(request("req-0"), constraints=[{"requests": ["req-0"]}]),),
        (ONE,),
        Error("empty constraint (unsupported constraint type?)"),
    ),
    Case(
        "all-devices-single",
        (claim(request("req-0", allocationMode="All")),),
        (ONE,),
        [alloc(result("req-0", "device-1"))],
    ),
    Case(
        "all-devices-many",
        (claim(request("req-0", allocationMode="All")),),
        (TWO,),
        [alloc(result("req-0", "device-1"), result("req-0", "device-2"))],
    ),
    Case(
        "all-devices-of-the-incomplete-pool",
        (claim(request("req-0", allocationMode="All")),),
        (slice_("slice-1", "pool-1", devices=["device-1"], count=2),),
        Error("asks for all devices, but resource pool driver-a/pool-1 is currently being updated"),
    ),
    Case(
        "all-devices-plus-another",
        (claim(request("req-0", allocationMode="All")), claim(request("req-0", cls=CLASS_B))),
        (ONE, slice_("slice-2", "pool-2", driver=DRIVER_B, devices=["device-1"])),
        [
            alloc(result("req-0", "device-1")),
            alloc(result("req-0", "device-1", pool="pool-2", driver=DRIVER_B)),
        ],
    ),
    Case(
        "all-devices-no-solution",
        (claim(request("req-0")), claim(request("req-0", allocationMode="All"))),
        (ONE,),
        None,
    ),
    Case(
        "all-devices-no-solution-reversed",
        (claim(request("req-0", allocationMode="All")), claim(request("req-0"))),
        (ONE,),
        None,
    ),
    Case(
        "all-devices-slice-without-devices",
        (claim(request("req-0", allocationMode="All")),),
        (slice_("slice-1", "pool-1"),),
        None,
    ),
    Case("all-devices-no-slices", (claim(request("req-0", allocationMode="All")),), (), None),
    Case(
        "all-devices-some-allocated",
        (claim(request("req-0", allocationMode="All")),),
        (TWO,),
        None,
        allocated=((DRIVER_A, "pool-1", "device-1"),),
    ),
    Case(
        "all-devices-some-allocated-admin-access",
        (claim(request("req-0", allocationMode="All", adminAccess=True)),),
        (TWO,),
        [
            alloc(
                result("req-0", "device-1", adminAccess=True),
                result("req-0", "device-2", adminAccess=True),
            )
        ],
        allocated=((DRIVER_A, "pool-1", "device-1"),),
    ),
    Case(
        "all-devices-some-allocating-admin-access",
        (
            claim(
                request("req-0", adminAccess=True),
                request("req-1", allocationMode="All", adminAccess=True),
            ),
        ),
        (TWO,),
        None,
    ),
    Case(
        "count-devices-some-allocated-admin-access",
        (claim(request("req-0", count=2, adminAccess=True)),),
        (TWO,),
        [
            alloc(
                result("req-0", "device-1", adminAccess=True),
                result("req-0", "device-2", adminAccess=True),
            )
        ],
        allocated=((DRIVER_A, "pool-1", "device-1"),),
    ),
    Case(
        "separate-claims-share-device-admin-access",
        (claim(request("req-0", adminAccess=True)), claim(request("req-0", adminAccess=True))),
        (ONE,),
        [
            alloc(result("req-0", "device-1", adminAccess=True)),
            alloc(result("req-0", "device-1", adminAccess=True)),
        ],
    ),
    Case(
        "admin-access-claims-device-allocating-for-non-admin-access",
        (claim(request("req-0")), claim(request("req-0", adminAccess=True))),
        (ONE,),
        [alloc(result("req-0", "device-1")), alloc(result("req-0", "device-1", adminAccess=True))],
    ),
    Case(
        "all-devices-slice-without-devices-prioritized-list",
        (
            claim(
                {
                    "name": "req-0",
                    "firstAvailable": [
                        subrequest("subReq-0", allocationMode="All"),
                        subrequest("subReq-1", cls=CLASS_B),
                    ],
                }
            ),
        ),
        (
            slice_("slice-1", "pool-1"),
            slice_("slice-2", "pool-2", driver=DRIVER_B, devices=["device-1"]),
        ),
        [alloc(result("req-0/subReq-1", "device-1", pool="pool-2", driver=DRIVER_B))],
    ),
    Case(
        "all-devices-some-allocated-prioritized-list",
        (
            claim(
                {
                    "name": "req-0",
                    "firstAvailable": [
                        subrequest("subReq-0", allocationMode="All"),
                        subrequest("subReq-1", cls=CLASS_B),
                    ],
                }
            ),
        ),
        (TWO, slice_("slice-2", "pool-2", driver=DRIVER_B, devices=["device-1"])),
        [alloc(result("req-0/subReq-1", "device-1", pool="pool-2", driver=DRIVER_B))],
        allocated=((DRIVER_A, "pool-1", "device-1"),),
    ),
    Case(
        "network-attached-device",
        (claim(request("req-0")),),
        (slice_("slice-1", "pool-1", devices=["device-1"], nodeSelector=node_selector()),),
        [alloc(result("req-0", "device-1"), selector=node_selector())],
    ),
    Case(
        "unsuccessful-allocation-network-attached-device",
        (claim(request("req-0")),),
        (slice_("slice-1", "pool-1", devices=["device-1"], nodeSelector=node_selector()),),
        None,
        node=node(NODE_1, "region-2"),
    ),
    Case(
        "many-network-attached-devices",
        (claim(request("req-0", count=4)),),
        (
            slice_("slice-1", "pool-1", devices=["device-1"], nodeSelector=node_selector()),
            slice_("slice-2", "pool-2", devices=["device-1"], nodeSelector=node_selector()),
            slice_("slice-3", "pool-3", devices=["device-1"], allNodes=True),
            slice_(
                "slice-4",
                "pool-4",
                devices=["device-1"],
                nodeSelector={
                    "nodeSelectorTerms": [
                        {
                            "matchExpressions": [
                                {"key": "region", "operator": "In", "values": ["region-1"]},
                                {"key": "zone", "operator": "DoesNotExist"},
                            ]
                        }
                    ]
                },
            ),
        ),
        [
            alloc(
                result("req-0", "device-1"),
                result("req-0", "device-1", pool="pool-2"),
                result("req-0", "device-1", pool="pool-3"),
                result("req-0", "device-1", pool="pool-4"),
                selector={
                    "nodeSelectorTerms": [
                        {
                            "matchExpressions": [
                                {"key": "region", "operator": "In", "values": ["region-1"]},
                                {"key": "zone", "operator": "DoesNotExist"},
                            ]
                        }
                    ]
                },
            )
        ],
    ),
    Case(
        "local-and-network-attached-devices",
        (claim(request("req-0", count=2)),),
        (
            slice_("slice-1", "pool-1", devices=["device-1"], nodeSelector=node_selector()),
            slice_("slice-2", "pool-2", devices=["device-1"]),
        ),
        [alloc(result("req-0", "device-1"), result("req-0", "device-1", pool="pool-2"))],
    ),
    Case(
        "several-different-drivers",
        (claim(request("req-0")), claim(request("req-0", cls=CLASS_B))),
        (ONE, slice_("slice-2", "pool-1", driver=DRIVER_B, devices=["device-1"])),
        [alloc(result("req-0", "device-1")), alloc(result("req-0", "device-1", driver=DRIVER_B))],
    ),
    Case(
        "already-allocated-devices",
        (claim(request("req-0")),),
        (ONE,),
        None,
        allocated=((DRIVER_A, "pool-1", "device-1"),),
    ),
    Case(
        "with-constraint",
        (
            claim(
                request("req-0"),
                request("req-1"),
                constraints=[
                    {"matchAttribute": "driver-a/numa"},
                    {"matchAttribute": "driver-a/model"},
                    {"matchAttribute": "driver-a/fast"},
                    {"matchAttribute": "driver-a/driverVersion"},
                ],
            ),
        ),
        (slice_("slice-1", "pool-1", devices=ATTR_DEVICES),),
        [alloc(result("req-0", "device-1"), result("req-1", "device-2"))],
    ),
    Case(
        "with-constraint-non-existent-attribute",
        (
            claim(
                request("req-0"),
                request("req-1"),
                constraints=[{"matchAttribute": "driver-a/missing"}],
            ),
        ),
        (slice_("slice-1", "pool-1", devices=ATTR_DEVICES),),
        None,
    ),
    Case(
        "with-constraint-not-matching-int-attribute",
        (
            claim(
                request("req-0"),
                request("req-1"),
                constraints=[{"matchAttribute": "driver-a/numa"}],
            ),
        ),
        (
            slice_(
                "slice-1",
                "pool-1",
                devices=[with_attr("device-1", numa=1), with_attr("device-2", numa=2)],
            ),
        ),
        None,
    ),
    Case(
        "with-constraint-not-matching-int-attribute-all-devices",
        (
            claim(
                request("req-0", allocationMode="All"),
                constraints=[{"matchAttribute": "driver-a/numa"}],
            ),
        ),
        (
            slice_(
                "slice-1",
                "pool-1",
                devices=[with_attr("device-1", numa=1), with_attr("device-2", numa=2)],
            ),
        ),
        Error(
            "cannot add device driver-a/pool-1/device-2 because a claim constraint would not "
            "be satisfied"
        ),
    ),
    Case(
        "with-constraint-not-matching-string-attribute",
        (
            claim(
                request("req-0"),
                request("req-1"),
                constraints=[{"matchAttribute": "driver-a/model"}],
            ),
        ),
        (
            slice_(
                "slice-1",
                "pool-1",
                devices=[with_attr("device-1", model="a"), with_attr("device-2", model="b")],
            ),
        ),
        None,
    ),
    Case(
        "with-constraint-not-matching-bool-attribute",
        (
            claim(
                request("req-0"),
                request("req-1"),
                constraints=[{"matchAttribute": "driver-a/fast"}],
            ),
        ),
        (
            slice_(
                "slice-1",
                "pool-1",
                devices=[with_attr("device-1", fast=True), with_attr("device-2", fast=False)],
            ),
        ),
        None,
    ),
    Case(
        "with-constraint-not-matching-version-attribute",
        (
            claim(
                request("req-0"), request("req-1"), constraints=[{"matchAttribute": "driver-a/v"}]
            ),
        ),
        (
            slice_(
                "slice-1",
                "pool-1",
                devices=[
                    with_attr("device-1", v={"version": "1.0.0"}),
                    with_attr("device-2", v={"version": "1.0.1"}),
                ],
            ),
        ),
        None,
    ),
    Case(
        "with-constraint-for-request",
        (
            claim(
                request("req-0"),
                request("req-1"),
                constraints=[{"requests": ["req-0"], "matchAttribute": "driver-a/numa"}],
            ),
        ),
        (
            slice_(
                "slice-1",
                "pool-1",
                devices=[with_attr("device-1", numa=1), with_attr("device-2", numa=2)],
            ),
        ),
        [alloc(result("req-0", "device-1"), result("req-1", "device-2"))],
    ),
    Case(
        "with-constraint-for-request-retry",
        (
            claim(
                request("req-0"),
                request("req-1"),
                constraints=[
                    {"requests": ["req-0"], "matchAttribute": "driver-a/numa"},
                    {"matchAttribute": "driver-a/model"},
                ],
            ),
        ),
        (
            slice_(
                "slice-1",
                "pool-1",
                devices=[
                    with_attr("device-0", numa=1, model="b"),
                    with_attr("device-1", numa=1, model="a"),
                    with_attr("device-2", numa=2, model="a"),
                ],
            ),
        ),
        [alloc(result("req-0", "device-1"), result("req-1", "device-2"))],
    ),
    Case(
        "constraint-unqualified-attribute-in-driver-domain",
        (claim(request("req-0", count=2), constraints=[{"matchAttribute": "driver-a/numa"}]),),
        (
            slice_(
                "slice-1",
                "pool-1",
                devices=[
                    with_attr("device-0", numa=0),
                    with_attr("device-1", **{"driver-a/numa": 1}),
                    with_attr("device-2", numa=1),
                ],
            ),
        ),
        [alloc(result("req-0", "device-1"), result("req-0", "device-2"))],
    ),
    Case(
        "with-class-device-config",
        (claim(request("req-0")),),
        (ONE,),
        [
            alloc(
                result("req-0", "device-1"),
                config=[
                    {"source": "FromClass", "opaque": {"driver": DRIVER_A, "parameters": {"a": 1}}}
                ],
            )
        ],
        classes=(
            device_class(CLASS_A, DRIVER_A, config=[{"driver": DRIVER_A, "parameters": {"a": 1}}]),
        ),
    ),
    Case(
        "with-class-device-config-with-multiple-request-and-configs",
        (claim(request("req-0"), request("req-1"), request("req-2", cls=CLASS_B)),),
        (TWO, slice_("slice-2", "pool-2", driver=DRIVER_B, devices=["device-1"])),
        [
            alloc(
                result("req-0", "device-1"),
                result("req-1", "device-2"),
                result("req-2", "device-1", pool="pool-2", driver=DRIVER_B),
                config=[
                    {
                        "source": "FromClass",
                        "requests": ["req-0", "req-1"],
                        "opaque": {"driver": DRIVER_A, "parameters": {"a": 1}},
                    },
                    {
                        "source": "FromClass",
                        "requests": ["req-2"],
                        "opaque": {"driver": DRIVER_B, "parameters": {"b": 1}},
                    },
                ],
            )
        ],
        classes=(
            device_class(CLASS_A, DRIVER_A, config=[{"driver": DRIVER_A, "parameters": {"a": 1}}]),
            device_class(CLASS_B, DRIVER_B, config=[{"driver": DRIVER_B, "parameters": {"b": 1}}]),
        ),
    ),
    Case(
        "with-claim-config-for-two-requests",
        (
            claim(
                request("req-0"),
                request("req-1"),
                request("req-2"),
                config=[
                    {
                        "requests": ["req-0", "req-1"],
                        "opaque": {"driver": DRIVER_A, "parameters": {}},
                    },
                ],
            ),
        ),
        (slice_("slice-1", "pool-1", devices=["device-0", "device-1", "device-2"]),),
        [
            alloc(
                result("req-0", "device-0"),
                result("req-1", "device-1"),
                result("req-2", "device-2"),
                config=[
                    {
                        "source": "FromClaim",
                        "requests": ["req-0", "req-1"],
                        "opaque": {"driver": DRIVER_A, "parameters": {}},
                    }
                ],
            )
        ],
    ),
    Case(
        "claim-with-device-config",
        (claim(request("req-0"), config=[{"opaque": {"driver": DRIVER_A, "parameters": {}}}]),),
        (ONE,),
        [
            alloc(
                result("req-0", "device-1"),
                config=[{"source": "FromClaim", "opaque": {"driver": DRIVER_A, "parameters": {}}}],
            )
        ],
    ),
    Case(
        "invalid-CEL-one-device",
        (claim(request("req-0", selectors=["noSuchVar"])),),
        (ONE,),
        Error("undeclared reference"),
    ),
    Case(
        "invalid-CEL-one-device-class",
        (claim(request("req-0")),),
        (ONE,),
        Error("undeclared reference"),
        classes=(device_class(CLASS_A, DRIVER_A, selectors=["noSuchVar"]),),
    ),
    Case(
        "unknown-attribute-in-known-domain-is-error",
        (claim(request("req-0", selectors=['device.attributes["driver-a"].missing == 1'])),),
        (slice_("slice-1", "pool-1", devices=[with_attr("device-1", numa=1)]),),
        Error("CEL runtime error"),
    ),
    Case(
        "unknown-domain-is-empty-map",
        (claim(request("req-0", selectors=['!("x" in device.attributes["other.example.com"])'])),),
        (ONE,),
        [alloc(result("req-0", "device-1"))],
    ),
    Case(
        "too-many-devices-single-request",
        (claim(request("req-0", count=500)),),
        (ONE,),
        Error("exceeds the claim limit"),
    ),
    Case("many-devices-okay", (claim(request("req-0", count=32)),), (), None),
    Case(
        "too-many-devices-total",
        (claim(request("req-0", count=32), request("req-1")),),
        (),
        Error("exceeds the claim limit"),
    ),
    Case(
        "max-number-devices",
        (claim(request("req-0", allocationMode="All")),),
        (slice_("slice-1", "pool-1", devices=[f"device-{i:02d}" for i in range(32)]),),
        [alloc(*[result("req-0", f"device-{i:02d}") for i in range(32)])],
    ),
    Case(
        "prioritized-list-first-unavailable",
        (
            claim(
                {
                    "name": "req-0",
                    "firstAvailable": [subrequest("subReq-0", cls=CLASS_B), subrequest("subReq-1")],
                }
            ),
        ),
        (ONE,),
        [alloc(result("req-0/subReq-1", "device-1"))],
    ),
    Case(
        "prioritized-list-non-available",
        (
            claim(
                {
                    "name": "req-0",
                    "firstAvailable": [
                        subrequest("subReq-0", cls=CLASS_B),
                        subrequest("subReq-1", count=2),
                    ],
                }
            ),
        ),
        (ONE,),
        None,
    ),
    Case(
        "prioritized-list-device-config",
        (
            claim(
                {
                    "name": "req-0",
                    "firstAvailable": [subrequest("subReq-0", cls=CLASS_B), subrequest("subReq-1")],
                },
                request("req-1"),
                config=[
                    {
                        "requests": ["req-0/subReq-0"],
                        "opaque": {"driver": DRIVER_B, "parameters": {}},
                    },
                    {
                        "requests": ["req-0/subReq-1"],
                        "opaque": {"driver": DRIVER_A, "parameters": {}},
                    },
                ],
            ),
        ),
        (TWO,),
        [
            alloc(
                result("req-0/subReq-1", "device-1"),
                result("req-1", "device-2"),
                config=[
                    {
                        "source": "FromClaim",
                        "requests": ["req-0/subReq-1"],
                        "opaque": {"driver": DRIVER_A, "parameters": {}},
                    }
                ],
            )
        ],
    ),
    Case(
        "prioritized-list-class-config",
        (
            claim(
                {
                    "name": "req-0",
                    "firstAvailable": [subrequest("subReq-0", cls=CLASS_B), subrequest("subReq-1")],
                },
                request("req-1"),
            ),
        ),
        (TWO,),
        [
            alloc(
                result("req-0/subReq-1", "device-1"),
                result("req-1", "device-2"),
                config=[
                    {"source": "FromClass", "opaque": {"driver": DRIVER_A, "parameters": {"a": 1}}}
                ],
            )
        ],
        classes=(
            device_class(CLASS_A, DRIVER_A, config=[{"driver": DRIVER_A, "parameters": {"a": 1}}]),
            device_class(CLASS_B, DRIVER_B, config=[{"driver": DRIVER_B, "parameters": {"b": 1}}]),
        ),
    ),
    Case(
        "prioritized-list-subrequests-with-constraints-ref-parent-request",
        (
            claim(
                request("req-0"),
                {
                    "name": "req-1",
                    "firstAvailable": [subrequest("subReq-0", count=2), subrequest("subReq-1")],
                },
                constraints=[{"requests": ["req-0", "req-1"], "matchAttribute": "driver-a/numa"}],
            ),
        ),
        (
            slice_(
                "slice-1",
                "pool-1",
                devices=[
                    with_attr("device-0", numa=1),
                    with_attr("device-1", numa=1),
                    with_attr("device-2", numa=2),
                ],
            ),
        ),
        [alloc(result("req-0", "device-0"), result("req-1/subReq-1", "device-1"))],
    ),
    Case(
        "prioritized-list-subrequests-with-constraints-ref-sub-request",
        (
            claim(
                request("req-0"),
                {
                    "name": "req-1",
                    "firstAvailable": [subrequest("subReq-0"), subrequest("subReq-1")],
                },
                constraints=[
                    {"requests": ["req-0", "req-1/subReq-1"], "matchAttribute": "driver-a/numa"}
                ],
            ),
        ),
        (
            slice_(
                "slice-1",
                "pool-1",
                devices=[with_attr("device-0", numa=1), with_attr("device-1", numa=2)],
            ),
        ),
        [alloc(result("req-0", "device-0"), result("req-1/subReq-0", "device-1"))],
    ),
    Case(
        "prioritized-list-with-backtracking",
        (
            claim(
                {
                    "name": "req-0",
                    "firstAvailable": [subrequest("subReq-0", count=2), subrequest("subReq-1")],
                },
                request("req-1"),
            ),
        ),
        (TWO,),
        [alloc(result("req-0/subReq-1", "device-1"), result("req-1", "device-2"))],
    ),
    Case(
        "prioritized-list-too-many-in-first-subrequest",
        (
            claim(
                {
                    "name": "req-0",
                    "firstAvailable": [subrequest("subReq-0", count=500), subrequest("subReq-1")],
                }
            ),
        ),
        (ONE,),
        [alloc(result("req-0/subReq-1", "device-1"))],
    ),
    Case(
        "prioritized-list-allocation-mode-all-multiple-requests",
        (
            claim(
                request("req-0"),
                {
                    "name": "req-1",
                    "firstAvailable": [
                        subrequest("subReq-0", allocationMode="All"),
                        subrequest("subReq-1"),
                    ],
                },
            ),
        ),
        (TWO,),
        [alloc(result("req-0", "device-1"), result("req-1/subReq-1", "device-2"))],
    ),
    Case(
        "prioritized-list-max-allocation-allocation-mode-all",
        (
            claim(
                {
                    "name": "req-0",
                    "firstAvailable": [
                        subrequest("subReq-0", allocationMode="All"),
                        subrequest("subReq-1", count=2),
                    ],
                },
                request("req-1", count=2),
            ),
        ),
        (slice_("slice-1", "pool-1", devices=[f"device-{i:02d}" for i in range(31)]),),
        [
            alloc(
                result("req-0/subReq-1", "device-00"),
                result("req-0/subReq-1", "device-01"),
                result("req-1", "device-02"),
                result("req-1", "device-03"),
            )
        ],
    ),
    Case(
        "partitionable-devices-single-device",
        (claim(request("req-0")),),
        partitions(partition("device-1", "4Gi")),
        [alloc(result("req-0", "device-1"))],
    ),
    Case(
        "partitionable-devices-multiple-devices",
        (claim(request("req-0"), request("req-1")),),
        partitions(
            partition("device-1", "4Gi"), partition("device-2", "6Gi"), partition("device-3", "4Gi")
        ),
        [alloc(result("req-0", "device-1"), result("req-1", "device-3"))],
    ),
    Case(
        "partitionable-devices-no-capacity-available",
        (claim(request("req-0")),),
        partitions(
            partition("device-1", "4Gi"),
            partition("device-2", "6Gi"),
            counters={"name": "gpu-0", "counters": {"memory": {"value": "8Gi"}}},
        ),
        None,
        allocated=((DRIVER_A, "pool-1", "device-2"),),
    ),
    Case(
        "partitionable-devices-overallocated-capacity-pool",
        (claim(request("req-0")),),
        partitions(partition("device-1", "1Gi"), partition("device-2", "10Gi")),
        None,
        allocated=((DRIVER_A, "pool-1", "device-2"),),
    ),
    Case(
        "partitionable-devices-devices-on-different-nodes-consume-same-counter-set",
        (claim(request("req-0")),),
        (
            slice_(
                "counters",
                "pool-1",
                count=3,
                node_name=None,
                allNodes=True,
                sharedCounters=[{"name": "gpu-0", "counters": {"memory": {"value": "8Gi"}}}],
            ),
            slice_("slice-1", "pool-1", count=3, devices=[partition("device-1", "4Gi")]),
            slice_(
                "slice-2",
                "pool-1",
                count=3,
                node_name=NODE_2,
                devices=[partition("device-2", "6Gi")],
            ),
        ),
        None,
        allocated=((DRIVER_A, "pool-1", "device-2"),),
    ),
    Case(
        "partitionable-devices-same-counter-set-name-in-different-resource-slices",
        (claim(request("req-0")),),
        (
            slice_(
                "counters-1",
                "pool-1",
                count=3,
                node_name=None,
                allNodes=True,
                sharedCounters=[{"name": "gpu-0", "counters": {"memory": {"value": "8Gi"}}}],
            ),
            slice_(
                "counters-2",
                "pool-1",
                count=3,
                node_name=None,
                allNodes=True,
                sharedCounters=[{"name": "gpu-0", "counters": {"memory": {"value": "8Gi"}}}],
            ),
            slice_("slice-1", "pool-1", count=3, devices=[partition("device-1", "4Gi")]),
        ),
        Error("invalid resource pools were encountered"),
    ),
    Case(
        "partitionable-devices-device-counter-consumption-references-unknown-counter-set",
        (claim(request("req-0")),),
        partitions(
            device(
                "device-1",
                consumesCounters=[{"counterSet": "nope", "counters": {"memory": {"value": "1Gi"}}}],
            )
        ),
        Error("invalid resource pools were encountered"),
    ),
    Case(
        "partitionable-devices-device-counter-consumption-references-unknown-counter-in-counter-set",
        (claim(request("req-0")),),
        partitions(
            device(
                "device-1",
                consumesCounters=[{"counterSet": "gpu-0", "counters": {"cores": {"value": "1"}}}],
            )
        ),
        Error("invalid resource pools were encountered"),
    ),
    Case(
        "partitionable-devices-validation-error-on-non-targeting-slice",
        (claim(request("req-0")),),
        (
            slice_(
                "counters",
                "pool-1",
                count=3,
                node_name=None,
                allNodes=True,
                sharedCounters=[{"name": "gpu-0", "counters": {"memory": {"value": "8Gi"}}}],
            ),
            slice_("slice-1", "pool-1", count=3, devices=[partition("device-1", "10Gi")]),
            slice_(
                "slice-2",
                "pool-1",
                count=3,
                node_name=NODE_2,
                devices=[
                    device(
                        "device-2",
                        consumesCounters=[
                            {"counterSet": "nope", "counters": {"memory": {"value": "1Gi"}}}
                        ],
                    )
                ],
            ),
        ),
        Error("invalid resource pools were encountered"),
    ),
    Case(
        "partitionable-devices-per-device-node-selection-nodename",
        (claim(request("req-0")),),
        (
            slice_(
                "slice-1",
                "pool-1",
                node_name=None,
                perDeviceNodeSelection=True,
                devices=[
                    device("device-1", nodeName=NODE_2),
                    device("device-2", nodeName=NODE_1),
                ],
            ),
        ),
        [alloc(result("req-0", "device-2"))],
    ),
    Case(
        "partitionable-devices-per-device-node-selection-node-selector",
        (claim(request("req-0")),),
        (
            slice_(
                "slice-1",
                "pool-1",
                node_name=None,
                perDeviceNodeSelection=True,
                devices=[
                    device("device-1", nodeSelector=node_selector()),
                ],
            ),
        ),
        [alloc(result("req-0", "device-1"), selector=node_selector())],
    ),
    Case(
        "invalid-pool-is-ok-if-devices-can-be-allocated-from-other",
        (claim(request("req-0")),),
        (
            slice_("slice-1", "pool-1", devices=["device-1", "device-1"]),
            slice_("slice-2", "pool-2", devices=["device-2"]),
        ),
        [alloc(result("req-0", "device-2", pool="pool-2"))],
    ),
    Case(
        "invalid-pool-is-error-if-no-other-device-can-be-allocated",
        (claim(request("req-0", count=2)),),
        (
            slice_("slice-1", "pool-1", devices=["device-1", "device-1"]),
            slice_("slice-2", "pool-2", devices=["device-2"]),
        ),
        Error("invalid resource pools were encountered"),
    ),
    Case(
        "no-allocation-from-incomplete-pools",
        (claim(request("req-0")),),
        (slice_("slice-1", "pool-1", devices=["device-1"], count=2),),
        None,
    ),
    Case(
        "multi-host-resource-pool-with-stale-slice-for-current-node",
        (claim(request("req-0")),),
        (
            slice_("slice-1", "pool-1", devices=["device-1"], count=2),
            slice_(
                "slice-2", "pool-1", devices=["device-2"], count=2, node_name=NODE_2, generation=2
            ),
        ),
        None,
    ),
    Case(
        "allocation-mode-all-with-multi-host-resource-pool",
        (claim(request("req-0", allocationMode="All")),),
        (
            slice_("slice-1", "pool-1", devices=["device-1"], count=2),
            slice_("slice-2", "pool-1", devices=["device-2"], count=2, node_name=NODE_2),
        ),
        [alloc(result("req-0", "device-1"))],
    ),
    Case(
        "check-combinations-with-backtracking",
        (
            claim(
                request("req-0", count=2),
                request("req-1", selectors=['device.attributes["driver-a"].type == "X"']),
            ),
        ),
        (
            slice_(
                "slice-1",
                "pool-1",
                devices=[
                    with_attr("device-1", type="X"),
                    with_attr("device-2", type="Y"),
                    with_attr("device-3", type="Y"),
                ],
            ),
        ),
        [
            alloc(
                result("req-0", "device-2"),
                result("req-0", "device-3"),
                result("req-1", "device-1"),
            )
        ],
    ),
    Case(
        "lexicographical-sorting-pools",
        (claim(request("req-0")),),
        (
            slice_("slice-1", "pool-2", devices=["device-2"]),
            slice_("slice-2", "pool-1", devices=["device-1"]),
        ),
        [alloc(result("req-0", "device-1"))],
    ),
    Case(
        "lexicographical-sorting-slices",
        (claim(request("req-0")),),
        (
            slice_("slice-b", "pool-1", devices=["device-2"], count=2),
            slice_("slice-a", "pool-1", devices=["device-1"], count=2),
        ),
        [alloc(result("req-0", "device-1"))],
    ),
    Case(
        "tainted-two-devices",
        (claim(request("req-0")),),
        (slice_("slice-1", "pool-1", devices=[TAINTED, TAINTED_EXEC]),),
        None,
    ),
    Case(
        "tainted-two-devices-tolerated",
        (claim(request("req-0", count=2, tolerations=TOLERATE)),),
        (slice_("slice-1", "pool-1", devices=[TAINTED, TAINTED_EXEC]),),
        [
            alloc(
                result("req-0", "device-1", tolerations=TOLERATE),
                result("req-0", "device-2", tolerations=TOLERATE),
            )
        ],
    ),
    Case(
        "tainted-no-effect",
        (claim(request("req-0")),),
        (
            slice_(
                "slice-1",
                "pool-1",
                devices=[device("device-1", taints=[{"key": "k", "effect": "None"}])],
            ),
        ),
        [alloc(result("req-0", "device-1"))],
    ),
    Case(
        "tainted-admin-access",
        (claim(request("req-0", adminAccess=True)),),
        (slice_("slice-1", "pool-1", devices=[TAINTED]),),
        None,
    ),
    Case(
        "tainted-all-devices-single",
        (claim(request("req-0", allocationMode="All")),),
        (slice_("slice-1", "pool-1", devices=[TAINTED]),),
        None,
    ),
    Case(
        "tainted-prioritized-list",
        (
            claim(
                {
                    "name": "req-0",
                    "firstAvailable": [
                        subrequest("subReq-0"),
                        subrequest("subReq-1", tolerations=TOLERATE),
                    ],
                }
            ),
        ),
        (slice_("slice-1", "pool-1", devices=[TAINTED]),),
        [alloc(result("req-0/subReq-1", "device-1", tolerations=TOLERATE))],
    ),
    Case(
        "with-distinct-constraints",
        (
            claim(
                request("req-0"),
                request("req-1"),
                constraints=[{"distinctAttribute": "driver-a/numa"}],
            ),
        ),
        (
            slice_(
                "slice-1",
                "pool-1",
                devices=[
                    with_attr("device-0", numa=1),
                    with_attr("device-1", numa=1),
                    with_attr("device-2", numa=2),
                ],
            ),
        ),
        [alloc(result("req-0", "device-0"), result("req-1", "device-2"))],
    ),
    Case(
        "with-distinct-constraints-attribute-not-set",
        (
            claim(
                request("req-0"),
                request("req-1"),
                constraints=[{"distinctAttribute": "driver-a/numa"}],
            ),
        ),
        (TWO,),
        None,
    ),
    Case(
        "cel-quantity-and-semver",
        (
            claim(
                request(
                    "req-0",
                    selectors=[
                        'device.capacity["driver-a"].memory.isGreaterThan(quantity("1Gi"))',
                        'device.attributes["driver-a"].v.isGreaterThan(semver("1.2.0"))'
                        ' && device.attributes["driver-a"].v.major() == 1',
                    ],
                )
            ),
        ),
        (
            slice_(
                "slice-1",
                "pool-1",
                devices=[
                    device(
                        "device-1", capacity={"memory": "1Gi"}, attrs={"v": {"version": "1.5.0"}}
                    ),
                    device(
                        "device-2", capacity={"memory": "2Gi"}, attrs={"v": {"version": "1.1.0"}}
                    ),
                    device(
                        "device-3",
                        capacity={"memory": "2048Mi"},
                        attrs={"v": {"version": "1.10.0"}},
                    ),
                ],
            ),
        ),
        [alloc(result("req-0", "device-3"))],
    ),
    Case(
        "v1beta1-slice-wraps-devices-in-basic",
        (claim(request("req-0", selectors=['device.attributes["driver-a"].model == "b"'])),),
        (
            {
                "apiVersion": "resource.k8s.io/v1beta1",
                "kind": "ResourceSlice",
                "metadata": {"name": "slice-1"},
                "spec": {
                    "driver": DRIVER_A,
                    "nodeName": NODE_1,
                    "pool": {"name": "pool-1", "generation": 1, "resourceSliceCount": 1},
                    "devices": [
                        {"name": "device-1", "basic": {"attributes": {"model": {"string": "a"}}}},
                        {"name": "device-2", "basic": {"attributes": {"model": {"string": "b"}}}},
                    ],
                },
            },
        ),
        [alloc(result("req-0", "device-2"))],
    ),
)


def shareable(name: str, policy: dict | None = None, **capacity: str) -> dict:
    caps = {}
    for key, value in capacity.items():
        entry: dict[str, Any] = {"value": value}
        if policy is not None:
            entry["requestPolicy"] = policy
        caps[key] = entry
    return {"name": name, "allowMultipleAllocations": True, "capacity": caps}


def cap_request(name: str, **amounts: str) -> dict:
    fields: dict[str, Any] = {"capacity": {"requests": dict(amounts)}} if amounts else {}
    return request(name, **fields)


def shared_result(request_name: str, device_name: str, **consumed: str) -> dict:
    extra: dict[str, Any] = {"consumedCapacity": dict(consumed)} if consumed else {}
    return result(request_name, device_name, shareID=SHARE_ID, **extra)


SHARE_ID = "<share-id>"
RANGE = {"default": "1", "validRange": {"min": "2", "max": "8", "step": "2"}}
VALUES = {"default": "1", "validValues": ["1", "4", "8"]}

CC_CASES: tuple[Case, ...] = (
    Case(
        "consumable-capacity-two-claims-share-a-device-without-capacity",
        (claim(request("req-0")), claim(request("req-0"))),
        (
            slice_(
                "slice-1",
                "pool-1",
                devices=[{"name": "device-1", "allowMultipleAllocations": True}],
            ),
        ),
        [alloc(shared_result("req-0", "device-1")), alloc(shared_result("req-0", "device-1"))],
    ),
    Case(
        "consumable-capacity-without-policy-without-request-blocks-the-second-claim",
        (claim(request("req-0")), claim(request("req-0"))),
        (slice_("slice-1", "pool-1", devices=[shareable("device-1", bw="2")]),),
        None,
    ),
    Case(
        "consumable-capacity-without-policy-with-capacity-request",
        (claim(cap_request("req-0", bw="1")), claim(cap_request("req-0", bw="1"))),
        (slice_("slice-1", "pool-1", devices=[shareable("device-1", bw="2")]),),
        [
            alloc(shared_result("req-0", "device-1", bw="1")),
            alloc(shared_result("req-0", "device-1", bw="1")),
        ],
    ),
    Case(
        "consumable-capacity-with-policy-default-without-request",
        (claim(request("req-0")), claim(request("req-0"))),
        (slice_("slice-1", "pool-1", devices=[shareable("device-1", RANGE, bw="8")]),),
        [
            alloc(shared_result("req-0", "device-1", bw="1")),
            alloc(shared_result("req-0", "device-1", bw="1")),
        ],
    ),
    Case(
        "consumable-capacity-range-policy-step-rounds-up",
        (claim(cap_request("req-0", bw="3")),),
        (slice_("slice-1", "pool-1", devices=[shareable("device-1", RANGE, bw="8")]),),
        [alloc(shared_result("req-0", "device-1", bw="4"))],
    ),
    Case(
        "consumable-capacity-range-policy-below-min-rounds-to-min",
        (claim(cap_request("req-0", bw="1500m")),),
        (slice_("slice-1", "pool-1", devices=[shareable("device-1", RANGE, bw="8")]),),
        [alloc(shared_result("req-0", "device-1", bw="2"))],
    ),
    Case(
        "consumable-capacity-request-over-max",
        (claim(cap_request("req-0", bw="9")),),
        (slice_("slice-1", "pool-1", devices=[shareable("device-1", RANGE, bw="16")]),),
        None,
    ),
    Case(
        "consumable-capacity-valid-values-round-up",
        (claim(cap_request("req-0", bw="2")),),
        (slice_("slice-1", "pool-1", devices=[shareable("device-1", VALUES, bw="8")]),),
        [alloc(shared_result("req-0", "device-1", bw="4"))],
    ),
    Case(
        "consumable-capacity-exceeded",
        (claim(cap_request("req-0", bw="4")), claim(cap_request("req-0", bw="4"))),
        (slice_("slice-1", "pool-1", devices=[shareable("device-1", VALUES, bw="6")]),),
        None,
    ),
    Case(
        "consumable-capacity-missing-capacity-request",
        (claim(cap_request("req-0", other="1")),),
        (slice_("slice-1", "pool-1", devices=[shareable("device-1", bw="2")]),),
        None,
    ),
    Case(
        "consumable-capacity-allocated-capacity-use-remaining",
        (claim(cap_request("req-0", bw="1")),),
        (slice_("slice-1", "pool-1", devices=[shareable("device-1", bw="2")]),),
        [alloc(shared_result("req-0", "device-1", bw="1"))],
        shared=((DRIVER_A, "pool-1", "device-1"),),
        capacity={(DRIVER_A, "pool-1", "device-1"): {"bw": "1"}},
    ),
    Case(
        "consumable-capacity-allocated-capacity-next-device",
        (claim(cap_request("req-0", bw="2")),),
        (
            slice_(
                "slice-1",
                "pool-1",
                devices=[shareable("device-1", bw="2"), shareable("device-2", bw="2")],
            ),
        ),
        [alloc(shared_result("req-0", "device-2", bw="2"))],
        shared=((DRIVER_A, "pool-1", "device-1"),),
        capacity={(DRIVER_A, "pool-1", "device-1"): {"bw": "1"}},
    ),
    Case(
        "consumable-capacity-dedicated-device-request-only-filters",
        (claim(cap_request("req-0", bw="1")),),
        (slice_("slice-1", "pool-1", devices=[device("device-1", capacity={"bw": "2"})]),),
        [alloc(result("req-0", "device-1"))],
    ),
    Case(
        "consumable-capacity-dedicated-device-request-too-large",
        (claim(cap_request("req-0", bw="3")),),
        (slice_("slice-1", "pool-1", devices=[device("device-1", capacity={"bw": "2"})]),),
        None,
    ),
    Case(
        "allow-multiple-allocations-not-allocate-multi-allocatable-device-which-already-dedicated",
        (claim(request("req-0")),),
        (
            slice_(
                "slice-1",
                "pool-1",
                devices=[{"name": "device-1", "allowMultipleAllocations": True}],
            ),
        ),
        None,
        allocated=((DRIVER_A, "pool-1", "device-1"),),
    ),
    Case(
        "allow-multiple-allocations-not-allocate-dedicated-device-which-change-from-multi-allocatable",
        (claim(request("req-0")),),
        (ONE,),
        None,
        shared=((DRIVER_A, "pool-1", "device-1"),),
    ),
    Case(
        "allow-multiple-allocations-exclude-multi-allocatable-device-by-class-selector",
        (claim(request("req-0")),),
        (
            slice_(
                "slice-1",
                "pool-1",
                devices=[{"name": "device-1", "allowMultipleAllocations": True}],
            ),
        ),
        None,
        classes=(device_class(CLASS_A, DRIVER_A, selectors=["!device.allowMultipleAllocations"]),),
    ),
    Case(
        "distinct-constraint-one-multi-allocatable-device",
        (
            claim(
                request("req-0"),
                request("req-1"),
                constraints=[{"distinctAttribute": "driver-a/numa"}],
            ),
        ),
        (
            slice_(
                "slice-1",
                "pool-1",
                devices=[
                    {
                        "name": "device-1",
                        "allowMultipleAllocations": True,
                        "attributes": {"numa": {"int": 1}},
                    }
                ],
            ),
        ),
        None,
    ),
    Case(
        "consumable-capacity-all-mode-filters-out-devices-without-capacity-left",
        (
            claim(
                cap_request("req-0", bw="2")
                | {
                    "exactly": {
                        "deviceClassName": CLASS_A,
                        "allocationMode": "All",
                        "capacity": {"requests": {"bw": "2"}},
                    }
                }
            ),
        ),
        (
            slice_(
                "slice-1",
                "pool-1",
                devices=[shareable("device-1", bw="2"), shareable("device-2", bw="2")],
            ),
        ),
        [alloc(shared_result("req-0", "device-2", bw="2"))],
        shared=((DRIVER_A, "pool-1", "device-1"),),
        capacity={(DRIVER_A, "pool-1", "device-1"): {"bw": "1"}},
    ),
)


def counted(name: str, counter_set: str, amount: str, counter: str = "c", **fields: Any) -> dict:
    return device(
        name,
        consumesCounters=[{"counterSet": counter_set, "counters": {counter: {"value": amount}}}],
        **fields,
    )


def counter_slice(
    name: str,
    pool: str,
    counter_set: str,
    amount: str,
    driver: str = DRIVER_A,
    count: int = 2,
    counter: str = "c",
) -> dict:
    return slice_(
        name,
        pool,
        driver=driver,
        count=count,
        node_name=None,
        nodeName=NODE_1,
        sharedCounters=[{"name": counter_set, "counters": {counter: {"value": amount}}}],
    )


KIND = 'device.attributes["driver-a"].kind == "{}"'

MORE_CASES: tuple[Case, ...] = (
    Case(
        "partitionable-devices-counter-cache-scoped-by-pool-id",
        (claim(request("req-0")), claim(request("req-1", cls=CLASS_B))),
        (
            slice_("slice-1", "pool-1", count=2, devices=[counted("device-1", "set-1", "1")]),
            counter_slice("slice-2", "pool-1", "set-1", "1"),
            slice_(
                "slice-3",
                "pool-1",
                driver=DRIVER_B,
                count=2,
                devices=[counted("device-2", "set-1", "2")],
            ),
            counter_slice("slice-4", "pool-1", "set-1", "2", driver=DRIVER_B),
        ),
        [
            alloc(result("req-0", "device-1")),
            alloc(result("req-1", "device-2", driver=DRIVER_B)),
        ],
    ),
    Case(
        "partitionable-devices-counter-cache-not-crossed-between-drivers",
        (claim(request("req-0")), claim(request("req-1", cls=CLASS_B))),
        (
            slice_("slice-1", "pool-1", count=2, devices=[counted("device-1", "set-1", "1")]),
            counter_slice("slice-2", "pool-1", "set-1", "1"),
            slice_(
                "slice-3",
                "pool-1",
                driver=DRIVER_B,
                count=2,
                devices=[counted("device-2", "set-2", "2", counter="d")],
            ),
            counter_slice("slice-4", "pool-1", "set-2", "1", driver=DRIVER_B, counter="d"),
        ),
        None,
    ),
    Case(
        "partitionable-devices-taint-releases-counter",
        (claim(request("req-0")),),
        (
            slice_(
                "slice-1",
                "pool-1",
                count=2,
                devices=[
                    counted(
                        "device-1", "set-1", "1", taints=[{"key": "k", "effect": "NoSchedule"}]
                    ),
                    counted("device-2", "set-1", "1"),
                ],
            ),
            counter_slice("slice-2", "pool-1", "set-1", "1"),
        ),
        [alloc(result("req-0", "device-2"))],
    ),
    Case(
        "partitionable-devices-constraint-releases-counter",
        (claim(request("req-0", count=2), constraints=[{"matchAttribute": "driver-a/color"}]),),
        (
            slice_(
                "slice-1",
                "pool-1",
                count=2,
                devices=[
                    counted("device-1", "set-1", "1", attributes={"color": {"string": "red"}}),
                    counted("device-2", "set-1", "1", attributes={"color": {"string": "blue"}}),
                    counted("device-3", "set-1", "1", attributes={"color": {"string": "blue"}}),
                ],
            ),
            counter_slice("slice-2", "pool-1", "set-1", "2"),
        ),
        [alloc(result("req-0", "device-2"), result("req-0", "device-3"))],
    ),
    Case(
        "partitionable-consumable-capacity-backtrack-releases-counter",
        (
            claim(
                request("req-0", selectors=[KIND.format("shared")]),
                request("req-1", selectors=[KIND.format("counteronly")]),
            ),
        ),
        (
            slice_(
                "slice-1",
                "pool-1",
                count=2,
                devices=[
                    counted(
                        "device-1",
                        "set-1",
                        "1",
                        allowMultipleAllocations=True,
                        attributes={"kind": {"string": "shared"}},
                    ),
                    device("device-2", attrs={"kind": "shared"}),
                    counted(
                        "device-3", "set-1", "1", attributes={"kind": {"string": "counteronly"}}
                    ),
                ],
            ),
            counter_slice("slice-2", "pool-1", "set-1", "1"),
        ),
        [alloc(result("req-0", "device-2"), result("req-1", "device-3"))],
    ),
    Case(
        "partitionable-shared-device-pays-its-counters-once",
        (
            claim(request("req-0", selectors=[KIND.format("shared")])),
            claim(
                request(
                    "req-1", selectors=[KIND.format("shared") + " || " + KIND.format("fallback")]
                ),
                request("req-2", selectors=[KIND.format("gate")]),
                request("req-3", selectors=[KIND.format("shared")]),
                constraints=[{"requests": ["req-1", "req-2"], "matchAttribute": "driver-a/color"}],
            ),
        ),
        (
            slice_(
                "slice-1",
                "pool-1",
                count=2,
                devices=[
                    counted(
                        "device-1",
                        "set-1",
                        "1",
                        allowMultipleAllocations=True,
                        attributes={"kind": {"string": "shared"}, "color": {"string": "red"}},
                    ),
                    device("device-2", attrs={"kind": "fallback", "color": "blue"}),
                    device("device-3", attrs={"kind": "gate", "color": "blue"}),
                ],
            ),
            counter_slice("slice-2", "pool-1", "set-1", "1"),
        ),
        [
            alloc(shared_result("req-0", "device-1")),
            alloc(
                result("req-1", "device-2"),
                result("req-2", "device-3"),
                shared_result("req-3", "device-1"),
            ),
        ],
    ),
    Case(
        "allow-multiple-allocations-with-shared-device-counter-cross-cycle",
        (
            claim(
                cap_request("req-0", bw="1")
                | {
                    "exactly": {
                        "deviceClassName": CLASS_A,
                        "capacity": {"requests": {"bw": "1"}},
                        "selectors": [{"cel": {"expression": KIND.format("b")}}],
                    }
                }
            ),
        ),
        (
            slice_(
                "slice-1",
                "pool-1",
                count=2,
                devices=[
                    counted(
                        "device-1",
                        "set-1",
                        "1",
                        counter="bw",
                        allowMultipleAllocations=True,
                        attributes={"kind": {"string": "a"}},
                        capacity={"bw": "1"},
                    ),
                    counted(
                        "device-2",
                        "set-1",
                        "1",
                        counter="bw",
                        allowMultipleAllocations=True,
                        attributes={"kind": {"string": "b"}},
                        capacity={"bw": "1"},
                    ),
                ],
            ),
            counter_slice("slice-2", "pool-1", "set-1", "1", counter="bw"),
        ),
        None,
        shared=((DRIVER_A, "pool-1", "device-1"),),
        capacity={(DRIVER_A, "pool-1", "device-1"): {"bw": "1"}},
    ),
    Case(
        "consumable-capacity-with-multi-allocatable-device-backtrack",
        (
            claim(
                cap_request("req-0", bw="2"),
                cap_request("req-1", bw="2"),
                constraints=[{"matchAttribute": "driver-a/color"}],
            ),
            claim(cap_request("req-0", bw="2")),
        ),
        (
            slice_(
                "slice-1",
                "pool-1",
                devices=[
                    shareable("device-2", RANGE, bw="2")
                    | {"attributes": {"color": {"string": "one"}}},
                    shareable("device-1", RANGE, bw="4")
                    | {"attributes": {"color": {"string": "two"}}},
                ],
            ),
        ),
        [
            alloc(
                shared_result("req-0", "device-1", bw="2"),
                shared_result("req-1", "device-1", bw="2"),
            ),
            alloc(shared_result("req-0", "device-2", bw="2")),
        ],
    ),
    Case(
        "with-distinct-constraints-unknown-type-attribute",
        (
            claim(
                request("req-0"),
                constraints=[{"requests": ["req-0"], "distinctAttribute": "driver-a/flag"}],
            ),
        ),
        (slice_("slice-1", "pool-1", devices=[{"name": "device-1", "attributes": {"flag": {}}}]),),
        Error("unsupported attribute value"),
    ),
    Case(
        "with-distinct-constraints-with-subrequests",
        (
            claim(
                *(
                    {
                        "name": f"req-{i}",
                        "firstAvailable": [
                            subrequest(
                                "subReq-0", selectors=['device.attributes["driver-a"].flag']
                            ),
                            subrequest("subReq-1"),
                        ],
                    }
                    for i in range(3)
                ),
                constraints=[
                    {"requests": ["req-0", "req-1"], "distinctAttribute": "driver-a/flag"}
                ],
            ),
        ),
        (
            slice_(
                "slice-1",
                "pool-1",
                devices=[
                    {
                        "name": "device-1",
                        "allowMultipleAllocations": True,
                        "attributes": {"flag": {"bool": True}},
                    },
                    {
                        "name": "device-2",
                        "allowMultipleAllocations": True,
                        "attributes": {"flag": {"bool": False}},
                    },
                ],
            ),
        ),
        [
            alloc(
                shared_result("req-0/subReq-0", "device-1"),
                shared_result("req-1/subReq-1", "device-2"),
                shared_result("req-2/subReq-0", "device-1"),
            )
        ],
    ),
    Case(
        "list-attributes-never-match-in-this-variant",
        (claim(request("req-0", count=2), constraints=[{"matchAttribute": "driver-a/names"}]),),
        (
            slice_(
                "slice-1",
                "pool-1",
                devices=[
                    {"name": "device-1", "attributes": {"names": {"strings": ["a", "b"]}}},
                    {"name": "device-2", "attributes": {"names": {"strings": ["a", "b"]}}},
                ],
            ),
        ),
        None,
    ),
    Case(
        "claim-config-scoped-to-subrequests-of-one-request",
        (
            claim(
                {
                    "name": "req-0",
                    "firstAvailable": [subrequest("subReq-0"), subrequest("subReq-1", cls=CLASS_B)],
                },
                request("req-1"),
                config=[
                    {
                        "requests": ["req-0/subReq-0", "req-0/subReq-1"],
                        "opaque": {"driver": DRIVER_A, "parameters": {}},
                    }
                ],
            ),
        ),
        (slice_("slice-1", "pool-1", devices=["device-0", "device-1"]),),
        [
            alloc(
                result("req-0/subReq-0", "device-0"),
                result("req-1", "device-1"),
                config=[
                    {
                        "source": "FromClaim",
                        "requests": ["req-0/subReq-0", "req-0/subReq-1"],
                        "opaque": {"driver": DRIVER_A, "parameters": {}},
                    }
                ],
            )
        ],
    ),
    Case(
        "claim-config-covering-all-requests-is-cleared",
        (
            claim(
                {
                    "name": "req-0",
                    "firstAvailable": [subrequest("subReq-0"), subrequest("subReq-1", cls=CLASS_B)],
                },
                request("req-1"),
                config=[
                    {
                        "requests": ["req-0/subReq-0", "req-1"],
                        "opaque": {"driver": DRIVER_A, "parameters": {}},
                    }
                ],
            ),
        ),
        (slice_("slice-1", "pool-1", devices=["device-0", "device-1"]),),
        [
            alloc(
                result("req-0/subReq-0", "device-0"),
                result("req-1", "device-1"),
                config=[{"source": "FromClaim", "opaque": {"driver": DRIVER_A, "parameters": {}}}],
            )
        ],
    ),
    Case(
        "node-restriction-binds-to-node",
        (claim(request("req-0")),),
        (
            slice_(
                "slice-1",
                "pool-1",
                devices=[device("device-1", bindsToNode=True)],
                nodeSelector=node_selector(),
            ),
        ),
        [alloc(result("req-0", "device-1"))],
    ),
    Case(
        "binding-conditions-copied-and-pool-searched-last",
        (claim(request("req-0", count=2)),),
        (
            slice_(
                "slice-1",
                "pool-1",
                devices=[
                    device(
                        "device-1",
                        bindingConditions=["IsPrepared"],
                        bindingFailureConditions=["Failed"],
                    )
                ],
            ),
            slice_("slice-2", "pool-2", devices=["device-2"]),
        ),
        [
            alloc(
                result("req-0", "device-2", pool="pool-2"),
                result(
                    "req-0",
                    "device-1",
                    bindingConditions=["IsPrepared"],
                    bindingFailureConditions=["Failed"],
                ),
            )
        ],
    ),
)
