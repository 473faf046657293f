"""CachedPlacer: one placement per claims and node labels until what placement reads changes."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from quota.claims import expand_pod_claims
from tests.webhook.builders import NAMESPACE, cluster_state, node_objects, pod
from webhook.placementcache import CachedPlacer


@dataclass(frozen=True)
class PlacementResult:
    ok: bool
    reason: str = ""


def test_cached_placer_reuses_answers_until_placement_inputs_change() -> None:
    calls: list[Any] = []

    def placer(claims: Any, labels: Any) -> Any:
        calls.append((len(claims), labels))
        return PlacementResult(ok=len(calls) == 1, reason=f"call {len(calls)}")

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
