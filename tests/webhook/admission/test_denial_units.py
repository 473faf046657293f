"""Denials a user reads print every amount of a counter resource in the unit of its
nominalQuota, the maximum capacity's explanation included (issue 27).

A whole A100 (40Gi of GPU memory) is submitted through draquota's /mutate and /validate
(tests/security/cluster.py) to ClusterQueue vision over the partitionable GPUs recorded
from the real control plane (tests/webhook/gpu_memory.py), its GPU memory quota lowered
below 40Gi, alone or in a cohort.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest

from tests.security.cluster import Cluster
from tests.webhook import gpu_memory


def _memory(queue: dict[str, Any]) -> dict[str, Any]:
    (group,) = queue["spec"]["resourceGroups"]
    (flavor,) = group["flavors"]
    return next(r for r in flavor["resources"] if r["name"] == "gpu-memory")


def _cluster(memory: dict[str, Any], peer: str | None) -> Cluster:
    """vision with its gpu-memory quota set to `memory`; with `peer`, in cohort lab with a
    queue of that much GPU memory that no namespace submits to."""
    objects = gpu_memory.objects()
    vision = next(o for o in objects if o["kind"] == "ClusterQueue")
    other = copy.deepcopy(vision)
    _memory(vision).update(memory)
    if peer is not None:
        vision["spec"]["cohort"] = other["spec"]["cohort"] = "lab"
        other["metadata"]["name"] = "peer"
        other["spec"]["namespaceSelector"] = {"matchLabels": {"team": "nobody"}}
        _memory(other)["nominalQuota"] = peer
        objects.append(other)
    return Cluster(objects)


@pytest.mark.parametrize(
    ("memory", "peer", "capacity"),
    [
        pytest.param({"nominalQuota": "39Gi"}, None, "(40Gi > 39Gi) (nominal 39Gi)", id="alone"),
        pytest.param(
            {"nominalQuota": "8Gi", "borrowingLimit": "16Gi"},
            "40Gi",
            "(40Gi > 24Gi) (nominal 8Gi + borrowing limit 16Gi)",
            id="borrowing-limit",
        ),
        pytest.param(
            {"nominalQuota": "8Gi"},
            "16Gi",
            "(40Gi > 24Gi) (nominal 8Gi, cohort lab can lend at most 16Gi)",
            id="cohort",
        ),
    ],
)
def test_a_whole_gpu_over_the_memory_quota_is_denied_with_amounts_in_gi(
    memory: dict[str, Any], peer: str | None, capacity: str
) -> None:
    cluster = _cluster(memory, peer)
    (whole,) = gpu_memory.example_pods("02-whole-gpu.yaml")
    answer = cluster.create(whole)
    assert not answer["allowed"]
    message = answer["status"]["message"]
    assert (
        "insufficient quota for gpu-memory (counter memory of a100.gpu.example.com, "
        f"mig-1g.5gb.gpu.example.com) in flavor a100, request > maximum capacity {capacity}"
    ) in message, message
