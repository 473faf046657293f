"""A cluster view: objects by kind, namespace and name, frozen."""

from __future__ import annotations

import pytest

from quota.cluster import ClusterView
from quota.demand import pod_demand
from quota.errors import InvalidObject
from quota.queuetable import queue_table
from quota.settings import Settings
from quota.workloads import as_workload
from tests.quota.builders import claim_template, pod
from tests.quota.queue_builders import cluster_queue, scenario_objects


def _obj(kind: str, name: str, namespace: str | None = None) -> dict:
    meta = {"name": name} | ({"namespace": namespace} if namespace else {})
    return {"kind": kind, "metadata": meta}


def test_a_view_of_objects_alone() -> None:
    view = ClusterView.of([_obj("Pod", "b", "ns"), _obj("Pod", "a", "ns"), _obj("Node", "n")])
    assert [p["metadata"]["name"] for p in view.list("Pod", "ns")] == ["a", "b"]
    assert view.list("Pod", "other") == [] and view.list("Job") == []
    assert view.kinds() == ["Node", "Pod"] and view.snapshot() is view
    assert view.revision("Pod", "Job") == (1, 0)
    assert view.changed_since("Pod", 1) == set()
    assert view.changed_since("Pod", 0) is None  # no journal: the caller rescans


def test_cluster_scoped_kinds_ignore_namespace_and_pods_default_it() -> None:
    view = ClusterView.of([_obj("DeviceClass", "gpu", "ignored"), _obj("Pod", "p")])
    assert view.get("DeviceClass", None, "gpu") is not None
    assert view.get("Pod", "default", "p") is not None


@pytest.mark.parametrize("obj", [{}, {"kind": "Pod"}, {"kind": "Pod", "metadata": {}}, "x"])
def test_objects_without_identity_are_rejected(obj: object) -> None:
    with pytest.raises(InvalidObject):
        ClusterView.of([obj])  # type: ignore[list-item]


def test_a_view_with_an_object_added_is_its_own() -> None:
    view = ClusterView.of([_obj("ResourceClaim", "a", "ns")])
    added = view.with_object(_obj("ResourceClaim", "b", "ns"))
    assert [c["metadata"]["name"] for c in added.list("ResourceClaim")] == ["a", "b"]
    assert view.get("ResourceClaim", "ns", "b") is None
    assert added.revision("ResourceClaim") == view.revision("ResourceClaim")
    assert added.source is not view.source  # nothing derived from it is kept for the other


def test_a_view_keeps_what_is_derived_from_it() -> None:
    view = ClusterView.of(scenario_objects({"queues": [{"name": "a", "groups": []}]}))
    assert queue_table(view, Settings()) is queue_table(view, Settings())


def test_a_view_with_an_object_added_shares_parsed_objects_but_not_tables() -> None:
    """Its revisions are the view's: a table kept for the view would be stale for it."""
    template = claim_template(
        "t", {"requests": [{"name": "r", "exactly": {"deviceClassName": "c"}}]}
    )
    view = ClusterView.of([*scenario_objects({"queues": [{"name": "a", "groups": []}]}), template])
    table = queue_table(view, Settings())
    added = view.with_object(cluster_queue({"name": "b", "groups": []}))
    assert set(queue_table(added, Settings()).queues) == {"a", "b"}
    assert queue_table(view, Settings()) is table
    workload = as_workload(pod(claims=({"name": "r", "resourceClaimTemplateName": "t"},)))
    parsed = pod_demand(workload, view).claims[0].spec
    assert pod_demand(workload, added).claims[0].spec is parsed
