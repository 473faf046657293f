"""Who may read /metrics: the API server says, as controller-runtime's secure metrics do.

`/metrics` shows every team's quota and usage, so on a live cluster it answers only a
client the API server vouches for: the client sends `Authorization: Bearer <token>`, a
TokenReview (authentication.k8s.io/v1) says who it is, and a SubjectAccessReview
(authorization.k8s.io/v1) on the non-resource URL `/metrics`, verb `get`, says whether it
may (the ClusterRole `draquota-metrics-reader` grants that). 401 without a token or with
one the API server does not accept, 403 when not allowed, 200 otherwise.

The pure part (`bearer_token`, `token_review`, `access_review`, `verdict`) reads and writes
review objects; `MetricsAuth` sends them and keeps answers in `AnswerCache`, so that a
scraper costs at most one pair of reviews per `allowed_ttl`. Invariants: a token is never
logged or kept (the cache is keyed by its SHA-256); an error talking to the API server is
answered 503 and not cached, so access is never granted by a failure.
"""

from __future__ import annotations

import hashlib
import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

__all__ = [
    "METRICS_PATH",
    "AnswerCache",
    "MetricsAuth",
    "Verdict",
    "access_review",
    "bearer_token",
    "token_review",
    "verdict",
]

METRICS_PATH = "/metrics"
TOKEN_REVIEWS = "/apis/authentication.k8s.io/v1/tokenreviews"
ACCESS_REVIEWS = "/apis/authorization.k8s.io/v1/subjectaccessreviews"

log = logging.getLogger("draquota.metricsauth")

Obj = dict[str, Any]


@dataclass(frozen=True)
class Verdict:
    """The HTTP answer to one scrape: `code` 200, 401, 403 (or 503: no answer), and why."""

    code: int
    reason: str

    @property
    def allowed(self) -> bool:
        return self.code == 200


UNAUTHENTICATED = Verdict(401, "a bearer token the API server accepts is required")


def bearer_token(header: str | None) -> str | None:
    """The token of an `Authorization: Bearer <token>` header; None for anything else."""
    if not header:
        return None
    scheme, _, token = header.strip().partition(" ")
    token = token.strip()
    if scheme.lower() != "bearer" or not token or " " in token:
        return None
    return token


def token_review(token: str) -> Obj:
    return {
        "apiVersion": "authentication.k8s.io/v1",
        "kind": "TokenReview",
        "spec": {"token": token},
    }


def access_review(user: Mapping[str, Any]) -> Obj:
    """May the user of a TokenReview's `status.user` get /metrics?"""
    spec: Obj = {
        "user": user.get("username", ""),
        "groups": list(user.get("groups") or []),
        "nonResourceAttributes": {"path": METRICS_PATH, "verb": "get"},
    }
    if user.get("uid"):
        spec["uid"] = user["uid"]
    if user.get("extra"):
        spec["extra"] = dict(user["extra"])
    return {"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview", "spec": spec}


def verdict(token_status: Mapping[str, Any], access_status: Mapping[str, Any] | None) -> Verdict:
    """The answer the two reviews' `status` give (`access_status` None: not asked yet)."""
    if not token_status.get("authenticated"):
        return UNAUTHENTICATED
    name = str((token_status.get("user") or {}).get("username", ""))
    if access_status is None or not access_status.get("allowed") or access_status.get("denied"):
        return Verdict(403, f'user "{name}" may not get {METRICS_PATH}')
    return Verdict(200, f'user "{name}" may get {METRICS_PATH}')


class AnswerCache:
    """Verdicts by token digest: allowed ones for `allowed_ttl` seconds, refusals for
    `refused_ttl`, at most `size` entries (the least recently used go first)."""

    def __init__(
        self,
        allowed_ttl: float = 60.0,
        refused_ttl: float = 10.0,
        size: int = 1024,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.allowed_ttl = allowed_ttl
        self.refused_ttl = refused_ttl
        self.size = size
        self.clock = clock
        self._entries: OrderedDict[bytes, tuple[float, Verdict]] = OrderedDict()
        self._lock = threading.Lock()

    @staticmethod
    def key(token: str) -> bytes:
        return hashlib.sha256(token.encode()).digest()

    def get(self, token: str) -> Verdict | None:
        key = self.key(token)
        with self._lock:
            entry = self._entries.get(key)
            if entry is None:
                return None
            expires, answer = entry
            if self.clock() >= expires:
                del self._entries[key]
                return None
            self._entries.move_to_end(key)
            return answer

    def put(self, token: str, answer: Verdict) -> None:
        ttl = self.allowed_ttl if answer.allowed else self.refused_ttl
        key = self.key(token)
        with self._lock:
            self._entries[key] = (self.clock() + ttl, answer)
            self._entries.move_to_end(key)
            while len(self._entries) > self.size:
                self._entries.popitem(last=False)


class Poster(Protocol):
    """What `MetricsAuth` needs of `webhook.kube.client.KubeClient`."""

    def request(self, method: str, path: str, query: Any = (), body: Any = None) -> Obj: ...


class MetricsAuth:
    """`check(authorization_header)` -> the Verdict for one scrape (blocking on a cache miss)."""

    def __init__(self, client: Poster, cache: AnswerCache | None = None) -> None:
        self.client = client
        self.cache = cache or AnswerCache()

    def check(self, header: str | None) -> Verdict:
        token = bearer_token(header)
        if token is None:
            return UNAUTHENTICATED
        cached = self.cache.get(token)
        if cached is not None:
            return cached
        try:
            answer = self._review(token)
        except Exception as exc:  # ApiError, TransportError: no answer is not a yes
            log.warning("cannot review a /metrics client", extra={"error": str(exc)})
            return Verdict(503, "cannot ask the API server who the client is: try again")
        self.cache.put(token, answer)
        return answer

    def _review(self, token: str) -> Verdict:
        reviewed = self.client.request("POST", TOKEN_REVIEWS, body=token_review(token))
        token_status = reviewed.get("status") or {}
        if not token_status.get("authenticated"):
            return verdict(token_status, None)
        user = token_status.get("user") or {}
        access = self.client.request("POST", ACCESS_REVIEWS, body=access_review(user))
        return verdict(token_status, access.get("status") or {})
