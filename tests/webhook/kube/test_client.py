"""`KubeClient` (webhook/kube/client.py) against the fake API server over real HTTP: JSON in and
out, the API server's Status turned into `ApiError` (code, reason, message; 410 is `gone`),
transport failures and timeouts as `TransportError` naming the request, and watch streams.

The client itself never retries: retrying is its callers' (the informer's backoff, the
ledger's conflict loop), tested in test_informer.py, test_backend.py and test_ledger.py.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest
from kubernetes import client as k8s

from tests.fakeapi import FakeApiServer
from tests.webhook.kube.objects import NAMESPACE, gpu_pod
from webhook.kube.client import ApiError, KubeClient, TransportError
from webhook.kube.resources import POD

pytestmark = pytest.mark.integration


def test_a_created_object_comes_back_as_the_api_server_stored_it(
    api: FakeApiServer, client: KubeClient
) -> None:
    created = client.request("POST", POD.path(NAMESPACE), body=gpu_pod("p0"))
    fetched = client.request("GET", POD.path(NAMESPACE, "p0"))
    assert fetched == created == api.objects("Pod")[0]
    assert created["metadata"]["uid"] and created["metadata"]["resourceVersion"]


def test_a_missing_object_is_an_api_error_with_the_servers_reason(client: KubeClient) -> None:
    with pytest.raises(ApiError) as raised:
        client.request("GET", POD.path(NAMESPACE, "nobody"))
    assert (raised.value.code, raised.value.reason) == (404, "NotFound")
    assert '"nobody" not found' in raised.value.message
    assert not raised.value.gone


def test_a_write_on_a_stale_version_is_a_conflict(api: FakeApiServer, client: KubeClient) -> None:
    created = client.request("POST", POD.path(NAMESPACE), body=gpu_pod("p0"))
    client.request("PUT", POD.path(NAMESPACE, "p0"), body=created)
    with pytest.raises(ApiError) as raised:
        client.request("PUT", POD.path(NAMESPACE, "p0"), body=created)  # its version is old now
    assert (raised.value.code, raised.value.reason) == (409, "Conflict")


def test_an_expired_list_continuation_is_gone(api: FakeApiServer, client: KubeClient) -> None:
    for i in range(3):
        api.create(gpu_pod(f"p{i}"))
    page = client.request("GET", POD.path(), [("limit", 1)])
    token = page["metadata"]["continue"]
    api.create(gpu_pod("later"))
    api.store.compact()  # the version the list was taken at is compacted away
    with pytest.raises(ApiError) as raised:
        client.request("GET", POD.path(), [("limit", 1), ("continue", token)])
    assert raised.value.gone and raised.value.code == 410


@pytest.mark.parametrize("mode", ["reset", "hang"])
def test_an_unreachable_api_server_is_a_transport_error_naming_the_request(
    api: FakeApiServer, client: KubeClient, mode: str
) -> None:
    api.unreachable(mode)
    try:
        with pytest.raises(TransportError, match=f"GET {POD.path(NAMESPACE)}"):
            client.request("GET", POD.path(NAMESPACE), timeout=(1.0, 0.3))
    finally:
        api.reachable()
    assert client.request("GET", POD.path(NAMESPACE))["items"] == []  # and it recovers


def test_an_answer_slower_than_the_timeout_is_a_transport_error(
    api: FakeApiServer, client: KubeClient
) -> None:
    api.latency = 1.0
    try:
        with pytest.raises(TransportError):
            client.request("GET", POD.path(NAMESPACE), timeout=(1.0, 0.2))
        with pytest.raises(TransportError):
            client.request("POST", POD.path(NAMESPACE), body=gpu_pod("p0"), timeout=(1.0, 0.2))
    finally:
        api.latency = 0.0


@pytest.fixture
def watching(api: FakeApiServer, client: KubeClient) -> Iterator[str]:
    api.create(gpu_pod("before"))
    yield str(api.store.rv)


def test_a_watch_yields_each_event_after_its_version_in_order(
    api: FakeApiServer, client: KubeClient, watching: str
) -> None:
    stream = client.watch(POD.path(NAMESPACE), [("resourceVersion", watching)], 5.0)
    api.create(gpu_pod("a"))
    api.delete("Pod", NAMESPACE, "a")
    events = []
    for event in stream:
        events.append((event["type"], event["object"]["metadata"]["name"]))
        if len(events) == 2:
            stream.close()
            break
    assert events == [("ADDED", "a"), ("DELETED", "a")]


def test_a_watch_from_a_compacted_version_says_gone_in_an_error_event(
    api: FakeApiServer, client: KubeClient, watching: str
) -> None:
    api.create(gpu_pod("after"))
    api.store.compact()
    stream = client.watch(POD.path(NAMESPACE), [("resourceVersion", watching)], 5.0)
    event = next(iter(stream))
    stream.close()
    assert event["type"] == "ERROR" and event["object"]["code"] == 410


def test_closing_a_watch_from_another_thread_ends_its_reader(
    client: KubeClient, watching: str
) -> None:
    stream = client.watch(POD.path(NAMESPACE), [("resourceVersion", watching)], 30.0)
    ended = threading.Event()

    def read() -> None:
        try:
            for _ in stream:
                pass
        except TransportError:
            pass
        ended.set()

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    stream.close()
    assert ended.wait(10), "the reader never returned"


def test_a_small_connection_pool_is_raised_for_the_informers_watches() -> None:
    configuration = k8s.Configuration()
    configuration.connection_pool_maxsize = 4
    kube = KubeClient(k8s.ApiClient(configuration))
    try:
        assert kube.api_client.rest_client.pool_manager.connection_pool_kw["maxsize"] >= 32
    finally:
        kube.api_client.close()  # type: ignore[no-untyped-call]
