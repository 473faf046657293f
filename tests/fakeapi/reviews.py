"""TokenReview and SubjectAccessReview answers of the fake API server.

Tests say which tokens are whose (`token`) and who may get which non-resource URL
(`allow`); every other token is not authenticated and every other request is not allowed,
as with RBAC. The answers have the shape of the real API server's: a TokenReview's
`status.authenticated` and `status.user` (`error` when refused), a SubjectAccessReview's
`status.allowed` and `reason`, with the spec sent echoed back. `count` is how many of each
were asked (what a cache saves).
"""

from __future__ import annotations

from collections import Counter
from typing import Any

__all__ = ["ACCESS_REVIEWS", "REVIEW_PATHS", "TOKEN_REVIEWS", "Reviews"]

TOKEN_REVIEWS = "/apis/authentication.k8s.io/v1/tokenreviews"
ACCESS_REVIEWS = "/apis/authorization.k8s.io/v1/subjectaccessreviews"
REVIEW_PATHS = (TOKEN_REVIEWS, ACCESS_REVIEWS)

Obj = dict[str, Any]


class Reviews:
    def __init__(self) -> None:
        self.users: dict[str, Obj] = {}  # token -> status.user
        self.allowed: set[tuple[str, str, str]] = set()  # (username, verb, path)
        self.count: Counter[str] = Counter()

    def token(self, token: str, username: str, groups: tuple[str, ...] = ()) -> None:
        self.users[token] = {
            "username": username,
            "uid": f"uid-{username}",
            "groups": [*groups, "system:authenticated"],
        }

    def allow(self, username: str, path: str, verb: str = "get") -> None:
        self.allowed.add((username, verb, path))

    def answer(self, path: str, review: Obj) -> Obj:
        kind = "TokenReview" if path == TOKEN_REVIEWS else "SubjectAccessReview"
        self.count[kind] += 1
        spec = review.get("spec") or {}
        if kind == "TokenReview":
            user = self.users.get(spec.get("token", ""))
            status: Obj = (
                {"authenticated": True, "user": user}
                if user
                else {
                    "user": {},
                    "error": "[invalid bearer token, token lookup failed]",
                }
            )
        else:
            wanted = spec.get("nonResourceAttributes") or {}
            key = (spec.get("user", ""), wanted.get("verb", ""), wanted.get("path", ""))
            status = (
                {"allowed": True, "reason": "allowed by the test"}
                if key in self.allowed
                else {"allowed": False}
            )
        return {**review, "metadata": {"creationTimestamp": None}, "status": status}
