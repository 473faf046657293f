"""The wiring of `draquota serve`: what it decides with, and the order its parts start and
stop in."""

from __future__ import annotations

import time
from pathlib import Path

from quota.settings import Settings
from tests.fakeapi import FakeApiServer
from tests.webhook.builders import cluster_objects
from tests.webhook.kube.conftest import write_kubeconfig
from webhook.bootstrap import InOrder, Wiring, embedded, live
from webhook.edge.metrics import Metrics
from webhook.kube.backend import KubeBackend
from webhook.ledger.cluster import ClusterLedger
from webhook.ledger.memory import MemoryLedger
from webhook.store.statedir import StateDirBackend


class Part:
    def __init__(self, name: str, log: list[str]) -> None:
        self.name, self.log = name, log

    def start(self) -> None:
        self.log.append(f"start {self.name}")

    def stop(self) -> None:
        self.log.append(f"stop {self.name}")


def test_parts_start_in_order_and_stop_in_reverse() -> None:
    log: list[str] = []
    parts = InOrder(Part("ledger", log), Part("elector", log), Part("controller", log))
    parts.start()
    parts.stop()
    assert log == [
        "start ledger",
        "start elector",
        "start controller",
        "stop controller",
        "stop elector",
        "stop ledger",
    ]


class Warming(Part):
    def __init__(self, name: str, log: list[str]) -> None:
        super().__init__(name, log)
        self.why = f"{name} loading"

    def warming(self) -> str:
        return self.why


def test_parts_warm_until_every_one_of_them_is_warm() -> None:
    log: list[str] = []
    ledger, index = Warming("ledger", log), Warming("index", log)
    parts = InOrder(ledger, Part("elector", log), index)
    assert parts.warming() == "ledger loading"
    ledger.why = ""
    assert parts.warming() == "index loading"
    index.why = ""
    assert parts.warming() == ""


def test_an_embedded_replica_decides_over_its_directory_with_a_memory_ledger(
    tmp_path: Path,
) -> None:
    (tmp_path / "cluster.yaml").write_text("", encoding="utf-8")
    backend = StateDirBackend(tmp_path)
    wiring = embedded(backend, Settings())
    assert isinstance(wiring.ledger, MemoryLedger)
    assert wiring.backend is backend and wiring.placer.state is backend.state


def test_a_live_replica_starts_its_ledger_with_the_backend_and_stops_the_lease_last(
    tmp_path: Path,
) -> None:
    api = FakeApiServer(resource_versions=("v1",), bookmark_interval=0.1).start()
    try:
        for obj in cluster_objects(2):
            api.create(obj)
        kubeconfig = write_kubeconfig(tmp_path / "kubeconfig", api.url)
        wiring = live(kubeconfig, False, Settings(), Metrics())
        assert isinstance(wiring, Wiring)
        backend, ledger = wiring.backend, wiring.ledger
        assert isinstance(backend, KubeBackend) and isinstance(ledger, ClusterLedger)
        parts = backend._companions[0]  # type: ignore[attr-defined]
        # Before start the ledger is cold, and the parts say so: ready() asks them.
        assert parts.warming() == ledger.warming() != ""
        held = Warming("test gate", [])
        backend.attach(held)
        backend.start()
        try:
            deadline = time.monotonic() + 10
            while parts.warming() and time.monotonic() < deadline:
                time.sleep(0.05)
            assert not ledger.warming()  # started by the backend, nobody else
            assert backend.caches_ready()[0]
            # ready waits for every attached part that is warming
            assert backend.ready() == (False, "test gate loading")
            held.why = ""
            assert backend.ready() == (True, "")
        finally:
            backend.stop()
    finally:
        api.stop()
    parts_objects = backend._companions[0].components  # type: ignore[attr-defined]
    parts = [type(c).__name__ for c in parts_objects]
    # stopped in reverse: the queue first, the ledger writes its records, the Lease last
    assert parts == [
        "LeaseElector",
        "ClusterLedger",
        "QueueStatusWriter",
        "WarmUp",
        "QueueController",
    ]
    assert wiring.elector is parts_objects[0]


def test_a_kubeconfig_that_cannot_be_read_is_named(tmp_path: Path) -> None:
    missing = tmp_path / "missing"
    answer = live(missing, False, Settings(), Metrics())
    assert isinstance(answer, str) and str(missing) in answer
