"""One team cannot stall admission for all (issue 29, item 4): a namespace flooding the
webhook with decisions that take long holds at most half the workers, another team's pods
are decided meanwhile, ahead of the flood's queue, and the flood's excess is refused at once
with 429 TooManyRequests and a retry delay, as the API server's Priority and Fairness does.

The app runs in-process; each flood decision is held in its placement search until the test
lets it finish, so what is asserted is order and counts, never wall time."""

from __future__ import annotations

import asyncio
import threading
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

import httpx
import orjson

from quota.claims import PodClaim
from quota.placement import Placement
from quota.settings import Settings
from tests.robustness.test_app_bounded import PLACED
from tests.webhook.builders import (
    NAMESPACE,
    TEMPLATE,
    FakeBackend,
    cluster_objects,
    node_objects,
    pod,
    review,
)
from webhook.edge.app import create_app
from webhook.ledger.memory import MemoryLedger
from webhook.store.clusterstate import ClusterState

WORKERS = 4  # half of them, 2, per namespace; 8 more may wait
WAIT = 30.0  # bound of every wait for another thread: never reached when the code is right


class HeldPlacer:
    """Placement searches that, for the namespaces in `held`, finish only when the test lets
    them (`let_through`); `entered` is the namespace of every decision's first search (the
    one without node labels; the later ones, per flavor, pass), in the order they began."""

    def __init__(self, held: Sequence[str]) -> None:
        self.gates = {namespace: threading.Semaphore(0) for namespace in held}
        self.entered: list[str] = []
        self.changed = threading.Condition()

    def __call__(self, claims: Sequence[PodClaim], labels: Mapping[str, str] | None) -> Placement:
        namespace = claims[0].namespace
        if labels is not None:
            return PLACED
        with self.changed:
            self.entered.append(namespace)
            self.changed.notify_all()
        gate = self.gates.get(namespace)
        if gate is not None:
            assert gate.acquire(timeout=WAIT), f"{namespace}: never let through"
        return PLACED

    def let_through(self, namespace: str, count: int = 1) -> None:
        self.gates[namespace].release(count)

    def wait_entered(self, count: int) -> None:
        with self.changed:
            assert self.changed.wait_for(lambda: len(self.entered) >= count, WAIT), self.entered


def _flood_namespace(name: str, pods: int) -> list[dict[str, Any]]:
    """Namespace `name` with team-a's LocalQueue default, and a template of its own for each
    of its pods `NAME-0`..: every flood pod is a new placement, as if a loop created a template
    per pod, so no decision of the flood is answered from a cache."""
    queue, template = (
        next(o for o in cluster_objects() if o["kind"] == kind and o["metadata"]["name"] == named)
        for kind, named in (("LocalQueue", "default"), ("ResourceClaimTemplate", TEMPLATE))
    )
    copies = [
        {**queue, "metadata": {**queue["metadata"], "namespace": name}},
        *(
            {**template, "metadata": {"name": f"{name}-{i}", "namespace": name}}
            for i in range(pods)
        ),
    ]
    return [{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}, *copies]


def _app(placer: HeldPlacer, floods: Sequence[str], pods: int) -> Any:
    settings = Settings(admission_workers=WORKERS, admission_deadline_seconds=WAIT * 2)
    objects = [*cluster_objects(gpus=1000), *node_objects(2)]
    flooding = [o for name in floods for o in _flood_namespace(name, pods)]
    state = ClusterState([*objects, *flooding])
    backend = FakeBackend(state)
    backend.blocking_io = True  # type: ignore[misc]  # as KubeBackend; an uncached placer: workers
    return create_app(backend, MemoryLedger(state, settings), settings, placer)


async def _admit(
    client: httpx.AsyncClient, namespace: str, name: str, template: str = TEMPLATE
) -> dict[str, Any]:
    body = orjson.dumps(review(pod(name, (template,), namespace=namespace)))
    answer = await client.post("/mutate", content=body)
    response: dict[str, Any] = answer.json()["response"]
    return response


def _reason(response: Mapping[str, Any]) -> str:
    return "Allowed" if response["allowed"] else str(response["status"]["reason"])


def test_a_flood_of_slow_decisions_leaves_workers_to_another_team_and_its_excess_is_refused() -> (
    None
):
    placer = HeldPlacer(["flood"])
    app = _app(placer, ["flood"], 13)

    async def scenario() -> tuple[list[dict[str, Any]], list[str], list[dict[str, Any]]]:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://webhook") as client:
            flood = [
                asyncio.create_task(_admit(client, "flood", f"p{i}", f"flood-{i}"))
                for i in range(13)
            ]
            await asyncio.to_thread(placer.wait_entered, 2)  # two flood decisions under way
            team = [
                await asyncio.wait_for(_admit(client, NAMESPACE, f"team-{i}"), WAIT)
                for i in range(5)
            ]
            started = list(placer.entered)
            placer.let_through("flood", 13)
            return team, started, await asyncio.gather(*flood)

    team, started, flood = asyncio.run(scenario())
    assert [_reason(r) for r in team] == ["Allowed"] * 5
    # decided while no third flood decision started: the flood held its two workers, no more
    assert Counter(started) == {"flood": 2, NAMESPACE: 1}  # later team pods: a cached search
    assert Counter(_reason(r) for r in flood) == {"Allowed": 10, "TooManyRequests": 3}
    refused = next(r for r in flood if not r["allowed"])
    assert refused["status"]["code"] == 429
    assert refused["status"]["details"] == {"retryAfterSeconds": 1}
    assert "too many admissions of namespace flood waiting" in refused["status"]["message"]
    queue = app.state.runner.queue
    assert (queue.queued["flood"], queue.rejected["flood"]) == (8, 3)
    assert not queue.queued[NAMESPACE] and not queue.rejected[NAMESPACE]


def test_with_two_floods_holding_every_worker_another_team_is_next_when_one_frees() -> None:
    placer = HeldPlacer(["flood-a", "flood-b"])
    app = _app(placer, ["flood-a", "flood-b"], 5)

    async def scenario() -> list[dict[str, Any]]:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://webhook") as client:
            floods = [
                asyncio.create_task(_admit(client, flow, f"p{i}", f"{flow}-{i}"))
                for i in range(5)
                for flow in ("flood-a", "flood-b")
            ]
            await asyncio.to_thread(placer.wait_entered, WORKERS)  # every worker taken
            team = asyncio.create_task(_admit(client, NAMESPACE, "team-0"))
            while not app.state.runner.queue.waiting(NAMESPACE):
                await asyncio.sleep(0)  # team-a's request is queued behind both floods
            placer.let_through("flood-a")  # one flood-a decision ends: its worker frees
            await asyncio.to_thread(placer.wait_entered, WORKERS + 1)
            placer.let_through("flood-a", 5)
            placer.let_through("flood-b", 5)
            return [await team, *await asyncio.gather(*floods)]

    answers = asyncio.run(scenario())
    assert [_reason(r) for r in answers] == ["Allowed"] * 11
    assert sorted(placer.entered[:WORKERS]) == ["flood-a", "flood-a", "flood-b", "flood-b"]
    assert placer.entered[WORKERS] == NAMESPACE  # ahead of the six flood requests waiting
