"""Shapes of the `admission.k8s.io/v1` AdmissionReview objects the webhook reads and writes."""

from __future__ import annotations

from typing import Any, Literal, TypedDict

__all__ = [
    "ADMISSION_API_VERSION",
    "ADMISSION_KIND",
    "OPERATIONS",
    "AdmissionRequestBody",
    "AdmissionResponse",
    "AdmissionReviewIn",
    "AdmissionReviewOut",
    "GroupVersionKind",
    "GroupVersionResource",
    "JsonObject",
    "Operation",
    "PatchOp",
    "PatchVerb",
    "ResponseStatus",
    "StatusDetails",
]

ADMISSION_API_VERSION = "admission.k8s.io/v1"
ADMISSION_KIND = "AdmissionReview"

JsonObject = dict[str, Any]
Operation = Literal["CREATE", "UPDATE", "DELETE", "CONNECT"]
OPERATIONS: frozenset[str] = frozenset({"CREATE", "UPDATE", "DELETE", "CONNECT"})


class GroupVersionKind(TypedDict):
    group: str
    version: str
    kind: str


class GroupVersionResource(TypedDict):
    group: str
    version: str
    resource: str


class _AdmissionRequestRequired(TypedDict):
    uid: str
    kind: GroupVersionKind
    resource: GroupVersionResource
    operation: Operation


class AdmissionRequestBody(_AdmissionRequestRequired, total=False):
    subResource: str
    requestKind: GroupVersionKind
    requestResource: GroupVersionResource
    requestSubResource: str
    name: str
    namespace: str
    userInfo: JsonObject
    object: JsonObject | None
    oldObject: JsonObject | None
    dryRun: bool
    options: JsonObject | None


class AdmissionReviewIn(TypedDict):
    apiVersion: str
    kind: str
    request: AdmissionRequestBody


class StatusDetails(TypedDict, total=False):
    retryAfterSeconds: int  # the API server sends it on as the Retry-After header


class ResponseStatus(TypedDict, total=False):
    code: int
    message: str
    reason: str
    details: StatusDetails


class _AdmissionResponseRequired(TypedDict):
    uid: str
    allowed: bool


class AdmissionResponse(_AdmissionResponseRequired, total=False):
    status: ResponseStatus
    warnings: list[str]
    patch: str
    patchType: Literal["JSONPatch"]


class AdmissionReviewOut(TypedDict):
    apiVersion: str
    kind: str
    response: AdmissionResponse


PatchVerb = Literal["add", "replace", "remove", "test"]


class PatchOp(TypedDict, total=False):
    op: PatchVerb
    path: str
    value: Any
