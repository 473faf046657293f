"""One `Informer` (webhook/kube/informer.py) against the fake API server, without a backend.

tests/webhook/kube/test_backend.py checks the informers together through `KubeBackend`
(watch events, resuming a broken watch, bookmarks, relisting after a missed compaction,
readiness under outages). Here, what only one informer shows: a list whose continuation
expires between pages starts over, objects the cache cannot hold are skipped and the rest
kept, staleness measured on the injected clock from the moment the watch broke, and `stop`.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import pytest

from tests.fakeapi import FakeApiServer
from tests.webhook.kube.conftest import FAST
from tests.webhook.kube.objects import NAMESPACE, gpu_pod
from webhook.kube.client import KubeClient, Obj, Timeout, WatchStream
from webhook.kube.informer import Informer
from webhook.kube.resources import POD
from webhook.store.clusterstate import ClusterState

pytestmark = pytest.mark.integration


def eventually(predicate: Callable[[], object], timeout: float = 10.0) -> None:
    """Wait until predicate() is truthy; fail the test if it never is (bounded)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.02)
    assert predicate(), "condition never became true"


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


class CompactingAfterFirstPage:
    """A client that compacts the API server's history right after the first page of the
    first LIST, as etcd compaction between two pages does: the continuation expires."""

    def __init__(self, client: KubeClient, api: FakeApiServer) -> None:
        self._client, self._api = client, api
        self.lists = 0  # LISTs started (a first page)
        self._lock = threading.Lock()

    def request(
        self,
        method: str,
        path: str,
        query: Sequence[tuple[str, Any]] = (),
        body: Obj | None = None,
        timeout: Timeout | None = None,
    ) -> Obj:
        answer = self._client.request(method, path, query, body, timeout)
        if not any(key == "continue" for key, _ in query):
            with self._lock:
                self.lists += 1
                if self.lists == 1:
                    self._api.create(gpu_pod("between-pages"))
                    self._api.store.compact()
        return answer

    def watch(
        self, path: str, query: Sequence[tuple[str, Any]], read_timeout: float
    ) -> WatchStream:
        return self._client.watch(path, query, read_timeout)


@pytest.fixture
def state() -> ClusterState:
    return ClusterState()


@pytest.fixture
def run() -> Iterator[Callable[[Informer], Informer]]:
    started: list[Informer] = []

    def start(informer: Informer) -> Informer:
        started.append(informer)
        informer.start()
        return informer

    yield start
    for informer in started:
        informer.stop()


def _names(state: ClusterState, kind: str = "Pod") -> set[str]:
    return {obj["metadata"]["name"] for obj in state.list(kind)}


def test_a_list_whose_continuation_expired_starts_over_and_misses_nothing(
    api: FakeApiServer, client: KubeClient, state: ClusterState, run: Any
) -> None:
    for i in range(5):  # page size 2: three pages
        api.create(gpu_pod(f"p{i}"))
    compacting = CompactingAfterFirstPage(client, api)
    informer = run(Informer(compacting, POD, state, FAST))  # type: ignore[arg-type]
    eventually(lambda: informer.synced)
    assert _names(state) == {f"p{i}" for i in range(5)} | {"between-pages"}
    assert compacting.lists == 2 and informer.lists == 1  # the first never completed


def test_objects_the_cache_cannot_hold_are_skipped_and_the_rest_kept(
    api: FakeApiServer, client: KubeClient, state: ClusterState, run: Any
) -> None:
    for name in ("good-0", "good-1"):
        api.create(gpu_pod(name))
    bad = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": 5}, "spec": {}}
    pods = api.resource("Pod")
    api.store.create(pods, "zz", bad)  # a name that is not a string: no object can be keyed
    informer = run(Informer(client, POD, state, FAST))
    eventually(lambda: informer.synced)
    assert _names(state) == {"good-0", "good-1"}
    changed = {**bad, "metadata": {"name": 5, "labels": {"a": "b"}}}
    api.store.update(pods, "zz", 5, changed)  # type: ignore[arg-type]
    api.create(gpu_pod("good-2"))  # after the bad event: the watch goes on
    eventually(lambda: "good-2" in _names(state))
    assert _names(state) == {"good-0", "good-1", "good-2"}


def test_an_informer_is_stale_from_the_moment_its_watch_broke_until_it_is_back(
    api: FakeApiServer, client: KubeClient, state: ClusterState, run: Any
) -> None:
    clock = Clock()
    informer = Informer(client, POD, state, FAST, clock=clock)
    clock.now += 5
    assert informer.stale_for() == 5  # never synced: stale since it was made
    run(informer)
    eventually(lambda: informer.synced and informer.disconnected_since is None)
    assert informer.stale_for() == 0
    api.unreachable("reset")
    eventually(lambda: informer.disconnected_since is not None)
    broke = informer.disconnected_since
    assert broke is not None and informer.last_error
    clock.now += 7
    assert informer.stale_for() == clock.now - broke
    api.create(gpu_pod("during"))
    api.reachable()
    eventually(lambda: "during" in _names(state))
    eventually(lambda: informer.disconnected_since is None)
    assert informer.stale_for() == 0 and informer.last_error == ""


def test_items_of_a_built_in_list_get_their_kind_and_version(
    api: FakeApiServer, client: KubeClient, state: ClusterState, run: Any
) -> None:
    api.create(gpu_pod("p0"))
    informer = run(Informer(client, POD, state, FAST))
    eventually(lambda: informer.synced)
    cached = state.get("Pod", NAMESPACE, "p0")
    assert cached is not None and (cached["kind"], cached["apiVersion"]) == ("Pod", "v1")
    assert informer.version == str(api.store.rv)


def test_stop_ends_the_loop_while_a_watch_is_open(
    api: FakeApiServer, client: KubeClient, state: ClusterState
) -> None:
    informer = Informer(client, POD, state, FAST)
    informer.start()
    eventually(lambda: informer.synced)
    informer.stop(timeout=5)
    assert informer._thread is not None and not informer._thread.is_alive()
    api.create(gpu_pod("after-stop"))
    time.sleep(0.2)  # give a (wrongly) running watch the chance to apply it
    assert "after-stop" not in _names(state)
