"""Group commit on its own: a batch decided in order on one usage, and the queue per cohort
that makes the first of a batch decide and write it for everyone."""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass

import pytest

from quota.charge import Charge, FlavorResource
from quota.usage import Usage
from quota.verdict import Decision, Verdict
from webhook.ledger.groupcommit import GroupCommit, Proposal, decide_together, recorded, settle

BASE = "cohort-team"
GPU = FlavorResource("a100", "gpu")
QUOTA = 2  # gpus of queue-a


def charge(queue: str = "queue-a", gpus: int = 1) -> Charge:
    return Charge(queue, "default", flavors={"gpu": "a100"}, per_pod={"gpu": gpus})


def fits(queue: str = "queue-a", gpus: int = 1) -> Callable[[Usage], Decision]:
    """Admitted when `gpus` more fit in the queue's quota on the usage it is shown."""

    def evaluate(usage: Usage) -> Decision:
        if usage.of(queue).get(GPU, 0) + gpus > QUOTA:
            return Decision(Verdict.DENIED, "QuotaExceeded", "no room")
        return Decision(Verdict.ADMITTED, "Admitted", charge=charge(queue, gpus))

    return evaluate


def broken(_usage: Usage) -> Decision:
    raise RuntimeError("a bug in one admission")


def base_of(queue: str) -> str:
    return "cohort-other" if queue == "queue-moved" else BASE


# -- deciding a batch -------------------------------------------------------------------------


@dataclass(frozen=True)
class BatchCase:
    id: str
    held: dict[str, Charge]  # the usage before the batch
    batch: list[Proposal]
    reasons: list[str]  # of each decision, in order


BATCH_CASES = [
    BatchCase(
        "each-sees-the-ones-admitted-before-it",
        {},
        [
            Proposal("u1", "ns/p1", fits()),
            Proposal("u2", "ns/p2", fits()),
            Proposal("u3", "ns/p3", fits()),
        ],
        ["Admitted", "Admitted", "QuotaExceeded"],
    ),
    BatchCase(
        "a-denied-one-takes-no-room",
        {},
        [Proposal("u1", "ns/p1", fits(gpus=3)), Proposal("u2", "ns/p2", fits(gpus=2))],
        ["QuotaExceeded", "Admitted"],
    ),
    BatchCase(
        "a-retried-admission-is-decided-without-its-earlier-record",
        {"u1": charge(gpus=2)},
        [Proposal("u1", "ns/p1", fits(gpus=2))],
        ["Admitted"],
    ),
    BatchCase(
        "a-pod-rechecked-in-place-is-decided-without-its-live-charge",
        {"ns/p1": charge(gpus=2)},
        [Proposal("u1", "ns/p1", fits(gpus=2), existing=True)],
        ["Admitted"],
    ),
    BatchCase(
        "a-new-pod-counts-the-live-pod-of-the-same-name",
        {"ns/p1": charge(gpus=2)},
        [Proposal("u1", "ns/p1", fits(gpus=1))],
        ["QuotaExceeded"],
    ),
    BatchCase(
        "one-failing-evaluation-is-its-own-not-the-batchs",
        {},
        [Proposal("u1", "ns/p1", broken), Proposal("u2", "ns/p2", fits(gpus=2))],
        ["LedgerUnavailable", "Admitted"],
    ),
    BatchCase(
        "a-queue-moved-to-another-cohort-fails-closed-and-takes-no-room",
        {},
        [Proposal("u1", "ns/p1", fits("queue-moved")), Proposal("u2", "ns/p2", fits(gpus=2))],
        ["LedgerUnavailable", "Admitted"],
    ),
]


@pytest.mark.parametrize("case", BATCH_CASES, ids=lambda c: c.id)
def test_a_batch_is_decided_in_order_on_one_usage(case: BatchCase) -> None:
    usage = Usage(case.held)
    decisions = decide_together(case.batch, usage, BASE, base_of)
    assert [d.reason for d in decisions] == case.reasons
    admitted = {p.uid for p, d in zip(case.batch, decisions, strict=True) if d.allowed}
    assert admitted <= usage.holders()  # the usage handed in now holds the batch's charges
    assert all(d.charge is None for d in decisions if not d.allowed)


