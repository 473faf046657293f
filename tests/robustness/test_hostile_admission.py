"""The hostile pods of issue 10 through the webhook app, with the real placer."""

from __future__ import annotations

import base64
from typing import Any

import jsonpatch
import orjson
import pytest

from quota.placement import make_placer
from quota.settings import Settings
from tests.quota.queue_builders import scenario_objects
from tests.robustness.hostile import (
    GPU,
    cel_spec,
    first_available_spec,
    nested_bind_equality,
    node_objects,
    nothing_matches_request,
    pod,
    template,
    unsatisfiable_constraint_spec,
)
from tests.webhook.builders import AppClient, FakeBackend, review
from webhook.admission.placementcache import CachedPlacer
from webhook.edge.app import create_app
from webhook.ledger.memory import MemoryLedger
from webhook.store.clusterstate import ClusterState

SCENARIO: dict[str, Any] = {
    "queues": [{"name": "a", "classes": {"gpus": [GPU]}, "groups": [{"default": {"gpus": 64}}]}],
    "localQueues": {"team-a/default": "a"},
}
TEMPLATES = {
    "nope": first_available_spec(3, 8, nothing_matches_request()),
    "explode": unsatisfiable_constraint_spec(),
    "bind": cel_spec(nested_bind_equality()),
    "fine": first_available_spec(3, 8),
}


def client(mode: str) -> AppClient:
    objects = scenario_objects(SCENARIO) + node_objects(20)
    objects += [template(name, spec) for name, spec in TEMPLATES.items()]
    backend = FakeBackend(ClusterState(objects))
    settings = Settings(placement=mode)
    placer = CachedPlacer(make_placer(backend.state), backend.state)
    return AppClient(create_app(backend, MemoryLedger(backend.state, settings), settings, placer))


def validate(c: AppClient, name: str, *templates: str) -> dict[str, Any]:
    """What the API server does for a create: /mutate, apply its patch, then /validate."""
    obj = pod(name, templates)
    answer = c.post("/mutate", content=orjson.dumps(review(obj)))
    assert answer.status_code == 200
    mutated = answer.json()["response"]
    if not mutated["allowed"]:
        return mutated
    if "patch" in mutated:
        obj = jsonpatch.apply_patch(obj, orjson.loads(base64.b64decode(mutated["patch"])))
    answer = c.post("/validate", content=orjson.dumps(review(obj)))
    assert answer.status_code == 200
    return answer.json()["response"]


def test_request_nothing_matches_is_unplaceable_not_a_hang() -> None:
    answer = validate(client("Enforce"), "p", "nope")
    assert not answer["allowed"]
    assert answer["status"]["reason"] == "Unplaceable"
    assert answer["status"]["message"] == (
        "pod team-a/p: claims cannot be placed on any node: request nope of claim nope: "
        "needs 1 device of class gpu.example.com; no node offers any"
    )


@pytest.mark.parametrize("name", ["explode", "bind"])
def test_too_complex_claims_are_denied_with_how_to_simplify(name: str) -> None:
    answer = validate(client("Enforce"), "p", name)
    assert not answer["allowed"]
    assert (answer["status"]["code"], answer["status"]["reason"]) == (403, "TooComplex")
    assert answer["status"]["message"].startswith("pod team-a/p: claims too complex to check: ")


@pytest.mark.parametrize("name", ["explode", "bind"])
def test_too_complex_claims_are_a_warning_under_warn(name: str) -> None:
    answer = validate(client("Warn"), "p", name)
    assert answer["allowed"]
    assert any("too complex to check" in w for w in answer.get("warnings", []))


def test_ordinary_pod_is_admitted_next_to_hostile_ones() -> None:
    c = client("Enforce")
    for name in ("nope", "explode", "bind"):
        assert not validate(c, f"hostile-{name}", name)["allowed"]
    assert validate(c, "ordinary", "fine")["allowed"]
