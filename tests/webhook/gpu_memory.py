"""A GPU memory quota over partitionable GPUs recorded from the real control plane: the cluster
the tests of what draquota shows of counter resources read (issue 27).

- The DeviceClasses, ResourceSlices and allocated ResourceClaims of
  tests/quota/fixtures/slices/partitionable.json (recorded from Kubernetes v1.36.2): two
  A100-40GB on node-1, each a counter set of `memory: 40Gi`, whole GPUs consuming 40Gi and
  eight 1g.5gb slices consuming 5Gi each.
- The queue objects of manifests/examples/gpu-memory/00-queues.yaml: ClusterQueue `vision`
  with 16 devices (`gpus`) and 40Gi of GPU memory (`gpu-memory`, kind DeviceCounter) in
  flavor a100, LocalQueue `vision/default`, templates `mig-slice` and `whole-a100`.
- `admitted(n)`: the first `n` notebooks of manifests/examples/gpu-memory/01-slices.yaml
  (one slice each) created through draquota's /mutate and /validate as the API server
  sends them (tests/security/cluster.py), so they carry the charge annotation draquota wrote.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml

from tests.security.cluster import Cluster

__all__ = [
    "GI",
    "NAMESPACE",
    "QUEUE",
    "admitted",
    "example_pods",
    "objects",
    "recorded",
    "write_state",
]

ROOT = Path(__file__).resolve().parents[2]
RECORDED = ROOT / "tests" / "quota" / "fixtures" / "slices" / "partitionable.json"
EXAMPLE = ROOT / "manifests" / "examples" / "gpu-memory"
GI = 2**30
NAMESPACE = QUEUE = "vision"


def recorded(*kinds: str) -> list[dict[str, Any]]:
    """The recorded objects of `kinds`, in recording order."""
    items = json.loads(RECORDED.read_text(encoding="utf-8"))["items"]
    return [obj for obj in items if obj["kind"] in kinds]


def _documents(name: str) -> list[dict[str, Any]]:
    return [doc for doc in yaml.safe_load_all((EXAMPLE / name).read_text()) if doc]


def objects() -> list[dict[str, Any]]:
    """The recorded devices and the example's queue objects: a cluster with nothing running."""
    return [*recorded("DeviceClass", "ResourceSlice"), *_documents("00-queues.yaml")]


def example_pods(name: str) -> list[dict[str, Any]]:
    """The pods of manifests/examples/gpu-memory/`name`: `01-slices.yaml` nine notebooks of
    one 1g.5gb slice, `02-whole-gpu.yaml` one pod of a whole A100."""
    return [doc for doc in _documents(name) if doc["kind"] == "Pod"]


def admitted(notebooks: int) -> Cluster:
    """The cluster after draquota admitted `notebooks` notebooks of one 1g.5gb slice each."""
    cluster = Cluster(objects())
    pods = example_pods("01-slices.yaml")
    assert len(pods) >= notebooks, "the example has fewer notebooks"
    for pod in pods[:notebooks]:
        answer = cluster.create(pod)
        assert answer["allowed"], answer
    return cluster


def write_state(directory: Path, documents: list[dict[str, Any]]) -> Path:
    """`documents` as a `--state` directory (one file)."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "cluster.yaml").write_text(yaml.safe_dump_all(documents), encoding="utf-8")
    return directory
