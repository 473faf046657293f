"""Admissions run where they are cheapest, with bounded concurrency, a deadline and a wedge
detector.

The event loop serves TLS handshakes, /healthz, /readyz and /metrics, so only work
known to be quick runs on it: a decision the caller marks `quick` is tried inline
first, and any step that could block or take long (an API call, a placement search
that is not cached) raises `Offload` before doing anything, so the decision is made
again on a worker. Handing a quick decision to a thread costs more than the decision
(the wake-up of the loop, and the GIL passed back and forth between busy threads), and a
large part of the throughput (bench/README.md has the figures).

At most `workers` decisions run on workers at once, each in its own thread; a
request waits for a free worker and for its decision only until its deadline, then
gets an answer anyway (the caller turns None into a denial). The work itself cannot
be interrupted: it finishes in its thread, bounded by the placement budgets, and
frees its worker then. Workers are shared fairly between namespaces
(`webhook.edge.fairqueue`): one namespace holds at most half of them, a freed worker goes
to the namespace holding fewest, and a namespace with too many requests waiting is
refused at once (`QueueFull`) rather than queued behind itself.

The admission path is wedged when every worker has been busy with one request for
longer than the deadline: nothing new can be decided. /readyz reports it, and
after `restart_after` seconds of it /healthz too, so Kubernetes restarts the
replica.
"""

from __future__ import annotations

import asyncio
import itertools
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from contextvars import ContextVar
from typing import Any, TypeVar

from webhook.edge.fairqueue import CLUSTER_FLOW, FairQueue, QueueFull

__all__ = ["AdmissionRunner", "Offload", "QueueFull", "offload_if_inline", "running_inline"]

_T = TypeVar("_T")

# True while a decision runs inline on the event loop. Workers run in threads of their own
# and never see it set: there, nothing offloads.
_INLINE: ContextVar[bool] = ContextVar("draquota_inline", default=False)


class Offload(Exception):
    """A decision tried inline reached a step that could block or take long: run it on a
    worker instead. Raised before the step changes anything."""


def running_inline() -> bool:
    """Whether the caller is a decision tried on the event loop."""
    return _INLINE.get()


def offload_if_inline(step: str) -> None:
    """Called before a step the event loop must not wait for (`step` says which)."""
    if running_inline():
        raise Offload(step)


def _consume(future: asyncio.Future[Any]) -> None:
    # A decision answered after its deadline: nobody awaits it, so retrieve its outcome here.
    if not future.cancelled():
        future.exception()


class AdmissionRunner:
    """Runs `fn(*args)` on at most `workers` threads, answering within `deadline` seconds;
    `queue` shares the workers between flows (namespaces) and counts what each queued and
    was refused."""

    def __init__(
        self,
        workers: int,
        deadline: float,
        restart_after: float | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.workers = workers
        self.deadline = deadline
        self.restart_after = restart_after if restart_after is not None else 6 * deadline
        self.clock = clock
        self.deadline_exceeded = 0
        self.inline = 0  # decisions answered on the event loop
        self.offloaded = 0  # decisions tried inline and handed to a worker
        self._executor = ThreadPoolExecutor(workers, thread_name_prefix="draquota-admission")
        self._side = ThreadPoolExecutor(2, thread_name_prefix="draquota-side")
        self.queue = FairQueue(workers)
        self._running: dict[int, float] = {}
        self._ids = itertools.count()
        self._lock = threading.Lock()
        self._wedged_since: float | None = None

    async def run(
        self,
        started: float,
        fn: Callable[..., _T],
        *args: Any,
        quick: bool = False,
        flow: str = CLUSTER_FLOW,
    ) -> tuple[bool, _T | None]:
        """(True, result), or (False, None) when the deadline (from `started`) passed first.

        With `quick`, `fn` is tried on the event loop first, and on a worker only if it
        raises `Offload`. On a worker it runs as a request of `flow` (the request's
        namespace): QueueFull when that flow already has too many waiting."""
        if quick:
            token = _INLINE.set(True)
            try:
                result = fn(*args)
            except Offload:
                self.offloaded += 1
            else:
                self.inline += 1
                return True, result
            finally:
                _INLINE.reset(token)
        loop = asyncio.get_running_loop()
        if not await self.queue.acquire(flow, self._remaining(started)):
            return self._late()
        key = next(self._ids)

        def job() -> _T:
            with self._lock:
                self._running[key] = self.clock()
            try:
                return fn(*args)
            finally:
                with self._lock:
                    self._running.pop(key, None)
                self.queue.release(flow)  # here, not on the loop: the loop may be gone

        try:
            future = loop.run_in_executor(self._executor, job)
        except BaseException:
            self.queue.release(flow)
            raise
        try:
            result = await asyncio.wait_for(asyncio.shield(future), self._remaining(started))
        except TimeoutError:
            future.add_done_callback(_consume)
            return self._late()
        return True, result

    def _remaining(self, started: float) -> float:
        return max(0.0, self.deadline - (self.clock() - started))

    def _late(self) -> tuple[bool, None]:
        self.deadline_exceeded += 1
        return False, None

    def busy(self) -> int:
        """Decisions running now."""
        with self._lock:
            return len(self._running)

    def wedged(self) -> tuple[bool, str]:
        """(True, why) when every worker has been on one request for longer than the deadline."""
        now = self.clock()
        with self._lock:
            starts = list(self._running.values())
        if len(starts) < self.workers or now - max(starts) <= self.deadline:
            self._wedged_since = None
            return False, ""
        if self._wedged_since is None:
            self._wedged_since = now
        youngest = now - max(starts)
        return True, (
            f"admission path wedged: all {self.workers} workers busy for more than "
            f"{youngest:.1f}s (deadline {self.deadline:g}s)"
        )

    def stuck(self) -> tuple[bool, str]:
        """(True, why) when the path has been wedged for longer than `restart_after`."""
        wedged, why = self.wedged()
        since = self._wedged_since
        if not wedged or since is None or self.clock() - since <= self.restart_after:
            return False, ""
        return True, f"{why}, for {self.clock() - since:.0f}s"

    async def side(self, fn: Callable[..., _T], *args: Any) -> _T:
        """Run quick blocking work (a metrics render) off the loop, never on an admission worker."""
        return await asyncio.get_running_loop().run_in_executor(self._side, fn, *args)

    def shutdown(self) -> None:
        self._executor.shutdown(wait=False, cancel_futures=True)
        self._side.shutdown(wait=False, cancel_futures=True)
