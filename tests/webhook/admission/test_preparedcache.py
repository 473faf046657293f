"""PreparedCache: pods that ask for the same share one preparation; each is still named."""

from __future__ import annotations

import copy
import dataclasses
from pathlib import Path
from typing import Any

import orjson
import pytest
import yaml

from quota.cluster import ClusterView
from quota.decision import Prepared, prepare
from quota.placement import make_placer
from quota.settings import Settings
from tests.webhook.builders import (
    FLAVOR_LABELS,
    NAMESPACE,
    TEMPLATE,
    FakeBackend,
    cluster_objects,
    node_objects,
    pod,
    review,
)
from webhook.admission import admit as admit_module
from webhook.admission.admit import Admission
from webhook.admission.placementcache import CachedPlacer
from webhook.admission.preparedcache import IDENTITY_FIELDS, PREPARE_KINDS, PreparedCache
from webhook.edge.review import parse_review
from webhook.ledger.memory import MemoryLedger
from webhook.store.clusterstate import ClusterState

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"


class Harness:
    """An Admission over the builders' cluster (2 nodes of 8 GPUs), counting preparations."""

    def __init__(
        self, monkeypatch: pytest.MonkeyPatch, settings: Settings | None = None, gpus: int = 8
    ) -> None:
        self.state = ClusterState([*cluster_objects(gpus=gpus), *node_objects(2)])
        self.settings = settings or Settings()
        placer = CachedPlacer(make_placer(self.state), self.state)
        ledger = MemoryLedger(self.state, self.settings)
        self.admission = Admission(FakeBackend(self.state), ledger, self.settings, placer)
        self.built = 0
        real = admit_module.prepare

        def counting(*args: Any, **kwargs: Any) -> Any:
            self.built += 1
            return real(*args, **kwargs)

        monkeypatch.setattr(admit_module, "prepare", counting)

    def mutate(self, obj: dict[str, Any]) -> Any:
        _, decision = self.admission.review(parse_review(orjson.dumps(review(obj))), True)
        return decision


def _identified(obj: dict[str, Any], suffix: str) -> dict[str, Any]:
    """The same pod under another identity: every field the cache leaves out of its key."""
    metadata = {
        **obj["metadata"],
        "name": f"other-{suffix}",
        "generateName": f"gen-{suffix}-",
        "uid": f"uid-{suffix}",
        "resourceVersion": suffix,
        "creationTimestamp": "2026-11-25T00:00:00Z",
        "generation": 7,
        "managedFields": [{"manager": suffix}],
        "ownerReferences": [
            {"apiVersion": "batch/v1", "kind": "Job", "name": suffix, "uid": suffix}
        ],
    }
    assert set(metadata) - set(obj["metadata"]) >= IDENTITY_FIELDS - {"name"}
    return {**obj, "metadata": metadata}


def test_pods_that_ask_alike_share_one_preparation_and_each_is_named(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    harness = Harness(monkeypatch)
    first, second = harness.mutate(pod("worker-1")), harness.mutate(pod("worker-2"))
    assert harness.built == 1
    assert first.allowed and second.allowed
    assert first.charge is second.charge  # one Charge object for the pods of a workload
    assert f"{NAMESPACE}/worker-1 " in first.message and "worker-2" not in first.message
    assert f"{NAMESPACE}/worker-2 " in second.message
    assert harness.admission.prepared.kept.hits == 1


@pytest.mark.parametrize(
    "variant",
    [
        pytest.param(lambda p: p["spec"].update(nodeSelector={"zone": "b"}), id="nodeSelector"),
        pytest.param(lambda p: p["metadata"].update(labels={"app": "x"}), id="labels"),
        pytest.param(lambda p: p["metadata"].update(annotations={"a": "b"}), id="annotations"),
        pytest.param(
            lambda p: p["spec"]["containers"][0]["resources"].update(requests={"cpu": "2"}),
            id="requests",
        ),
        pytest.param(
            lambda p: p["spec"]["resourceClaims"].append(
                {"name": "c1", "resourceClaimTemplateName": TEMPLATE}
            ),
            id="claims",
        ),
    ],
)
def test_anything_else_a_pod_says_is_prepared_for_that_pod(
    monkeypatch: pytest.MonkeyPatch, variant: Any
) -> None:
    harness = Harness(monkeypatch)
    harness.mutate(pod("worker-1"))
    changed = pod("worker-2")
    variant(changed)
    harness.mutate(changed)
    assert harness.built == 2


def test_the_identity_left_out_of_the_key_changes_no_preparation() -> None:
    """What the key leaves out must not matter to `prepare` (only to its messages)."""
    state = ClusterState([*cluster_objects(gpus=8), *node_objects(2)])
    placer = make_placer(state)
    job = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "train", "namespace": NAMESPACE},
        "spec": {"parallelism": 2, "template": {"spec": pod()["spec"]}},
    }
    for obj in (pod("worker-1"), job):
        original = prepare(obj, state, Settings(), placer)
        other = prepare(_identified(obj, "x"), state, Settings(), placer)
        assert isinstance(original, Prepared) and isinstance(other, Prepared)
        assert dataclasses.replace(other, workload=original.workload) == original


