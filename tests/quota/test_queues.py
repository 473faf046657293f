"""Parsing and validation of ClusterQueue, LocalQueue and ResourceFlavor (embedded mode rules)."""

from __future__ import annotations

import copy
import functools
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml
from cel_expr_python import cel

from quota.cluster import ClusterView
from quota.errors import InvalidObject
from quota.quantity import parse_quantity
from quota.queues import QUEUE_KINDS, parse_cluster_queue, parse_local_queue, parse_resource_flavor
from quota.queuetable import queue_table
from quota.routing import namespace_selected
from quota.settings import Settings
from quota.status import queue_condition
from tests.quota.queue_builders import cluster_queue, scenario_objects
from webhook.store.clusterstate import ClusterState

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


def test_queue_table_is_kept_with_the_view_until_queue_objects_change() -> None:
    objects = scenario_objects({"queues": [{"name": "a", "groups": [{"default": {"cpu": 1}}]}]})
    state, twin = ClusterState(objects), ClusterState(objects)
    first = queue_table(state.snapshot(), Settings())
    assert queue_table(state.snapshot(), Settings()) is first
    assert queue_table(ClusterView.of(objects), Settings()) is not first  # a view of its own
    # Another store at the same revisions, or other settings, is not answered from the entry.
    assert twin.revision(*QUEUE_KINDS) == state.revision(*QUEUE_KINDS)
    assert queue_table(twin.snapshot(), Settings()) is not first
    assert queue_table(state.snapshot(), Settings(unmapped_device_class="Ignore")) is not first
    state.upsert(cluster_queue({"name": "b", "groups": [{"other": {"cpu": 1}}]}))
    second = queue_table(state.snapshot(), Settings())
    assert second is not first and set(second.queues) == {"a", "b"}
    assert second.invalid == {"b": "ResourceFlavor other not found"}


# --- the CRD's CEL rules and the embedded checks agree ------------------------------------

CRD = Path(__file__).resolve().parents[2] / "manifests" / "base" / "crds" / "clusterqueues.yaml"
_M = cel.Type.Map(cel.Type.STRING, cel.Type.DYN)


def _compare(a: Mapping[str, Any], b: Mapping[str, Any]) -> int:
    left, right = parse_quantity(a["q"]), parse_quantity(b["q"])
    return (left > right) - (left < right)


@functools.lru_cache(maxsize=1)
def _env() -> Any:
    functions = [
        cel.FunctionDecl(
            "quantity",
            [cel.Overload("q_string", _M, [cel.Type.STRING], impl=lambda s: {"q": s})],
        ),
        cel.FunctionDecl(
            "compareTo",
            [cel.Overload("q_compare", cel.Type.INT, [_M, _M], is_member=True, impl=_compare)],
        ),
    ]
    return cel.NewEnv(variables={"self": cel.Type.DYN}, functions=functions)


def _rules() -> dict[str, list[str]]:
    """CEL rules of the ClusterQueue schema by where `self` points."""
    schema = yaml.safe_load(CRD.read_text(encoding="utf-8"))["spec"]["versions"][0]["schema"]
    spec = schema["openAPIV3Schema"]["properties"]["spec"]
    group = spec["properties"]["resourceGroups"]["items"]
    flavor = group["properties"]["flavors"]["items"]
    resource = flavor["properties"]["resources"]["items"]
    return {
        where: [rule["rule"] for rule in node.get("x-kubernetes-validations", [])]
        for where, node in (("spec", spec), ("group", group), ("resource", resource))
    }


def _cel_valid(obj: Mapping[str, Any]) -> bool:
    rules = _rules()
    spec = obj["spec"]
    targets = {
        "spec": [spec],
        "group": list(spec.get("resourceGroups", [])),
        "resource": [
            r for g in spec.get("resourceGroups", []) for f in g["flavors"] for r in f["resources"]
        ],
    }
    for where, selves in targets.items():
        for rule in rules[where]:
            program = _env().compile(rule)
            for value in selves:
                result = program.eval(data={"self": value}).value()
                assert isinstance(result, bool), (rule, result)
                if not result:
                    return False
    return True


COVERED = "spec.resourceGroups.0.coveredResources"


