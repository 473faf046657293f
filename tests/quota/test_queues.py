"""Parsing and validation of ClusterQueue, LocalQueue and ResourceFlavor (embedded mode rules)."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from quota.cluster import ClusterState
from quota.errors import InvalidObject
from quota.queues import (
    namespace_selected,
    parse_cluster_queue,
    parse_local_queue,
    parse_resource_flavor,
    queue_table,
)
from quota.settings import Settings
from tests.quota.queue_builders import cluster_queue, scenario_objects

BASE = cluster_queue(
    {
        "name": "a",
        "cohort": "research",
        "classes": {"gpus": ["gpu.example.com", "gpu-small.example.com"]},
        "groups": [
            {"default": {"cpu": 4, "gpus": {"nominal": 4, "borrowingLimit": 2, "lendingLimit": 1}}},
            {"spot": {"memory": "8Gi"}},
        ],
    }
)


def _with(path: str, value: Any) -> dict[str, Any]:
    obj = copy.deepcopy(BASE)
    target: Any = obj
    keys = path.split(".")
    for key in keys[:-1]:
        target = target[int(key)] if key.isdigit() else target[key]
    last = keys[-1]
    if value is DELETE:
        del target[last]
    elif last.isdigit():
        target[int(last)] = value
    else:
        target[last] = value
    return obj


DELETE = object()
GPU = "spec.resourceGroups.0.flavors.0.resources.1"


def test_parse_cluster_queue() -> None:
    queue = parse_cluster_queue(BASE)
    assert queue.problems == ()
    assert queue.cohort == "research" and queue.when_can_borrow == "Borrow"
    assert queue.covered() == ("cpu", "gpus", "memory")
    assert queue.resource_classes == {"gpus": ("gpu-small.example.com", "gpu.example.com")}
    gpus = queue.groups[0].flavors[0].resources["gpus"]
    assert (gpus.nominal, gpus.borrowing_limit, gpus.lending_limit) == (4, 2, 1)
    assert queue.groups[0].flavors[0].resources["cpu"].nominal == 4000  # millicores
    assert queue.groups[1].flavors[0].resources["memory"].nominal == 8 * 2**30


@pytest.mark.parametrize(
    ("path", "value", "field"),
    [
        pytest.param("apiVersion", "kueue.x-k8s.io/v1beta1", "apiVersion", id="wrong-group"),
        pytest.param("spec.resourceGroups", "x", "spec.resourceGroups", id="groups-not-a-list"),
        pytest.param(
            f"{GPU}.nominalQuota",
            "lots",
            "spec.resourceGroups[0].flavors[0].resources[1].nominalQuota",
            id="bad-quantity",
        ),
        pytest.param(f"{GPU}.nominalQuota", DELETE, "nominalQuota", id="missing-nominal"),
        pytest.param(f"{GPU}.kind", "Widget", "kind", id="unknown-kind"),
        pytest.param(
            "spec.flavorFungibility", {"whenCanBorrow": "Maybe"}, "whenCanBorrow", id="fungibility"
        ),
        pytest.param(
            "spec.namespaceSelector",
            {"matchExpressions": [{"key": "team", "operator": "Near", "values": ["a"]}]},
            "spec.namespaceSelector.matchExpressions[0].operator",
            id="selector-operator",
        ),
        pytest.param(
            "spec.namespaceSelector",
            {"matchExpressions": [{"key": "team", "operator": "In"}]},
            "spec.namespaceSelector.matchExpressions[0].values",
            id="selector-in-without-values",
        ),
    ],
)
def test_malformed_cluster_queue_raises_with_field_path(path: str, value: Any, field: str) -> None:
    with pytest.raises(InvalidObject) as err:
        parse_cluster_queue(_with(path, value))
    assert err.value.obj == "ClusterQueue a"
    assert field in err.value.path


@pytest.mark.parametrize(
    ("path", "value", "problem"),
    [
        pytest.param(
            f"{GPU}.lendingLimit",
            5,
            "lendingLimit: must be less than or equal to nominalQuota",
            id="lending-over-nominal",
        ),
        pytest.param(
            "spec.cohort",
            DELETE,
            "borrowingLimit: must be nil when cohort is empty",
            id="no-cohort",
        ),
        pytest.param(
            "spec.resourceGroups.0.coveredResources",
            ["cpu", "gpus", "pods"],
            "must list exactly the covered resources",
            id="flavor-misses-covered",
        ),
        pytest.param(
            "spec.resourceGroups.0.coveredResources",
            ["gpus", "cpu"],
            "in the same order",
            id="flavor-order-differs",
        ),
        pytest.param(
            f"{GPU}.deviceClassNames",
            [],
            "deviceClassNames: required when kind is DeviceClass",
            id="device-class-without-names",
        ),
        pytest.param(
            "spec.resourceGroups.1.flavors.0.name",
            "default",
            "flavor default is used twice",
            id="flavor-in-two-groups",
        ),
        pytest.param(
            "spec.resourceGroups.1.coveredResources",
            ["cpu"],
            "cpu is covered by two groups",
            id="resource-in-two-groups",
        ),
    ],
)
def test_rule_violations_are_problems(path: str, value: Any, problem: str) -> None:
    queue = parse_cluster_queue(_with(path, value))
    assert any(problem in p for p in queue.problems), queue.problems


def test_resource_maps_to_same_classes_in_every_flavor() -> None:
    obj = cluster_queue(
        {
            "name": "a",
            "classes": {"gpus": ["gpu.example.com"]},
            "groups": [{"one": {"gpus": 1}, "two": {"gpus": 1}}],
        }
    )
    obj["spec"]["resourceGroups"][0]["flavors"][1]["resources"][0]["deviceClassNames"] = [
        "tpu.example.com"
    ]
    problems = parse_cluster_queue(obj).problems
    assert any("resource gpus maps to [gpu.example.com] in another flavor" in p for p in problems)


def test_parse_local_queue_and_flavor() -> None:
    local = parse_local_queue(
        {
            "kind": "LocalQueue",
            "metadata": {"name": "q", "namespace": "ns"},
            "spec": {"clusterQueue": "a"},
        }
    )
    assert (local.key, local.cluster_queue) == ("ns/q", "a")
    with pytest.raises(InvalidObject) as err:
        parse_local_queue({"kind": "LocalQueue", "metadata": {"name": "q", "namespace": "ns"}})
    assert (err.value.obj, err.value.path) == ("LocalQueue ns/q", "spec.clusterQueue")
    flavor = parse_resource_flavor(
        {"kind": "ResourceFlavor", "metadata": {"name": "spot"}, "spec": {"nodeLabels": {"p": "s"}}}
    )
    assert flavor.node_labels == {"p": "s"}
    with pytest.raises(InvalidObject) as err:
        parse_resource_flavor(
            {"kind": "ResourceFlavor", "metadata": {"name": "x"}, "spec": {"nodeLabels": {"p": 1}}}
        )
    assert err.value.path == "spec.nodeLabels.p"


NAMESPACE = {
    "kind": "Namespace",
    "metadata": {"name": "team-a", "labels": {"team": "a", "tier": "gold"}},
}


@pytest.mark.parametrize(
    ("selector", "selected"),
    [
        pytest.param(None, False, id="null-selects-none"),
        pytest.param({}, True, id="empty-selects-all"),
        pytest.param({"matchLabels": {"team": "a"}}, True, id="labels-match"),
        pytest.param({"matchLabels": {"team": "b"}}, False, id="labels-differ"),
        pytest.param(
            {"matchLabels": {"kubernetes.io/metadata.name": "team-a"}}, True, id="name-label"
        ),
        pytest.param(
            {"matchExpressions": [{"key": "tier", "operator": "In", "values": ["gold"]}]},
            True,
            id="in",
        ),
        pytest.param(
            {"matchExpressions": [{"key": "tier", "operator": "NotIn", "values": ["gold"]}]},
            False,
            id="not-in",
        ),
        pytest.param(
            {"matchExpressions": [{"key": "tier", "operator": "Exists"}]}, True, id="exists"
        ),
        pytest.param(
            {"matchExpressions": [{"key": "tier", "operator": "DoesNotExist"}]},
            False,
            id="does-not-exist",
        ),
    ],
)
def test_namespace_selector(selector: Any, selected: bool) -> None:
    obj = _with("spec.namespaceSelector", selector)
    assert namespace_selected(parse_cluster_queue(obj), NAMESPACE, "team-a") is selected


def test_queue_table_is_cached_until_queue_objects_change() -> None:
    state = ClusterState(
        scenario_objects({"queues": [{"name": "a", "groups": [{"default": {"cpu": 1}}]}]})
    )
    first = queue_table(state, Settings())
    assert queue_table(state, Settings()) is first
    state.upsert(cluster_queue({"name": "b", "groups": [{"other": {"cpu": 1}}]}))
    second = queue_table(state, Settings())
    assert second is not first and set(second.queues) == {"a", "b"}
    assert second.invalid == {"b": "ResourceFlavor other not found"}
