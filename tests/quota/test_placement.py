"""Cluster-wide placement: one node for all claims of a pod, or a reason naming the request."""

from __future__ import annotations

from typing import Any

import pytest

from quota.claims import PodClaim
from quota.claimspec import parse_claim_spec
from quota.devices import claim_devices
from quota.placement import Placement, make_placer, place_claims
from quota.placement import index as index_module
from webhook.store.clusterstate import ClusterState

GPU = "gpu.example.com"
ROOT = "resource.kubernetes.io/pcieRoot"


def gpu_class() -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceClass",
        "metadata": {"name": GPU},
        "spec": {"selectors": [{"cel": {"expression": f'device.driver == "{GPU}"'}}]},
    }


def node(name: str, **labels: str) -> dict[str, Any]:
    return {"kind": "Node", "metadata": {"name": name, "labels": labels}}


def gpus(node_name: str, roots: list[str]) -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": f"{node_name}-gpus"},
        "spec": {
            "driver": GPU,
            "nodeName": node_name,
            "pool": {"name": node_name, "generation": 1, "resourceSliceCount": 1},
            "devices": [
                {"name": f"gpu-{i}", "attributes": {ROOT: {"string": root}}}
                for i, root in enumerate(roots)
            ],
        },
    }


def allocated_claim(name: str, node_name: str, *devices: str) -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": "team-a"},
        "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": GPU}}]}},
        "status": {
            "allocation": {
                "devices": {
                    "results": [
                        {"request": "gpu", "driver": GPU, "pool": node_name, "device": d}
                        for d in devices
                    ]
                },
                "nodeSelector": {
                    "nodeSelectorTerms": [
                        {
                            "matchFields": [
                                {"key": "metadata.name", "operator": "In", "values": [node_name]}
                            ]
                        }
                    ]
                },
            }
        },
    }


def cluster(*extra: dict[str, Any]) -> ClusterState:
    return ClusterState(
        [
            gpu_class(),
            node("node-1", zone="a"),
            node("node-2", zone="b"),
            gpus("node-1", ["pci-a"] * 4),
            gpus("node-2", ["pci-a", "pci-a", "pci-b", "pci-b"]),
            *extra,
        ]
    )


def template_claim(
    name: str, count: int, selectors: tuple[str, ...] = (), match: bool = False
) -> PodClaim:
    exactly: dict[str, Any] = {"deviceClassName": GPU, "count": count}
    if selectors:
        exactly["selectors"] = [{"cel": {"expression": s}} for s in selectors]
    devices: dict[str, Any] = {"requests": [{"name": "gpu", "exactly": exactly}]}
    if match:
        devices["constraints"] = [{"matchAttribute": ROOT}]
    spec = parse_claim_spec({"devices": devices}, "v1", f"ResourceClaimTemplate team-a/{name}")
    return PodClaim(name, "team-a", spec, claim_devices(spec), template=name)


def devices_of(placement: Placement) -> list[list[str]]:
    return [[r["device"] for r in a["devices"]["results"]] for a in placement.allocations]


def test_two_claims_share_the_first_node_that_fits_both() -> None:
    placement = place_claims([template_claim("a", 2), template_claim("b", 2)], cluster())
    assert placement.ok and placement.node == "node-1"
    assert devices_of(placement) == [["gpu-0", "gpu-1"], ["gpu-2", "gpu-3"]]


def test_unplaceable_request_is_named_with_the_best_any_node_offers() -> None:
    placement = place_claims([template_claim("gpu-tmpl", 5, match=True)], cluster())
    assert not placement.ok and not placement.invalid
    assert placement.reason == (
        "request gpu of claim gpu-tmpl: needs 5 devices of class gpu.example.com "
        "with the same resource.kubernetes.io/pcieRoot; the most any node offers is 4"
    )


def test_constraint_decides_the_node() -> None:
    selector = f'device.attributes["{ROOT.split("/")[0]}"].pcieRoot == "pci-b"'
    placement = place_claims([template_claim("b", 2, (selector,), match=True)], cluster())
    assert placement.ok and placement.node == "node-2"
    assert devices_of(placement) == [["gpu-2", "gpu-3"]]


def test_allocated_devices_are_honoured() -> None:
    state = cluster(allocated_claim("busy", "node-1", "gpu-0", "gpu-1", "gpu-2"))
    placement = place_claims([template_claim("a", 2)], state)
    assert placement.ok and placement.node == "node-2"


