"""The pure part of /metrics authorization: headers, review objects, verdicts, the cache."""

from __future__ import annotations

from webhook.kube.metricsauth import (
    AnswerCache,
    Verdict,
    access_review,
    bearer_token,
    token_review,
    verdict,
)

# status.user of a TokenReview for a ServiceAccount token, as the API server answers it
USER = {
    "username": "system:serviceaccount:monitoring:prometheus",
    "uid": "5d7c8e1a-0000-4000-8000-000000000001",
    "groups": [
        "system:serviceaccounts",
        "system:serviceaccounts:monitoring",
        "system:authenticated",
    ],
    "extra": {"authentication.kubernetes.io/credential-id": ["JTI=abc"]},
}


def test_only_a_bearer_header_carries_a_token() -> None:
    assert bearer_token("Bearer abc.def") == "abc.def"
    assert bearer_token("bearer  abc ") == "abc"
    for header in (None, "", "Bearer", "Bearer ", "Basic abc", "Bearer a b", "abc"):
        assert bearer_token(header) is None


def test_the_access_review_asks_for_get_on_metrics_as_the_reviewed_user() -> None:
    assert token_review("t")["spec"] == {"token": "t"}
    review = access_review(USER)
    assert review["kind"] == "SubjectAccessReview"
    assert review["spec"] == {
        "user": USER["username"],
        "uid": USER["uid"],
        "groups": USER["groups"],
        "extra": USER["extra"],
        "nonResourceAttributes": {"path": "/metrics", "verb": "get"},
    }


def test_verdicts() -> None:
    refused = {"user": {}, "error": "[invalid bearer token, token lookup failed]"}
    assert verdict(refused, None).code == 401
    known = {"authenticated": True, "user": USER}
    assert verdict(known, {"allowed": False}).code == 403
    assert verdict(known, {"allowed": True, "denied": True}).code == 403
    assert verdict(known, {"allowed": True, "reason": "RBAC"}).code == 200
    assert USER["username"] in verdict(known, {"allowed": False}).reason


class Clock:
    now = 0.0

    def __call__(self) -> float:
        return self.now


def test_allowed_answers_last_longer_than_refusals() -> None:
    clock = Clock()
    cache = AnswerCache(allowed_ttl=60, refused_ttl=10, clock=clock)
    cache.put("reader", Verdict(200, "ok"))
    cache.put("user", Verdict(403, "no"))
    clock.now = 30
    assert cache.get("reader") == Verdict(200, "ok")
    assert cache.get("user") is None
    clock.now = 60
    assert cache.get("reader") is None


def test_the_cache_is_bounded_and_forgets_the_least_recently_used() -> None:
    cache = AnswerCache(size=2, clock=Clock())
    cache.put("a", Verdict(200, "a"))
    cache.put("b", Verdict(200, "b"))
    assert cache.get("a") is not None
    cache.put("c", Verdict(200, "c"))
    assert cache.get("b") is None
    assert cache.get("a") is not None and cache.get("c") is not None


def test_the_cache_keeps_no_token() -> None:
    cache = AnswerCache(clock=Clock())
    cache.put("secret-token", Verdict(200, "ok"))
    assert all(b"secret-token" not in key for key in cache._entries)
