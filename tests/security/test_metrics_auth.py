"""/metrics shows every team's usage: on a live cluster only whom the API server allows reads it.

The app is wired as `draquota serve --kubeconfig` wires it (`MetricsAuth` over a KubeClient)
against the fake API server, which answers TokenReviews and SubjectAccessReviews for the
tokens and grants each test sets up (tests/fakeapi/reviews.py).
"""

from __future__ import annotations

import logging

import httpx
import pytest

from quota.settings import Settings
from tests.fakeapi import FakeApiServer
from tests.webhook.builders import AppClient, FakeBackend, cluster_state
from webhook.edge.app import create_app
from webhook.kube.client import KubeClient
from webhook.kube.metricsauth import AnswerCache, MetricsAuth
from webhook.ledger.memory import MemoryLedger

pytestmark = pytest.mark.integration

READER = "system:serviceaccount:monitoring:prometheus"
USER = "system:serviceaccount:team-a:alice"


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def scrape(api: FakeApiServer, client: KubeClient, clock: Clock) -> AppClient:
    api.reviews.token("reader-token", READER)
    api.reviews.token("user-token", USER)
    api.reviews.allow(READER, "/metrics")
    backend = FakeBackend(cluster_state(1))
    auth = MetricsAuth(client, AnswerCache(clock=clock))
    return AppClient(
        create_app(
            backend, MemoryLedger(backend.state, Settings()), Settings(), metrics_auth=auth.check
        )
    )


def get(http: AppClient, authorization: str | None = None) -> httpx.Response:
    headers = {"Authorization": authorization} if authorization is not None else {}
    return http.request("GET", "/metrics", headers=headers)


def test_without_a_bearer_token_metrics_answers_401(scrape: AppClient) -> None:
    for header in (None, "", "Basic cmVhZGVyOnB3", "Bearer", "Bearer a b"):
        answer = get(scrape, header)
        assert answer.status_code == 401, header
        assert answer.headers["WWW-Authenticate"].startswith("Bearer")
        assert "draquota_" not in answer.text


def test_a_token_the_api_server_does_not_accept_answers_401(
    api: FakeApiServer, scrape: AppClient
) -> None:
    answer = get(scrape, "Bearer forged-token")
    assert answer.status_code == 401
    assert api.reviews.count == {"TokenReview": 1}  # no access review for nobody


def test_an_authenticated_user_without_the_grant_answers_403(scrape: AppClient) -> None:
    answer = get(scrape, "Bearer user-token")
    assert answer.status_code == 403
    assert USER in answer.json()["error"]
    assert "draquota_" not in answer.text


def test_the_granted_reader_gets_the_metrics(scrape: AppClient) -> None:
    answer = get(scrape, "Bearer reader-token")
    assert answer.status_code == 200
    assert "draquota_cluster_queue_nominal_quota{" in answer.text


def test_a_scraper_costs_one_review_pair_per_minute(
    api: FakeApiServer, scrape: AppClient, clock: Clock
) -> None:
    for _ in range(3):
        assert get(scrape, "Bearer reader-token").status_code == 200
    assert api.reviews.count == {"TokenReview": 1, "SubjectAccessReview": 1}
    clock.now += 61
    assert get(scrape, "Bearer reader-token").status_code == 200
    assert api.reviews.count == {"TokenReview": 2, "SubjectAccessReview": 2}


def test_refusals_are_remembered_briefly_so_a_new_grant_takes_effect(
    api: FakeApiServer, scrape: AppClient, clock: Clock
) -> None:
    assert get(scrape, "Bearer user-token").status_code == 403
    api.reviews.allow(USER, "/metrics")
    assert get(scrape, "Bearer user-token").status_code == 403  # remembered
    assert api.reviews.count["SubjectAccessReview"] == 1
    clock.now += 11
    assert get(scrape, "Bearer user-token").status_code == 200


def test_an_unreachable_api_server_grants_nothing_and_is_not_remembered(
    api: FakeApiServer, scrape: AppClient
) -> None:
    api.unreachable("reset")
    answer = get(scrape, "Bearer reader-token")
    assert answer.status_code == 503
    assert "draquota_" not in answer.text
    api.reachable()
    assert get(scrape, "Bearer reader-token").status_code == 200


def test_tokens_are_never_logged(
    api: FakeApiServer, scrape: AppClient, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    get(scrape, "Bearer forged-token")
    get(scrape, "Bearer reader-token")
    api.unreachable("reset")
    get(scrape, "Bearer user-token")
    api.reachable()
    assert caplog.records  # the unreachable API server was logged
    for token in ("forged-token", "reader-token", "user-token"):
        assert token not in caplog.text
