"""WriteBehind: records decided now are written later, in batches per ledger base."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import pytest

from webhook.ledger.reservations import Reservation
from webhook.ledger.writebehind import WriteBehind


def record(uid: str, charge: str = '{"a": 1}') -> Reservation:
    return Reservation(uid, "team-a", f"ns/{uid}", charge)


class Writer:
    """Stands for the ledger's write: takes what it is given, unless told to fail."""

    def __init__(self) -> None:
        self.batches: list[tuple[str, list[str]]] = []
        self.failing = False
        self.release = threading.Event()
        self.release.set()

    def __call__(self, base: str, records: list[Reservation]) -> set[str]:
        self.release.wait(5)
        if self.failing:
            raise RuntimeError("API server down")
        self.batches.append((base, [r.id for r in records]))
        return {r.id for r in records}


@pytest.fixture
def writer() -> Writer:
    return Writer()


@pytest.fixture
def writes(writer: Writer) -> Iterator[WriteBehind]:
    behind = WriteBehind(writer, interval=0.05)
    behind.start()
    yield behind
    writer.failing = False
    writer.release.set()
    behind.stop(5)


def test_records_added_while_a_batch_is_out_go_together_in_the_next(
    writer: Writer, writes: WriteBehind
) -> None:
    writer.release.clear()  # the first batch is held at the API server
    writes.add("cohort-a", record("u1"))
    time.sleep(0.1)
    for uid in ("u2", "u3", "u4"):
        writes.add("cohort-a", record(uid))
    writer.release.set()
    assert writes.flush(5)
    assert writer.batches == [("cohort-a", ["u1"]), ("cohort-a", ["u2", "u3", "u4"])]
    assert writes.unwritten() == 0
    assert writes.oldest_age() == 0.0


def test_each_ledger_base_gets_its_own_batch(writer: Writer, writes: WriteBehind) -> None:
    writer.release.clear()
    writes.add("cohort-a", record("a1"))
    writes.add("queue-b", record("b1"))
    writes.add("cohort-a", record("a2"))
    writer.release.set()
    assert writes.flush(5)
    assert sorted(writer.batches) == [("cohort-a", ["a1", "a2"]), ("queue-b", ["b1"])]


def test_a_failed_batch_stays_and_is_written_once_the_api_server_takes_it(
    writer: Writer, writes: WriteBehind
) -> None:
    writer.failing = True
    writes.add("cohort-a", record("u1"))
    assert not writes.flush(0.3)
    assert writes.unwritten() == 1
    assert writes.oldest_age() >= 0.3  # what the ledger bounds admissions by
    writer.failing = False
    assert writes.flush(5)
    assert writer.batches == [("cohort-a", ["u1"])]


def test_a_record_released_before_it_was_written_is_never_written(
    writer: Writer, writes: WriteBehind
) -> None:
    writer.release.clear()
    writes.add("cohort-a", record("u0"))
    time.sleep(0.1)  # u0 is out; u1 waits behind it
    writes.add("cohort-a", record("u1"))
    writes.discard(["u1"])
    writer.release.set()
    assert writes.flush(5)
    assert writer.batches == [("cohort-a", ["u0"])]


def test_a_newer_record_of_the_same_pod_replaces_the_one_out_and_is_written_too(
    writer: Writer, writes: WriteBehind
) -> None:
    writer.release.clear()
    writes.add("cohort-a", record("u1", '{"a": 1}'))
    time.sleep(0.1)  # the first version is out
    writes.add("cohort-a", record("u1", '{"a": 2}'))
    writer.release.set()
    assert writes.flush(5)
    assert writer.batches == [("cohort-a", ["u1"]), ("cohort-a", ["u1"])]


def test_stop_writes_what_is_left_before_the_writer_ends(writer: Writer) -> None:
    behind = WriteBehind(writer, interval=3600)  # nothing would be due for an hour
    behind.start()
    behind.add("cohort-a", record("u1"))
    time.sleep(0.05)
    behind.add("cohort-a", record("u2"))
    assert behind.stop(5)
    assert [uid for _, batch in writer.batches for uid in batch] == ["u1", "u2"]


def test_a_writer_never_started_reports_what_it_could_not_write(writer: Writer) -> None:
    behind = WriteBehind(writer, interval=0.05)
    assert behind.stop(1)  # nothing to write
    behind.add("cohort-a", record("u1"))
    assert not behind.flush(0.2)
    assert writer.batches == []


def test_a_burst_of_admissions_wakes_the_writer_once_not_once_per_record(writer: Writer) -> None:
    """Each wake-up is a thread switch taken from the admissions; a base with records waiting
    already bounds the writer's sleep, so only its first record wakes it."""
    writer_reads = 0

    def clock() -> float:
        nonlocal writer_reads
        if threading.current_thread().name == "draquota-write-behind":
            writer_reads += 1  # the writer reads the clock at every wake-up
        return time.monotonic()

    behind = WriteBehind(writer, interval=30.0, clock=clock)
    behind.start()
    try:
        behind.add("cohort-a", record("u0"))  # due at once: written, then the 30 s starts
        assert behind.flush(5)
        behind.add("cohort-a", record("u1"))  # wakes the writer: now it sleeps until due
        time.sleep(0.2)
        woken = writer_reads
        for i in range(2, 200):
            behind.add("cohort-a", record(f"u{i}"))
            time.sleep(0.001)  # admissions come apart, as each has its own work
        time.sleep(0.2)
        assert writer_reads - woken <= 2
        assert behind.unwritten() == 199
    finally:
        assert behind.stop(5)
    assert sum(len(ids) for _, ids in writer.batches) == 200