def test_busy_cluster_is_unplaceable_now_but_admissible_ever() -> None:
    state = cluster(
        allocated_claim("busy-1", "node-1", "gpu-0", "gpu-1", "gpu-2", "gpu-3"),
        allocated_claim("busy-2", "node-2", "gpu-0", "gpu-1", "gpu-2"),
    )
    claims = [template_claim("a", 2)]
    now = place_claims(claims, state)
    assert not now.ok
    assert "the most any node offers is 1" in now.reason
    later = make_placer(state)(claims, None)
    assert later.ok and later.node is None and not later.now
    assert "the most any node offers is 1" in later.reason


def test_admission_denies_only_what_can_never_be_placed() -> None:
    state = cluster(allocated_claim("busy-1", "node-1", "gpu-0", "gpu-1", "gpu-2", "gpu-3"))
    never = make_placer(state)([template_claim("a", 5)], None)
    assert not never.ok and not never.too_complex and not never.invalid
    assert "the most any node offers is 4" in never.reason  # judged on all published devices


def test_free_node_is_preferred_now() -> None:
    state = cluster(allocated_claim("busy", "node-1", "gpu-0", "gpu-1", "gpu-2"))
    placement = make_placer(state)([template_claim("a", 2)], None)
    assert placement.ok and placement.now and placement.node == "node-2"


def test_node_labels_restrict_the_nodes() -> None:
    placer = make_placer(cluster())
    claims = [template_claim("gpu-tmpl", 3, match=True)]
    assert placer(claims, {"zone": "a"}).node == "node-1"
    restricted = placer(claims, {"zone": "b"})
    assert not restricted.ok
    assert "the most any node offers is 2" in restricted.reason
    assert not placer(claims, {"zone": "nowhere"}).ok


def test_named_node() -> None:
    state = cluster()
    assert place_claims([template_claim("a", 1)], state, node="node-2").node == "node-2"
    assert not place_claims([template_claim("a", 1)], state, node="node-3").ok


def test_invalid_claim_is_a_distinct_outcome() -> None:
    placement = place_claims([template_claim("bad", 1, ("nosuchvar == 1",))], cluster())
    assert not placement.ok and placement.invalid
    assert "undeclared reference" in placement.reason


def test_unknown_class_is_invalid() -> None:
    spec = parse_claim_spec(
        {"devices": {"requests": [{"name": "x", "exactly": {"deviceClassName": "nope"}}]}},
        "v1",
        "ResourceClaimTemplate team-a/x",
    )
    placement = place_claims([PodClaim("x", "team-a", spec, {}, template="x")], cluster())
    assert placement.invalid and "could not retrieve device class nope" in placement.reason


def test_index_is_rebuilt_when_the_cluster_changes() -> None:
    state = cluster()
    placer = make_placer(state)
    claims = [template_claim("big", 6)]
    assert not placer(claims, None).ok
    state.upsert(node("node-3"))
    state.upsert(gpus("node-3", ["pci-c"] * 8))
    placement = placer(claims, None)
    assert placement.ok and placement.node == "node-3"


def test_already_allocated_shared_claim_pins_the_node() -> None:
    shared_obj = allocated_claim("shared", "node-2", "gpu-0")
    state = cluster(shared_obj)
    spec = parse_claim_spec(shared_obj["spec"], "v1", "ResourceClaim team-a/shared")
    shared = PodClaim(
        "shared",
        "team-a",
        spec,
        claim_devices(spec),
        claim="shared",
        allocation=shared_obj["status"]["allocation"],
    )
    placement = place_claims([shared, template_claim("a", 1)], state)
    assert placement.ok and placement.node == "node-2"
    assert placement.allocations[0] == shared_obj["status"]["allocation"]
    assert devices_of(placement)[1] == ["gpu-1"]


def test_malformed_slices_are_skipped_not_raised() -> None:
    broken = gpus("node-9", ["x"])
    broken["spec"]["pool"]["generation"] = "one"
    state = cluster(broken)
    placer = make_placer(state)
    assert placer([template_claim("a", 1)], None).ok
    assert any("spec.pool.generation" in p for p in placer.problems)


@pytest.mark.parametrize("count", [1, 4])
def test_placement_is_deterministic(count: int) -> None:
    state = cluster()
    claims = [template_claim("a", count)]
    assert place_claims(claims, state) == place_claims(claims, state)


def taint_rule(pool: str, effect: str = "NoSchedule") -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1alpha3",
        "kind": "DeviceTaintRule",
        "metadata": {"name": f"maintenance-{pool}"},
        "spec": {
            "deviceSelector": {"driver": GPU, "pool": pool},
            "taint": {"key": "example.com/maintenance", "value": "true", "effect": effect},
        },
    }


