"""The admission decision: scenario tables (fixtures/queues), placement and edge cases."""

from __future__ import annotations

import copy
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest
import yaml

from quota.charge import CHARGE_ANNOTATION, Charge
from quota.claims import PodClaim
from quota.decision import decide
from quota.errors import ObjectRef
from quota.livepods import usage_from_pods
from quota.placement import Placement
from quota.settings import Settings
from quota.usage import Usage
from quota.verdict import Decision, Verdict
from tests.quota.queue_builders import scenario_objects, submission_object
from webhook.store.clusterstate import ClusterState

FIXTURES = Path(__file__).parent / "fixtures" / "queues"
# The fixture tables give the answer as the webhook's status code.
VERDICT_OF_CODE = {200: Verdict.ADMITTED, 403: Verdict.DENIED, 400: Verdict.INVALID}


def _scenarios() -> list[Any]:
    params = []
    for path in sorted(FIXTURES.glob("*.yaml")):
        for scenario in yaml.safe_load(path.read_text(encoding="utf-8"))["scenarios"]:
            params.append(pytest.param(scenario, id=f"{path.stem}/{scenario['id']}"))
    return params


def _check(decision: Decision, expect: Mapping[str, Any], where: str) -> None:
    assert decision.allowed is expect["allowed"], f"{where}: {decision}"
    if "reason" in expect:
        assert decision.reason == expect["reason"], where
    if "code" in expect:
        assert decision.verdict is VERDICT_OF_CODE[expect["code"]], where
    if "message" in expect:
        assert decision.message == expect["message"], where
    for text in expect.get("contains", ()):
        assert text in decision.message, f"{where}: {decision.message}"
    for text in expect.get("warnings_contain", ()):
        assert any(text in w for w in decision.warnings), f"{where}: {decision.warnings}"
    if "borrowing" in expect:
        borrows = any("borrows quota from cohort" in w for w in decision.warnings)
        assert borrows is expect["borrowing"], f"{where}: {decision.warnings}"
    if "charge" in expect:
        assert expect["charge"] is None and decision.charge is None, where
    charge = decision.charge
    if "flavors" in expect:
        assert charge is not None, where
        for resource, flavor in expect["flavors"].items():
            assert charge.flavors[resource] == flavor, f"{where}: {charge.flavors}"
    if "usage" in expect:
        assert charge is not None and dict(charge.per_pod) == expect["usage"], f"{where}: {charge}"
    if "shared_claims" in expect:
        assert charge is not None, where
        assert {k: dict(v) for k, v in charge.shared_claims.items()} == expect["shared_claims"]
    if "node_selector" in expect:
        assert dict(decision.node_selector) == expect["node_selector"], where
    if not decision.allowed:
        assert decision.charge is None and decision.verdict in (Verdict.INVALID, Verdict.DENIED), (
            where
        )
        assert decision.message and decision.message[0].islower(), where
        assert not decision.message.endswith("."), where


def _run(scenario: Mapping[str, Any]) -> list[Decision]:
    objects = scenario_objects(scenario)
    state = ClusterState(objects)
    settings = Settings.from_mapping(scenario.get("settings"))
    usage = usage_from_pods(state, settings, time.time())
    decisions = []
    for sub in scenario["submit"]:
        obj, _ = submission_object(sub)
        before = copy.deepcopy(obj)
        decision = decide(obj, state, usage, settings)
        assert obj == before, "decide must not mutate its input"
        assert decide(obj, state, usage.copy(), settings) == decision, "not deterministic"
        _check(decision, sub["expect"], f"{scenario['id']}/{sub['name']}")
        if decision.allowed and decision.charge is not None:
            usage.add(f"{sub.get('ns', 'team-a')}/{sub['name']}", decision.charge)
        decisions.append(decision)
    return decisions


@pytest.mark.parametrize("scenario", _scenarios())
def test_scenario(scenario: Mapping[str, Any]) -> None:
    _run(scenario)


# --- placement, with a fake placer -------------------------------------------------------


