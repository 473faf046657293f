"""The warning a pod or Job created into a queueing ClusterQueue gets at submit (what `kubectl
create` prints as `Warning: waits in ClusterQueue ...`), through the stand-in API server
(tests/security/cluster.py), and checked against what the controller's next pass then says.
"""

from __future__ import annotations

import random
import re
from typing import Any

import pytest

from quota.waiting import GROUP_LABEL
from tests.security.cluster import Cluster
from tests.webhook.builders import FLAVOR, NAMESPACE, QUEUE
from tests.webhook.queueing.test_controller import (
    controller,
    gpu_job,
    gpus,
    group,
    job_controller,
    queueing_cluster,
    running,
)

WHY_2_OF_4 = (
    "waiting for quota: insufficient unused quota for gpu (DeviceClass gpu.example.com) in "
    f"flavor {FLAVOR}, 2 more needed (requested 2, in use 4 of nominal 4)"
)


def _warnings(answer: dict[str, Any]) -> list[str]:
    assert answer["allowed"], answer
    return [w for w in answer.get("warnings", []) if w.startswith("waits in")]


def _create(cluster: Cluster, obj: dict[str, Any]) -> list[str]:
    kind = obj.get("kind", "Pod")
    answer = cluster.create_job(obj) if kind == "Job" else cluster.create(obj)
    cluster.clock.now += 1
    return _warnings(answer)


def test_a_pod_that_will_wait_is_told_its_queue_position_and_why() -> None:
    cluster = queueing_cluster(gpus=4)
    # the first two take the quota at the next pass, though neither is admitted yet
    assert _create(cluster, gpus("a", 2)) == []
    assert _create(cluster, gpus("b", 2)) == []
    assert _create(cluster, gpus("c", 2)) == [
        f"waits in ClusterQueue {QUEUE}, position 1: {WHY_2_OF_4}"
    ]
    assert _create(cluster, gpus("d", 2)) == [
        f"waits in ClusterQueue {QUEUE}, position 2: {WHY_2_OF_4}"
    ]
    queue, writer = controller(cluster)
    queue.run_once()
    assert running(cluster) == ["a", "b"]
    assert writer.waiting["d"] == f"{WHY_2_OF_4}; position 2 of 2 in ClusterQueue {QUEUE}"


def test_a_dry_run_is_told_too() -> None:
    cluster = queueing_cluster(gpus=2)
    _create(cluster, gpus("a", 2))
    (warning,) = _warnings(cluster.create(gpus("b", 1), dry_run=True))
    assert warning.startswith(f"waits in ClusterQueue {QUEUE}, position 1: waiting for quota: ")


def test_a_queued_job_is_told_where_it_stands() -> None:
    cluster = queueing_cluster(gpus=4)
    assert _create(cluster, gpu_job("first", 1, parallelism=3)) == []
    warning = _create(cluster, gpu_job("second", 1, parallelism=2))
    assert warning == [
        f"waits in ClusterQueue {QUEUE}, position 1: waiting for quota: insufficient unused "
        f"quota for gpu (DeviceClass gpu.example.com) in flavor {FLAVOR}, 1 more needed "
        "(requested 2, in use 3 of nominal 4)"
    ]


def test_a_group_is_told_its_pods_are_missing_then_its_own_numbers() -> None:
    cluster = queueing_cluster(gpus=4)
    _create(cluster, gpus("a", 2))
    controller(cluster)[0].run_once()
    trio = group("trio", 3, 3)
    assert _create(cluster, trio[0]) == [
        f"waits in ClusterQueue {QUEUE}: waiting for the pods of pod group {NAMESPACE}/trio: "
        "1 of 3 exist"
    ]
    _create(cluster, trio[1])
    (warning,) = _create(cluster, trio[2])
    assert "1 more needed (requested 3, in use 2 of nominal 4)" in warning


def _expected(message: str) -> str:
    """The warning at submit that says what the controller's message says."""
    found = re.fullmatch(r"(.*); position (\d+) of \d+ in ClusterQueue (\S+)", message)
    if found is None:
        return f"waits in ClusterQueue {QUEUE}: {message}"
    why, position, queue = found.groups()
    return f"waits in ClusterQueue {queue}, position {position}: {why}"


def _random_workload(rng: random.Random, index: int) -> list[dict[str, Any]]:
    name = f"w{index}"
    shape = rng.choice(["pod", "pod", "pod", "group", "job"])
    if shape == "group":
        size = rng.randint(2, 3)
        return group(name, size, size, count=1)
    if shape == "job":
        return [gpu_job(name, 1, parallelism=rng.randint(1, 3))]
    return [gpus(name, rng.randint(1, 3), priority=rng.choice([None, None, 5]))]


@pytest.mark.parametrize("seed", range(25))
def test_the_warning_at_submit_is_what_the_next_pass_says(seed: int) -> None:
    """Two paths that must agree: `quota.position` played at submit, and the controller."""
    rng = random.Random(seed)
    strategy = rng.choice(["BestEffortFIFO", "StrictFIFO"])
    cluster = queueing_cluster(gpus=rng.randint(3, 6), strategy=strategy)
    queue, writer = job_controller(cluster)
    for index in range(8):
        objects = _random_workload(rng, index)
        for obj in objects[:-1]:
            _create(cluster, obj)
        last = objects[-1]
        warnings = _create(cluster, last)
        writer.waiting.clear()
        done = queue.run_once()
        name = last["metadata"]["name"]
        key = f"{NAMESPACE}/{last['metadata'].get('labels', {}).get(GROUP_LABEL, name)}"
        if key in done.waiting:
            assert warnings == [_expected(done.waiting[key])], (seed, index)
        else:
            assert warnings == [], (seed, index, done)
        if rng.random() < 0.4:  # something running ends
            pods = running(cluster)
            if pods:
                cluster.state.remove("Pod", NAMESPACE, rng.choice(pods))