def test_a_failed_write_fails_closed_the_allowed_and_keeps_the_denials() -> None:
    batch = [Proposal("u1", "ns/p1", fits()), Proposal("u2", "ns/p2", fits(gpus=3))]
    decisions = decide_together(batch, Usage(), BASE, base_of)
    settle(batch, BASE, decisions, "409 Conflict")
    assert [p.decision.reason if p.decision else None for p in batch] == [
        "LedgerUnavailable",
        "QuotaExceeded",
    ]
    assert batch[0].decision is not None and f"QuotaLedger {BASE}: 409" in batch[0].decision.message


def test_a_record_written_again_is_admitted_whatever_the_usage() -> None:
    full = Usage({"other": charge(gpus=QUOTA)})
    decision = recorded(charge())(full)
    assert decision.allowed and decision.charge == charge()


# -- the queue per cohort ---------------------------------------------------------------------


class Writer:
    """A commit that decides its batch in order, holding the first write until released."""

    def __init__(self) -> None:
        self.batches: list[list[str]] = []
        self.entered = threading.Event()
        self.release = threading.Event()
        self.usage = Usage()

    def __call__(self, base: str, batch: list[Proposal]) -> None:
        self.batches.append([p.uid for p in batch])
        if len(self.batches) == 1:
            self.entered.set()
            assert self.release.wait(10)
        settle(batch, base, decide_together(batch, self.usage, base, base_of))


def test_admissions_arriving_during_a_write_are_decided_and_written_together() -> None:
    commits = GroupCommit()
    writer = Writer()
    results: dict[str, Decision] = {}

    def join(uid: str) -> None:
        results[uid] = commits.join(BASE, Proposal(uid, f"ns/{uid}", fits()), writer)

    first = threading.Thread(target=join, args=("u0",))
    first.start()
    assert writer.entered.wait(10)
    others = [threading.Thread(target=join, args=(f"u{i}",)) for i in (1, 2, 3)]
    for thread in others:
        thread.start()
    for _ in range(1000):  # until all three are queued behind the write in progress
        if len(commits.queued(BASE)) == 3:
            break
        threading.Event().wait(0.01)
    assert len(commits.queued(BASE)) == 3
    writer.release.set()
    for thread in [first, *others]:
        thread.join(10)
    assert writer.batches[0] == ["u0"]
    assert sorted(writer.batches[1]) == ["u1", "u2", "u3"] and len(writer.batches) == 2
    assert sorted(uid for uid, d in results.items() if d.allowed) == sorted(
        ["u0", *writer.batches[1][:1]]
    )


def test_a_commit_that_raises_denies_its_batch_and_hands_the_lead_on() -> None:
    commits = GroupCommit()

    def failing(base: str, batch: list[Proposal]) -> None:
        raise RuntimeError("the API server went away")

    with pytest.raises(RuntimeError):
        commits.join(BASE, Proposal("u1", "ns/p1", fits()), failing)
    writer = Writer()
    writer.release.set()
    decision = commits.join(BASE, Proposal("u2", "ns/p2", fits()), writer)
    assert decision.allowed  # the base is free again: the next one leads
    assert commits.queued(BASE) == []


def test_a_batch_whose_commit_decided_nothing_fails_closed() -> None:
    commits = GroupCommit()
    decision = commits.join(BASE, Proposal("u1", "ns/p1", fits()), lambda base, batch: None)
    assert (decision.allowed, decision.reason) == (False, "LedgerUnavailable")


def test_each_base_has_one_lock() -> None:
    commits = GroupCommit()
    assert commits.lock(BASE) is commits.lock(BASE)
    assert commits.lock(BASE) is not commits.lock("cohort-other")
