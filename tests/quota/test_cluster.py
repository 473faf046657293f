"""The cluster view indexes objects by kind, namespace and name."""

from __future__ import annotations

import pytest

from quota.cluster import ClusterState
from quota.errors import InvalidObject


def _obj(kind: str, name: str, namespace: str | None = None) -> dict:
    meta = {"name": name} | ({"namespace": namespace} if namespace else {})
    return {"kind": kind, "metadata": meta}


def test_upsert_get_list_remove_and_revisions() -> None:
    state = ClusterState(
        [_obj("Pod", "b", "ns"), _obj("Pod", "a", "ns"), _obj("Pod", "c", "other")]
    )
    assert [p["metadata"]["name"] for p in state.list("Pod", "ns")] == ["a", "b"]
    assert state.get("Pod", "other", "c") is not None
    before = state.revision("Pod", "Node")
    state.remove("Pod", "ns", "a")
    assert state.get("Pod", "ns", "a") is None
    assert state.revision("Pod", "Node") != before
    unchanged = state.revision("Pod")
    state.remove("Pod", "ns", "missing")
    assert state.revision("Pod") == unchanged


def test_cluster_scoped_kinds_ignore_namespace_and_pods_default_it() -> None:
    state = ClusterState([_obj("DeviceClass", "gpu", "ignored"), _obj("Pod", "p")])
    assert state.get("DeviceClass", None, "gpu") is not None
    assert state.get("Pod", "default", "p") is not None


def test_replace_kind_swaps_everything_at_once() -> None:
    state = ClusterState([_obj("Node", "n1"), _obj("Node", "n2")])
    state.replace_kind("Node", [_obj("Node", "n3")])
    assert [n["metadata"]["name"] for n in state.list("Node")] == ["n3"]


@pytest.mark.parametrize("obj", [{}, {"kind": "Pod"}, {"kind": "Pod", "metadata": {}}, "x"])
def test_objects_without_identity_are_rejected(obj: object) -> None:
    with pytest.raises(InvalidObject):
        ClusterState([obj])  # type: ignore[list-item]


def test_status_of_a_queue_alone_is_not_a_new_revision() -> None:
    queue = {
        "apiVersion": "draquota.io/v1beta1",
        "kind": "ClusterQueue",
        "metadata": {"name": "a", "resourceVersion": "1"},
        "spec": {"cohort": "x"},
    }
    state = ClusterState([queue])
    before = state.revision("ClusterQueue")
    written = {**queue, "metadata": {"name": "a", "resourceVersion": "2"}, "status": {"x": 1}}
    state.upsert(written)
    assert state.revision("ClusterQueue") == before
    assert state.get("ClusterQueue", None, "a") is written  # the newest object is served
    state.upsert({**written, "spec": {"cohort": "y"}})
    assert state.revision("ClusterQueue") != before
