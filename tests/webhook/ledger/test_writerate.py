"""WriteRate: record writes paced per ClusterQueue, the wait bounded, queues independent."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from webhook.ledger.writerate import WriteRate


@dataclass
class Time:
    """A clock that the rate's sleeps move on."""

    now: float = 100.0
    slept: list[float] = field(default_factory=list)

    def clock(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds


def rate(t: Time, per_second: float = 10, burst: float = 3, max_wait: float = 1.0) -> WriteRate:
    return WriteRate(per_second, burst, max_wait, clock=t.clock, sleep=t.sleep)


def test_a_burst_writes_at_once_then_each_write_waits_its_turn() -> None:
    t = Time()
    writes = rate(t, per_second=10, burst=3)
    waits = [writes.turn("gpus") for _ in range(6)]
    assert waits[:3] == [0.0, 0.0, 0.0]
    assert waits[3:] == pytest.approx([0.1, 0.1, 0.1])
    assert t.now == pytest.approx(100.3)  # 6 writes: 3 at once, then 10 a second


def test_a_queue_over_its_rate_does_not_slow_another_queue() -> None:
    t = Time()
    writes = rate(t, per_second=10, burst=2)
    for _ in range(2):
        writes.turn("churning")
    assert writes.turn("churning") == pytest.approx(0.1)
    assert [writes.turn("quiet") for _ in range(2)] == [0.0, 0.0]


def test_a_turn_further_away_than_the_wait_allowed_is_refused_and_takes_no_slot() -> None:
    t = Time()
    writes = WriteRate(1, 1, 0.5, clock=t.clock, sleep=lambda _: None)  # nobody's clock moves
    assert writes.turn("gpus") == 0.0
    assert writes.turn("gpus") is None  # a second away: more than half a second
    assert writes.turn("gpus") is None
    t.now += 0.6  # the refused ones took nothing: the next slot is 0.4 s away
    assert writes.turn("gpus") == pytest.approx(0.4)


def test_admissions_waiting_together_are_given_successive_slots() -> None:
    t = Time()
    writes = WriteRate(10, 1, 1.0, clock=t.clock, sleep=lambda _: None)  # all arrive at once
    waits = [writes.turn("gpus") for _ in range(4)]
    assert waits == pytest.approx([0.0, 0.1, 0.2, 0.3])


def test_an_idle_queue_gets_its_burst_back_and_no_more() -> None:
    t = Time()
    writes = rate(t, per_second=10, burst=3)
    for _ in range(3):
        writes.turn("gpus")
    t.now += 60  # would be 600 tokens unbounded
    assert [writes.turn("gpus") for _ in range(3)] == [0.0, 0.0, 0.0]
    assert writes.turn("gpus") == pytest.approx(0.1)


@pytest.mark.parametrize(("per_second", "burst", "wait"), [(0, 1, 1), (1, 0, 1), (1, 1, -1)])
def test_settings_out_of_range_are_refused(per_second: float, burst: float, wait: float) -> None:
    with pytest.raises(ValueError, match="out of range"):
        WriteRate(per_second, burst, wait)
