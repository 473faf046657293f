"""Issue 11: admission judges whether claims can ever be placed; busy devices only warn."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from quota.claims import expand_pod_claims
from quota.decision import decide
from quota.placement import make_placer
from quota.settings import Settings
from quota.usage import Usage
from tests.quota.queue_builders import scenario_objects
from tests.robustness.hostile import GPU, first_available_spec, node_objects, pod, template
from webhook.store.clusterstate import ClusterState

SCENARIO: dict[str, Any] = {
    "flavors": [
        {"name": "fa", "nodeLabels": {"pool": "a"}},
        {"name": "fb", "nodeLabels": {"pool": "b"}},
    ],
    "queues": [
        {
            "name": "q",
            "classes": {"gpus": [GPU]},
            "groups": [{"fa": {"gpus": 8}, "fb": {"gpus": 8}}],
        }
    ],
    "localQueues": {"team-a/default": "q"},
}
ONE_GPU = {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": GPU}}]}}


def busy_claim(node: str, devices: int = 8) -> dict[str, Any]:
    results = [
        {"request": "gpu", "driver": GPU, "pool": node, "device": f"gpu-{i}"}
        for i in range(devices)
    ]
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": f"busy-{node}", "namespace": "other"},
        "spec": ONE_GPU,
        "status": {"allocation": {"devices": {"results": results}}},
    }


def state(*busy: str, extra: tuple[dict[str, Any], ...] = ()) -> ClusterState:
    nodes = node_objects(2)
    for obj, pool in zip([o for o in nodes if o["kind"] == "Node"], ("a", "b"), strict=True):
        obj["metadata"]["labels"]["pool"] = pool
    objects = scenario_objects(SCENARIO) + nodes + [template("one", ONE_GPU)]
    objects += [template("many", first_available_spec(2, 4))]
    return ClusterState(objects + [busy_claim(n) for n in busy] + list(extra))


def test_busy_devices_are_a_warning_not_a_quota_denial() -> None:
    s = state("node-0000", "node-0001")
    decision = decide(pod("p", ("one",)), s, Usage(), Settings(), make_placer(s))
    assert decision.allowed and decision.reason == "Admitted"
    assert any("cannot be placed on the devices free right now" in w for w in decision.warnings)


def test_flavor_whose_nodes_are_free_now_is_preferred() -> None:
    s = state("node-0000")  # pool a busy, pool b free
    decision = decide(pod("p", ("one",)), s, Usage(), Settings(), make_placer(s))
    assert decision.allowed and decision.charge is not None
    assert decision.charge.flavors == {"gpus": "fb"}
    assert decision.node_selector == {"pool": "b"}
    assert not any("right now" in w for w in decision.warnings)


def test_first_flavor_kept_when_both_are_free() -> None:
    s = state()
    decision = decide(pod("p", ("one",)), s, Usage(), Settings(), make_placer(s))
    assert decision.charge is not None and decision.charge.flavors == {"gpus": "fa"}


def test_claims_that_can_never_be_placed_are_still_denied() -> None:
    nine = {
        "devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": GPU, "count": 9}}]}
    }
    s = state("node-0000", extra=(template("nine", nine),))
    decision = decide(pod("p", ("nine",)), s, Usage(), Settings(), make_placer(s))
    assert not decision.allowed and decision.reason == "Unplaceable"
    assert "the most any node offers is 8" in decision.message


def test_new_allocations_keep_parsed_devices_and_change_the_answer() -> None:
    s = state()
    placer = make_placer(s)
    claims = [_claim_of(s, "one")]
    before = placer.index()
    assert placer.place(claims).node == "node-0000"
    s.upsert(busy_claim("node-0000"))
    after = placer.index()
    assert after is not before and after.slices is before.slices  # not parsed again
    assert after.allocated != before.allocated
    assert placer.place(claims).node == "node-0001"
    assert placer.place(claims) == make_placer(s).place(claims)


def _claim_of(s: ClusterState, template_name: str) -> Any:
    return expand_pod_claims(pod("p", (template_name,)), s, "Pod team-a/p")[0]


def test_more_claims_than_any_node_has_devices_is_unplaceable_without_searching() -> None:
    # Nine one-GPU claims, 8 GPUs per node, some busy: the per-class count answers for
    # every node, allocated or not; a search would try 8! orders before giving up.
    s = state("node-0000")
    obj = pod("p", ("one",))
    obj["spec"]["resourceClaims"] = [
        {"name": f"gpu-{i}", "resourceClaimTemplateName": "one"} for i in range(9)
    ]
    claims = expand_pod_claims(obj, s, "Pod team-a/p")
    placement = make_placer(s)(claims, None)
    assert not placement.ok and not placement.too_complex
    assert placement.reason.startswith("the claims fit no node together")
    assert placement.steps < 100


def test_chosen_flavor_busy_warns_even_when_other_nodes_are_free() -> None:
    # An unlabelled node (no flavor's) has free GPUs: the claims fit somewhere now, but
    # not on the nodes of either flavor, where the pod will be steered.
    free_node = node_objects(3)[5:]  # node-0002 and its slice
    s = state("node-0000", "node-0001", extra=tuple(free_node))
    decision = decide(pod("p", ("one",)), s, Usage(), Settings(), make_placer(s))
    assert decision.allowed and decision.charge is not None
    assert decision.charge.flavors == {"gpus": "fa"}
    warned = [w for w in decision.warnings if "cannot be placed on the devices free right now" in w]
    assert len(warned) == 1 and "of flavor fa" in warned[0]


def _partly_busy(node: str, devices: int, name: str) -> dict[str, Any]:
    obj = busy_claim(node, devices)
    obj["metadata"]["name"] = name
    return obj


@settings(max_examples=40, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from(["c0", "c1", "c2"]),
            st.sampled_from(["node-0000", "node-0001"]),
            st.integers(0, 8),
        ),
        max_size=8,
    )
)
def test_a_placer_kept_across_claim_changes_answers_as_a_fresh_one(
    changes: list[tuple[str, str, int]],
) -> None:
    s = state()
    placer = make_placer(s)
    claims = [_claim_of(s, "one")]
    many = [_claim_of(s, "many")]
    for name, node, devices in changes:
        if devices:
            s.upsert(_partly_busy(node, devices, name))
        else:
            s.remove("ResourceClaim", "other", name)
        fresh = make_placer(s)
        for which in (claims, many):
            assert placer.place(which) == fresh.place(which)
            assert placer(which, {"pool": "b"}) == fresh(which, {"pool": "b"})


def test_a_claim_change_keeps_what_was_derived_for_other_nodes() -> None:
    s = state()
    placer = make_placer(s)
    claims = [_claim_of(s, "one")]
    placer.place(claims, node="node-0001")
    placer.place(claims, node="node-0000")
    before = placer.index()
    s.upsert(busy_claim("node-0000"))
    after = placer.index()
    assert after.views["node-0001"] is before.views["node-0001"]
    assert after.views["node-0000"] is not before.views["node-0000"]
    assert placer.place(claims).node == "node-0001"
