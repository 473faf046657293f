"""`spec.preemption` of a ClusterQueue: Kueue's fields, defaults and validation, parsed
(`quota.preemptionpolicy`) and checked by the CRD (enums, defaults, the CEL rule) alike."""

from __future__ import annotations

import copy
import functools
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml
from cel_expr_python import cel

from quota.errors import InvalidObject
from quota.preemptionpolicy import (
    BORROW_POLICIES,
    NEVER,
    RECLAIM_POLICIES,
    WITHIN_POLICIES,
    Preemption,
)
from quota.queues import parse_cluster_queue
from tests.quota.queue_builders import cluster_queue

CRD = Path(__file__).resolve().parents[2] / "manifests" / "base" / "crds" / "clusterqueues.yaml"
BASE = cluster_queue({"name": "a", "cohort": "lab", "groups": [{"default": {"cpu": 4}}]})
RULE = "reclaimWithinCohort=Never and borrowWithinCohort.Policy!=Never"


def _with(preemption: Any) -> dict[str, Any]:
    obj = copy.deepcopy(BASE)
    obj["spec"]["preemption"] = preemption
    return obj


def _schema() -> dict[str, Any]:
    doc = yaml.safe_load(CRD.read_text(encoding="utf-8"))
    return dict(doc["spec"]["versions"][0]["schema"]["openAPIV3Schema"])


def _preemption_schema() -> dict[str, Any]:
    return dict(_schema()["properties"]["spec"]["properties"]["preemption"])


def test_absent_preemption_is_all_never() -> None:
    queue = parse_cluster_queue(BASE)
    assert queue.preemption == Preemption(NEVER, NEVER, NEVER, None)
    assert not queue.preemption.enabled
    assert parse_cluster_queue(_with({})).preemption == queue.preemption


def test_every_field_is_read() -> None:
    queue = parse_cluster_queue(
        _with(
            {
                "reclaimWithinCohort": "Any",
                "withinClusterQueue": "LowerOrNewerEqualPriority",
                "borrowWithinCohort": {"policy": "LowerPriority", "maxPriorityThreshold": -7},
            }
        )
    )
    assert queue.preemption == Preemption("Any", "LowerOrNewerEqualPriority", "LowerPriority", -7)
    assert queue.problems == ()


@pytest.mark.parametrize(
    ("preemption", "field", "reason"),
    [
        ("Any", "spec.preemption", "must be an object"),
        ({"reclaimWithinCohort": "Always"}, "spec.preemption.reclaimWithinCohort", "'Always'"),
        (
            {"withinClusterQueue": "Any"},
            "spec.preemption.withinClusterQueue",
            "expected Never or LowerPriority or LowerOrNewerEqualPriority",
        ),
        (
            {"borrowWithinCohort": {"policy": "Any"}},
            "spec.preemption.borrowWithinCohort.policy",
            "expected Never or LowerPriority",
        ),
        (
            {"borrowWithinCohort": {"maxPriorityThreshold": "3"}},
            "spec.preemption.borrowWithinCohort.maxPriorityThreshold",
            "must be an integer",
        ),
        (
            {"borrowWithinCohort": {"maxPriorityThreshold": True}},
            "spec.preemption.borrowWithinCohort.maxPriorityThreshold",
            "must be an integer",
        ),
        (
            {"borrowWithinCohort": {"maxPriorityThreshold": 2**31}},
            "spec.preemption.borrowWithinCohort.maxPriorityThreshold",
            "32-bit",
        ),
        ({"withinClusterQueue": 1}, "spec.preemption.withinClusterQueue", "must be a string"),
        ({"reclaimWithinCohrt": "Any"}, "spec.preemption.reclaimWithinCohrt", "unknown field"),
    ],
)
def test_malformed_preemption_names_the_field(preemption: Any, field: str, reason: str) -> None:
    with pytest.raises(InvalidObject) as info:
        parse_cluster_queue(_with(preemption))
    assert (info.value.obj, info.value.path) == ("ClusterQueue a", field)
    assert reason in info.value.reason


@pytest.mark.parametrize(
    ("priority", "policy", "bound"),
    [
        (5, {"policy": "Never", "maxPriorityThreshold": 9}, None),
        (5, {"policy": "LowerPriority"}, 5),
        (5, {"policy": "LowerPriority", "maxPriorityThreshold": 2}, 3),
        (5, {"policy": "LowerPriority", "maxPriorityThreshold": 9}, 5),
    ],
)
def test_borrow_threshold_is_kueues(priority: int, policy: Any, bound: int | None) -> None:
    # Kueue evicts, while borrowing, priorities below min(preemptor, maxPriorityThreshold + 1).
    spec = {"reclaimWithinCohort": "Any", "borrowWithinCohort": policy}
    assert parse_cluster_queue(_with(spec)).preemption.borrow_threshold(priority) == bound


