"""The webhooks' matchConditions against requests a real API server sent.

Inputs come from the real thing: tests/manifests/fixtures/admission/ holds AdmissionReview
requests that Kubernetes v1.36.2 sent for ordinary cluster traffic, recorded by
`.venv/bin/python -m tests.manifests.record_reviews` (index.json says what produced each).
Hand-built requests once hid that the API server omits `subResource` on a plain pod UPDATE:
`request.subResource == 'resize'` then fails with `no such key`, and failurePolicy Fail
rejected every `kubectl label pod` and the Job controller's finalizer removals.

Each condition is evaluated as the API server does it: `request` is the admission request
without `uid`, `object` and `oldObject` (CreateAdmissionRequest in k8s.io/apiserver), `object`
and `oldObject` the objects (null on CREATE), `authorizer` declared but not bound (the
conditions never call it: test_lint).
"""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Any

import pytest
from cel_expr_python import cel

from tests.manifests.test_lint import _webhooks

FIXTURES = Path(__file__).parent / "fixtures" / "admission"
INDEX = json.loads((FIXTURES / "index.json").read_text(encoding="utf-8"))
RECORD = INDEX["recorded_with"]
MUTATE = "mutate.draquota.io"
VALIDATE = "validate.draquota.io"
BOTH = frozenset({MUTATE, VALIDATE})
ONLY_VALIDATE = frozenset({VALIDATE})
NEITHER: frozenset[str] = frozenset()

# fixture -> the webhooks that receive it (rules, namespaceSelector and matchConditions)
SENT_TO: dict[str, frozenset[str]] = {
    # pods: every CREATE; an UPDATE only when it can change what the pod is charged or where
    "pod-create-plain": BOTH,
    "pod-create-with-claim-template": BOTH,
    "pod-create-queue-label": BOTH,
    "pod-create-scheduling-gate": BOTH,
    "pod-create-dry-run": BOTH,
    "pod-create-by-job-controller": BOTH,
    "pod-create-by-replicaset-controller": BOTH,
    "pod-create-by-statefulset-controller": BOTH,
    "pod-create-by-daemonset-controller": BOTH,
    "pod-update-kubectl-label": NEITHER,
    "pod-update-kubectl-label-dry-run": NEITHER,
    "pod-update-kubectl-annotate": NEITHER,
    "pod-update-kubectl-patch-merge": NEITHER,
    "pod-update-kubectl-patch-json": NEITHER,
    "pod-update-kubectl-patch-strategic": NEITHER,  # a new image: resources unchanged
    "pod-update-kubectl-apply": NEITHER,
    "pod-update-finalizer-added": NEITHER,
    "pod-update-finalizer-removed-while-terminating": NEITHER,
    "pod-update-job-controller-removes-finalizer": NEITHER,
    "pod-update-job-controller-removes-finalizer-on-suspend": NEITHER,
    "pod-update-queue-label-changed": ONLY_VALIDATE,
    "pod-update-queue-label-removed": ONLY_VALIDATE,
    "pod-update-charge-annotation-changed": ONLY_VALIDATE,
    "pod-update-scheduling-gate-removed": ONLY_VALIDATE,
    "pod-update-owner-reference-added": ONLY_VALIDATE,
    "pod-update-owner-reference-removed": ONLY_VALIDATE,
    "pod-update-garbage-collector-orphans": ONLY_VALIDATE,
    "pod-update-replicaset-controller-adopts": ONLY_VALIDATE,
    "pod-resize": ONLY_VALIDATE,
    # workloads: every CREATE; an UPDATE when spec or labels change
    "job-create": BOTH,
    "job-update-suspend": BOTH,
    "job-update-resume": BOTH,
    "job-update-annotation-only": NEITHER,
    "cronjob-create": BOTH,
    "cronjob-update-schedule": BOTH,
    "deployment-create": BOTH,
    "deployment-update-replicas": BOTH,
    "deployment-update-replicas-dry-run": BOTH,
    "deployment-update-queue-label": BOTH,
    "deployment-update-image": BOTH,
    "deployment-update-annotation-only": NEITHER,
    "replicaset-create-by-deployment-controller": BOTH,
    "replicaset-update-replicas-by-deployment-controller": BOTH,
    "replicaset-update-annotations-by-deployment-controller": NEITHER,
    "replicaset-update-garbage-collector-removes-orphan-finalizer": NEITHER,
    "statefulset-create": BOTH,
    "statefulset-update-replicas": BOTH,
    "daemonset-create": BOTH,
    "daemonset-update-image": BOTH,
    # claims: every CREATE, in each served version
    "resourceclaim-create-v1": ONLY_VALIDATE,
    "resourceclaim-create-v1beta2": ONLY_VALIDATE,
    "resourceclaim-create-v1beta1": ONLY_VALIDATE,
    "resourceclaim-create-by-resourceclaim-controller": ONLY_VALIDATE,
}
HOOKS = [hook for _, hook in _webhooks()]


