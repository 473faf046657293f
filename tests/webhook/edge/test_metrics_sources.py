"""Counter resources on /metrics (webhook.edge.metrics): raw amounts in the base unit, as
Prometheus wants numbers, beside device counts (issue 27).

Six notebooks of one 1g.5gb slice (5Gi) admitted through draquota's /mutate and /validate
into ClusterQueue vision, 16 devices and 40Gi of GPU memory (tests/webhook/gpu_memory.py:
partitionable GPUs recorded from the real control plane).
"""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families

from tests.webhook import gpu_memory
from tests.webhook.gpu_memory import GI


def _series(text: str, name: str) -> dict[str, float]:
    """The samples of `name` for flavor a100 of ClusterQueue vision, by resource."""
    (family,) = (f for f in text_string_to_metric_families(text) if f.name == name)
    return {
        s.labels["resource"]: s.value
        for s in family.samples
        if (s.labels["cluster_queue"], s.labels["flavor"]) == (gpu_memory.QUEUE, "a100")
    }


def test_gpu_memory_usage_and_quota_are_exported_in_bytes_beside_device_counts() -> None:
    cluster = gpu_memory.admitted(6)
    text = cluster.client.get("/metrics").text
    assert _series(text, "draquota_cluster_queue_nominal_quota") == {
        "gpu-memory": 40 * GI,
        "gpus": 16,
    }
    assert _series(text, "draquota_queue_usage") == {"gpu-memory": 6 * 5 * GI, "gpus": 6}
