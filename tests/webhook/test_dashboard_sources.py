"""Where the dashboard reads from (webhook.dashboard.sources), against the fake API server
holding the recorded cluster: informers with cluster-wide read access, namespace LISTs after
a 403, and what the page says when even LocalQueues may not be read."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from quota.settings import Settings
from tests.fakeapi import ApiError, FakeApiServer
from tests.webhook.dashboard_lab import admin_view, lab_objects, of
from tests.webhook.kube.conftest import write_kubeconfig
from webhook.commands._cluster import ClusterUnavailable
from webhook.dashboard.model import namespace_cards
from webhook.dashboard.sources import ClusterSource, NamespaceSource, Source, choose
from webhook.kube.client import KubeClient

pytestmark = pytest.mark.integration


class _Api(FakeApiServer):
    """The fake API server, refusing LISTs as RBAC would: `cluster` plurals at cluster scope,
    `namespaced` plurals in any namespace."""

    def __init__(self) -> None:
        super().__init__(resource_versions=("v1",), bookmark_interval=0.1)
        self.cluster: set[str] = set()
        self.namespaced: set[str] = set()

    def route(self, h: Any, method: str, path: str, query: dict[str, str]) -> None:
        plural = path.rstrip("/").rsplit("/", 1)[-1]
        refused = self.namespaced if "/namespaces/" in path else self.cluster
        if method == "GET" and plural in refused:
            raise ApiError(403, "Forbidden", f'{plural} is forbidden: User "tester" cannot list')
        super().route(h, method, path, query)


@pytest.fixture
def api() -> Iterator[_Api]:
    server = _Api()
    server.start()
    for obj in lab_objects():
        server.create(obj)
    yield server
    server.stop()


@pytest.fixture
def client(api: _Api, tmp_path: Path) -> Iterator[KubeClient]:
    kube = KubeClient.from_kubeconfig(str(write_kubeconfig(tmp_path / "kubeconfig", api.url)))
    yield kube
    kube.api_client.close()


def _loaded(source: Source, timeout: float = 10.0) -> dict[str, Any]:
    source.start()
    deadline = time.monotonic() + timeout
    while (model := source.model()).get("loading"):
        assert time.monotonic() < deadline, model
        time.sleep(0.05)
    return model


def test_with_cluster_wide_read_access_it_watches_and_shows_every_cluster_queue(
    client: KubeClient,
) -> None:
    source = choose(client, Settings(), "research")
    assert isinstance(source, ClusterSource)
    try:
        model = _loaded(source)
    finally:
        source.stop()
    cards, rows = admin_view(lab_objects())
    assert model["queues"] == cards
    assert model["waiting"] == rows  # pods cached without status: reasons from their Events
    assert model["scope"].startswith("Every ClusterQueue, kept current by watches")


@pytest.mark.parametrize("refused", ["clusterqueues", "pods", "quotaledgers"])
def test_a_403_at_cluster_scope_shows_the_namespace_from_its_local_queues(
    api: _Api, client: KubeClient, refused: str
) -> None:
    api.cluster = {refused}
    source = choose(client, Settings(), "research")
    assert isinstance(source, NamespaceSource)
    model = _loaded(source)
    assert model["scope"] == (
        "Namespace research: its LocalQueues and what waits there, read every 2 s "
        f"(cannot list {refused} at cluster scope: 403 Forbidden)"
    )
    assert model["queues"] == namespace_cards(of(lab_objects(), "LocalQueue", "research"))
    _, rows = admin_view(lab_objects())
    assert model["waiting"] == rows  # both research's: wait-0 and the Job train
    assert model["problems"] == []


def test_without_draquotas_user_roles_the_page_says_what_to_install(
    api: _Api, client: KubeClient
) -> None:
    api.cluster = {"clusterqueues"}
    api.namespaced = {"localqueues"}
    model = _loaded(choose(client, Settings(), "research"))
    assert model["queues"] == []
    assert model["problems"] == [
        "cannot list localqueues in namespace research (403 Forbidden): an admin installs "
        "draquota's user roles (manifests/base/user-roles.yaml)"
    ]
    assert [row["key"] for row in model["waiting"]] == ["research/wait-0", "research/train"]


def test_an_unreachable_api_server_is_named(api: _Api, client: KubeClient) -> None:
    api.unreachable()
    with pytest.raises(ClusterUnavailable, match=rf"^{api.url}: cannot reach the API server"):
        choose(client, Settings(), "research")
