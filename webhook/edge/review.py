"""The `admission.k8s.io/v1` AdmissionReview codec.

Decoding validates the envelope only and keeps the object as plain data: a body
that is not an AdmissionReview raises `BadReview` (answered with HTTP 400), a
malformed *object* inside a valid envelope is the decision's business (a 400
denial). Encoding obeys every rule the API server enforces on responses: the
apiVersion, kind and request uid are echoed, a denial carries `status.code >= 400`
and a message, and `patch`/`patchType: JSONPatch` travel together and only from
the mutating endpoint.
"""

from __future__ import annotations

import base64
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import orjson

from quota.verdict import Decision, Verdict
from webhook.edge.reviewtypes import (
    ADMISSION_API_VERSION,
    ADMISSION_KIND,
    OPERATIONS,
    AdmissionResponse,
    AdmissionReviewOut,
    JsonObject,
    PatchOp,
)

__all__ = [
    "MAX_WARNING_LENGTH",
    "AdmissionRequest",
    "BadReview",
    "Outcome",
    "encode_patch",
    "outcome_of",
    "parse_review",
    "review_response",
]

MAX_WARNING_LENGTH = 256  # the API server truncates longer warnings


class BadReview(ValueError):
    """The body is not an AdmissionReview v1; `path` is the offending field."""

    def __init__(self, path: str, reason: str) -> None:
        self.path = path
        self.reason = reason
        super().__init__(f"{path}: {reason}" if path else reason)


@dataclass(frozen=True)
class AdmissionRequest:
    """The fields of `request` the webhook uses; `object`/`old_object` stay raw data."""

    uid: str
    operation: str
    group: str
    version: str
    kind: str
    resource: str
    sub_resource: str = ""
    namespace: str = ""
    name: str = ""
    dry_run: bool = False
    user: str = ""  # userInfo.username: who sent the request
    object: JsonObject | None = field(default=None, compare=False)
    old_object: JsonObject | None = field(default=None, compare=False)

    @property
    def ref(self) -> str:
        """`Kind ns/name` for messages and logs."""
        name = self.name or _meta(self.object).get("name") or _meta(self.object).get("generateName")
        where = f"{self.namespace}/{name or '<unnamed>'}" if self.namespace else name
        return f"{self.kind} {where or '<unnamed>'}"


@dataclass(frozen=True)
class Outcome:
    """What to answer: allowed, or denied with a status code >= 400, reason and message."""

    allowed: bool
    code: int = 200
    reason: str = ""
    message: str = ""
    warnings: tuple[str, ...] = ()
    patch: tuple[PatchOp, ...] = ()

    def __post_init__(self) -> None:
        if not self.allowed and (self.code < 400 or not self.message):
            raise ValueError("a denial needs a status code >= 400 and a message")
        if not self.allowed and self.patch:
            raise ValueError("a denial never carries a patch")


# The one place a verdict of the core becomes an HTTP status code.
_HTTP_CODE = {Verdict.DENIED: 403, Verdict.INVALID: 400}


def outcome_of(decision: Decision) -> Outcome:
    """The answer for a decision: allowed with its warnings, or denied with its status code,
    reason and message."""
    if decision.allowed:
        return Outcome(True, warnings=decision.warnings)
    code = _HTTP_CODE[decision.verdict]
    return Outcome(False, code, decision.reason, decision.message, decision.warnings)


def _meta(obj: Any) -> Mapping[str, Any]:
    if isinstance(obj, Mapping):
        metadata = obj.get("metadata")
        if isinstance(metadata, Mapping):
            return metadata
    return {}


def _string(value: Any, path: str, required: bool = False) -> str:
    if value is None and not required:
        return ""
    if not isinstance(value, str) or (required and not value):
        raise BadReview(
            path, "required, must be a non-empty string" if required else "must be a string"
        )
    return value


def _mapping(value: Any, path: str, required: bool = False) -> Mapping[str, Any] | None:
    if value is None and not required:
        return None
    if not isinstance(value, dict):  # what orjson makes of a JSON object
        raise BadReview(path, "required, must be an object" if required else "must be an object")
    return value


