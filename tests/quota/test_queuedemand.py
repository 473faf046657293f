"""A pod's demand in a queue's resources (`quota.queuedemand`): counter and capacity resources
beside device counts (issue 27), through the admission decision a user sees."""

from __future__ import annotations

import time
from typing import Any

from quota.charge import QUEUE_LABEL
from quota.decision import decide
from quota.livepods import usage_from_pods
from quota.settings import Settings
from quota.usage import Usage
from tests.quota.builders import claim, claim_template, device_class, pod
from tests.quota.test_devicecharge import GI, GPU, MODEL_1G, MODEL_A100, gpu, pool
from webhook.store.clusterstate import ClusterState


def _queue(memory: str, gpus: int | None = 100) -> dict[str, Any]:
    count = {"name": "gpus", "kind": "DeviceClass", "deviceClassNames": [GPU], "nominalQuota": gpus}
    resources = [
        *([count] if gpus is not None else []),
        {
            "name": "gpu-memory",
            "kind": "DeviceCounter",
            "deviceClassNames": [GPU],
            "counter": "memory",
            "driver": GPU,
            "nominalQuota": memory,
        },
    ]
    return {
        "apiVersion": "draquota.io/v1beta1",
        "kind": "ClusterQueue",
        "metadata": {"name": "a"},
        "spec": {
            "namespaceSelector": {},
            "resourceGroups": [
                {
                    "coveredResources": [r["name"] for r in resources],
                    "flavors": [{"name": "a100", "resources": resources}],
                }
            ],
        },
    }


def _objects(memory: str = "40Gi", gpus: int | None = 100) -> list[dict[str, Any]]:
    slices = pool(
        "node-1",
        [gpu(f"mig-{i}", "5Gi", "1g") for i in range(8)] + [gpu("full", "40Gi", "a100")],
    )
    return [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "team-a"}},
        {
            "apiVersion": "draquota.io/v1beta1",
            "kind": "ResourceFlavor",
            "metadata": {"name": "a100"},
        },
        _queue(memory, gpus),
        {
            "apiVersion": "draquota.io/v1beta1",
            "kind": "LocalQueue",
            "metadata": {"name": "default", "namespace": "team-a"},
            "spec": {"clusterQueue": "a"},
        },
        device_class(GPU),
        slices,
        claim_template(
            "slice",
            {
                "requests": [
                    {
                        "name": "g",
                        "exactly": {
                            "deviceClassName": GPU,
                            "selectors": [{"cel": {"expression": MODEL_1G}}],
                        },
                    }
                ]
            },
        ),
        claim_template(
            "whole",
            {
                "requests": [
                    {
                        "name": "g",
                        "exactly": {
                            "deviceClassName": GPU,
                            "selectors": [{"cel": {"expression": MODEL_A100}}],
                        },
                    }
                ]
            },
        ),
        claim(
            "shared",
            {
                "requests": [
                    {
                        "name": "g",
                        "exactly": {
                            "deviceClassName": GPU,
                            "selectors": [{"cel": {"expression": MODEL_1G}}],
                        },
                    }
                ]
            },
        ),
    ]


def _pod(name: str, **claims: str) -> dict[str, Any]:
    entries = [
        {"name": entry, "resourceClaimTemplateName": target}
        if target != "shared"
        else {"name": entry, "resourceClaimName": target}
        for entry, target in claims.items()
    ]
    return pod(name, claims=tuple(entries), labels={QUEUE_LABEL: "default"})


def _admit(state: ClusterState, usage: Usage, name: str, **claims: str) -> Any:
    decision = decide(_pod(name, **claims), state, usage, Settings())
    if decision.allowed and decision.charge is not None:
        usage.add(f"team-a/{name}", decision.charge)
    return decision


def test_gpu_memory_quota_admits_eight_slices_and_denies_the_ninth() -> None:
    state = ClusterState(_objects())
    usage = usage_from_pods(state, Settings(), time.time())
    for i in range(8):
        decision = _admit(state, usage, f"slice-{i}", gpu="slice")
        assert decision.allowed, decision.message
        assert decision.charge is not None
        assert dict(decision.charge.per_pod) == {"gpu-memory": 5 * GI, "gpus": 1}
    ninth = _admit(state, usage, "slice-8", gpu="slice")
    assert not ninth.allowed
    assert (
        "insufficient unused quota for gpu-memory (counter memory of gpu.example.com) "
        "in flavor a100, 5Gi more needed" in ninth.message
    ), ninth.message
    whole = _admit(state, usage, "whole-0", gpu="whole")
    assert not whole.allowed
    assert "gpu-memory (counter memory of gpu.example.com) in flavor a100, 40Gi more needed" in (
        whole.message
    )


def test_device_count_alone_would_admit_what_memory_denies() -> None:
    state = ClusterState(_objects("1000Gi"))
    usage = usage_from_pods(state, Settings(), time.time())
    assert _admit(state, usage, "whole-0", gpu="whole").allowed
    state = ClusterState(_objects("39Gi"))
    usage = usage_from_pods(state, Settings(), time.time())
    denied = _admit(state, usage, "whole-0", gpu="whole")
    assert not denied.allowed and "request > maximum capacity (40Gi > 39Gi)" in denied.message


def test_shared_claim_charged_once_per_queue() -> None:
    state = ClusterState(_objects())
    usage = usage_from_pods(state, Settings(), time.time())
    first = _admit(state, usage, "user-0", gpu="shared")
    second = _admit(state, usage, "user-1", gpu="shared")
    assert first.allowed and second.allowed
    assert first.charge is not None
    assert dict(first.charge.shared_claims) == {"team-a/shared": {"gpu-memory": 5 * GI, "gpus": 1}}
    assert usage.of("a")[("a100", "gpu-memory")] == 5 * GI


def test_a_class_charged_by_gpu_memory_alone_needs_no_device_count() -> None:
    state = ClusterState(_objects("10Gi", gpus=None))  # Kueue's counter-only mapping
    usage = usage_from_pods(state, Settings(), time.time())
    for i in range(2):
        admitted = _admit(state, usage, f"slice-{i}", gpu="slice")
        assert admitted.allowed, admitted.message
        assert admitted.charge is not None and dict(admitted.charge.per_pod) == {
            "gpu-memory": 5 * GI
        }
    third = _admit(state, usage, "slice-2", gpu="slice")
    assert not third.allowed and "gpu-memory" in third.message and "5Gi more" in third.message
