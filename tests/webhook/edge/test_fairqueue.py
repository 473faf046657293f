"""Workers shared fairly between namespaces: a flood keeps at most its share, a freed worker
goes to the namespace holding fewest, and a namespace's queue is bounded.

Deterministic: every request is a task on one event loop, seats are released by the test, and
the order in which requests got their seat is what is asserted (no sleeps, no clocks)."""

from __future__ import annotations

import asyncio
import threading
from collections import Counter

import pytest

from webhook.edge.fairqueue import CLUSTER_FLOW, FairQueue, QueueFull, flow_queue_limit, flow_share

HOLD = 60.0  # a wait that never ends within a test: every grant is the test's doing


async def _settle() -> None:
    """Let every task woken so far run up to its next wait."""
    for _ in range(10):
        await asyncio.sleep(0)


class Entrants:
    """Requests entering a FairQueue as tasks; `order` is the order they got a seat."""

    def __init__(self, queue: FairQueue) -> None:
        self.queue = queue
        self.order: list[str] = []
        self.tasks: dict[str, asyncio.Task[bool]] = {}

    def enter(self, flow: str, name: str, timeout: float = HOLD) -> asyncio.Task[bool]:
        async def wait() -> bool:
            seated = await self.queue.acquire(flow, timeout)
            if seated:
                self.order.append(name)
            return seated

        self.tasks[name] = asyncio.create_task(wait())
        return self.tasks[name]


def test_half_the_workers_per_namespace_and_a_full_queue_after_four_requests_per_seat() -> None:
    assert [flow_share(seats) for seats in (1, 2, 3, 8, 9)] == [1, 1, 1, 4, 4]
    assert flow_queue_limit(8) == 16 and flow_queue_limit(1) == 4


def test_a_flood_holds_at_most_its_share_and_other_namespaces_take_the_rest_at_once() -> None:
    async def scenario() -> None:
        queue = FairQueue(seats=4)  # share 2
        entrants = Entrants(queue)
        for i in range(6):
            entrants.enter("flood", f"flood-{i}")
        await _settle()
        assert entrants.order == ["flood-0", "flood-1"]  # two seats stay free
        entrants.enter("team-b", "team-b-0")
        entrants.enter("team-c", "team-c-0")
        await _settle()
        assert entrants.order[2:] == ["team-b-0", "team-c-0"]
        assert (queue.held("flood"), queue.waiting("flood")) == (2, 4)
        assert queue.queued == Counter({"flood": 4}) and not queue.rejected

    asyncio.run(scenario())


def test_a_freed_worker_goes_to_the_namespace_holding_fewest_then_round_robin() -> None:
    async def scenario() -> None:
        queue = FairQueue(seats=4)  # share 2: two floods hold every seat
        entrants = Entrants(queue)
        for flow in ("flood-a", "flood-b"):
            for i in range(4):
                entrants.enter(flow, f"{flow}-{i}")
        await _settle()
        entrants.enter("quiet", "quiet-0")  # arrives behind four waiting flood requests
        await _settle()
        assert entrants.order == ["flood-a-0", "flood-a-1", "flood-b-0", "flood-b-1"]
        queue.release("flood-b")
        await _settle()
        assert entrants.order[4:] == ["quiet-0"]  # holds none: first
        queue.release("flood-a")  # a holds 1, b 1, quiet 1: a was served longest ago
        queue.release("quiet")  # a 2, b 1, quiet 0 and not waiting: b
        await _settle()
        assert entrants.order[5:] == ["flood-a-2", "flood-b-2"]

    asyncio.run(scenario())


def test_namespaces_with_equal_seats_are_served_in_turn() -> None:
    async def scenario() -> None:
        queue = FairQueue(seats=1)
        entrants = Entrants(queue)
        entrants.enter("holder", "holder")
        for flow in ("a", "b", "c"):
            for i in range(3):
                entrants.enter(flow, f"{flow}{i}")
        await _settle()
        for _ in range(9):
            queue.release(entrants.order[-1].rstrip("0123456789") or "holder")
            await _settle()
        assert entrants.order == ["holder", "a0", "b0", "c0", "a1", "b1", "c1", "a2", "b2", "c2"]

    asyncio.run(scenario())


def test_a_namespace_past_its_queue_limit_is_refused_at_once_and_others_are_not() -> None:
    async def scenario() -> None:
        queue = FairQueue(seats=2, queue_limit=2)  # share 1
        entrants = Entrants(queue)
        for i in range(3):
            entrants.enter("flood", f"flood-{i}")
        await _settle()
        with pytest.raises(QueueFull) as refused:
            await queue.acquire("flood", HOLD)
        assert (refused.value.flow, refused.value.waiting, refused.value.held) == ("flood", 2, 1)
        entrants.enter(CLUSTER_FLOW, "cluster-scoped")  # a flow of its own
        await _settle()
        assert entrants.order == ["flood-0", "cluster-scoped"]
        assert queue.rejected == Counter({"flood": 1}) and queue.queued == Counter({"flood": 2})

    asyncio.run(scenario())


def test_a_request_whose_deadline_passed_leaves_the_queue_and_never_takes_a_seat() -> None:
    async def scenario() -> None:
        queue = FairQueue(seats=1)
        entrants = Entrants(queue)
        entrants.enter("a", "a0")
        late = entrants.enter("b", "late", timeout=0.0)
        entrants.enter("c", "c0")
        await _settle()
        assert await late is False
        assert queue.timed_out == Counter({"b": 1}) and queue.waiting("b") == 0
        queue.release("a")
        await _settle()
        assert entrants.order == ["a0", "c0"]

    asyncio.run(scenario())


def test_a_request_cancelled_as_its_seat_came_passes_the_seat_on() -> None:
    async def scenario() -> None:
        queue = FairQueue(seats=1)
        entrants = Entrants(queue)
        entrants.enter("a", "a0")
        gone = entrants.enter("b", "gone")
        entrants.enter("c", "c0")
        await _settle()
        queue.release("a")  # granted to b, which is cancelled before it runs again
        gone.cancel()
        await _settle()
        assert gone.cancelled()
        assert entrants.order == ["a0", "c0"] and queue.held("c") == 1 and queue.held("b") == 0

    asyncio.run(scenario())


def test_a_seat_released_by_a_worker_thread_wakes_the_next_request_on_the_loop() -> None:
    async def scenario() -> None:
        queue = FairQueue(seats=1)
        entrants = Entrants(queue)
        entrants.enter("a", "a0")
        waiting = entrants.enter("b", "b0")
        await _settle()
        worker = threading.Thread(target=queue.release, args=("a",))
        worker.start()
        worker.join()
        assert await asyncio.wait_for(waiting, HOLD)
        assert entrants.order == ["a0", "b0"]

    asyncio.run(scenario())
