"""Work done per admission request: one decision per /validate, on one view of the cluster,
each claim parsed once."""

from __future__ import annotations

import base64
import gc
from typing import Any

import jsonpatch
import orjson
import pytest

from quota import claims as claims_module
from quota.cluster import ClusterView
from quota.placement import make_placer
from quota.settings import Settings
from tests.webhook.builders import (
    AppClient,
    FakeBackend,
    cluster_objects,
    node_objects,
    pod,
    review,
)
from webhook.admission import admit as admit_module
from webhook.admission.placementcache import CachedPlacer
from webhook.edge.app import create_app
from webhook.ledger.memory import MemoryLedger
from webhook.store.clusterstate import ClusterState


def _template(name: str) -> dict[str, Any]:
    template = next(o for o in cluster_objects() if o["kind"] == "ResourceClaimTemplate")
    return {**template, "metadata": {"name": name, "namespace": "team-a"}}


def test_a_validate_prepares_and_concludes_once_on_one_view_and_parses_each_claim_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    objects = [
        *cluster_objects(gpus=8),
        *node_objects(2),
        _template("fresh-a"),
        _template("fresh-b"),
    ]
    state = ClusterState(objects)
    backend = FakeBackend(state)
    placer = CachedPlacer(make_placer(state), state)
    client = AppClient(create_app(backend, MemoryLedger(state, Settings()), Settings(), placer))
    obj = pod("p", templates=("fresh-a", "fresh-b"))
    mutated = client.post("/mutate", content=orjson.dumps(review(obj))).json()["response"]
    obj = jsonpatch.apply_patch(obj, orjson.loads(base64.b64decode(mutated["patch"])))
    obj["metadata"]["uid"] = "uid-p"

    decisions: list[str] = []
    real_prepare, real_conclude = admit_module.prepare, admit_module.conclude

    def counting_prepare(*args: Any, **kwargs: Any) -> Any:
        decisions.append("prepare")
        prepared_on.append(args[1])
        return real_prepare(*args, **kwargs)

    def counting_conclude(*args: Any, **kwargs: Any) -> Any:
        decisions.append("conclude")
        return real_conclude(*args, **kwargs)

    prepared_on: list[Any] = []
    views: list[ClusterView] = []
    real_snapshot = state.snapshot

    def counting_snapshot() -> ClusterView:
        views.append(real_snapshot())
        return views[-1]

    parsed: list[str] = []
    real_parse = claims_module.claim_spec_of

    def counting_parse(obj: Any) -> Any:
        parsed.append(obj["metadata"]["name"])
        return real_parse(obj)

    monkeypatch.setattr(admit_module, "prepare", counting_prepare)
    monkeypatch.setattr(admit_module, "conclude", counting_conclude)
    monkeypatch.setattr(claims_module, "claim_spec_of", counting_parse)
    for name in ("fresh-a", "fresh-b"):  # new objects: nothing parsed before this request
        state.upsert(_template(name))
    monkeypatch.setattr(state, "snapshot", counting_snapshot)
    answer = client.post("/validate", content=orjson.dumps(review(obj))).json()["response"]
    assert answer["allowed"], answer
    assert decisions == ["prepare", "conclude"]
    assert len(views) == 1 and prepared_on == views  # one frozen view, handed to the decision
    assert sorted(parsed) == ["fresh-a", "fresh-b"]


def _live_views(state: ClusterState) -> list[ClusterView]:
    gc.collect()
    return [o for o in gc.get_objects() if isinstance(o, ClusterView) and o.source is state]


def test_nothing_kept_between_requests_holds_an_older_view_of_the_cluster() -> None:
    """A view kept by a cache would keep every object of its time alive as the store moves
    on (each kind is a persistent map): only the store's current view may outlive a request."""
    state = ClusterState([*cluster_objects(gpus=8), *node_objects(2)])
    placer = CachedPlacer(make_placer(state), state)
    app = create_app(FakeBackend(state), MemoryLedger(state, Settings()), Settings(), placer)
    client = AppClient(app)
    for i in range(4):
        obj = pod(f"p-{i}")
        mutated = client.post("/mutate", content=orjson.dumps(review(obj))).json()["response"]
        obj = jsonpatch.apply_patch(obj, orjson.loads(base64.b64decode(mutated["patch"])))
        obj["metadata"]["uid"] = f"uid-{i}"
        answer = client.post("/validate", content=orjson.dumps(review(obj))).json()["response"]
        assert answer["allowed"], answer
        state.upsert({**obj, "spec": {**obj["spec"], "nodeName": "node-1"}})  # the pod appears
    assert len(placer.kept) and len(app.state.admission.prepared.kept)  # caches in use
    assert _live_views(state) == [state.snapshot()]  # and one view alive: the store's own
