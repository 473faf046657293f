"""The webhook app over KubeBackend + ClusterLedger: a stale cache fails closed and says why."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from quota.settings import Settings
from tests.fakeapi import FakeApiServer
from tests.webhook.builders import AppClient, submit
from tests.webhook.kube.conftest import FAST
from tests.webhook.kube.objects import cluster_objects, gpu_pod
from tests.webhook.kube.test_backend import eventually
from webhook.edge.app import create_app
from webhook.kube.backend import KubeBackend
from webhook.kube.client import KubeClient
from webhook.ledger.cluster import ClusterLedger

pytestmark = pytest.mark.integration


def admit(http: AppClient, name: str, uid: str) -> dict:
    return submit(
        lambda path, doc: http.post(path, json=doc).json()["response"], gpu_pod(name), uid
    )


@pytest.fixture
def http(api: FakeApiServer, client: KubeClient) -> Iterator[AppClient]:
    for obj in cluster_objects(5):
        api.create(obj)
    settings = Settings(placement="Off", admission_deadline_seconds=30)  # not under test here
    backend = KubeBackend(client, FAST, max_staleness=0.3)
    ledger = ClusterLedger(client, backend, settings)
    backend.attach(ledger)
    app = create_app(backend, ledger, settings)
    backend.start()  # the app's lifespan does this when served
    try:
        yield AppClient(app)
    finally:
        backend.stop()


def test_stale_cache_makes_readyz_fail_and_admission_deny_with_the_reason(
    api: FakeApiServer, http: AppClient
) -> None:
    eventually(lambda: http.get("/readyz").status_code == 200)
    first = admit(http, "p0", "uid-0")
    assert first["allowed"], first

    api.unreachable("reset")
    eventually(lambda: http.get("/readyz").status_code == 503)
    assert "stale for" in http.get("/readyz").json()["reason"]
    answer = admit(http, "p1", "uid-1")
    assert answer["allowed"] is False
    assert answer["status"]["reason"] == "NotReady"
    assert "stale for" in answer["status"]["message"]

    api.reachable()
    eventually(lambda: http.get("/readyz").status_code == 200)
    assert admit(http, "p1", "uid-1")["allowed"]
