"""CachedPlacer: one placement per claims and node labels until what placement reads changes."""

from __future__ import annotations

from typing import Any

from quota.claims import expand_pod_claims
from quota.decision import decide
from quota.placement import Placement, make_placer
from quota.settings import Settings
from quota.usage import Usage
from tests.quota.test_placement_busy import state as busy_cluster
from tests.robustness.hostile import pod as hostile_pod
from tests.webhook.builders import NAMESPACE, cluster_state, node_objects, pod
from webhook.admission.placementcache import CachedPlacer


def test_cached_placer_reuses_answers_until_placement_inputs_change() -> None:
    calls: list[Any] = []

    def placer(claims: Any, labels: Any) -> Any:
        calls.append((len(claims), labels))
        return Placement(ok=len(calls) == 1, reason=f"call {len(calls)}")

    state = cluster_state()
    cached = CachedPlacer(placer, state)
    claims = expand_pod_claims(pod(), state)
    first = cached(claims, None)
    assert cached(claims, None) is first and len(calls) == 1
    assert cached(claims, {"zone": "a"}) is not first and len(calls) == 2
    state.upsert(node_objects(1)[1])  # a new ResourceSlice
    assert cached(claims, None).reason == "call 3"
    usage_only = {**pod("other"), "metadata": {"name": "other", "namespace": NAMESPACE}}
    state.upsert(usage_only)  # pods do not change placements
    cached(claims, None)
    assert len(calls) == 3


def test_cached_placer_keeps_the_typed_outcome_of_the_placer_it_wraps() -> None:
    cluster = busy_cluster("node-0000", "node-0001")  # every device allocated: not now
    cached = CachedPlacer(make_placer(cluster), cluster)
    workload = hostile_pod("p", ("one",))
    claims = expand_pod_claims(workload, cluster)
    first = cached(claims, None)
    assert isinstance(first, Placement) and (first.ok, first.now) == (True, False)
    assert cached(claims, None) is first  # kept as the placer answered it
    # the decision reads the outcome from the kept answer: admitted, with the warning
    decision = decide(workload, cluster, Usage(), Settings(), cached)
    assert decision.allowed
    assert any("cannot be placed on the devices free right now" in w for w in decision.warnings)
