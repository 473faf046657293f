"""Where an admission runs: quick decisions on the event loop, anything that may block on a
worker, and a decision that finds out half-way hands over before it changes anything."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import httpx
import orjson

from quota.claims import PodClaim
from quota.placement import Placement
from quota.settings import Settings
from tests.robustness.test_app_bounded import PLACED
from tests.webhook.builders import AppClient, FakeBackend, cluster_objects, node_objects, pod
from tests.webhook.builders import review as make_review
from webhook.admission.placementcache import CachedPlacer
from webhook.edge.app import QUICK_BODY_BYTES, create_app
from webhook.edge.runner import AdmissionRunner, Offload, offload_if_inline
from webhook.ledger.memory import MemoryLedger
from webhook.store.clusterstate import ClusterState


def _run(runner: AdmissionRunner, fn: Any, quick: bool) -> tuple[bool, Any]:
    async def main() -> tuple[bool, Any]:
        return await runner.run(runner.clock(), fn, quick=quick)

    return asyncio.run(main())


def test_a_quick_decision_runs_on_the_event_loop_and_others_on_a_worker() -> None:
    runner = AdmissionRunner(workers=2, deadline=5.0)
    loop_thread = threading.get_ident()
    assert _run(runner, threading.get_ident, quick=True) == (True, loop_thread)
    answered, worker_thread = _run(runner, threading.get_ident, quick=False)
    assert answered and worker_thread != loop_thread
    assert (runner.inline, runner.offloaded) == (1, 0)
    runner.shutdown()


def test_a_step_that_may_block_hands_the_decision_to_a_worker_before_it_runs() -> None:
    runner = AdmissionRunner(workers=2, deadline=5.0)
    ran_on: list[int] = []

    def decide() -> str:
        offload_if_inline("a network call")  # raises on the loop, nothing on a worker
        ran_on.append(threading.get_ident())
        return "decided"

    assert _run(runner, decide, quick=True) == (True, "decided")
    assert len(ran_on) == 1 and ran_on[0] != threading.get_ident()
    assert (runner.inline, runner.offloaded) == (0, 1)
    offload_if_inline("outside any admission")  # not inline: nothing to hand over
    runner.shutdown()


def test_offload_is_not_swallowed_as_an_answer() -> None:
    runner = AdmissionRunner(workers=1, deadline=5.0)
    calls = []

    def decide() -> str:
        calls.append(1)
        if len(calls) == 1:
            raise Offload("first try")
        return "second try"

    assert _run(runner, decide, quick=True) == (True, "second try")
    runner.shutdown()


class RecordingPlacer:
    """A placer that notes the thread of every search, and can hold one until released."""

    def __init__(self) -> None:
        self.threads: list[int] = []
        self.release = threading.Event()
        self.release.set()
        self.entered = threading.Event()

    def __call__(self, claims: Sequence[PodClaim], labels: Mapping[str, str] | None) -> Placement:
        self.threads.append(threading.get_ident())
        self.entered.set()
        self.release.wait(30)
        return PLACED


def _app(placer: RecordingPlacer, settings: Settings | None = None, **backend: Any) -> Any:
    settings = settings or Settings()
    state = ClusterState([*cluster_objects(gpus=8), *node_objects(2)])
    fake = FakeBackend(state)
    for name, value in backend.items():
        setattr(fake, name, value)
    return create_app(fake, MemoryLedger(state, settings), settings, CachedPlacer(placer, state))


def _allowed(client: AppClient, name: str, **extra: Any) -> bool:
    body = orjson.dumps(make_review(pod(name, **extra)))
    return bool(client.post("/mutate", content=body).json()["response"]["allowed"])


def test_a_placement_search_runs_on_a_worker_and_its_cached_answer_inline() -> None:
    placer = RecordingPlacer()
    app = _app(placer)
    client = AppClient(app)
    assert _allowed(client, "first")
    assert placer.threads and threading.get_ident() not in placer.threads
    searches = len(placer.threads)
    assert _allowed(client, "second")  # same claims, same cluster: the cached answer
    assert len(placer.threads) == searches
    runner = app.state.runner
    assert (runner.inline, runner.offloaded) == (1, 0)


def test_a_backend_and_ledger_on_the_network_are_decided_inline_when_nothing_waits() -> None:
    # Every network wait on the decision path offloads by itself (offload_if_inline): a
    # live cluster's backend and ledger do not send every decision to a worker.
    placer = RecordingPlacer()
    state = ClusterState([*cluster_objects(gpus=8), *node_objects(2)])
    live_ledger = MemoryLedger(state, Settings())
    live_ledger.blocking_io = True  # type: ignore[misc]  # as ClusterLedger declares
    backend = FakeBackend(state)
    backend.blocking_io = True  # type: ignore[misc]  # as KubeBackend declares
    app = create_app(backend, live_ledger, Settings(), CachedPlacer(placer, state))
    client = AppClient(app)
    assert _allowed(client, "a")  # an unknown placement: searched on a worker
    assert _allowed(client, "b")  # the same claims: the cached placement, on the loop
    assert (app.state.runner.inline, app.state.runner.offloaded) == (1, 0)


def test_large_bodies_are_never_decided_inline() -> None:
    app = _app(RecordingPlacer())
    client = AppClient(app)
    assert _allowed(client, "warm")
    padding = "x" * QUICK_BODY_BYTES
    assert _allowed(client, "large", annotations={"example.com/padding": padding})
    assert app.state.runner.inline == 0


def test_a_view_in_use_by_another_thread_is_waited_for_on_a_worker_not_on_the_loop() -> None:
    app = _app(RecordingPlacer())
    client = AppClient(app)
    assert _allowed(client, "warm")
    lock = app.state.admission.ledger.view.lock
    held, release = threading.Event(), threading.Event()

    def hold() -> None:
        with lock:
            held.set()
            release.wait(10)

    holder = threading.Thread(target=hold)
    holder.start()
    assert held.wait(5)
    threading.Timer(0.2, release.set).start()
    assert _allowed(client, "while-held")
    holder.join(5)
    assert (app.state.runner.inline, app.state.runner.offloaded) == (0, 1)


def test_a_view_that_must_charge_every_pod_again_is_caught_up_on_a_worker() -> None:
    app = _app(RecordingPlacer())
    client = AppClient(app)
    assert _allowed(client, "warm")
    state = app.state.admission.backend.state
    queue = state.list("ClusterQueue")[0]
    state.upsert({**queue, "metadata": {**queue["metadata"], "labels": {"changed": "yes"}}})
    assert _allowed(client, "after-a-queue-change")  # every pod is charged again: a worker
    assert _allowed(client, "caught-up")  # then the loop again
    assert (app.state.runner.inline, app.state.runner.offloaded) == (1, 1)


def test_a_search_that_never_ends_leaves_probes_answered_and_is_denied_by_its_deadline() -> None:
    placer = RecordingPlacer()
    placer.release.clear()
    settings = Settings(admission_deadline_seconds=0.3, admission_workers=1)
    app = _app(placer, settings)

    async def scenario() -> tuple[int, dict[str, Any]]:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://webhook") as client:
            body = orjson.dumps(make_review(pod("slow")))
            admission = asyncio.create_task(client.post("/validate", content=body))
            while not placer.entered.is_set():
                await asyncio.sleep(0.01)
            health = await client.get("/healthz")
            answer = await admission
        placer.release.set()
        return health.status_code, answer.json()["response"]

    health, answer = asyncio.run(scenario())
    assert health == 200
    assert answer["status"]["reason"] == "DeadlineExceeded"


@dataclass(frozen=True)
class Claim:
    namespace: str = "team-a"
    template: str | None = "gpu"
    claim: str | None = None


def test_a_placement_not_cached_is_searched_on_a_worker_even_when_tried_inline() -> None:
    placer = RecordingPlacer()
    state = ClusterState([*cluster_objects(gpus=8), *node_objects(2)])
    cached = CachedPlacer(placer, state)
    runner = AdmissionRunner(workers=1, deadline=5.0)
    claims: Any = (Claim(),)
    answered, placed = _run(runner, lambda: cached(claims, {"pool": "a"}), quick=True)
    assert answered and placed.ok
    assert placer.threads and threading.get_ident() not in placer.threads
    assert cached.knows(None) and not cached.knows(make_review(pod("p"))["request"]["object"])
    _run(runner, lambda: cached(claims, {"pool": "a"}), quick=True)
    assert len(placer.threads) == 1 and (runner.inline, runner.offloaded) == (1, 1)
    runner.shutdown()


def test_a_namespace_whose_decisions_hang_keeps_half_the_workers_and_others_are_decided() -> None:
    runner = AdmissionRunner(workers=4, deadline=60.0)
    release = threading.Event()
    started = threading.Semaphore(0)

    def hang() -> str:
        started.release()
        release.wait(30)
        return "flood"

    async def scenario() -> tuple[list[Any], int, int]:
        flood = [
            asyncio.create_task(runner.run(runner.clock(), hang, flow="flood")) for _ in range(6)
        ]
        for _ in range(2):
            assert await asyncio.to_thread(started.acquire, True, 30)
        quiet = [await runner.run(runner.clock(), lambda: "quiet", flow="team-b") for _ in range(3)]
        held, waiting = runner.queue.held("flood"), runner.queue.waiting("flood")
        release.set()
        return [*quiet, *await asyncio.gather(*flood)], held, waiting

    answers, held, waiting = asyncio.run(scenario())
    assert answers == [(True, "quiet")] * 3 + [(True, "flood")] * 6
    assert (held, waiting) == (2, 4)  # while team-b was decided
    assert runner.queue.queued["flood"] == 4 and runner.deadline_exceeded == 0
    runner.shutdown()
