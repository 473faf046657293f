"""Victim choice (`quota.preemption`): a table of cases written from Kueue's documented
classic preemption (site/content/en/docs/concepts/preemption.md, cluster_queue.md
"Preemption", KEP-83) and the behaviour its scheduler tests pin down.

Every row is a cohort of ClusterQueues (parsed from real objects), the workloads admitted
to them with priority, admission time and GPUs held, and a pending workload; the expected
victims are listed in eviction order with Kueue's reason. `fits` is the cohort arithmetic
of `quota.assignment` (the preemptor may borrow up to its borrowingLimit), as the caller's.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import pytest

from quota.assignment import quota_view
from quota.charge import Charge, FlavorResource
from quota.preemption import (
    IN_CLUSTER_QUEUE,
    IN_COHORT_RECLAIM_WHILE_BORROWING,
    IN_COHORT_RECLAMATION,
    Candidate,
    choose_victims,
)
from quota.queues import ClusterQueue
from quota.queuetable import QueueTable, queue_table
from quota.settings import Settings
from quota.usage import Usage
from tests.quota.queue_builders import cluster_queue, scenario_objects
from webhook.store.clusterstate import ClusterState

GPU_CLASS = "gpu.example.com"
DEFAULT = FlavorResource("default", "gpus")
SPOT = FlavorResource("spot", "gpus")
RECLAIM = IN_COHORT_RECLAMATION
WHILE_BORROWING = IN_COHORT_RECLAIM_WHILE_BORROWING
IN_CQ = IN_CLUSTER_QUEUE


def queue(
    name: str, nominal: int | Mapping[str, int], cohort: str | None = None, **preemption: Any
) -> dict[str, Any]:
    """A ClusterQueue of `nominal` GPUs in flavor default (or per flavor), with a policy."""
    nominals = {"default": nominal} if isinstance(nominal, int) else dict(nominal)
    obj = cluster_queue(
        {
            "name": name,
            "cohort": cohort,
            "classes": {"gpus": [GPU_CLASS]},
            "groups": [{flavor: {"gpus": n} for flavor, n in nominals.items()}],
        }
    )
    if preemption:
        obj["spec"]["preemption"] = preemption
    return obj


@dataclass(frozen=True)
class W:
    """An admitted workload: `gpus` per pod, `pods` pods (more than one: a group or a Job)."""

    key: str
    queue: str
    priority: int
    at: float
    gpus: int
    pods: int = 1
    flavor: str = "default"

    def holders(self) -> tuple[str, ...]:
        return (self.key,) if self.pods == 1 else tuple(f"{self.key}-{i}" for i in range(self.pods))


@dataclass(frozen=True)
class Case:
    queues: list[dict[str, Any]]
    running: list[W]
    preemptor: str  # its ClusterQueue
    priority: int
    created: float
    gpus: int
    victims: list[tuple[str, str]] = field(default_factory=list)
    needs: frozenset[FlavorResource] = frozenset({DEFAULT})


def _table(case: Case) -> QueueTable:
    flavors = sorted(
        {f["name"] for q in case.queues for g in q["spec"]["resourceGroups"] for f in g["flavors"]}
    )
    objects = scenario_objects({"flavors": flavors, "queues": [{"raw": q} for q in case.queues]})
    table = queue_table(ClusterState(objects), Settings())
    assert table.invalid == {}
    return table


def _usage(running: list[W]) -> Usage:
    usage = Usage()
    for w in running:
        for holder in w.holders():
            charge = Charge(w.queue, "team-a/default", {"gpus": w.flavor}, {"gpus": w.gpus})
            usage.add(holder, charge)
    return usage


def _candidates(running: list[W]) -> list[Candidate]:
    return [Candidate(w.key, w.holders(), w.queue, w.priority, w.at) for w in running]


def _fits(
    table: QueueTable, home: ClusterQueue, gpus: int, key: FlavorResource = DEFAULT
) -> Callable[[Usage], bool]:
    """The caller's verdict: `gpus` more fit in the queue's flavor (borrowing allowed)."""
    return lambda u: gpus <= quota_view(table, home, key, u.of).available


def _choose(case: Case) -> tuple[list[tuple[str, str]], QueueTable, Usage]:
    table = _table(case)
    usage = _usage(case.running)
    home = table.queues[case.preemptor]
    fits = _fits(table, home, case.gpus, next(iter(case.needs)))
    victims = choose_victims(
        home, case.priority, case.created, fits, case.needs, table, usage, _candidates(case.running)
    )
    return [(v.candidate.key, v.reason) for v in victims], table, usage


# A queue of 4 GPUs that evicts lower priority, with a mix of admitted workloads.
LOCAL = [queue("a", 4, withinClusterQueue="LowerPriority")]
LOCAL_RUNNING = [
    W("a/low-old", "a", 1, at=10, gpus=1),
    W("a/low-new", "a", 1, at=20, gpus=1),
    W("a/mid", "a", 3, at=5, gpus=2),
]
# Cohort lab: research lends, ml borrows (ml holds 6 of its nominal 2).
LAB_RESEARCH_OWN = W("research/r-low", "research", 0, at=1, gpus=1)
ML_BORROWING = [
    W("ml/m1", "ml", 0, at=10, gpus=2),
    W("ml/m2", "ml", 0, at=20, gpus=2),
    W("ml/m3", "ml", 0, at=30, gpus=2),
]

BORROW_THRESHOLD = [
    queue(
        "research",
        4,
        "lab",
        reclaimWithinCohort="Any",
        borrowWithinCohort={"policy": "LowerPriority", "maxPriorityThreshold": 2},
    ),
    queue("ml", 2, "lab"),
    queue("spare", 1, "lab"),
]
BORROW_THRESHOLD_RUNNING = [
    W("research/r-keep", "research", 9, at=1, gpus=2),
    W("ml/low", "ml", 1, at=10, gpus=1),
    W("ml/hi", "ml", 4, at=20, gpus=4),
]


def lab(**preemption: Any) -> list[dict[str, Any]]:
    return [queue("research", 6, "lab", **preemption), queue("ml", 2, "lab")]


CASES = {
    # --- within the ClusterQueue -------------------------------------------------------
    "within-lowest-priority-newest-first": Case(
        LOCAL, LOCAL_RUNNING, "a", 5, 100, gpus=1, victims=[("a/low-new", IN_CQ)]
    ),
    "within-only-as-many-as-needed": Case(
        LOCAL,
        LOCAL_RUNNING,
        "a",
        5,
        100,
        gpus=2,
        victims=[("a/low-new", IN_CQ), ("a/low-old", IN_CQ)],
    ),
    # Greedy takes low-new, low-old, mid (4 free); fill-back puts low-old back (3 free).
    "fill-back-drops-an-unneeded-victim": Case(
        LOCAL,
        LOCAL_RUNNING,
        "a",
        5,
        100,
        gpus=3,
        victims=[("a/low-new", IN_CQ), ("a/mid", IN_CQ)],
    ),
    "within-never-evicts-nothing": Case([queue("a", 4)], LOCAL_RUNNING, "a", 5, 100, gpus=1),
    "within-equal-priority-kept-under-lower-priority": Case(
        LOCAL, [W("a/peer", "a", 5, at=150, gpus=4)], "a", 5, 100, gpus=1
    ),
    "within-equal-priority-newer-evicted-under-lower-or-newer-equal": Case(
        [queue("a", 4, withinClusterQueue="LowerOrNewerEqualPriority")],
        [W("a/older", "a", 5, at=50, gpus=2), W("a/newer", "a", 5, at=150, gpus=2)],
        "a",
        5,
        100,
        gpus=2,
        victims=[("a/newer", IN_CQ)],
    ),
    "within-equal-priority-older-kept-under-lower-or-newer-equal": Case(
        [queue("a", 4, withinClusterQueue="LowerOrNewerEqualPriority")],
        [W("a/older", "a", 5, at=50, gpus=4)],
        "a",
        5,
        100,
        gpus=1,
    ),
    "within-higher-priority-never": Case(
        [queue("a", 4, withinClusterQueue="LowerOrNewerEqualPriority")],
        [W("a/high", "a", 9, at=150, gpus=4)],
        "a",
        5,
        100,
        gpus=1,
    ),
    "nothing-when-eviction-cannot-make-room": Case(
        LOCAL,
        [W("a/high", "a", 9, at=1, gpus=3), W("a/low", "a", 1, at=2, gpus=1)],
        "a",
        5,
        100,
        gpus=2,
    ),
    "nothing-when-it-already-fits": Case(
        LOCAL, [W("a/low", "a", 1, at=2, gpus=1)], "a", 5, 100, gpus=3
    ),
    "job-evicted-whole": Case(
        LOCAL,
        [W("a/pod", "a", 1, at=5, gpus=1), W("Job:team-a/train", "a", 1, at=10, gpus=1, pods=3)],
        "a",
        5,
        100,
        gpus=2,
        victims=[("Job:team-a/train", IN_CQ)],
    ),
    "only-candidates-holding-a-needed-flavor": Case(
        [queue("a", {"default": 2, "spot": 2}, withinClusterQueue="LowerPriority")],
        [
            W("a/spot-lowest", "a", 0, at=30, gpus=2, flavor="spot"),
            W("a/default-low", "a", 1, at=10, gpus=2),
        ],
        "a",
        5,
        100,
        gpus=1,
        victims=[("a/default-low", IN_CQ)],
    ),
    # --- reclaim within the cohort -------------------------------------------------------
    "reclaim-any-newest-borrower-first": Case(
        lab(reclaimWithinCohort="Any"),
        ML_BORROWING,
        "research",
        0,
        100,
        gpus=4,
        victims=[("ml/m3", RECLAIM)],
    ),
    "reclaim-lower-priority-spares-equal-priority": Case(
        lab(reclaimWithinCohort="LowerPriority"), ML_BORROWING, "research", 0, 100, gpus=4
    ),
    "reclaim-lower-priority-takes-lower-priority": Case(
        lab(reclaimWithinCohort="LowerPriority"),
        ML_BORROWING,
        "research",
        5,
        100,
        gpus=4,
        victims=[("ml/m3", RECLAIM)],
    ),
    "reclaim-never-evicts-nothing": Case(lab(), ML_BORROWING, "research", 5, 100, gpus=4),
    "no-reclaim-from-a-queue-within-its-nominal": Case(
        [queue("research", 4, "lab", reclaimWithinCohort="Any"), queue("ml", 4, "lab")],
        [W("research/r", "research", 9, at=1, gpus=4), W("ml/m", "ml", 0, at=2, gpus=4)],
        "research",
        5,
        100,
        gpus=1,
    ),
    # m3 and m2 bring ml back to its nominal 2: m1 is then not borrowing and stays; the rest
    # comes from research's own lower-priority workload.
    "reclaim-stops-once-the-queue-is-within-nominal": Case(
        lab(reclaimWithinCohort="Any", withinClusterQueue="LowerPriority"),
        [LAB_RESEARCH_OWN, *ML_BORROWING],
        "research",
        5,
        100,
        gpus=6,
        victims=[("ml/m3", RECLAIM), ("ml/m2", RECLAIM), ("research/r-low", IN_CQ)],
    ),
    # research would hold 3 + 2 > nominal 4 afterwards: reclaiming to borrow is not done.
    "reclaim-only-to-fit-within-nominal": Case(
        [queue("research", 4, "lab", reclaimWithinCohort="Any"), queue("ml", 4, "lab")],
        [W("research/r", "research", 9, at=1, gpus=3), W("ml/m", "ml", 0, at=2, gpus=5)],
        "research",
        5,
        100,
        gpus=2,
    ),
    "outside-the-cohort-never": Case(
        [
            queue("research", 4, "lab", reclaimWithinCohort="Any"),
            queue("ml", 4, "lab"),
            queue("x", 2, "other"),
            queue("y", 4, "other"),
        ],
        [
            W("ml/m", "ml", 0, at=2, gpus=4),
            W("x/b", "x", 0, at=3, gpus=4),
            W("research/r", "research", 9, at=1, gpus=4),
        ],
        "research",
        5,
        100,
        gpus=1,
    ),
    # --- borrow within the cohort ----------------------------------------------------------
    # research must borrow 4 more; ml is back at its nominal 2 once m-b goes, so m-a stays.
    "borrow-within-cohort-stops-at-the-lenders-nominal": Case(
        [
            queue(
                "research",
                2,
                "lab",
                reclaimWithinCohort="Any",
                borrowWithinCohort={"policy": "LowerPriority"},
            ),
            queue("ml", 2, "lab"),
            queue("spare", 4, "lab"),
        ],
        [
            W("research/r", "research", 9, at=1, gpus=2),
            W("ml/m-a", "ml", 0, at=10, gpus=2),
            W("ml/m-b", "ml", 0, at=20, gpus=2),
        ],
        "research",
        5,
        100,
        gpus=6,
    ),
    # research is under nominal: ml/hi (above the threshold) may go, but then research must
    # fit within its nominal quota; ml/low goes back (fill-back).
    "borrow-within-cohort-above-threshold-is-plain-reclaim": Case(
        BORROW_THRESHOLD,
        BORROW_THRESHOLD_RUNNING,
        "research",
        5,
        100,
        gpus=2,
        victims=[("ml/hi", RECLAIM)],
    ),
    "borrow-within-cohort-above-threshold-forbids-borrowing": Case(
        BORROW_THRESHOLD, BORROW_THRESHOLD_RUNNING, "research", 5, 100, gpus=3
    ),
    # research is at its nominal 2 and must borrow 4; ml borrows 4 of spare's.
    **{
        f"borrow-within-cohort-threshold-{name}": Case(
            [
                queue("research", 2, "lab", reclaimWithinCohort="Any", borrowWithinCohort=policy),
                queue("ml", 2, "lab"),
                queue("spare", 4, "lab"),
            ],
            [
                W("research/r", "research", 9, at=1, gpus=2),
                W("ml/base", "ml", 9, at=1, gpus=2),
                W("ml/low", "ml", 1, at=10, gpus=2),
                W("ml/mid", "ml", 3, at=20, gpus=2),
            ],
            "research",
            5,
            100,
            gpus=4,
            victims=victims,
        )
        for name, policy, victims in [
            (
                "unset",
                {"policy": "LowerPriority"},
                [("ml/low", WHILE_BORROWING), ("ml/mid", WHILE_BORROWING)],
            ),
            ("below-mid", {"policy": "LowerPriority", "maxPriorityThreshold": 2}, []),
            (
                "at-mid",
                {"policy": "LowerPriority", "maxPriorityThreshold": 3},
                [("ml/low", WHILE_BORROWING), ("ml/mid", WHILE_BORROWING)],
            ),
            ("never", {"policy": "Never"}, []),
        ]
    },
}


@pytest.mark.parametrize("case", CASES.values(), ids=CASES.keys())
def test_victims(case: Case) -> None:
    victims, table, usage = _choose(case)
    assert victims == case.victims
    if not victims:
        return
    home = table.queues[case.preemptor]
    members = {m.name for m in table.members(home)}
    chosen = {w.key: w for w in case.running if w.key in dict(victims)}
    assert {w.queue for w in chosen.values()} <= members
    left = usage.copy()
    for w in chosen.values():
        for holder in w.holders():
            left.remove(holder)
    assert case.gpus <= quota_view(table, home, next(iter(case.needs)), left.of).available


def test_job_victim_carries_every_holder() -> None:
    case = CASES["job-evicted-whole"]
    table, usage = _table(case), _usage(case.running)
    home = table.queues["a"]
    victims = choose_victims(
        home,
        5,
        100,
        _fits(table, home, 2),
        frozenset({DEFAULT}),
        table,
        usage,
        _candidates(case.running),
    )
    assert [v.candidate.holders for v in victims] == [
        ("Job:team-a/train-0", "Job:team-a/train-1", "Job:team-a/train-2")
    ]


def test_a_holder_charged_to_another_queue_is_never_evicted() -> None:
    # A candidate must free its own queue's quota: one whose holder is charged elsewhere
    # (a caller's mix-up) would evict a workload for nothing.
    case = Case(LOCAL, [W("a/low", "a", 1, at=2, gpus=4)], "a", 5, 100, gpus=1)
    table, usage = _table(case), _usage(case.running)
    home = table.queues["a"]
    wrong = Candidate("b/low", ("a/low",), "b", 1, 2)
    victims = choose_victims(
        home,
        5,
        100,
        _fits(table, home, 1),
        frozenset({DEFAULT}),
        table,
        usage,
        [wrong],
    )
    assert victims == ()


def test_the_usage_given_is_left_as_it_was() -> None:
    case = CASES["fill-back-drops-an-unneeded-victim"]
    table, usage = _table(case), _usage(case.running)
    before = {h: usage.charge_of(h) for h in usage.holders()}
    home = table.queues["a"]
    choose_victims(
        home,
        5,
        100,
        _fits(table, home, 3),
        frozenset({DEFAULT}),
        table,
        usage,
        _candidates(case.running),
    )
    assert {h: usage.charge_of(h) for h in usage.holders()} == before
