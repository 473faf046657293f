"""Fair queuing of admission workers between namespaces, as the API server's Priority and
Fairness shares its seats between flows.

A flow is the namespace of an admission request, as the API server wrote it into the
AdmissionReview: a user cannot pick it, and cannot multiply it without the right to create
namespaces (a flow per user or ServiceAccount could be multiplied by any namespace admin).
Requests without a namespace (cluster-scoped objects) form one flow of their own, `""`.

Three rules, each checked under one lock:
- a flow holds at most `share` of the `seats` (workers) at once, whatever else is waiting,
  so that a namespace whose decisions are slow always leaves seats free for the others: a
  decision cannot be interrupted, so seats are reserved up front rather than taken back;
- a seat that frees goes to the waiting flow holding the fewest seats, ties to the flow
  served longest ago (round-robin between equals), and within a flow in arrival order: a
  quiet namespace's request is next as soon as a seat frees, however long a flood's queue;
- at most `queue_limit` requests of one flow wait at once; the next is refused at once
  (`QueueFull`, answered as the API server answers an APF rejection: 429 TooManyRequests
  with a retry delay) instead of waiting for a seat it would not get before its deadline.

Invariant: after every change, no seat is free while a waiting flow is below its share
(`_dispatch`). A seat is held from grant until the decision's thread ends, past a deadline
too, so a flow whose decisions outlive the deadline cannot pile up more threads.

Waiters are asyncio futures of the loop that awaits them; seats may be released from any
thread (the worker that ran the decision), so the state is guarded by a threading lock and
grants reach their loop through `call_soon_threadsafe`.
"""

from __future__ import annotations

import asyncio
import itertools
import threading
from collections import Counter, deque
from dataclasses import dataclass, field

__all__ = ["CLUSTER_FLOW", "FairQueue", "QueueFull", "flow_queue_limit", "flow_share"]

CLUSTER_FLOW = ""  # the flow of requests without a namespace


def flow_share(seats: int) -> int:
    """Seats one flow may hold: half of them (at least one), so a flood leaves the other half
    to everyone else; when two floods hold every seat, the next one to free goes to whoever
    else waits, since they hold fewest."""
    return max(1, seats // 2)


def flow_queue_limit(seats: int) -> int:
    """Requests one flow may have waiting: four per seat it may hold. More would wait for
    seats their own flow holds, beyond any deadline worth waiting for."""
    return 4 * flow_share(seats)


class QueueFull(Exception):
    """A flow already has `waiting` requests queued (its limit) and holds `held` seats."""

    def __init__(self, flow: str, waiting: int, held: int) -> None:
        self.flow = flow
        self.waiting = waiting
        self.held = held
        super().__init__(f"flow {flow!r}: {waiting} requests waiting, {held} seats held")


@dataclass(eq=False)
class _Waiter:
    flow: str
    loop: asyncio.AbstractEventLoop
    future: asyncio.Future[None]
    granted: bool = False


@dataclass
class _Flow:
    waiting: deque[_Waiter] = field(default_factory=deque)
    held: int = 0
    last_served: int = -1  # the grant number of its latest seat; -1: never served


class FairQueue:
    """`seats` shared between flows: at most `share` per flow, at most `queue_limit` waiting
    per flow, freed seats to the flow holding fewest.

    Counters, per flow, for metrics: `queued` (requests that had to wait for a seat),
    `rejected` (refused with QueueFull), `timed_out` (gave up waiting: their deadline came).
    """

    def __init__(self, seats: int, share: int | None = None, queue_limit: int | None = None):
        if seats < 1:
            raise ValueError(f"seats must be at least 1, got {seats}")
        self.seats = seats
        self.share = min(seats, share if share is not None else flow_share(seats))
        self.queue_limit = queue_limit if queue_limit is not None else flow_queue_limit(seats)
        if self.share < 1 or self.queue_limit < 0:
            raise ValueError(f"share must be >= 1 and queue_limit >= 0: {share}, {queue_limit}")
        self.queued: Counter[str] = Counter()
        self.rejected: Counter[str] = Counter()
        self.timed_out: Counter[str] = Counter()
        self._flows: dict[str, _Flow] = {}
        self._free = seats
        self._grants = itertools.count()
        self._lock = threading.Lock()

    async def acquire(self, flow: str, timeout: float) -> bool:
        """Take a seat for `flow`: True once held, False if `timeout` seconds passed first.
        Raises QueueFull, without waiting, when the flow's queue is at its limit."""
        loop = asyncio.get_running_loop()
        with self._lock:
            state = self._flows.setdefault(flow, _Flow())
            if self._free and state.held < self.share:
                self._grant(state)  # a free seat means no eligible flow waits (invariant)
                return True
            if len(state.waiting) >= self.queue_limit:
                self.rejected[flow] += 1
                self._forget_if_idle(flow, state)
                raise QueueFull(flow, len(state.waiting), state.held)
            waiter = _Waiter(flow, loop, loop.create_future())
            state.waiting.append(waiter)
            self.queued[flow] += 1
        try:
            await asyncio.wait_for(asyncio.shield(waiter.future), timeout)
        except TimeoutError:
            self._abandon(waiter, late=True)
            return False
        except asyncio.CancelledError:  # the caller went away: nobody will use the seat
            self._abandon(waiter, late=False)
            raise
        return True

    def release(self, flow: str) -> None:
        """Give back a seat of `flow` (from any thread); it goes to the next flow in turn."""
        with self._lock:
            state = self._flows[flow]
            self._give_back(state)
            self._forget_if_idle(flow, state)

    def held(self, flow: str) -> int:
        """Seats `flow` holds now."""
        with self._lock:
            state = self._flows.get(flow)
            return state.held if state else 0

    def waiting(self, flow: str) -> int:
        """Requests of `flow` waiting for a seat now."""
        with self._lock:
            state = self._flows.get(flow)
            return len(state.waiting) if state else 0

    def _abandon(self, waiter: _Waiter, late: bool) -> None:
        """A waiter that stopped waiting: out of the queue, or, granted meanwhile, its seat
        passed on to the next flow in turn."""
        with self._lock:
            state = self._flows[waiter.flow]
            if waiter.granted:
                self._give_back(state)
            else:
                state.waiting.remove(waiter)
                self.timed_out[waiter.flow] += late
            self._forget_if_idle(waiter.flow, state)

    def _grant(self, state: _Flow) -> None:
        state.held += 1
        state.last_served = next(self._grants)
        self._free -= 1

    def _give_back(self, state: _Flow) -> None:
        state.held -= 1
        self._free += 1
        self._dispatch()

    def _forget_if_idle(self, flow: str, state: _Flow) -> None:
        # Idle flows are dropped: the table holds only flows with seats or waiters.
        if not state.held and not state.waiting:
            del self._flows[flow]

    def _dispatch(self) -> None:
        """Hand free seats to waiting flows below their share, fewest seats held first."""
        while self._free:
            eligible = [s for s in self._flows.values() if s.waiting and s.held < self.share]
            if not eligible:
                return
            state = min(eligible, key=lambda s: (s.held, s.last_served))
            waiter = state.waiting.popleft()
            try:
                waiter.loop.call_soon_threadsafe(_wake, waiter.future)
            except RuntimeError:  # its loop is closed: nobody waits any more
                continue
            self._grant(state)
            waiter.granted = True


def _wake(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)
