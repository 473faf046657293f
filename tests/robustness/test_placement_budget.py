"""Hostile claims of issue 10 against placement: answered by a pre-check or stopped by the
deterministic budget, never by a clock."""

from __future__ import annotations

from typing import Any

import pytest

from quota.allocator import Budget, BudgetExceeded, allocate
from quota.allocator.budget import (
    COMPILE_COST_PER_CHARACTER,
    DEFAULT_CEL_COST,
    DEFAULT_SEARCH_STEPS,
    EVALUATION_COST_LIMIT,
    NODE_SEARCH_STEPS,
)
from quota.claims import PodClaim
from quota.claimspec import parse_claim_spec
from quota.devices import claim_devices
from quota.placement import index as placement_index
from quota.placement import make_placer
from tests.robustness.hostile import (
    GPU,
    NAMESPACE,
    cel_spec,
    first_available_spec,
    gpu_class,
    nested_bind_equality,
    node_objects,
    nothing_matches_request,
    unsatisfiable_constraint_spec,
)
from webhook.store.clusterstate import ClusterState


def claim(name: str, spec: dict[str, Any]) -> PodClaim:
    parsed = parse_claim_spec(spec, "v1", f"ResourceClaimTemplate {NAMESPACE}/{name}")
    return PodClaim(name, NAMESPACE, parsed, claim_devices(parsed), template=name)


@pytest.fixture(scope="module")
def state() -> ClusterState:
    return ClusterState(node_objects(nodes=20))


def test_request_no_device_matches_is_answered_without_searching(state: ClusterState) -> None:
    spec = first_available_spec(3, 8, nothing_matches_request())
    placement = make_placer(state)([claim("hostile", spec)], None)
    assert not placement.ok and not placement.too_complex and not placement.invalid
    assert placement.reason == (
        "request nope of claim hostile: needs 1 device of class gpu.example.com; no node offers any"
    )
    # No node was searched: beyond validating the claims against no devices, one
    # pre-check and one diagnosis step per request, for one node of each kind.
    validation = Budget()
    assert (
        allocate([claim("hostile", spec).spec], None, classes=[gpu_class()], budget=validation)
        is None
    )
    requests = 4
    assert placement.steps == validation.used_steps + 2 * requests
    bigger = ClusterState(node_objects(nodes=200))
    assert make_placer(bigger)([claim("hostile", spec)], None).steps == placement.steps


def test_answer_is_deterministic(state: ClusterState) -> None:
    spec = first_available_spec(3, 8, nothing_matches_request())
    first = make_placer(state)([claim("hostile", spec)], None)
    again = make_placer(state)([claim("hostile", spec)], None)
    assert first == again


def test_search_that_would_explode_stops_at_the_step_budget(state: ClusterState) -> None:
    placer = make_placer(state)
    placement = placer([claim("hostile", unsatisfiable_constraint_spec())], None)
    assert placement.too_complex and not placement.ok and not placement.invalid
    assert placement.reason.startswith(
        f"too complex to check: the device search took more than {NODE_SEARCH_STEPS} steps "
        "on a node without an answer, and no other node fits: "
    )
    assert "firstAvailable" in placement.reason  # says how to simplify
    # One node of this shape was searched up to its share, the 19 like it not at all: the
    # same count on a cluster ten times the size.
    assert placement.steps <= DEFAULT_SEARCH_STEPS
    bigger = ClusterState(node_objects(nodes=200))
    again = make_placer(bigger)([claim("hostile", unsatisfiable_constraint_spec())], None)
    assert again.steps == placement.steps


