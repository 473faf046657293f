"""A replica that is starting has an empty cluster view: it must refuse, never admit a
pod of a queue as "not managed" because it has not read the queue yet."""

from __future__ import annotations

import time

import pytest

from quota.settings import Settings
from tests.fakeapi import FakeApiServer
from tests.webhook.builders import AppClient, review
from tests.webhook.kube.conftest import FAST, InformersHeld
from tests.webhook.kube.objects import cluster_objects, gpu_pod
from webhook.edge.app import create_app
from webhook.kube.backend import KubeBackend
from webhook.kube.client import KubeClient
from webhook.ledger.cluster import ClusterLedger

pytestmark = pytest.mark.integration


def test_a_pod_sent_while_the_caches_are_being_made_is_refused_not_waved_through(
    api: FakeApiServer, client: KubeClient, informers_held: InformersHeld
) -> None:
    for obj in cluster_objects(1, None):
        api.create(obj)
    settings = Settings(placement="Off")
    backend = KubeBackend(client, FAST)
    ledger = ClusterLedger(client, backend, settings)
    backend.attach(ledger)
    http = AppClient(create_app(backend, ledger, settings))
    backend.start()
    try:
        assert informers_held.entered.wait(10)  # API versions discovered, no informer made yet
        deadline = time.monotonic() + 1.0  # time enough for the ledger to warm on an empty view
        while ledger.warming() and time.monotonic() < deadline:
            time.sleep(0.02)
        answer = http.post("/validate", json=review(gpu_pod("early"))).json()["response"]
        assert not answer["allowed"]
        assert answer["status"]["reason"] == "NotReady"
    finally:
        informers_held.release.set()
        backend.stop()