def parse_review(body: bytes) -> AdmissionRequest:
    """Decode and validate an AdmissionReview v1 body; BadReview says what is wrong."""
    try:
        document = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise BadReview("", f"body is not valid JSON: {exc}") from None
    review = _mapping(document, "", required=True)
    assert review is not None
    api_version = review.get("apiVersion")
    if not isinstance(api_version, str) or api_version != ADMISSION_API_VERSION:
        raise BadReview("apiVersion", f"must be {ADMISSION_API_VERSION}, got {api_version!r:.80}")
    if not isinstance(review.get("kind"), str) or review["kind"] != ADMISSION_KIND:
        raise BadReview("kind", f"must be {ADMISSION_KIND}, got {review.get('kind')!r:.80}")
    request = _mapping(review.get("request"), "request", required=True)
    assert request is not None
    operation = request.get("operation")
    if not isinstance(operation, str) or operation not in OPERATIONS:
        raise BadReview(
            "request.operation",
            f"must be one of {', '.join(sorted(OPERATIONS))}, got {operation!r:.80}",
        )
    gvk = _mapping(request.get("kind"), "request.kind", required=True)
    gvr = _mapping(request.get("resource"), "request.resource", required=True)
    assert gvk is not None and gvr is not None
    dry_run = request.get("dryRun")
    if dry_run is not None and not isinstance(dry_run, bool):
        raise BadReview("request.dryRun", "must be a boolean")
    obj = _mapping(request.get("object"), "request.object")
    old = _mapping(request.get("oldObject"), "request.oldObject")
    if operation in ("CREATE", "UPDATE") and obj is None:
        raise BadReview("request.object", f"required for {operation}")
    return AdmissionRequest(
        uid=_string(request.get("uid"), "request.uid", required=True),
        operation=operation,
        group=_string(gvk.get("group"), "request.kind.group"),
        version=_string(gvk.get("version"), "request.kind.version"),
        kind=_string(gvk.get("kind"), "request.kind.kind", required=True),
        resource=_string(gvr.get("resource"), "request.resource.resource", required=True),
        sub_resource=_string(request.get("subResource"), "request.subResource"),
        namespace=_string(request.get("namespace"), "request.namespace"),
        name=_string(request.get("name"), "request.name"),
        dry_run=bool(dry_run),
        user=_username(request.get("userInfo")),
        object=dict(obj) if obj is not None else None,
        old_object=dict(old) if old is not None else None,
    )


def _username(user_info: Any) -> str:
    name = user_info.get("username") if isinstance(user_info, Mapping) else None
    return name if isinstance(name, str) else ""


def _clean_warning(text: str) -> str:
    flat = "".join(ch if ch.isprintable() else " " for ch in str(text)).strip()
    return flat[:MAX_WARNING_LENGTH]


def encode_patch(ops: Sequence[PatchOp]) -> str:
    """An RFC 6902 JSON patch as the base64 string AdmissionResponse.patch carries."""
    return base64.b64encode(orjson.dumps(list(ops))).decode("ascii")


def review_response(uid: str, outcome: Outcome, mutating: bool) -> AdmissionReviewOut:
    """The AdmissionReview answer; a patch is emitted only when `mutating` and non-empty."""
    response: AdmissionResponse = {"uid": uid, "allowed": outcome.allowed}
    if not outcome.allowed:
        response["status"] = {
            "code": outcome.code,
            "message": outcome.message,
            "reason": outcome.reason or "Forbidden",
        }
    warnings = [w for w in dict.fromkeys(_clean_warning(w) for w in outcome.warnings) if w]
    if warnings:
        response["warnings"] = warnings
    if mutating and outcome.allowed and outcome.patch:
        response["patch"] = encode_patch(outcome.patch)
        response["patchType"] = "JSONPatch"
    return {"apiVersion": ADMISSION_API_VERSION, "kind": ADMISSION_KIND, "response": response}
