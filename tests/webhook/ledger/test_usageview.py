"""`webhook.ledger.UsageView`: a ledger's pods, locked and caught up, and handed to a worker
when a decision on the event loop would wait for either."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

from quota.settings import Settings
from tests.webhook.builders import cluster_state
from webhook.edge.runner import AdmissionRunner
from webhook.ledger import QUICK_CHANGES, UsageView
from webhook.ledger.podusage import PodUsage


class Follower:
    """Stands in for a ledger's catching up: counts syncs, reports how far behind it is."""

    def __init__(self, behind: int | None = 0) -> None:
        self.behind_by = behind
        self.syncs = 0
        self.asked = 0
        self.fail = False

    def sync(self) -> None:
        if self.fail:
            raise RuntimeError("the journal could not be read")
        self.syncs += 1

    def behind(self) -> int | None:
        self.asked += 1
        return self.behind_by


def make(behind: int | None = 0) -> tuple[UsageView, Follower]:
    follower = Follower(behind)
    pods = PodUsage(cluster_state(), Settings())
    return UsageView(pods, follower.sync, follower.behind), follower


def on_the_loop(view: UsageView) -> tuple[AdmissionRunner, int]:
    """Read the view as a quick decision does: inline first, on a worker if it offloads."""
    runner = AdmissionRunner(workers=1, deadline=10)

    def read() -> int:
        with view as pods:
            return len(pods.records())

    try:
        answered, result = asyncio.run(runner.run(time.monotonic(), read, quick=True))
    finally:
        runner.shutdown()
    assert answered and result == 0
    return runner, result


def test_each_use_catches_up_once_under_the_lock_and_lets_it_go() -> None:
    view, follower = make()
    with view as pods:
        assert pods is view.pods and follower.syncs == 1
    with view:
        assert follower.syncs == 2
    assert view.lock.acquire(blocking=False)  # released: another thread could take it
    view.lock.release()


def test_a_failed_catch_up_releases_the_lock() -> None:
    view, follower = make()
    follower.fail = True
    with pytest.raises(RuntimeError), view:
        pass
    got: list[bool] = []
    taken = threading.Thread(target=lambda: got.append(view.lock.acquire(timeout=5)))
    taken.start()
    taken.join(10)
    assert got == [True]  # another thread takes it


@pytest.mark.parametrize(
    ("behind", "offloaded"),
    [
        pytest.param(0, False, id="caught-up-answers-on-the-loop"),
        pytest.param(QUICK_CHANGES, False, id="a-few-changes-are-caught-up-on-the-loop"),
        pytest.param(QUICK_CHANGES + 1, True, id="far-behind-goes-to-a-worker"),
        pytest.param(None, True, id="a-rebuild-goes-to-a-worker"),
    ],
)
def test_a_decision_on_the_loop_catches_up_only_a_few_changes(
    behind: int | None, offloaded: bool
) -> None:
    view, follower = make(behind)
    runner, _ = on_the_loop(view)
    assert follower.asked == 1
    assert (runner.offloaded, runner.inline) == ((1, 0) if offloaded else (0, 1))
    assert follower.syncs == 1  # on whichever thread answered, once


def test_a_decision_on_the_loop_never_waits_for_the_lock() -> None:
    view, follower = make()
    held, done = threading.Event(), threading.Event()

    def hold() -> None:
        with view.lock:
            held.set()
            done.wait(10)

    holder = threading.Thread(target=hold)
    holder.start()
    assert held.wait(10)
    threading.Timer(0.2, done.set).start()  # the worker waits for the lock, the loop does not
    runner, _ = on_the_loop(view)
    holder.join(10)
    assert (runner.offloaded, runner.inline) == (1, 0)
    assert follower.syncs == 1  # on the worker, once the holder let go


def test_off_the_loop_how_far_behind_is_not_asked() -> None:
    view, follower = make(behind=None)
    with view:
        pass
    assert (follower.asked, follower.syncs) == (0, 1)