class FakePlacer:
    """Places claims only on nodes whose labels include `pool` in `pools`."""

    def __init__(self, pools: set[str], anywhere: bool = True) -> None:
        self.pools = pools
        self.anywhere = anywhere
        self.calls: list[tuple[tuple[str, ...], Mapping[str, str] | None]] = []

    def __call__(self, claims: Sequence[PodClaim], labels: Mapping[str, str] | None) -> Placement:
        self.calls.append((tuple(c.entry for c in claims), labels))
        if labels is None:
            if self.anywhere:
                return Placement(True, node="node-1")
            return Placement(
                False, reason="request r0 of claim devices: needs 9 devices, at most 8"
            )
        if labels.get("pool") in self.pools:
            return Placement(True, node=f"node-{labels['pool']}")
        return Placement(False, reason="no node has enough free devices")


PLACEMENT_SCENARIO = {
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


def _placement_setup(
    placement: str = "Enforce",
) -> tuple[dict[str, Any], ClusterState, Settings]:
    state = ClusterState(scenario_objects(PLACEMENT_SCENARIO))
    pod, _ = submission_object(PLACEMENT_SCENARIO["submit"][0])
    return pod, state, Settings(placement=placement)


def test_flavor_kept_only_where_claims_can_be_placed() -> None:
    pod, state, settings = _placement_setup()
    placer = FakePlacer({"spot"})
    decision = decide(pod, state, Usage(), settings, placer)
    assert decision.allowed
    assert decision.charge is not None and decision.charge.flavors == {"gpus": "spot"}
    assert decision.node_selector == {"pool": "spot"}
    assert (("devices",), {"pool": "on-demand"}) in placer.calls


def test_no_placeable_flavor_denies_with_placement_reason() -> None:
    pod, state, settings = _placement_setup()
    decision = decide(pod, state, Usage(), settings, FakePlacer(set()))
    assert not decision.allowed and decision.reason == "QuotaExceeded"
    assert (
        "flavor spot: claims cannot be placed on nodes with labels pool=spot: "
        "no node has enough free devices" in decision.message
    )


def test_unplaceable_anywhere_denied() -> None:
    pod, state, settings = _placement_setup()
    decision = decide(pod, state, Usage(), settings, FakePlacer({"spot"}, anywhere=False))
    assert not decision.allowed
    assert decision.reason == "Unplaceable" and decision.verdict is Verdict.DENIED
    assert decision.message == (
        "pod team-a/p: claims cannot be placed on any node: "
        "request r0 of claim devices: needs 9 devices, at most 8"
    )


def test_placement_warn_turns_denial_into_warning() -> None:
    pod, state, settings = _placement_setup("Warn")
    decision = decide(pod, state, Usage(), settings, FakePlacer(set(), anywhere=False))
    assert decision.allowed
    assert decision.charge is not None and decision.charge.flavors == {"gpus": "on-demand"}
    assert any("cannot be placed on any node" in w for w in decision.warnings)
    assert any("flavor on-demand: claims cannot be placed" in w for w in decision.warnings)


INVALID_PLACEMENT = Placement(
    False,
    reason="claim devices, request r0: CEL expression: undeclared reference to 'x'",
    invalid=True,
)


@pytest.mark.parametrize("mode", ["Enforce", "Warn"])
def test_invalid_claims_found_by_the_placer_are_invalid_in_every_mode(mode: str) -> None:
    pod, state, settings = _placement_setup(mode)
    decision = decide(pod, state, Usage(), settings, lambda claims, labels: INVALID_PLACEMENT)
    assert not decision.allowed
    assert (decision.verdict, decision.reason) == (Verdict.INVALID, "InvalidObject")
    assert "undeclared reference" in decision.message


def test_placement_off_never_calls_the_placer() -> None:
    pod, state, settings = _placement_setup("Off")
    placer = FakePlacer(set(), anywhere=False)
    assert decide(pod, state, Usage(), settings, placer).allowed
    assert placer.calls == []


# --- operations, reservations, bad input ----------------------------------------------


SMALL = {
    "queues": [
        {
            "name": "a",
            "classes": {"gpus": ["gpu.example.com"]},
            "groups": [{"default": {"gpus": 1}}],
        }
    ],
    "localQueues": {"team-a/default": "a"},
    "submit": [{"name": "p", "devices": {"gpu.example.com": 1}}],
}


def _small() -> tuple[dict[str, Any], ClusterState]:
    pod, _ = submission_object(SMALL["submit"][0])
    return pod, ClusterState(scenario_objects(SMALL))


def test_decide_counts_every_holder_it_is_given() -> None:
    """Leaving the pod's own record out is the ledger's job, done by UID: a holder under the
    pod's own name (another pod of that name) still counts."""
    pod, state = _small()
    usage = Usage()
    first = decide(pod, state, usage, Settings())
    assert first.allowed and first.charge is not None
    usage.add("team-a/p", first.charge)
    assert not decide(pod, state, usage, Settings()).allowed


def test_update_of_existing_pod_over_quota_is_allowed_with_warning() -> None:
    pod, state = _small()
    usage = Usage()
    other = decide(
        {**pod, "metadata": {**pod["metadata"], "name": "other"}}, state, usage, Settings()
    )
    assert other.charge is not None
    usage.add("team-a/other", other.charge)
    assert not decide(pod, state, usage, Settings()).allowed
    update = decide(pod, state, usage, Settings(), operation="UPDATE")
    assert update.allowed and update.charge is not None
    assert any("update allowed" in w for w in update.warnings)


def test_deletes_are_not_checked_but_status_never_exempts_a_pod() -> None:
    pod, state = _small()
    full = Usage({"x": Charge("a", "team-a/default", {"gpus": "default"}, {"gpus": 1})})
    assert decide(pod, state, full, Settings(), operation="DELETE").allowed
    # the API server resets status and deletion fields on create: they decide nothing
    done = {**pod, "status": {"phase": "Succeeded"}}
    assert decide(done, state, full, Settings()).reason == "QuotaExceeded"
    deleting = {**pod, "metadata": {**pod["metadata"], "deletionTimestamp": "2026-01-01T00:00:00Z"}}
    assert decide(deleting, state, full, Settings()).reason == "QuotaExceeded"


@pytest.mark.parametrize(
    ("obj", "path"),
    [
        pytest.param({"kind": "Pod"}, "kind", id="no-metadata"),
        pytest.param(
            {
                "kind": "Pod",
                "metadata": {"name": "p", "namespace": "team-a"},
                "spec": {"resourceClaims": "x"},
            },
            "spec.resourceClaims",
            id="claims-not-a-list",
        ),
        pytest.param(
            {"kind": "Widget", "metadata": {"name": "w", "namespace": "team-a"}},
            "kind",
            id="unsupported-kind",
        ),
    ],
)
def test_malformed_object_is_an_invalid_decision(obj: dict[str, Any], path: str) -> None:
    _, state = _small()
    decision = decide(obj, state, Usage(), Settings())
    assert decision.verdict is Verdict.INVALID and decision.reason == "InvalidObject"
    assert path in decision.message


def test_admitted_charge_round_trips_through_the_annotation() -> None:
    pod, state = _small()
    decision = decide(pod, state, Usage(), Settings())
    assert decision.charge is not None
    text = decision.charge.to_annotation()
    assert Charge.from_annotation(text, "Pod team-a/p") == decision.charge
    stamped = {**pod, "metadata": {**pod["metadata"], "annotations": {CHARGE_ANNOTATION: text}}}
    state.upsert(stamped)
    rebuilt = usage_from_pods(state, Settings(), time.time())
    assert rebuilt.charge_of("team-a/p") == decision.charge
    assert decision.local_queue_name == "default"


def test_denial_of_a_generated_pod_names_its_owner() -> None:
    pod, state = _small()
    full = Usage({"x": Charge("a", "team-a/default", {"gpus": "default"}, {"gpus": 4})})
    metadata = {
        **pod["metadata"],
        "generateName": "par4-",
        "ownerReferences": [{"kind": "Job", "name": "par4", "controller": True}],
    }
    del metadata["name"]
    at_mutation = decide({**pod, "metadata": metadata}, state, full, Settings())
    assert at_mutation.message.startswith("pod team-a/par4-<generated> of Job team-a/par4 ")
    named = {**pod, "metadata": {**metadata, "name": "par4-x7k2p"}}
    at_validation = decide(named, state, full, Settings())
    assert at_validation.message.startswith(
        "pod team-a/par4-x7k2p (generated name) of Job team-a/par4 exceeds"
    )


# --- pod groups in a queueing ClusterQueue: the whole group must be able to fit -----------


def _group_member(total: str, devices: int = 1) -> tuple[dict[str, Any], ClusterState]:
    """Pod g-0 of group team-a/g (annotated `total`) in queue a: nominal 1 of 2 GPUs in cohort
    lab, whose other member b lends its 1; a queues (`whenFull: Queue`)."""
    scenario = {
        "queues": [
            {
                "name": name,
                "cohort": "lab",
                "classes": {"gpus": [GPU]},
                "groups": [{"default": {"gpus": 1}}],
            }
            for name in ("a", "b")
        ],
        "localQueues": {"team-a/default": "a"},
    }
    objects = scenario_objects(scenario)
    (queue_a,) = [
        o for o in objects if o["kind"] == "ClusterQueue" and o["metadata"]["name"] == "a"
    ]
    queue_a["spec"]["whenFull"] = "Queue"
    obj, extra = submission_object({"name": "g-0", "devices": {GPU: devices}})
    obj["metadata"]["labels"] = {"draquota.io/pod-group-name": "g"}
    obj["metadata"]["annotations"] = {"draquota.io/pod-group-total-count": total}
    return obj, ClusterState([*objects, *extra])


GPU = "gpu.example.com"


def test_a_group_member_is_denied_at_create_when_the_whole_group_could_never_fit() -> None:
    obj, state = _group_member("3")
    decision = decide(obj, state, Usage(), Settings())
    assert decision.verdict is Verdict.DENIED and decision.reason == "QuotaExceeded"
    assert decision.message == (
        'pod team-a/g-0: pod group team-a/g of 3 pods exceeds quota of ClusterQueue "a" '
        "(LocalQueue team-a/default): insufficient quota for gpus (DeviceClass gpu.example.com) "
        "in flavor default, 3 pods x 1 = 3 > maximum capacity 2 (nominal 1, cohort lab can lend "
        "at most 1)"
    )


@pytest.mark.parametrize(
    "total",
    [
        pytest.param("2", id="the-group-fits-what-the-cohort-may-lend"),
        pytest.param("lots", id="no-count-the-controller-says-why-it-cannot-start"),
        pytest.param("1", id="a-group-of-one"),
    ],
)
def test_a_group_member_waits_when_its_group_could_fit_or_has_no_valid_count(total: str) -> None:
    obj, state = _group_member(total)
    decision = decide(obj, state, Usage(), Settings())
    assert decision.allowed and decision.queued, decision.message


def test_a_group_member_whose_own_pod_could_never_fit_is_denied_for_its_own_request() -> None:
    obj, state = _group_member("lots", devices=3)
    decision = decide(obj, state, Usage(), Settings())
    assert not decision.allowed
    assert "request > maximum capacity (3 > 2)" in decision.message


@pytest.mark.parametrize("kind", ["Pod", "Job"])
def test_a_decision_missing_claims_lists_every_one_it_lacks(kind: str) -> None:
    pod, template = submission_object(
        {"name": "p", "kind": kind, "devices": {"gpu.example.com": 1}, "shared": ["b", "a"]}
    )
    state = ClusterState([*scenario_objects(PLACEMENT_SCENARIO), *template])
    decision = decide(pod, state, Usage(), Settings())
    assert (decision.verdict, decision.reason) == (Verdict.DENIED, "ClaimNotFound")
    assert "ResourceClaim team-a/b not found" in decision.message  # the first entry missing
    # the template the pod names is in the view: only the shared claims are missing
    assert decision.missing == (
        ObjectRef("ResourceClaim", "team-a", "a"),
        ObjectRef("ResourceClaim", "team-a", "b"),
    )


@pytest.mark.parametrize(
    ("submission", "reason"),
    [
        ({"name": "p", "devices": {"gpu.example.com": 9}}, "QuotaExceeded"),
        ({"name": "p", "devices": {"gpu.example.com": 1}, "queue": "nope"}, "LocalQueueNotFound"),
    ],
    ids=["over-quota", "local-queue-not-found"],
)
def test_a_denial_for_anything_but_missing_claims_lists_nothing_missing(
    submission: dict[str, Any], reason: str
) -> None:
    pod, template = submission_object(submission)
    state = ClusterState([*scenario_objects(PLACEMENT_SCENARIO), *template])
    decision = decide(pod, state, Usage(), Settings())
    assert (decision.allowed, decision.reason) == (False, reason)
    assert decision.missing == ()