def _with_token_volume(obj: dict[str, Any], recorded_pod: str) -> dict[str, Any]:
    """`obj` with the service-account token volume and mount a real pod got from the API
    server's ServiceAccount admission (`kube-api-access-<random>`, recorded in user-view)."""
    source = next(
        p for p in recorded_pods() if p["metadata"]["name"] == recorded_pod
    )  # the volume exactly as the API server wrote it
    out = copy.deepcopy(obj)
    out["spec"]["volumes"] = copy.deepcopy(source["spec"]["volumes"])
    for container in out["spec"]["containers"]:
        container["volumeMounts"] = copy.deepcopy(source["spec"]["containers"][0]["volumeMounts"])
    return out


def recorded_pods() -> list[dict[str, Any]]:
    text = (FIXTURES / "user-view" / "admin" / "pods.yaml").read_text(encoding="utf-8")
    return [doc for doc in yaml.safe_load_all(text) if doc]


def test_pods_whose_token_volumes_differ_share_one_preparation(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Every pod of a real cluster has its own token volume name; a key holding it would
    never hit (each of the recorded pods tune-0 and tune-1 has its own)."""
    first = _with_token_volume(pod("worker-1"), "tune-0")
    second = _with_token_volume(pod("worker-2"), "tune-1")
    assert first["spec"]["volumes"][0]["name"] != second["spec"]["volumes"][0]["name"]
    harness = Harness(monkeypatch)
    assert harness.mutate(first).allowed and harness.mutate(second).allowed
    assert harness.built == 1
    assert harness.admission.prepared.kept.hits == 1


def test_the_volumes_left_out_of_the_key_change_no_preparation() -> None:
    """`prepare` reads no volume and no mount: with or without them it prepares the same."""
    state = ClusterState([*cluster_objects(gpus=8), *node_objects(2)])
    placer = make_placer(state)
    bare = pod("worker-1")
    mounted = _with_token_volume(bare, "tune-0")
    mounted["spec"]["initContainers"] = [
        {**copy.deepcopy(mounted["spec"]["containers"][0]), "name": "init"}
    ]
    bare["spec"]["initContainers"] = [
        {k: v for k, v in mounted["spec"]["initContainers"][0].items() if k != "volumeMounts"}
    ]
    original = prepare(bare, state, Settings(), placer)
    other = prepare(mounted, state, Settings(), placer)
    assert isinstance(original, Prepared) and isinstance(other, Prepared)
    assert dataclasses.replace(other, workload=original.workload) == original


def test_of_copies_every_field_but_the_workload() -> None:
    state = ClusterState([*cluster_objects(gpus=8), *node_objects(2)])
    first = prepare(pod("worker-1"), state, Settings())
    second = prepare(pod("worker-2"), state, Settings())
    assert isinstance(first, Prepared) and isinstance(second, Prepared)
    assert first.of(second.workload) == dataclasses.replace(first, workload=second.workload)


def test_a_change_to_what_prepare_reads_drops_what_was_kept(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    harness = Harness(monkeypatch)
    assert harness.mutate(pod("worker-1")).charge.per_pod == {"gpu": 1}
    template = copy.deepcopy(harness.state.get("ResourceClaimTemplate", NAMESPACE, TEMPLATE))
    assert template is not None
    template["spec"]["spec"]["devices"]["requests"][0]["exactly"]["count"] = 2
    harness.state.upsert(template)
    assert harness.mutate(pod("worker-2")).charge.per_pod == {"gpu": 2}
    assert harness.built == 2


def test_a_preparation_that_names_its_pod_in_a_warning_is_not_kept(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    harness = Harness(monkeypatch, Settings(placement="Warn"), gpus=32)
    huge = copy.deepcopy(harness.state.get("ResourceClaimTemplate", NAMESPACE, TEMPLATE))
    assert huge is not None
    huge["metadata"]["name"] = "sixteen"
    huge["spec"]["spec"]["devices"]["requests"][0]["exactly"]["count"] = 16  # 8 per node
    harness.state.upsert(huge)
    first = harness.mutate(pod("worker-1", templates=("sixteen",)))
    second = harness.mutate(pod("worker-2", templates=("sixteen",)))
    assert any("worker-1" in w for w in first.warnings), first.warnings
    assert any("worker-2" in w for w in second.warnings), second.warnings
    assert first.allowed and not any("worker-1" in w for w in second.warnings)
    assert harness.built == 2


class RecordingView(ClusterView):
    """A cluster view that notes every kind read from it (a decision reads its view only)."""

    read: set[str]

    def get(self, kind: str, namespace: str | None, name: str) -> Any:
        self.read.add(kind)
        return super().get(kind, namespace, name)

    def list(self, kind: str, namespace: str | None = None) -> Any:
        self.read.add(kind)
        return super().list(kind, namespace)


def test_prepare_reads_only_the_kinds_the_cache_follows() -> None:
    claim = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": "shared", "namespace": NAMESPACE},
        "spec": {
            "devices": {
                "requests": [
                    {"name": "gpu", "exactly": {"deviceClassName": "gpu.example.com", "count": 1}}
                ]
            }
        },
    }
    state = RecordingView.of([*cluster_objects(gpus=8), *node_objects(2), claim])
    state.read = set()
    shared = pod("worker-1", node_selector=dict(FLAVOR_LABELS))
    shared["spec"]["resourceClaims"].append({"name": "s", "resourceClaimName": "shared"})
    extended = pod("worker-2")
    extended["spec"]["containers"][0]["resources"]["limits"] = {"example.com/gpu": "1"}
    job = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "train", "namespace": NAMESPACE},
        "spec": {"parallelism": 2, "template": {"spec": pod()["spec"]}},
    }
    for obj in (pod(), shared, extended, job, pod(namespace="elsewhere")):
        prepare(obj, state, Settings(), make_placer(state))
    assert state.read, "nothing recorded: the recording state is not read"
    assert state.read <= set(PREPARE_KINDS), state.read - set(PREPARE_KINDS)


def test_the_cache_holds_at_most_its_entries_and_bytes_and_no_identity() -> None:
    state = ClusterState(cluster_objects(gpus=8))
    by_count, by_bytes = PreparedCache(state, size=4), PreparedCache(state, budget=4096)
    for i in range(20):
        obj = pod(f"worker-{i}", labels={"batch": str(i)})
        obj["metadata"]["managedFields"] = [{"manager": "x" * 4096}]  # not in the key
        for cache in (by_count, by_bytes):
            cache.prepare(obj, "CREATE", lambda o=obj: prepare(o, state, Settings()))
        assert len(by_count.kept) <= 4
        assert 0 < by_bytes.kept.weight <= 4096 and len(by_bytes.kept) < 20
    for kept in [*by_count.kept.values(), *by_bytes.kept.values()]:
        assert not set(kept.workload.pod["metadata"]) & IDENTITY_FIELDS