def test_device_taint_rules_taint_the_devices_they_select() -> None:
    state = cluster(taint_rule("node-1"))
    placement = place_claims([template_claim("a", 1)], state)
    assert placement.ok and placement.node == "node-2"


def test_rule_taint_can_be_tolerated() -> None:
    state = cluster(taint_rule("node-1"), taint_rule("node-2"))
    assert not place_claims([template_claim("a", 1)], state).ok
    spec = parse_claim_spec(
        {
            "devices": {
                "requests": [
                    {
                        "name": "gpu",
                        "exactly": {
                            "deviceClassName": GPU,
                            "tolerations": [
                                {"key": "example.com/maintenance", "operator": "Exists"}
                            ],
                        },
                    }
                ]
            }
        },
        "v1",
        "ResourceClaimTemplate team-a/tolerant",
    )
    tolerant = PodClaim("tolerant", "team-a", spec, claim_devices(spec), template="tolerant")
    placement = place_claims([tolerant], state)
    assert placement.ok and placement.node == "node-1"
    (result,) = placement.allocations[0]["devices"]["results"]
    assert result["tolerations"] == [{"key": "example.com/maintenance", "operator": "Exists"}]


def test_none_effect_rule_does_not_block() -> None:
    state = cluster(taint_rule("node-1", effect="None"))
    assert place_claims([template_claim("a", 1)], state).node == "node-1"


def test_slices_of_a_missing_node_offer_nothing() -> None:
    state = cluster(gpus("node-gone", ["pci-z"] * 8))
    assert not place_claims([template_claim("big", 6)], state).ok


def test_without_node_objects_the_slices_name_the_nodes() -> None:
    state = ClusterState([gpu_class(), gpus("node-x", ["pci-a"] * 2)])
    placement = place_claims([template_claim("a", 2)], state)
    assert placement.ok and placement.node == "node-x"


def test_a_view_without_resource_slices_does_not_judge_admission() -> None:
    # A quota-only cluster view (no driver publishes devices) cannot tell where claims
    # fit: admission must not deny on placement, while the allocator itself says no.
    state = ClusterState([gpu_class(), node("node-1")])
    answer = make_placer(state)([template_claim("a", 1)], None)
    assert answer.ok and answer.node is None and "no ResourceSlices" in answer.reason
    assert not place_claims([template_claim("a", 1)], state).ok


def test_named_node_without_node_objects_is_a_node_without_labels() -> None:
    network = gpus("ignored", ["pci-a", "pci-a"])
    network["spec"].pop("nodeName")
    network["spec"]["allNodes"] = True
    network["spec"]["pool"]["name"] = "fabric"
    state = ClusterState([gpu_class(), network])
    placement = place_claims([template_claim("a", 2)], state, node="worker-7")
    assert placement.ok and placement.node == "worker-7"
    assert devices_of(placement) == [["gpu-0", "gpu-1"]]
    with_nodes = cluster(network)
    assert place_claims([template_claim("a", 1)], with_nodes, node="worker-7").reason == (
        "node worker-7 not found"
    )


def test_a_placer_bound_to_a_view_answers_on_that_view() -> None:
    state = cluster()
    placer = make_placer(state)
    claims = [template_claim("a", 4)]
    view = state.snapshot()
    state.replace_kind("ResourceSlice", [gpus("node-1", ["pci-a"])])  # fewer devices now
    placement = placer.on(view)(claims, None)
    assert placement.ok and placement.node == "node-1"
    assert not placer(claims, None).ok  # unbound: the cluster now
    assert placer.on(view)(claims, None).ok  # an older view is answered on its own index


def test_an_older_view_after_a_newer_index_costs_no_rescan_of_every_claim(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    state = cluster(allocated_claim("busy", "node-1", "gpu-0", "gpu-1", "gpu-2"))
    placer = make_placer(state)
    claims = [template_claim("a", 2)]
    older = state.snapshot()  # node-1 busy
    state.remove("ResourceClaim", "team-a", "busy")  # freed
    assert placer(claims, None).node == "node-1"  # the newer index: node-1 is free
    rescans: list[int] = []
    real = index_module._holdings
    monkeypatch.setattr(index_module, "_holdings", lambda s: rescans.append(1) or real(s))
    placement = placer.on(older)(claims, None)
    assert placement.ok and placement.now and placement.node == "node-2"  # busy on that view
    assert placer(claims, None).node == "node-1"  # and forward again
    assert rescans == []  # both ways from the journal of changed claims