def _recorded() -> list[str]:
    return sorted(p.stem for p in FIXTURES.glob("*.json") if p.name != "index.json")


@functools.cache
def _request(fixture: str) -> dict[str, Any]:
    return dict(json.loads((FIXTURES / f"{fixture}.json").read_text(encoding="utf-8")))


@functools.cache
def _condition(expression: str) -> Any:
    env = cel.NewEnv(
        variables={name: cel.Type.DYN for name in ("request", "object", "oldObject", "authorizer")}
    )
    return env.compile(expression)


def _evaluate(expression: str, request: dict[str, Any]) -> Any:
    attributes = {k: v for k, v in request.items() if k not in ("uid", "object", "oldObject")}
    data = {
        "request": attributes,
        "object": request.get("object"),
        "oldObject": request.get("oldObject"),
    }
    return _condition(expression).eval(data=data)


def _selects(selector: dict[str, Any], labels: dict[str, str]) -> bool:
    assert set(selector) <= {"matchExpressions", "matchLabels"}, selector
    if any(labels.get(k) != v for k, v in selector.get("matchLabels", {}).items()):
        return False
    tests = {
        "In": lambda e: labels.get(e["key"]) in e["values"],
        "NotIn": lambda e: labels.get(e["key"]) not in e["values"],
        "Exists": lambda e: e["key"] in labels,
        "DoesNotExist": lambda e: e["key"] not in labels,
    }
    return all(tests[e["operator"]](e) for e in selector.get("matchExpressions", []))


def _rules_select(hook: dict[str, Any], request: dict[str, Any]) -> bool:
    """Whether the API server calls `hook` for `request` when its matchConditions hold."""
    assert "objectSelector" not in hook, "objectSelector: match it here too"
    namespace = {"kubernetes.io/metadata.name": request["namespace"]}
    if not _selects(hook.get("namespaceSelector", {}), namespace):
        return False
    resource = request["resource"]
    path = "/".join(p for p in (resource["resource"], request.get("subResource")) if p)
    return any(
        request["operation"] in rule["operations"]
        and resource["group"] in rule["apiGroups"]
        and resource["version"] in rule["apiVersions"]
        and path in rule["resources"]
        for rule in hook["rules"]
    )


def _holds(condition: dict[str, Any], request: dict[str, Any]) -> bool:
    """The condition's value; an error fails the test, as it fails the request (failurePolicy
    Fail) in the API server."""
    result = _evaluate(condition["expression"], request)
    assert result.type() == cel.Type.BOOL, f"{condition['name']}: {result.value()}"
    return bool(result.value())


def _sent_to(request: dict[str, Any]) -> set[str]:
    return {
        hook["name"]
        for hook in HOOKS
        if _rules_select(hook, request) and all(_holds(c, request) for c in hook["matchConditions"])
    }


def test_every_recording_has_an_expected_outcome_and_vice_versa() -> None:
    indexed = sorted(name.removesuffix(".json") for name in INDEX["fixtures"])
    assert _recorded() == indexed, f"index.json is stale: run {RECORD}"
    assert sorted(SENT_TO) == _recorded(), "a recording without a row in SENT_TO, or vice versa"


@pytest.mark.parametrize("fixture", _recorded())
def test_match_conditions_evaluate_to_a_bool_on_recorded_request(fixture: str) -> None:
    request = _request(fixture)
    for hook in HOOKS:
        if _rules_select(hook, request):
            for condition in hook["matchConditions"]:
                _holds(condition, request)


@pytest.mark.parametrize("fixture", _recorded())
def test_webhooks_receive_what_the_table_says(fixture: str) -> None:
    assert _sent_to(_request(fixture)) == SENT_TO[fixture]


@pytest.mark.parametrize("fixture", _recorded())
def test_rules_here_select_what_the_api_server_sent(fixture: str) -> None:
    # The recorder registered the webhooks without matchConditions: received_by is what the
    # real API server selected by rules and namespaceSelector alone.
    selected = {hook["name"] for hook in HOOKS if _rules_select(hook, _request(fixture))}
    received_by = set(INDEX["fixtures"][f"{fixture}.json"]["received_by"])
    assert selected == received_by, f"the rules changed since the recording: run {RECORD}"


def test_the_api_server_omits_sub_resource_on_a_plain_pod_update() -> None:
    label = _request("pod-update-kubectl-label")
    assert "subResource" not in label
    assert _request("pod-resize")["subResource"] == "resize"
    unguarded = _evaluate("request.subResource == 'resize'", label)
    assert unguarded.type() == cel.Type.ERROR
    assert "subResource" in unguarded.value()
