"""Queue order and all-or-nothing groups (quota.waiting), against a stub that admits what fits
in a fixed number of devices."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest

from quota.queuetable import queue_table
from quota.settings import Settings
from quota.waiting import (
    ADMISSION_GATE,
    GROUP_LABEL,
    GROUP_TOTAL_ANNOTATION,
    Waiting,
    admit_in_order,
    waiting_key,
    waiting_workloads,
)
from tests.webhook.builders import NAMESPACE, QUEUE, cluster_objects
from webhook.store.clusterstate import ClusterState


def _table(strategy: str = "BestEffortFIFO", when_full: str = "Queue") -> Any:
    objects = cluster_objects(4)
    for obj in objects:
        if obj["kind"] == "ClusterQueue":
            obj["spec"].update(whenFull=when_full, queueingStrategy=strategy)
    return queue_table(ClusterState(objects), Settings())


def _pod(name: str, created: int, priority: int = 0, gated: bool = True, **meta: Any) -> Any:
    spec: dict[str, Any] = {"priority": priority, "containers": []}
    if gated:
        spec["schedulingGates"] = [{"name": "other"}, {"name": ADMISSION_GATE}]
    metadata = {"name": name, "namespace": NAMESPACE, "uid": name, **meta}
    metadata["creationTimestamp"] = f"2026-11-24T20:{created:02d}:00Z"
    return {"kind": "Pod", "metadata": metadata, "spec": spec}


def _member(name: str, created: int, group: str, total: str) -> Any:
    return _pod(
        name,
        created,
        labels={GROUP_LABEL: group},
        annotations={GROUP_TOTAL_ANNOTATION: total},
    )


@dataclass
class Devices:
    """Admits a workload when its pods' sizes fit in what is left."""

    free: int
    sizes: dict[str, int]

    def __call__(self, workload: Waiting) -> str:
        need = sum(self.sizes[p["metadata"]["name"]] for p in workload.pods)
        if need > self.free:
            return f"{need - self.free} more needed"
        self.free -= need
        return ""


def _run(strategy: str, pods: list[Any], sizes: dict[str, int], free: int) -> dict[str, str]:
    table = _table(strategy)
    workloads = waiting_workloads(pods, table)[QUEUE]
    return admit_in_order(table.queues[QUEUE], workloads, Devices(free, sizes))


ORDER_CASES = [
    # strategy, pods (name, created, priority), sizes, free, those left waiting
    ("BestEffortFIFO", [("a", 1, 0), ("b", 2, 0), ("c", 3, 0)], {"a": 3, "b": 2, "c": 1}, 4, "b"),
    ("StrictFIFO", [("a", 1, 0), ("b", 2, 0), ("c", 3, 0)], {"a": 3, "b": 2, "c": 1}, 4, "bc"),
    ("StrictFIFO", [("a", 1, 0), ("b", 2, 5)], {"a": 2, "b": 2}, 2, "a"),
    ("BestEffortFIFO", [("a", 1, 0), ("b", 2, 0)], {"a": 1, "b": 1}, 2, ""),
    ("StrictFIFO", [("a", 2, 0), ("b", 1, 0)], {"a": 1, "b": 2}, 2, "a"),
]


@pytest.mark.parametrize(("strategy", "pods", "sizes", "free", "left"), ORDER_CASES)
def test_order_priority_then_age_and_strategy(
    strategy: str, pods: list[tuple[str, int, int]], sizes: dict[str, int], free: int, left: str
) -> None:
    objects = [_pod(name, created, priority) for name, created, priority in pods]
    waiting = _run(strategy, objects, sizes, free)
    assert "".join(sorted(k.split("/")[1] for k in waiting)) == left


def test_positions_count_only_those_still_waiting() -> None:
    pods = [_pod("a", 1), _pod("b", 2), _pod("c", 3)]
    waiting = _run("StrictFIFO", pods, {"a": 1, "b": 9, "c": 1}, 4)
    assert waiting == {
        f"{NAMESPACE}/b": (
            f"waiting for quota: 6 more needed; position 1 of 2 in ClusterQueue {QUEUE}"
        ),
        f"{NAMESPACE}/c": (
            f"waiting behind pod {NAMESPACE}/b (StrictFIFO); position 2 of 2 in ClusterQueue "
            f"{QUEUE}"
        ),
    }


def test_a_group_is_tried_whole_and_an_incomplete_one_blocks_nobody() -> None:
    pods = [_member("g-0", 1, "g", "3"), _member("g-1", 2, "g", "3"), _pod("late", 5)]
    waiting = _run("StrictFIFO", pods, {"g-0": 1, "g-1": 1, "late": 1}, 4)
    assert waiting == {f"{NAMESPACE}/g": "waiting for the pods of pod group team-a/g: 2 of 3 exist"}


@pytest.mark.parametrize(
    ("totals", "problem"),
    [
        (("2", "3"), f"its pods disagree on annotation {GROUP_TOTAL_ANNOTATION}"),
        (("zero", "zero"), "must be a whole number from 1 to 1024"),
        (("1", "1"), "it has 2 pods, more than its total count 1"),
    ],
)
def test_a_group_with_a_bad_total_count_never_starts_and_says_why(
    totals: tuple[str, str], problem: str
) -> None:
    pods = [_member(f"g-{i}", i, "g", total) for i, total in enumerate(totals)]
    waiting = _run("BestEffortFIFO", pods, {"g-0": 1, "g-1": 1}, 4)
    assert waiting[f"{NAMESPACE}/g"].startswith("pod group team-a/g cannot start: ")
    assert problem in waiting[f"{NAMESPACE}/g"]


def test_only_gated_pods_of_queueing_queues_wait() -> None:
    pods = [_pod("gated", 1), _pod("running", 2, gated=False)]
    assert [w.key for w in waiting_workloads(pods, _table())[QUEUE]] == [f"{NAMESPACE}/gated"]
    assert waiting_workloads(pods, _table(when_full="Reject")) == {}


@pytest.mark.parametrize(
    ("obj", "key"),
    [
        ({"kind": "Pod", "metadata": {"namespace": "a", "name": "p"}}, "a/p"),
        ({"kind": "Pod", "metadata": {"name": "p"}}, "default/p"),
        (
            {
                "kind": "Pod",
                "metadata": {"namespace": "a", "name": "p", "labels": {GROUP_LABEL: "g"}},
            },
            "a/g",
        ),
        (
            {
                "kind": "Job",
                "metadata": {"namespace": "a", "name": "j", "labels": {GROUP_LABEL: "g"}},
            },
            "a/j",
        ),
    ],
    ids=["pod", "pod without namespace", "pod of a group", "job labelled as a group"],
)
def test_waiting_key_is_the_key_the_queue_knows_a_workload_by(
    obj: dict[str, Any], key: str
) -> None:
    assert waiting_key(obj) == key