def test_pathological_node_does_not_hide_a_node_that_fits() -> None:
    # node-0000: 8 GPUs, one tainted: 8 one-GPU claims search 8! orders there and fail.
    # node-0001: 8 clean GPUs. The first node is left undecided; the second answers.
    objects = node_objects(nodes=2)
    first = objects[2]["spec"]["devices"][7]
    first["taints"] = [{"key": "broken", "value": "true", "effect": "NoSchedule"}]
    state = ClusterState(objects)
    one = {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": GPU}}]}}
    claims = [claim(f"c{i}", one) for i in range(8)]
    placement = make_placer(state)(claims, None)
    assert placement.ok and placement.node == "node-0001"
    assert placement.steps > NODE_SEARCH_STEPS  # node-0000 used its whole share


def test_smaller_budget_stops_sooner_at_exactly_its_limit(state: ClusterState) -> None:
    placement = make_placer(state, steps=500)([claim("h", unsatisfiable_constraint_spec())], None)
    assert placement.too_complex and placement.steps == 501


def test_ordinary_firstavailable_pod_fits_well_within_the_budget(state: ClusterState) -> None:
    placement = make_placer(state)([claim("ok", first_available_spec(3, 8))], None)
    assert placement.ok and placement.node == "node-0000"
    assert placement.steps < DEFAULT_SEARCH_STEPS // 100  # a handful of steps per request


def test_nested_bind_list_equality_is_stopped_before_it_runs(state: ClusterState) -> None:
    expression = nested_bind_equality(levels=8, width=10)
    placement = make_placer(state)([claim("cel", cel_spec(expression))], None)
    assert placement.too_complex and not placement.invalid
    # Refused on its estimate: the only cost spent is compiling the two selectors.
    class_selector = gpu_class()["spec"]["selectors"][0]["cel"]["expression"]
    compiled = COMPILE_COST_PER_CHARACTER * (len(expression) + len(class_selector))
    assert placement.cost == compiled
    assert "estimated cost" in placement.reason and "cel.bind" in placement.reason


def test_cel_estimate_is_reported_with_the_limit() -> None:
    spec = parse_claim_spec(cel_spec(nested_bind_equality()), "v1", "ResourceClaim a/b")
    with pytest.raises(BudgetExceeded) as caught:
        objects = node_objects(1)
        allocate([spec], objects[1], objects[2:], [gpu_class()])
    assert caught.value.kind == "cel-evaluation"
    assert caught.value.limit == EVALUATION_COST_LIMIT
    assert caught.value.used > 100 * EVALUATION_COST_LIMIT


def test_cel_cost_budget_counts_every_evaluation() -> None:
    state = ClusterState(node_objects(nodes=50))
    # Cheap selectors, but many devices: a tiny CEL budget runs out at a counted point.
    placer = make_placer(state, cel_cost=300)
    placement = placer([claim("c", cel_spec('device.attributes["gpu.example.com"].index > 99'))])
    assert placement.too_complex
    assert placement.cost > 300
    assert make_placer(state)([claim("c", cel_spec("device.attributes['x'].size() > 99"))]).cost


def test_budget_object_reports_what_was_spent() -> None:
    budget = Budget(steps=3)
    for _ in range(3):
        budget.step()
    with pytest.raises(BudgetExceeded) as caught:
        budget.step()
    assert (caught.value.kind, caught.value.used, caught.value.limit) == ("steps", 4, 3)


def test_many_long_distinct_selectors_exhaust_the_cel_budget_by_compiling() -> None:
    state = ClusterState(node_objects(nodes=2))
    # 30 distinct selectors of ~9 600 characters each: compiling them would take seconds.
    long = " || ".join(['device.driver == "x"'] * 400)
    selectors = [f"{long} || {i} == 0 || true" for i in range(30)]
    spec = {
        "devices": {
            "requests": [
                {
                    "name": "gpu",
                    "exactly": {
                        "deviceClassName": "gpu.example.com",
                        "selectors": [{"cel": {"expression": s}} for s in selectors],
                    },
                }
            ]
        }
    }
    placement = make_placer(state)([claim("long", spec)], None)
    assert placement.too_complex
    assert (
        DEFAULT_CEL_COST
        < placement.cost
        <= DEFAULT_CEL_COST + COMPILE_COST_PER_CHARACTER * len(selectors[-1])
    )
    assert f"CEL selectors cost more than {DEFAULT_CEL_COST}" in placement.reason


def test_devices_examined_count_as_steps_in_a_large_shared_pool() -> None:
    devices = [{"name": f"d-{i}", "attributes": {"index": {"int": i}}} for i in range(3000)]
    shared = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": "shared"},
        "spec": {
            "driver": "gpu.example.com",
            "allNodes": True,
            "pool": {"name": "shared", "generation": 1, "resourceSliceCount": 1},
            "devices": devices,
        },
    }
    state = ClusterState([gpu_class(), {"kind": "Node", "metadata": {"name": "n"}}, shared])
    placement = make_placer(state, steps=2000)([claim("h", unsatisfiable_constraint_spec())])
    assert placement.too_complex and placement.steps == 2001


def test_new_selectors_every_pod_do_not_grow_what_the_index_remembers(
    state: ClusterState, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A user whose every pod names a selector never seen before: the index forgets what
    it remembered rather than grow until the devices change; answers stay the same."""
    monkeypatch.setattr(placement_index, "MEMO_ENTRIES", 100)
    placer = make_placer(state)
    for i in range(40):  # each is evaluated on a dozen distinct devices: 480 results in all
        request = {"name": "gpu", "exactly": {"deviceClassName": "gpu.example.com",
                   "selectors": [{"cel": {"expression": f"device.driver == 'x{i}'"}}]}}  # fmt: skip
        placement = placer([claim(f"p{i}", {"devices": {"requests": [request]}})], None)
        assert not placement.ok and "no node offers any" in placement.reason
        assert len(placer.index().memo) <= 100
