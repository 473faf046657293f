"""KubeBackend against the fake API: list, watch, bookmarks, 410, outages, staleness, discovery."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.fakeapi import FakeApiServer
from tests.webhook.kube.conftest import FAST, InformersHeld, write_kubeconfig
from tests.webhook.kube.objects import NAMESPACE, TEMPLATE, cluster_objects, gpu_pod
from webhook.edge.runner import AdmissionRunner
from webhook.kube.backend import KubeBackend
from webhook.kube.backoff import Backoff
from webhook.kube.client import KubeClient
from webhook.kube.informer import Informer
from webhook.kube.resources import QUOTA_LEDGER
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


@pytest.fixture
def backend(client: KubeClient) -> Iterator[KubeBackend]:
    kube = KubeBackend(client, FAST, max_staleness=0.3)
    yield kube
    kube.stop()


def pods(backend: KubeBackend) -> set[str]:
    return {p["metadata"]["name"] for p in backend.state.list("Pod", NAMESPACE)}


def test_paginated_list_fills_every_cache_and_types_items(
    api: FakeApiServer, backend: KubeBackend
) -> None:
    for obj in cluster_objects(4):
        api.create(obj)
    for i in range(5):  # page size is 2: three pages
        api.create(gpu_pod(f"p{i}"))
    assert backend.ready() == (False, "not started")
    backend.start()
    assert backend.wait_until_ready(10), backend.ready()
    assert pods(backend) == {f"p{i}" for i in range(5)}
    template = backend.state.get("ResourceClaimTemplate", NAMESPACE, TEMPLATE)
    assert template is not None
    assert (template["kind"], template["apiVersion"]) == (
        "ResourceClaimTemplate",
        "resource.k8s.io/v1",
    )
    assert backend.state.get("ClusterQueue", None, "gpus") is not None
    assert backend.relists() == dict.fromkeys(backend.relists(), 0)


def test_watch_applies_adds_updates_and_deletes(api: FakeApiServer, backend: KubeBackend) -> None:
    api.create(gpu_pod("old"))
    backend.start()
    assert backend.wait_until_ready(10)
    api.create(gpu_pod("new"))
    changed = api.update({**gpu_pod("old"), "status": {"phase": "Succeeded"}})
    api.delete("Pod", NAMESPACE, "new")
    api.create(gpu_pod("last"))
    eventually(lambda: pods(backend) == {"old", "last"})
    old = backend.state.get("Pod", NAMESPACE, "old")
    assert old is not None
    assert old["metadata"]["resourceVersion"] == changed["metadata"]["resourceVersion"]
    assert old["status"] == {"phase": "Succeeded"}


def test_broken_watch_resumes_from_last_version_without_relisting(
    api: FakeApiServer, backend: KubeBackend
) -> None:
    backend.start()
    assert backend.wait_until_ready(10)
    for i in range(3):
        api.break_watches()
        api.create(gpu_pod(f"p{i}"))
    eventually(lambda: pods(backend) == {"p0", "p1", "p2"})
    assert backend.relists()["pods"] == 0


def test_bookmarks_keep_the_version_current_so_quiet_kinds_survive_compaction(
    api: FakeApiServer, backend: KubeBackend
) -> None:
    backend.start()
    assert backend.wait_until_ready(10)
    for i in range(3):  # only pods change; node watches learn the new version from bookmarks
        api.create(gpu_pod(f"p{i}"))
    newest = api.store.rv
    eventually(lambda: all(int(i.version or 0) >= newest for i in backend.informers))
    api.force_gone()
    api.create(gpu_pod("after"))
    eventually(lambda: "after" in pods(backend))
    assert backend.relists()["nodes"] == 0


def test_gone_relists_and_catches_up(api: FakeApiServer, backend: KubeBackend) -> None:
    api.create(gpu_pod("doomed"))
    backend.start()
    assert backend.wait_until_ready(10)
    api.unreachable("reset")
    api.delete("Pod", NAMESPACE, "doomed")  # missed while disconnected...
    api.create(gpu_pod("born"))
    api.store.compact()  # ...and compacted away: resuming the watch gets 410 Gone
    api.reachable()
    eventually(lambda: pods(backend) == {"born"})
    assert backend.relists()["pods"] >= 1
    assert backend.wait_until_ready(10)


@pytest.mark.parametrize("mode", ["reset", "hang"])
def test_unreachable_api_makes_ready_false_with_reason_then_recovers(
    api: FakeApiServer, backend: KubeBackend, mode: str
) -> None:
    backend.start()
    assert backend.wait_until_ready(10)
    api.unreachable(mode)
    eventually(lambda: not backend.ready()[0])
    _, reason = backend.ready()
    assert "stale for" in reason
    assert "limit 0.3s" in reason
    api.store.create(api.resource("Pod"), NAMESPACE, gpu_pod("during-outage"))
    api.reachable()
    assert backend.wait_until_ready(10), backend.ready()
    eventually(lambda: "during-outage" in pods(backend))


def test_not_ready_until_the_api_answers(api: FakeApiServer, backend: KubeBackend) -> None:
    api.unreachable("reset")
    backend.start()
    eventually(lambda: "API discovery failed" in backend.ready()[1])
    api.reachable()
    assert backend.wait_until_ready(10), backend.ready()


@pytest.mark.parametrize(
    ("served", "expected"),
    [
        (("v1", "v1beta2", "v1beta1"), "v1"),
        (("v1beta2", "v1beta1"), "v1beta2"),
        (("v1beta1",), "v1beta1"),
    ],
    ids=["v1", "v1beta2", "v1beta1"],
)
def test_discovery_picks_the_newest_served_dra_version(
    tmp_path: Path, served: tuple[str, ...], expected: str
) -> None:
    api = FakeApiServer(resource_versions=served, bookmark_interval=0.1).start()
    legacy = {
        "apiVersion": f"resource.k8s.io/{expected}",
        "kind": "DeviceClass",
        "metadata": {"name": "gpu.example.com"},
        "spec": {},
    }
    api.create(legacy)
    kube = KubeBackend(
        KubeClient.from_kubeconfig(str(write_kubeconfig(tmp_path / "kc", api.url))), FAST
    )
    try:
        kube.start()
        assert kube.wait_until_ready(10), kube.ready()
        assert kube.dra_version == expected
        resource = kube.resource("ResourceClaim")
        assert resource is not None
        assert resource.path(NAMESPACE) == (
            f"/apis/resource.k8s.io/{expected}/namespaces/{NAMESPACE}/resourceclaims"
        )
        assert kube.state.get("DeviceClass", None, "gpu.example.com") == {
            **legacy,
            "metadata": kube.state.get("DeviceClass", None, "gpu.example.com")["metadata"],
        }
    finally:
        kube.stop()
        api.stop()


def test_no_dra_group_is_never_ready(tmp_path: Path) -> None:
    api = FakeApiServer(resource_versions=()).start()
    kube = KubeBackend(
        KubeClient.from_kubeconfig(str(write_kubeconfig(tmp_path / "kc", api.url))), FAST
    )
    try:
        kube.start()
        eventually(lambda: "not served" in kube.ready()[1])
        assert kube.ready()[0] is False
        assert "resource.k8s.io" in kube.ready()[1]
    finally:
        kube.stop()
        api.stop()


def test_fetch_gets_a_fresh_object_into_the_cache(api: FakeApiServer, backend: KubeBackend) -> None:
    backend.start()
    assert backend.wait_until_ready(10)
    api.unreachable("reset")
    api.store.create(api.resource("Pod"), NAMESPACE, gpu_pod("just-made"))
    assert backend.fetch("Pod", NAMESPACE, "just-made") is None  # unreachable: nothing, fail closed
    api.reachable()
    fetched = backend.fetch("Pod", NAMESPACE, "just-made")
    assert fetched is not None
    assert fetched["kind"] == "Pod"
    assert backend.state.get("Pod", NAMESPACE, "just-made") is not None
    assert backend.fetch("Pod", NAMESPACE, "missing") is None
    assert backend.fetch("NoSuchKind", NAMESPACE, "x") is None


def test_backoff_grows_exponentially_with_bounded_jitter_and_resets() -> None:
    backoff = Backoff(initial=0.1, maximum=1.0, factor=2.0, jitter=0.5)
    delays = [backoff.next() for _ in range(6)]
    bases = [0.1, 0.2, 0.4, 0.8, 1.0, 1.0]
    for delay, base in zip(delays, bases, strict=True):
        assert base <= delay <= base * 1.5
    backoff.reset()
    assert 0.1 <= backoff.next() <= 0.15


def test_not_ready_until_its_caches_exist(
    api: FakeApiServer, client: KubeClient, informers_held: InformersHeld
) -> None:
    """Between discovery and the informers' creation the view is empty: ready then would admit
    every pod as not managed by any queue."""
    kube = KubeBackend(client, FAST)
    kube.start()
    try:
        assert informers_held.entered.wait(10)
        assert kube.ready()[0] is False
        informers_held.release.set()
        assert kube.wait_until_ready(10), kube.ready()
    finally:
        informers_held.release.set()
        kube.stop()


def test_a_fetch_tried_on_the_event_loop_is_made_on_a_worker(
    api: FakeApiServer, client: KubeClient
) -> None:
    kube = KubeBackend(client, FAST)
    runner = AdmissionRunner(workers=1, deadline=5.0)
    try:
        kube.start()
        assert kube.wait_until_ready(10)
        api.create(gpu_pod("fresh"))
        threads: list[int] = []

        def fetch() -> Any:
            threads.append(threading.get_ident())
            return kube.fetch("Pod", NAMESPACE, "fresh")

        async def main() -> Any:
            return await runner.run(runner.clock(), fetch, quick=True)

        answered, found = asyncio.run(main())
        assert answered and found is not None
        assert runner.offloaded == 1 and threads[0] != threads[-1]  # first try inline: handed over
    finally:
        runner.shutdown()
        kube.stop()


def test_fetch_gives_up_after_its_short_timeout(api: FakeApiServer, client: KubeClient) -> None:
    kube = KubeBackend(client, FAST, fetch_timeout=0.2)
    try:
        kube.start()
        assert kube.wait_until_ready(10)
        api.create(gpu_pod("slow"))
        api.latency = 1.0  # slower than the fetch timeout: no answer is no object (fail closed)
        assert kube.fetch("Pod", NAMESPACE, "slow") is None
        api.latency = 0.0
        assert kube.fetch("Pod", NAMESPACE, "slow") is not None
    finally:
        api.latency = 0.0
        kube.stop()


class _Warming:
    """A component attached to the backend that is still loading."""

    def __init__(self) -> None:
        self.reason = "loading admission records and live pod usage"

    def start(self) -> None:
        pass

    def stop(self) -> None:
        pass

    def warming(self) -> str:
        return self.reason


def test_not_ready_until_attached_components_warmed_up(
    api: FakeApiServer, backend: KubeBackend
) -> None:
    for obj in cluster_objects(4):
        api.create(obj)
    component = _Warming()
    backend.attach(component)
    backend.start()
    eventually(lambda: backend.caches_ready()[0])
    assert backend.ready() == (False, component.reason)
    component.reason = ""
    assert backend.ready() == (True, "")


def test_caches_keep_no_managed_fields(api: FakeApiServer, backend: KubeBackend) -> None:
    managed = [{"manager": "kubectl", "operation": "Apply", "fieldsType": "FieldsV1"}]
    for obj in cluster_objects(4):
        obj["metadata"]["managedFields"] = managed
        api.create(obj)
    backend.start()
    assert backend.wait_until_ready(10), backend.ready()
    template = backend.state.get("ResourceClaimTemplate", NAMESPACE, TEMPLATE)
    queue = backend.state.get("ClusterQueue", None, "gpus")
    assert template is not None and queue is not None
    assert "managedFields" not in template["metadata"]
    assert "managedFields" not in queue["metadata"]
    assert template["spec"] == api.objects("ResourceClaimTemplate")[0]["spec"]


def _ledger_event(version: str, entries: int) -> dict[str, Any]:
    spec = {"reservations": [{"id": f"u{i}"} for i in range(entries)]}
    meta = {"name": "cohort-a-0", "resourceVersion": version}
    return {"type": "MODIFIED", "object": {"metadata": meta, "spec": spec}}


def test_a_late_watch_event_never_takes_a_quota_ledger_back_to_an_older_version() -> None:
    state = ClusterState()
    informer = Informer(None, QUOTA_LEDGER, state)  # type: ignore[arg-type]
    informer._apply(_ledger_event("12", 2), "")  # the ledger's own write, cached from its PUT
    informer._apply(_ledger_event("11", 1), "")  # the watch event of the write before it
    cached = state.get("QuotaLedger", None, "cohort-a-0")
    assert cached is not None and cached["metadata"]["resourceVersion"] == "12"
    informer._apply(_ledger_event("13", 3), "")
    cached = state.get("QuotaLedger", None, "cohort-a-0")
    assert cached is not None and len(cached["spec"]["reservations"]) == 3
