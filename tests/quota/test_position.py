"""Where a workload just submitted to a queueing ClusterQueue stands (quota.position): the
controller's next pass played over what waits, as a table of scenarios.

tests/webhook/admission/test_submitwait.py checks the same answers against the controller itself.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any

import pytest

from quota.charge import Charge
from quota.decision import prepare
from quota.position import wait_at_submit, wait_warning
from quota.queuetable import queue_table
from quota.settings import Settings
from quota.usage import Usage
from quota.waiting import ADMISSION_GATE, GROUP_LABEL, GROUP_TOTAL_ANNOTATION, waiting_among
from tests.webhook.builders import FLAVOR, NAMESPACE, QUEUE, cluster_objects, pod
from webhook.store.clusterstate import ClusterState

SETTINGS = Settings(placement="Off")
NOW = 1_800_000_000.0


@dataclass(frozen=True)
class Sub:
    """A pod (or a suspended Job of `parallelism` pods) waiting in the queue."""

    name: str
    gpus: int = 1
    minute: int = 0  # creation time: queue order among equal priorities
    priority: int = 0
    group: str = ""
    total: int = 0
    job: int = 0  # a Job of this many pods at once (0: a pod)


@dataclass(frozen=True)
class Case:
    id: str
    waiting: tuple[Sub, ...]
    new: Sub
    expected: str | None  # the warning, or None: the next pass admits the new workload
    quota: int = 4
    in_use: int = 0  # GPUs running pods hold
    held: tuple[str, ...] = ()  # waiting pods already recorded (their gate not yet removed)
    strategy: str = "BestEffortFIFO"


def _why(more: int, requested: int, used: int, quota: int = 4, what: str = "gpu") -> str:
    return (
        f"waiting for quota: insufficient unused quota for {what} (DeviceClass gpu.example.com) "
        f"in flavor {FLAVOR}, {more} more needed (requested {requested}, in use {used} of "
        f"nominal {quota})"
    )


CASES = [
    Case("fits-and-nobody-waits", (), Sub("new", 2), None),
    Case(
        "the-ones-before-take-the-quota-first",
        (Sub("a", 2, 1), Sub("b", 2, 2)),
        Sub("new", 2, 3),
        f"waits in ClusterQueue {QUEUE}, position 1: {_why(2, 2, 4)}",
    ),
    Case(
        "behind-one-that-does-not-fit-either",
        (Sub("big", 3, 1),),
        Sub("new", 2, 2),
        f"waits in ClusterQueue {QUEUE}, position 2: {_why(1, 2, 3)}",
        in_use=3,
    ),
    Case(
        "best-effort-goes-past-a-head-that-does-not-fit",
        (Sub("big", 3, 1),),
        Sub("new", 1, 2),
        None,
        in_use=2,
    ),
    Case(
        "strict-fifo-waits-behind-the-head",
        (Sub("big", 3, 1),),
        Sub("new", 1, 2),
        f"waits in ClusterQueue {QUEUE}, position 2: waiting behind pod team-a/big (StrictFIFO)",
        in_use=2,
        strategy="StrictFIFO",
    ),
    Case(
        "higher-priority-goes-first",
        (Sub("a", 3, 1), Sub("b", 3, 2)),
        Sub("new", 3, 3, priority=10),
        None,
        in_use=1,
    ),
    Case(
        "a-recorded-pod-takes-nothing-more",
        (Sub("a", 2, 1),),
        Sub("new", 2, 2),
        None,
        held=("a",),
    ),
    Case(
        "a-group-whose-pods-do-not-all-exist-yet",
        (Sub("trio-0", 1, 1, group="trio", total=3),),
        Sub("trio-1", 1, 2, group="trio", total=3),
        f"waits in ClusterQueue {QUEUE}: waiting for the pods of pod group team-a/trio: 2 of 3 "
        "exist",
    ),
    Case(
        "a-group-waits-in-its-own-numbers",
        (Sub("trio-0", 1, 1, group="trio", total=3), Sub("trio-1", 1, 2, group="trio", total=3)),
        Sub("trio-2", 1, 3, group="trio", total=3),
        f"waits in ClusterQueue {QUEUE}, position 1: {_why(1, 3, 2)}",
        in_use=2,
    ),
    Case(
        "a-job-waits-for-the-pods-it-runs-at-once",
        (),
        Sub("sweep", 1, 1, job=3),
        f"waits in ClusterQueue {QUEUE}, position 1: {_why(2, 3, 3)}",
        in_use=3,
    ),
    Case(
        "a-pod-behind-a-job-that-fits",
        (Sub("sweep", 1, 1, job=3),),
        Sub("new", 2, 2),
        f"waits in ClusterQueue {QUEUE}, position 1: {_why(1, 2, 3)}",
    ),
]


def _objects(case: Case) -> list[dict[str, Any]]:
    objects = cluster_objects(case.quota)
    for obj in objects:
        if obj["kind"] == "ClusterQueue":
            obj["spec"].update(whenFull="Queue", queueingStrategy=case.strategy)
    for count in range(2, 5):
        template = copy.deepcopy(next(o for o in objects if o["kind"] == "ResourceClaimTemplate"))
        template["metadata"]["name"] = f"gpus-{count}"
        template["spec"]["spec"]["devices"]["requests"][0]["exactly"]["count"] = count
        objects.append(template)
    return objects


def _submitted(sub: Sub) -> dict[str, Any]:
    obj = pod(sub.name, ("one-gpu",) if sub.gpus == 1 else (f"gpus-{sub.gpus}",))
    metadata = obj["metadata"]
    metadata.update(uid=f"uid-{sub.name}", creationTimestamp=f"2027-01-15T08:{sub.minute:02d}:00Z")
    if sub.group:
        metadata["labels"] = {GROUP_LABEL: sub.group}
        metadata["annotations"] = {GROUP_TOTAL_ANNOTATION: str(sub.total)}
    if sub.job:
        template = {"metadata": {}, "spec": obj["spec"]}
        spec = {"parallelism": sub.job, "suspend": True, "template": template}
        return {"apiVersion": "batch/v1", "kind": "Job", "metadata": metadata, "spec": spec}
    obj["spec"].update(priority=sub.priority, schedulingGates=[{"name": ADMISSION_GATE}])
    return obj


def _charge(gpus: int) -> Charge:
    return Charge(QUEUE, f"{NAMESPACE}/default", {"gpu": FLAVOR}, {"gpu": gpus})


def _answer(case: Case) -> str | None:
    state = ClusterState(_objects(case))
    table = queue_table(state.snapshot(), SETTINGS)
    subs = {sub.name: sub for sub in (*case.waiting, case.new)}
    objects = [_submitted(sub) for sub in subs.values()]
    usage = Usage({"team-a/running": _charge(case.in_use)} if case.in_use else {})
    for name in case.held:
        usage.add(f"{NAMESPACE}/{name}", _charge(subs[name].gpus))
    before = copy.deepcopy(objects), usage.holders(), usage.of(QUEUE)
    pods = [o for o in objects if o["kind"] == "Pod"]
    jobs = [o for o in objects if o["kind"] == "Job"]
    workloads = waiting_among(pods, jobs, table, (), NOW)[QUEUE]
    key = f"{NAMESPACE}/{case.new.group or case.new.name}"
    wait = wait_at_submit(
        table.queues[QUEUE],
        workloads,
        key,
        lambda obj: prepare(obj, state, SETTINGS),
        usage,
        lambda job: f"Job:{job}",
    )
    assert (copy.deepcopy(objects), usage.holders(), usage.of(QUEUE)) == before
    return wait_warning(wait) if wait is not None else None


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_wait_at_submit(case: Case) -> None:
    assert _answer(case) == case.expected
    assert _answer(case) == case.expected  # deterministic
