"""The charge record stamped on admitted pods."""

from __future__ import annotations

import dataclasses
import json

import pytest

from quota.charge import Charge, FlavorResource
from quota.errors import InvalidObject

CHARGE = Charge(
    cluster_queue="team-a",
    local_queue="team-a/user-queue",
    flavors={"gpus": "on-demand", "cpu": "default"},
    per_pod={"gpus": 2, "cpu": 1500},
    device_classes={"gpu.example.com": 3},
    shared_claims={"team-a/shared": {"gpus": 1}},
)


def test_annotation_is_compact_sorted_json_that_round_trips() -> None:
    text = CHARGE.to_annotation()
    assert " " not in text
    data = json.loads(text)
    assert list(data) == sorted(data)
    assert data["clusterQueue"] == "team-a" and data["localQueue"] == "team-a/user-queue"
    assert data["sharedClaims"] == {"team-a/shared": {"gpus": 1}}
    assert Charge.from_annotation(text, "Pod team-a/p") == CHARGE
    assert "reservation" not in data
    assert (
        json.loads(Charge("a", "ns/q", reservation="uid").to_annotation())["reservation"] == "uid"
    )


@pytest.mark.parametrize(
    "charge",
    [
        CHARGE,
        Charge("équipe", "ns/q", {"gpus": "défaut"}, {"gpus": 1}),  # escaped as json always did
        Charge("a", "ns/q", {"cpu": "f"}, {"cpu": 2**70}),  # beyond 64 bits: json writes it
        Charge("a", "ns/q", {"x\u0001y": "f"}, {"x\u0001y": -1}, reservation='q"uote\\'),
    ],
    ids=["plain", "non-ascii", "huge", "escapes"],
)
def test_the_annotation_text_is_the_same_as_ever(charge: Charge) -> None:
    """Equal charges give equal annotations across versions: pods admitted before keep theirs."""
    expected = json.dumps(charge.to_dict(), sort_keys=True, separators=(",", ":"))
    assert charge.to_annotation() == expected


def test_what_a_charge_derives_is_kept_read_only_and_follows_a_replaced_charge() -> None:
    usage = CHARGE.flavor_usage()
    assert CHARGE.flavor_usage() is usage and CHARGE.to_annotation() is CHARGE.to_annotation()
    with pytest.raises(TypeError):
        usage[FlavorResource("default", "cpu")] = 0  # type: ignore[index]
    with pytest.raises(TypeError):
        CHARGE.shared_flavor_usage()["team-a/shared"][FlavorResource("x", "y")] = 1  # type: ignore[index]
    bigger = dataclasses.replace(CHARGE, per_pod={"gpus": 5, "cpu": 1500})
    assert bigger.flavor_usage()[FlavorResource("on-demand", "gpus")] == 5
    assert json.loads(bigger.to_annotation())["usage"]["gpus"] == 5
    assert CHARGE.flavor_usage()[FlavorResource("on-demand", "gpus")] == 2


def test_flavor_usage_keys_by_flavor_and_resource() -> None:
    assert CHARGE.flavor_usage() == {
        FlavorResource("default", "cpu"): 1500,
        FlavorResource("on-demand", "gpus"): 2,
    }
    assert CHARGE.shared_flavor_usage() == {
        "team-a/shared": {FlavorResource("on-demand", "gpus"): 1}
    }


@pytest.mark.parametrize(
    ("text", "field"),
    [
        pytest.param("{oops", "", id="not-json"),
        pytest.param("[1]", "", id="not-an-object"),
        pytest.param('{"localQueue": "ns/q"}', "clusterQueue", id="no-queue"),
        pytest.param(
            '{"clusterQueue": "a", "localQueue": "q"}', "localQueue", id="local-not-namespaced"
        ),
        pytest.param(
            '{"clusterQueue": "a", "localQueue": "ns/q", "usage": {"gpus": -1}}',
            "usage.gpus",
            id="negative",
        ),
        pytest.param(
            '{"clusterQueue": "a", "localQueue": "ns/q", "usage": {"gpus": 1.5}}',
            "usage.gpus",
            id="fraction",
        ),
        pytest.param(
            '{"clusterQueue": "a", "localQueue": "ns/q", "usage": {"gpus": true}}',
            "usage.gpus",
            id="bool",
        ),
        pytest.param(
            '{"clusterQueue": "a", "localQueue": "ns/q", "flavors": {"gpus": 1}}',
            "flavors.gpus",
            id="flavor-not-string",
        ),
        pytest.param(
            '{"clusterQueue": "a", "localQueue": "ns/q", "sharedClaims": []}',
            "sharedClaims",
            id="shared-not-object",
        ),
    ],
)
def test_malformed_annotation_names_pod_and_field(text: str, field: str) -> None:
    with pytest.raises(InvalidObject) as err:
        Charge.from_annotation(text, "Pod team-a/p")
    assert err.value.obj == "Pod team-a/p"
    assert err.value.path.startswith("metadata.annotations[draquota.io/charge]")
    assert err.value.path.endswith(field)
