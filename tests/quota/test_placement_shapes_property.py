"""Property: checking one node of each shape gives the answer of checking every node.

Placement skips a node whose signature (devices without pool and node names, their
allocation) equals one where the claims did not fit. On random clusters of nodes
that often look alike, the node it picks must be the first node, in name order,
where `allocate()` on that node alone succeeds.
"""

from __future__ import annotations

from typing import Any

from hypothesis import example, given, settings
from hypothesis import strategies as st

from quota.allocator import DeviceID, allocate
from quota.claims import PodClaim
from quota.claimspec import parse_claim_spec
from quota.devices import claim_devices
from quota.placement import make_placer
from webhook.store.clusterstate import ClusterState

GPU = "gpu.example.com"

_nodes = st.lists(
    st.lists(st.tuples(st.integers(0, 2), st.booleans()), min_size=1, max_size=4),
    min_size=1,
    max_size=6,
)


def _objects(nodes: list[list[tuple[int, bool]]]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = [
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "DeviceClass",
            "metadata": {"name": GPU},
            "spec": {"selectors": [{"cel": {"expression": f'device.driver == "{GPU}"'}}]},
        }
    ]
    for n, devices in enumerate(nodes):
        name = f"node-{n}"
        out.append({"kind": "Node", "metadata": {"name": name}})
        out.append(
            {
                "apiVersion": "resource.k8s.io/v1",
                "kind": "ResourceSlice",
                "metadata": {"name": f"{name}-gpus"},
                "spec": {
                    "driver": GPU,
                    "nodeName": name,
                    "pool": {"name": name, "generation": 1, "resourceSliceCount": 1},
                    "devices": [
                        {"name": f"gpu-{d}", "attributes": {"numa": {"int": numa}}}
                        for d, (numa, _) in enumerate(devices)
                    ],
                },
            }
        )
        busy = [f"gpu-{d}" for d, (_, taken) in enumerate(devices) if taken]
        if busy:
            out.append(
                {
                    "apiVersion": "resource.k8s.io/v1",
                    "kind": "ResourceClaim",
                    "metadata": {"name": f"busy-{n}", "namespace": "other"},
                    "spec": {"devices": {"requests": []}},
                    "status": {
                        "allocation": {
                            "devices": {
                                "results": [
                                    {"request": "r", "driver": GPU, "pool": name, "device": d}
                                    for d in busy
                                ]
                            }
                        }
                    },
                }
            )
    return out


@settings(max_examples=300, deadline=None)
@given(nodes=_nodes, count=st.integers(1, 3), match=st.booleans())
# Alike but for which devices are allocated: the first does not fit, the second does.
@example(
    nodes=[
        [(0, True), (0, False), (1, True), (1, False)],
        [(0, True), (0, True), (1, False), (1, False)],
    ],
    count=2,
    match=True,
)
def test_first_fitting_node_is_found_when_like_nodes_are_skipped(
    nodes: list[list[tuple[int, bool]]], count: int, match: bool
) -> None:
    devices: dict[str, Any] = {
        "requests": [{"name": "gpu", "exactly": {"deviceClassName": GPU, "count": count}}]
    }
    if match:
        devices["constraints"] = [{"matchAttribute": f"{GPU}/numa"}]
    spec = parse_claim_spec({"devices": devices}, "v1", "ResourceClaimTemplate a/t")
    claim = PodClaim("t", "a", spec, claim_devices(spec), template="t")
    objects = _objects(nodes)
    state = ClusterState(objects)
    slices = [o for o in objects if o["kind"] == "ResourceSlice"]
    allocated = {
        (r["driver"], r["pool"], r["device"])
        for o in objects
        if o["kind"] == "ResourceClaim"
        for r in o["status"]["allocation"]["devices"]["results"]
    }
    expected = None
    for n in range(len(nodes)):
        node = {"kind": "Node", "metadata": {"name": f"node-{n}"}}
        taken = {DeviceID(*a) for a in allocated}
        if allocate([spec], node, slices, [objects[0]], taken) is not None:
            expected = f"node-{n}"
            break
    placement = make_placer(state).place([claim])
    assert placement.node == expected
    assert placement.ok == (expected is not None)
