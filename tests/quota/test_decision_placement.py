"""Placement outcomes in the decision: never placeable, not placeable now, too complex."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import pytest

from quota.claims import PodClaim
from quota.decision import decide
from quota.placement import ClusterPlacer, Placement, make_placer
from quota.settings import Settings
from quota.usage import Usage
from quota.verdict import Verdict
from tests.quota.queue_builders import scenario_objects, submission_object
from tests.quota.test_placement import cluster as placement_cluster
from tests.quota.test_placement import gpus
from webhook.store.clusterstate import ClusterState

SCENARIO = {
    "flavors": [
        {"name": "on-demand", "nodeLabels": {"pool": "on-demand"}},
        {"name": "spot", "nodeLabels": {"pool": "spot"}},
    ],
    "queues": [
        {
            "name": "a",
            "classes": {"gpus": ["gpu.example.com"]},
            "groups": [{"on-demand": {"gpus": 4}, "spot": {"gpus": 4}}],
        }
    ],
    "localQueues": {"team-a/default": "a"},
    "submit": [{"name": "p", "devices": {"gpu.example.com": 1}}],
}
BUSY = "request gpu of claim devices: needs 1 device of class gpu.example.com; no node offers any"
COMPLEX = (
    "too complex to check: the device search took more than 10000 steps: use fewer "
    "firstAvailable alternatives"
)


def answer(ok: bool, reason: str = "", **fields: Any) -> Placement:
    """A placer's answer: `ok`, why, and any other field of `Placement`."""
    return Placement(ok, reason=reason, **fields)


class Placer:
    """Answers per node label `pool` (None: the cluster-wide question)."""

    def __init__(self, answers: Mapping[str | None, Placement]) -> None:
        self.answers = answers

    def __call__(self, claims: Sequence[PodClaim], labels: Mapping[str, str] | None) -> Placement:
        return self.answers[None if labels is None else labels["pool"]]


def setup(mode: str = "Enforce") -> tuple[dict[str, Any], ClusterState, Settings]:
    pod, _ = submission_object(SCENARIO["submit"][0])
    return pod, ClusterState(scenario_objects(SCENARIO)), Settings(placement=mode)


def test_claims_placeable_only_once_devices_are_released_are_admitted_with_a_warning() -> None:
    pod, state, settings = setup()
    later = answer(True, BUSY, now=False)
    decision = decide(
        pod, state, Usage(), settings, Placer({None: later, "on-demand": later, "spot": later})
    )
    assert decision.allowed and decision.reason == "Admitted"
    assert (
        "pod team-a/p: claims cannot be placed on the devices free right now, the pod waits "
        f"until allocated devices are released: {BUSY}"
    ) in decision.warnings


def test_flavor_whose_nodes_can_host_the_pod_now_is_preferred() -> None:
    pod, state, settings = setup()
    answers = {
        None: answer(True, node="node-2"),
        "on-demand": answer(True, BUSY, now=False),
        "spot": answer(True, node="node-2"),
    }
    decision = decide(pod, state, Usage(), settings, Placer(answers))
    assert decision.allowed
    assert decision.charge is not None and decision.charge.flavors == {"gpus": "spot"}


def test_busy_flavor_still_chosen_when_no_flavor_fits_now() -> None:
    pod, state, settings = setup()
    later = answer(True, BUSY, now=False)
    decision = decide(
        pod, state, Usage(), settings, Placer({None: later, "on-demand": later, "spot": later})
    )
    assert decision.charge is not None and decision.charge.flavors == {"gpus": "on-demand"}


def test_too_complex_claims_are_denied_under_enforce_with_how_to_simplify() -> None:
    pod, state, settings = setup("Enforce")
    decision = decide(
        pod, state, Usage(), settings, Placer({None: answer(False, COMPLEX, too_complex=True)})
    )
    assert not decision.allowed
    assert (decision.verdict, decision.reason) == (Verdict.DENIED, "TooComplex")
    assert decision.message == f"pod team-a/p: claims {COMPLEX}"


def test_too_complex_claims_are_a_warning_under_warn() -> None:
    pod, state, settings = setup("Warn")
    complex_ = answer(False, COMPLEX, too_complex=True)
    answers = {None: complex_, "on-demand": complex_, "spot": complex_}
    decision = decide(pod, state, Usage(), settings, Placer(answers))
    assert decision.allowed
    assert f"pod team-a/p: claims {COMPLEX}" in decision.warnings


@pytest.mark.parametrize("mode", ["Enforce", "Warn"])
def test_too_complex_is_not_reported_as_unplaceable_or_invalid(mode: str) -> None:
    pod, state, settings = setup(mode)
    decision = decide(
        pod,
        state,
        Usage(),
        settings,
        Placer(
            {
                None: answer(False, COMPLEX, too_complex=True),
                "on-demand": answer(True),
                "spot": answer(True),
            }
        ),
    )
    assert decision.reason not in ("Unplaceable", "InvalidObject")
    assert decision.verdict is not Verdict.INVALID


def test_busy_warning_judges_the_nodes_of_the_chosen_flavor_not_the_whole_cluster() -> None:
    pod, state, settings = setup()
    later = answer(True, BUSY, now=False)
    # some node outside every flavor is free right now; the flavors' nodes are not
    answers = {None: answer(True, node="elsewhere"), "on-demand": later, "spot": later}
    decision = decide(pod, state, Usage(), settings, Placer(answers))
    assert decision.allowed and decision.charge is not None
    assert decision.charge.flavors == {"gpus": "on-demand"}
    assert (
        "pod team-a/p: claims cannot be placed on the devices free right now of flavor "
        "on-demand, the pod waits until allocated devices are released: nodes with labels "
        f"pool=on-demand: {BUSY}"
    ) in decision.warnings


def placement_objects() -> list[Any]:
    cluster = placement_cluster()
    return [obj for kind in cluster.kinds() for obj in cluster.list(kind)]


def test_a_decision_is_judged_on_one_view_while_the_cluster_changes() -> None:
    """Every placement question of a decision is asked of the view it started from: devices
    that go away meanwhile are not half seen (here, under Enforce, they would deny it)."""
    scenario = {
        **SCENARIO,
        "flavors": [
            {"name": "on-demand", "nodeLabels": {"zone": "a"}},
            {"name": "spot", "nodeLabels": {"zone": "b"}},
        ],
        "submit": [{"name": "p", "devices": {"gpu.example.com": 4}}],
    }
    pod, _ = submission_object(scenario["submit"][0])
    state = ClusterState([*scenario_objects(scenario), *placement_objects()])

    class Meddling(ClusterPlacer):
        def __call__(self, claims: Any, node_labels: Any = None, view: Any = None) -> Any:
            state.replace_kind("ResourceSlice", [gpus("node-1", ["pci-a"])])  # 1 GPU left
            return super().__call__(claims, node_labels, view)

    decision = decide(pod, state, Usage(), Settings(placement="Enforce"), Meddling(state))
    assert decision.allowed, decision.message
    assert decision.charge is not None and decision.charge.flavors == {"gpus": "on-demand"}
    later = decide(pod, state, Usage(), Settings(placement="Enforce"), make_placer(state))
    assert not later.allowed and "cannot be placed" in later.message  # the cluster now
