"""The webhook always answers: decisions off the event loop, a deadline, bounded metrics."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Mapping, Sequence
from typing import Any

import httpx
import orjson
from prometheus_client.parser import text_string_to_metric_families

from quota.charge import CHARGE_ANNOTATION, QUEUE_LABEL
from quota.claims import PodClaim
from quota.placement import Placement
from quota.settings import Settings
from quota.usage import Usage
from tests.webhook.builders import AppClient, FakeBackend, cluster_state, pod, review
from webhook.edge.app import create_app
from webhook.edge.metrics import UNKNOWN_QUEUE, Metrics
from webhook.edge.runner import AdmissionRunner
from webhook.ledger.memory import MemoryLedger

PLACED = Placement(True, node="node-0")  # what the fake placers answer


class BlockingPlacer:
    """Holds every placement until `release` is set: a decision that never finishes in time."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.entered = threading.Event()

    def __call__(self, claims: Sequence[PodClaim], labels: Mapping[str, str] | None) -> Placement:
        self.entered.set()
        self.release.wait(30)
        return PLACED


def decision_series(client: AppClient) -> list[dict[str, str]]:
    text = client.get("/metrics").text
    for family in text_string_to_metric_families(text):
        if family.name == "draquota_admission_decisions":
            return [dict(s.labels) for s in family.samples if s.name.endswith("_total")]
    return []


def test_queue_labels_come_only_from_queues_that_exist() -> None:
    backend = FakeBackend(cluster_state())
    client = AppClient(create_app(backend, MemoryLedger(backend.state, Settings()), Settings()))

    def deny_random_queues(start: int, count: int) -> None:
        for i in range(start, start + count):
            obj = pod(f"p-{i}", labels={QUEUE_LABEL: f"queue-{i}"})
            body = client.post("/validate", content=orjson.dumps(review(obj))).json()
            assert body["response"]["status"]["reason"] == "LocalQueueNotFound"

    deny_random_queues(0, 20)
    after_twenty = decision_series(client)
    deny_random_queues(20, 200)
    after_more = decision_series(client)
    queues = {s["queue"] for s in after_more}
    assert queues == {UNKNOWN_QUEUE}
    assert len(after_more) == len(after_twenty)  # series do not grow with user-chosen names


def test_hostile_resource_names_are_not_labels() -> None:
    backend = FakeBackend(cluster_state())
    client = AppClient(create_app(backend, MemoryLedger(backend.state, Settings()), Settings()))
    for i in range(30):
        document = review(pod(f"p-{i}"), resource=f"made-up-{i}", kind="Secret")
        assert client.post("/validate", content=orjson.dumps(document)).status_code == 200
    assert {s["resource"] for s in decision_series(client)} == {"other"}


def test_malformed_charge_annotation_is_answered_not_crashed() -> None:
    backend = FakeBackend(cluster_state())
    client = AppClient(create_app(backend, MemoryLedger(backend.state, Settings()), Settings()))
    obj = pod("p", annotations={CHARGE_ANNOTATION: "[" * 100_000})
    body = client.post("/validate", content=orjson.dumps(review(obj))).json()["response"]
    assert not body["allowed"]
    assert body["status"]["reason"] != "InternalError"


async def _while_blocked(app: Any, placer: BlockingPlacer) -> dict[str, Any]:
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://webhook") as client:
        admission = asyncio.create_task(
            client.post("/validate", content=orjson.dumps(review(pod("slow"))))
        )
        while not placer.entered.is_set():
            await asyncio.sleep(0.01)
        # The only worker is busy: probes and scrapes are still answered by the loop.
        health = await client.get("/healthz")
        metrics = await client.get("/metrics")
        answer = await admission
        second = await client.post("/validate", content=orjson.dumps(review(pod("next"))))
        # Past the deadline with every worker still busy: wedged, not ready.
        ready = await client.get("/readyz")
        placer.release.set()
        return {
            "health": health.status_code,
            "metrics": metrics.status_code,
            "answer": answer.json()["response"],
            "ready": (ready.status_code, ready.json()["reason"]),
            "second": second.json()["response"],
        }


def test_decision_past_the_deadline_is_a_denial_and_probes_keep_answering() -> None:
    backend = FakeBackend(cluster_state())
    settings = Settings(admission_deadline_seconds=0.3, admission_workers=1)
    placer = BlockingPlacer()
    app = create_app(backend, MemoryLedger(backend.state, settings), settings, placer)
    seen = asyncio.run(_while_blocked(app, placer))
    assert seen["health"] == 200 and seen["metrics"] == 200
    answer = seen["answer"]
    assert not answer["allowed"]
    assert (answer["status"]["code"], answer["status"]["reason"]) == (403, "DeadlineExceeded")
    assert answer["status"]["message"].startswith("Pod team-a/slow: draquota could not decide")
    assert seen["ready"][0] == 503 and "wedged" in seen["ready"][1]
    # A request that finds no free worker is answered by its deadline too.
    assert seen["second"]["status"]["reason"] == "DeadlineExceeded"


def test_runner_reports_wedged_then_stuck_by_its_clock() -> None:
    now = [0.0]
    runner = AdmissionRunner(workers=1, deadline=1.0, restart_after=6.0, clock=lambda: now[0])
    release, entered = threading.Event(), threading.Event()

    def slow() -> str:
        entered.set()
        release.wait(30)
        return "done"

    async def scenario() -> list[tuple[bool, bool]]:
        task = asyncio.create_task(runner.run(now[0], slow))
        while not entered.is_set():
            await asyncio.sleep(0.01)
        seen = []
        for t in (0.5, 2.0, 7.0, 8.5):  # busy; wedged; wedged 5 s; wedged 6.5 s
            now[0] = t
            seen.append((runner.wedged()[0], runner.stuck()[0]))
        release.set()
        await task
        await asyncio.sleep(0.05)
        seen.append((runner.wedged()[0], runner.stuck()[0]))
        return seen

    assert asyncio.run(scenario()) == [
        (False, False),
        (True, False),
        (True, False),
        (True, True),
        (False, False),
    ]
    runner.shutdown()


class LockedLedger:
    """A ledger whose usage is behind a lock someone holds (a slow admission)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()

    def usage(self) -> Usage:
        with self.lock:
            return Usage()


def test_scrape_shows_last_usage_while_the_ledger_is_locked() -> None:
    backend = FakeBackend(cluster_state())
    ledger = LockedLedger()
    metrics = Metrics()
    metrics.watch(backend, ledger)
    assert b"draquota_queue_usage_stale 0.0" in metrics.render()
    with ledger.lock:
        text = metrics.render()  # returns: it does not wait for the lock
    assert b"draquota_queue_usage_stale 1.0" in text