def _without_cohort() -> dict[str, Any]:
    obj = _with(f"{GPU}.borrowingLimit", DELETE)
    obj["spec"]["cohort"] = ""
    return obj


CEL_CASES = [
    pytest.param(BASE, True, id="valid"),
    pytest.param(_with(f"{GPU}.lendingLimit", 5), False, id="lending-over-nominal"),
    pytest.param(_with(f"{GPU}.lendingLimit", "4"), True, id="lending-equal-as-string"),
    pytest.param(_with(f"{GPU}.nominalQuota", "1500m"), True, id="lending-under-milli-nominal"),
    pytest.param(_with(f"{GPU}.nominalQuota", "500m"), False, id="lending-over-milli-nominal"),
    pytest.param(_with("spec.cohort", DELETE), False, id="borrowing-without-cohort"),
    pytest.param(_without_cohort(), True, id="no-cohort-no-borrowing"),
    pytest.param(_with(COVERED, ["gpus", "cpu"]), False, id="order"),
    pytest.param(_with(COVERED, ["cpu"]), False, id="extra-resource"),
    pytest.param(_with(f"{GPU}.deviceClassNames", []), False, id="device-class-no-names"),
    pytest.param(_with(f"{GPU}.kind", DELETE), False, id="names-without-kind"),
]


@pytest.mark.parametrize(("obj", "valid"), CEL_CASES)
def test_crd_cel_rules_agree_with_embedded_checks(obj: dict[str, Any], valid: bool) -> None:
    assert _cel_valid(obj) is valid
    assert (parse_cluster_queue(obj).problems == ()) is valid


def test_queue_condition_reports_problems() -> None:
    scenario = {
        "queues": [
            {"name": "ok", "groups": [{"default": {"cpu": 1}}]},
            {"name": "bad", "groups": [{"default": {"cpu": {"nominal": 1, "lendingLimit": 2}}}]},
        ]
    }
    table = queue_table(ClusterState(scenario_objects(scenario)), Settings())
    assert queue_condition(table, "ok")["status"] == "True"
    bad = queue_condition(table, "bad")
    assert (bad["status"], bad["reason"]) == ("False", "InvalidSpec")
    assert "lendingLimit: must be less than or equal to nominalQuota" in bad["message"]
    assert queue_condition(table, "missing")["status"] == "Unknown"


# --- the example queues are valid for the API server (schema and CEL) and for draquota ---

EXAMPLES = Path(__file__).resolve().parents[2] / "manifests" / "examples" / "cluster"
CRDS = {
    "ClusterQueue": "clusterqueues.yaml",
    "LocalQueue": "localqueues.yaml",
    "ResourceFlavor": "resourceflavors.yaml",
}


def _json_schema(node: Any) -> Any:
    """OpenAPI v3 (structural) to JSON Schema: `nullable` becomes a null type."""
    if isinstance(node, dict):
        out = {k: _json_schema(v) for k, v in node.items() if not k.startswith("x-kubernetes")}
        if out.pop("nullable", False) and "type" in out:
            out["type"] = [out["type"], "null"]
        return out
    if isinstance(node, list):
        return [_json_schema(v) for v in node]
    return node


def _example_queue_objects() -> list[dict[str, Any]]:
    docs = yaml.safe_load_all((EXAMPLES / "queues.yaml").read_text(encoding="utf-8"))
    return [doc for doc in docs if doc]


@pytest.mark.parametrize(
    "obj", _example_queue_objects(), ids=lambda o: f"{o['kind']}/{o['metadata']['name']}"
)
def test_example_queue_objects_are_valid(obj: dict[str, Any]) -> None:
    crd = yaml.safe_load((CRD.parent / CRDS[obj["kind"]]).read_text(encoding="utf-8"))
    version = crd["spec"]["versions"][0]
    assert obj["apiVersion"] == f"{crd['spec']['group']}/{version['name']}"
    jsonschema.validate(obj, _json_schema(version["schema"]["openAPIV3Schema"]))
    if obj["kind"] == "ClusterQueue":
        assert _cel_valid(obj)
        assert parse_cluster_queue(obj).problems == ()
    table = queue_table(ClusterState(_example_queue_objects()), Settings())
    assert table.invalid == {}