# --- the CRD: enums and defaults as the parser's, and Kueue's one rule in CEL ---------------


def test_crd_enums_and_defaults_are_the_parsers() -> None:
    schema = _preemption_schema()
    fields = schema["properties"]
    borrow = fields["borrowWithinCohort"]["properties"]
    assert tuple(fields["reclaimWithinCohort"]["enum"]) == RECLAIM_POLICIES
    assert tuple(fields["withinClusterQueue"]["enum"]) == WITHIN_POLICIES
    assert tuple(borrow["policy"]["enum"]) == BORROW_POLICIES
    defaults = {
        fields["reclaimWithinCohort"]["default"],
        fields["withinClusterQueue"]["default"],
        borrow["policy"]["default"],
    }
    assert defaults == {NEVER}
    assert schema["default"] == {}  # as Kueue: an absent block reads back as all Never
    threshold = borrow["maxPriorityThreshold"]
    assert (threshold["type"], threshold["format"]) == ("integer", "int32")


@functools.lru_cache(maxsize=1)
def _rule() -> Any:
    rules = _preemption_schema()["x-kubernetes-validations"]
    assert [r["message"] for r in rules] == [RULE]
    env = cel.NewEnv(variables={"self": cel.Type.DYN})
    return env.compile(rules[0]["rule"])


CASES = [
    pytest.param({}, True, id="empty"),
    pytest.param({"reclaimWithinCohort": "Any"}, True, id="reclaim-only"),
    pytest.param(
        {"reclaimWithinCohort": "LowerPriority", "borrowWithinCohort": {"policy": "LowerPriority"}},
        True,
        id="reclaim-and-borrow",
    ),
    pytest.param(
        {"reclaimWithinCohort": "Never", "borrowWithinCohort": {"policy": "Never"}},
        True,
        id="borrow-never",
    ),
    pytest.param({"borrowWithinCohort": {"maxPriorityThreshold": 3}}, True, id="threshold-only"),
    pytest.param(
        {"reclaimWithinCohort": "Never", "borrowWithinCohort": {"policy": "LowerPriority"}},
        False,
        id="borrow-without-reclaim",
    ),
    pytest.param(
        {"borrowWithinCohort": {"policy": "LowerPriority"}}, False, id="borrow-reclaim-default"
    ),
]


@pytest.mark.parametrize(("preemption", "valid"), CASES)
def test_crd_rule_agrees_with_the_parser(preemption: dict[str, Any], valid: bool) -> None:
    obj = _with(preemption)
    jsonschema.validate(obj, _schema())
    assert _rule().eval(data={"self": preemption}).value() is valid
    problems = parse_cluster_queue(obj).problems
    assert problems == (() if valid else (f"spec.preemption: {RULE}",))


@pytest.mark.parametrize(
    "preemption",
    [
        {"reclaimWithinCohort": "Always"},
        {"withinClusterQueue": "Any"},
        {"borrowWithinCohort": {"policy": "Any"}},
        {"borrowWithinCohort": {"maxPriorityThreshold": "3"}},
    ],
)
def test_crd_schema_rejects_what_the_parser_rejects(preemption: dict[str, Any]) -> None:
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(_with(preemption), _schema())
    with pytest.raises(InvalidObject):
        parse_cluster_queue(_with(preemption))


RECORDED = Path(__file__).resolve().parent / "fixtures" / "preemption" / "recorded.yaml"


def test_queues_as_the_api_server_returns_them() -> None:
    # The API server rejected `{"borrowWithinCohort": {"policy": "LowerPriority"}}` with
    # "spec.preemption: Invalid value: reclaimWithinCohort=Never and
    # borrowWithinCohort.Policy!=Never" and a threshold of 3000000000 as not int32.
    recorded = {
        doc["metadata"]["name"]: parse_cluster_queue(doc)
        for doc in yaml.safe_load_all(RECORDED.read_text(encoding="utf-8"))
    }
    assert recorded["plain"].preemption == Preemption()
    assert recorded["research"].preemption == Preemption(
        "Any", "LowerPriority", "LowerPriority", 100
    )
    assert [q.problems for q in recorded.values()] == [(), ()]
