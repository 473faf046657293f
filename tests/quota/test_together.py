"""A pod group decided in memory as the ledger would decide its pods one after another."""

from __future__ import annotations

from typing import Any

from quota.decision import prepare
from quota.settings import Settings
from quota.together import Member, conclude_in_turn
from quota.usage import Usage
from tests.quota.queue_builders import scenario_objects, submission_object
from webhook.store.clusterstate import ClusterState

GPU = "gpu.example.com"
SUBJECT = "pod group team-a/trio"


def _trio(nominal: int) -> list[Member]:
    """Three one-GPU pods of group trio in queue a (`nominal` GPUs, no cohort)."""
    scenario: dict[str, Any] = {
        "queues": [
            {"name": "a", "classes": {"gpus": [GPU]}, "groups": [{"default": {"gpus": nominal}}]}
        ],
        "localQueues": {"team-a/default": "a"},
    }
    objects = scenario_objects(scenario)
    pods = [submission_object({"name": f"trio-{i}", "devices": {GPU: 1}}) for i in range(3)]
    state = ClusterState([*objects, *(t for _, extra in pods for t in extra)])
    members = [
        Member(f"uid-{i}", f"team-a/trio-{i}", prepare(obj, state, Settings()))
        for i, (obj, _) in enumerate(pods)
    ]
    return members


def test_a_group_fits_when_every_pod_fits_after_the_ones_before_it() -> None:
    members = _trio(3)
    decision = conclude_in_turn(members, Usage(), SUBJECT)
    assert decision.allowed and decision.charge is not None


def test_a_group_that_does_not_fit_says_so_in_the_groups_numbers() -> None:
    members = _trio(3)
    one = conclude_in_turn(members[:1], Usage(), SUBJECT).charge
    assert one is not None
    usage = Usage({"team-a/other": one})  # another pod of the queue holds 1
    decision = conclude_in_turn(members, usage, SUBJECT)
    assert not decision.allowed
    assert "1 more needed (requested 3, in use 1 of nominal 3)" in decision.shortfall


def test_what_the_groups_own_pods_hold_already_counts_once() -> None:
    members = _trio(3)
    earlier = conclude_in_turn(members[:1], Usage(), SUBJECT).charge
    assert earlier is not None
    # a pass that stopped half way: trio-0 recorded, trio-1 ungated and charged by name
    usage = Usage({"uid-0": earlier, "team-a/trio-1": earlier})
    assert conclude_in_turn(members, usage, SUBJECT).allowed


def test_a_group_over_what_its_queue_could_ever_hold_can_never_fit() -> None:
    members = _trio(2)
    decision = conclude_in_turn(members, Usage(), SUBJECT)
    assert not decision.allowed
    assert decision.shortfall.startswith(f"{SUBJECT} can never fit: insufficient quota for gpus")
    assert "request > maximum capacity (3 > 2) (nominal 2)" in decision.shortfall
