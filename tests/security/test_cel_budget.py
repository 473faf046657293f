"""Issue 29, attack 4: a pod template of 16 requests x 4 selectors `device.driver in [300
string literals]` once cost about 0.5 s of CPU per decision. Every decision now stays within
the work budget (counted, never timed) and the pod is answered; an ordinary pod decided right
after is unaffected."""

from __future__ import annotations

from typing import Any

from quota.allocator.budget import (
    COMPILE_COST_PER_CHARACTER,
    DEFAULT_CEL_COST,
    DEFAULT_SEARCH_STEPS,
)
from quota.allocator.cel import EVALUATION_BASE_COST, compile_selector
from quota.allocator.celcost import COMPARE_COST
from quota.claims import PodClaim
from quota.claimspec import parse_claim_spec
from quota.devices import claim_devices
from quota.placement import make_placer
from tests.robustness.hostile import GPU, NAMESPACE, node_objects
from webhook.store.clusterstate import ClusterState


def _flood(pod: int, literals: int = 300) -> dict[str, Any]:
    """16 requests x 4 selectors, each a list of `literals` driver names, distinct per pod,
    request and selector (nothing is remembered from one decision to the next)."""

    def selector(r: int, s: int) -> dict[str, Any]:
        names = ",".join(f'"d{pod}-{r}-{s}-{i}.example.com"' for i in range(literals))
        return {"cel": {"expression": f"device.driver in [{names}]"}}

    requests = [
        {
            "name": f"r{r}",
            "exactly": {
                "deviceClassName": GPU,
                "selectors": [selector(r, s) for s in range(4)],
            },
        }
        for r in range(16)
    ]
    return {"devices": {"requests": requests}}


def _claim(name: str, spec: dict[str, Any]) -> PodClaim:
    parsed = parse_claim_spec(spec, "v1", f"ResourceClaimTemplate {NAMESPACE}/{name}")
    return PodClaim(name, NAMESPACE, parsed, claim_devices(parsed), template=name)


def test_list_literal_selector_is_priced_by_its_size() -> None:
    short = compile_selector('device.driver in ["a.example.com"]').static_cost
    names = ",".join(f'"d{i}.example.com"' for i in range(300))
    long = compile_selector(f"device.driver in [{names}]").static_cost
    # every literal is built and compared on each evaluation: priced per literal
    assert long >= 300 * COMPARE_COST and long > 100 * short


def test_cel_list_literal_flood_stays_within_the_budget_and_leaves_others_unaffected() -> None:
    state = ClusterState(node_objects(nodes=20))
    placer = make_placer(state)
    one_gpu = {"name": "g", "exactly": {"deviceClassName": GPU}}
    ordinary = _claim("one", {"devices": {"requests": [one_gpu]}})
    before = placer([ordinary], None)
    for pod in range(3):
        flood = placer([_claim(f"flood-{pod}", _flood(pod))], None)
        # answered: too complex to check (or decided), never left running
        assert flood.too_complex and "CEL selectors cost more than" in flood.reason
        longest = max(len(r) for r in str(_flood(pod)).split("'expression': ")[1:])
        assert flood.cost <= DEFAULT_CEL_COST + COMPILE_COST_PER_CHARACTER * longest
        assert flood.steps <= DEFAULT_SEARCH_STEPS
        after = placer([ordinary], None)
        assert after == before and after.ok


def test_one_flood_selector_alone_is_evaluated_on_every_gpu_within_the_budget() -> None:
    # One request, one selector of 300 literals: cheap enough to answer, and its price
    # per evaluation (list built, 300 dynamic comparisons) is what the budget counts.
    spec = _flood(99)
    spec["devices"]["requests"] = spec["devices"]["requests"][:1]
    spec["devices"]["requests"][0]["exactly"]["selectors"] = spec["devices"]["requests"][0][
        "exactly"
    ]["selectors"][:1]
    placement = make_placer(ClusterState(node_objects(nodes=2)))([_claim("one-flood", spec)])
    assert not placement.ok and not placement.too_complex and not placement.invalid
    expression = spec["devices"]["requests"][0]["exactly"]["selectors"][0]["cel"]["expression"]
    compiled = COMPILE_COST_PER_CHARACTER * len(expression)
    per_evaluation = EVALUATION_BASE_COST + 300 * COMPARE_COST  # at least
    assert placement.cost >= compiled + 8 * per_evaluation  # every GPU of the node was asked
    assert placement.cost <= DEFAULT_CEL_COST
