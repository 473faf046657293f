"""The AdmissionReview v1 codec: envelope validation and the API server's response rules."""

from __future__ import annotations

import base64
from dataclasses import dataclass
from typing import Any

import orjson
import pytest

from tests.webhook.builders import pod, review
from webhook.edge.review import BadReview, Outcome, parse_review, review_response


@dataclass(frozen=True)
class Malformed:
    id: str
    body: Any
    path: str


def _without(field: str) -> dict[str, Any]:
    doc = review(pod())
    del doc["request"][field]
    return doc


def _with(field: str, value: Any) -> dict[str, Any]:
    doc = review(pod())
    doc["request"][field] = value
    return doc


MALFORMED = [
    Malformed("not-json", b"{nope", ""),
    Malformed("json-array", [1, 2], ""),
    Malformed("json-string", "AdmissionReview", ""),
    Malformed(
        "wrong-api-version",
        {**review(pod()), "apiVersion": "admission.k8s.io/v1beta1"},
        "apiVersion",
    ),
    Malformed("wrong-kind", {**review(pod()), "kind": "Pod"}, "kind"),
    Malformed(
        "no-request", {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview"}, "request"
    ),
    Malformed("request-is-list", {**review(pod()), "request": []}, "request"),
    Malformed("no-uid", _without("uid"), "request.uid"),
    Malformed("empty-uid", _with("uid", ""), "request.uid"),
    Malformed("uid-not-string", _with("uid", 7), "request.uid"),
    Malformed("unknown-operation", _with("operation", "PATCH"), "request.operation"),
    Malformed("no-kind", _without("kind"), "request.kind"),
    Malformed(
        "kind-without-kind", _with("kind", {"group": "", "version": "v1"}), "request.kind.kind"
    ),
    Malformed("no-resource", _without("resource"), "request.resource"),
    Malformed("dry-run-string", _with("dryRun", "yes"), "request.dryRun"),
    Malformed("object-is-list", _with("object", []), "request.object"),
    Malformed("create-without-object", _with("object", None), "request.object"),
    Malformed("namespace-not-string", _with("namespace", 3), "request.namespace"),
]


@pytest.mark.parametrize("case", MALFORMED, ids=lambda c: c.id)
def test_body_that_is_not_an_admission_review_is_refused_naming_the_field(case: Malformed) -> None:
    body = case.body if isinstance(case.body, bytes) else orjson.dumps(case.body)
    with pytest.raises(BadReview) as raised:
        parse_review(body)
    assert raised.value.path == case.path


def test_valid_review_keeps_the_object_as_data() -> None:
    obj = pod(labels={"a": "b"})
    req = parse_review(orjson.dumps(review(obj, uid="u-1", dry_run=True)))
    assert (req.uid, req.operation, req.kind, req.resource, req.dry_run) == (
        "u-1",
        "CREATE",
        "Pod",
        "pods",
        True,
    )
    assert req.object == obj
    assert req.ref == "Pod team-a/train-0"


def test_delete_needs_no_object() -> None:
    req = parse_review(orjson.dumps(review(None, operation="DELETE", old=pod())))
    assert req.object is None and req.old_object == pod()


def _patch() -> tuple[dict[str, Any], ...]:
    return ({"op": "add", "path": "/metadata/labels", "value": {"a": "b"}},)


def test_response_echoes_api_version_kind_and_uid() -> None:
    document = review_response("uid-9", Outcome(True), mutating=False)
    assert document == {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "response": {"uid": "uid-9", "allowed": True},
    }


def test_mutating_response_carries_base64_json_patch_with_its_type() -> None:
    response = review_response("u", Outcome(True, patch=_patch()), mutating=True)["response"]
    assert response["patchType"] == "JSONPatch"
    assert orjson.loads(base64.b64decode(response["patch"])) == list(_patch())


def test_validating_response_never_carries_a_patch() -> None:
    response = review_response("u", Outcome(True, patch=_patch()), mutating=False)["response"]
    assert "patch" not in response and "patchType" not in response


def test_empty_patch_means_neither_patch_nor_patch_type() -> None:
    response = review_response("u", Outcome(True), mutating=True)["response"]
    assert "patch" not in response and "patchType" not in response


def test_denial_carries_status_code_reason_and_message() -> None:
    outcome = Outcome(False, code=403, reason="QuotaExceeded", message="over quota")
    response = review_response("u", outcome, mutating=True)["response"]
    assert response["allowed"] is False
    assert response["status"] == {"code": 403, "reason": "QuotaExceeded", "message": "over quota"}
    assert "patch" not in response


@pytest.mark.parametrize(
    "kwargs",
    [
        {"code": 200, "message": "m"},
        {"code": 403, "message": ""},
        {"code": 403, "message": "m", "patch": _patch()},
    ],
    ids=["code-below-400", "no-message", "denial-with-patch"],
)
def test_a_denial_that_breaks_api_server_rules_cannot_be_built(kwargs: dict[str, Any]) -> None:
    with pytest.raises(ValueError):
        Outcome(False, **kwargs)


def test_warnings_are_single_line_bounded_and_deduplicated() -> None:
    outcome = Outcome(True, warnings=("a\nb", "a\nb", "x" * 1000, ""))
    warnings = review_response("u", outcome, mutating=False)["response"]["warnings"]
    assert warnings == ["a b", "x" * 256]
