"""The store indexes objects by kind, namespace and name, and hands out frozen views."""

from __future__ import annotations

import pytest

from quota.errors import InvalidObject
from quota.queuetable import queue_table
from quota.settings import Settings
from tests.quota.queue_builders import cluster_queue, scenario_objects
from webhook.store.clusterstate import ClusterState


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


def test_a_snapshot_is_frozen_while_the_store_moves_on() -> None:
    state = ClusterState([_obj("Pod", "a", "ns"), _obj("Node", "n1")])
    view = state.snapshot()
    assert state.snapshot() is view  # no write: the same view, handed out again
    before = view.revision("Pod", "Node")
    state.upsert(_obj("Pod", "b", "ns"))
    state.remove("Pod", "ns", "a")
    state.replace_kind("Node", [_obj("Node", "n2")])
    assert [p["metadata"]["name"] for p in view.list("Pod")] == ["a"]
    assert view.get("Pod", "ns", "b") is None and view.get("Node", None, "n1") is not None
    assert view.revision("Pod", "Node") == before
    now = state.snapshot()
    assert [p["metadata"]["name"] for p in now.list("Pod")] == ["b"]
    assert now.revision("Pod", "Node") != before
    assert view.source is now.source is state  # caches derived from views of one store


def test_every_write_is_a_new_generation_and_one_generation_has_one_set_of_revisions() -> None:
    state = ClusterState([_obj("Pod", "a", "ns")])
    seen = {state.snapshot().generation: state.snapshot()._revisions}
    writes = [
        lambda: state.upsert(_obj("Pod", "b", "ns")),
        lambda: state.upsert(_obj("Pod", "b", "ns")),  # the same object again: still a write
        lambda: state.remove("Pod", "ns", "a"),
        lambda: state.remove("Pod", "ns", "missing"),  # nothing removed: no new view
        lambda: state.replace_kind("Node", [_obj("Node", "n1")]),
    ]
    for write in writes:
        before = state.snapshot()
        write()
        after = state.snapshot()
        assert (after.generation > before.generation) == (after is not before)
        assert seen.setdefault(after.generation, after._revisions) == after._revisions
    assert len(seen) == 5


def test_changes_since_a_revision_are_those_up_to_the_view() -> None:
    state = ClusterState([_obj("ResourceClaim", "a", "ns")])
    start = state.revision("ResourceClaim")[0]
    state.upsert(_obj("ResourceClaim", "b", "ns"))
    view = state.snapshot()
    state.upsert(_obj("ResourceClaim", "c", "ns"))
    assert view.changed_since("ResourceClaim", start) == {("ns", "b")}
    assert state.changed_since("ResourceClaim", start) == {("ns", "b"), ("ns", "c")}
    assert view.changed_since("ResourceClaim", view.revision("ResourceClaim")[0]) == set()
    state.replace_kind("ResourceClaim", [])
    assert view.changed_since("ResourceClaim", start) is None  # unknown now: rescan the view


def test_a_view_with_an_object_added_is_not_the_stores() -> None:
    state = ClusterState([_obj("ResourceClaim", "a", "ns")])
    added = state.snapshot().with_object(_obj("ResourceClaim", "b", "ns"))
    assert added.get("ResourceClaim", "ns", "b") is not None
    assert state.get("ResourceClaim", "ns", "b") is None
    assert added.source is not state


def test_an_older_view_names_the_changes_up_to_a_newer_revision() -> None:
    state = ClusterState([_obj("ResourceClaim", "a", "ns")])
    older = state.snapshot()
    state.upsert(_obj("ResourceClaim", "b", "ns"))
    state.remove("ResourceClaim", "ns", "a")
    newer = state.revision("ResourceClaim")[0]
    assert older.changed_since("ResourceClaim", newer) == {("ns", "a"), ("ns", "b")}
    state.replace_kind("ResourceClaim", [])
    assert older.changed_since("ResourceClaim", newer) is None  # replaced since: rescan


def test_views_of_an_unchanged_store_share_one_queue_table_and_a_change_rebuilds_it() -> None:
    state = ClusterState(scenario_objects({"queues": [{"name": "a", "groups": []}]}))
    first = state.snapshot()
    table = queue_table(first, Settings())
    state.upsert(_obj("Pod", "p", "ns"))  # a new view; no queue object changed
    second = state.snapshot()
    assert second is not first
    assert queue_table(second, Settings()) is table
    state.upsert(cluster_queue({"name": "b", "groups": []}))
    rebuilt = queue_table(state.snapshot(), Settings())
    assert rebuilt is not table and set(rebuilt.queues) == {"a", "b"}
    assert set(queue_table(first, Settings()).queues) == {"a"}  # an older view: its own answer
