"""Record, from the real control plane, the partitionable and shared devices of issue 27.

    .venv/bin/python -m tests.e2e.record_slices [--out DIR]

starts the Kubernetes v1.36.2 control plane of ../shared/k8s (`tests.e2e.cluster.ControlPlane`,
no draquota), publishes on a fake node the pools of tests/e2e/device_pools.py (two partitionable
A100-40GB with a `memory` counter; two shareable 100G NICs whose `bandwidth` requests round up
to validValues or a validRange) with their DeviceClasses, creates one ResourceClaim per kind of
request and a pod for each, and waits until kube-scheduler has allocated every claim it can.
Then it keeps the objects as the API server returns them (defaults filled in, quantities in
the API server's canonical form, the scheduler's `consumedCapacity`), as `kind: List` files:

- `partitionable.json`: DeviceClasses, the counter slice and device slice of the GPU pool, and
  the claims of a slice and of a whole GPU, allocated;
- `consumable.json`: DeviceClasses, the NIC slice, and claims of 15G, 20G and 1G on
  validValues, 15G, 11G and no request on the validRange, each allocated with the bandwidth
  the scheduler consumed for it.

in tests/quota/fixtures/slices/ (`--out` elsewhere), replacing an earlier recording. The control
plane is stopped at the end, whatever happens.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

from tests.e2e.cluster import REPO, ControlPlane, missing_reason
from tests.e2e.device_pools import (
    MIG_CLASS,
    NIC_CLASSES,
    RANGE_NIC_CLASS,
    STEPS_NIC_CLASS,
    WHOLE_GPU_CLASS,
    mig_pool,
    nic_classes,
    shared_nic_pool,
)

FIXTURES = REPO / "tests" / "quota" / "fixtures" / "slices"
EXAMPLE_CLASSES = REPO / "manifests" / "examples" / "cluster" / "deviceclasses.yaml"
NODE = "node-1"
NAMESPACE = "default"
# claim name -> (device class, bandwidth request or None); one pod each
GPU_CLAIMS = {"mig-slice": (MIG_CLASS, None), "whole-a100": (WHOLE_GPU_CLASS, None)}
NIC_CLAIMS = {
    "steps-15g": (STEPS_NIC_CLASS, "15G"),
    "steps-20g": (STEPS_NIC_CLASS, "20G"),
    "steps-1g": (STEPS_NIC_CLASS, "1G"),
    "range-15g": (RANGE_NIC_CLASS, "15G"),
    "range-11g": (RANGE_NIC_CLASS, "11G"),
    "range-default": (RANGE_NIC_CLASS, None),
}


def _claim(name: str, device_class: str, bandwidth: str | None) -> dict[str, Any]:
    exactly: dict[str, Any] = {"deviceClassName": device_class}
    if bandwidth:
        exactly["capacity"] = {"requests": {"bandwidth": bandwidth}}
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": {"devices": {"requests": [{"name": "dev", "exactly": exactly}]}},
    }


def _pod(claim: str) -> dict[str, Any]:
    container = {"name": "main", "image": "registry.example.com/app:1.0",
                 "resources": {"claims": [{"name": "dev"}]}}  # fmt: skip
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": claim, "namespace": NAMESPACE},
        "spec": {
            "containers": [container],
            "resourceClaims": [{"name": "dev", "resourceClaimName": claim}],
        },
    }


def _get(cluster: ControlPlane, kind: str, names: list[str], namespaced: bool) -> list[Any]:
    args = ["get", kind, *names, "-o", "json"] + (["-n", NAMESPACE] if namespaced else [])
    found = json.loads(cluster.kubectl(*args).stdout)
    return list(found["items"]) if "items" in found else [found]


def _wait_allocated(cluster: ControlPlane, claims: list[str], timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while True:
        pending = [
            c["metadata"]["name"]
            for c in _get(cluster, "resourceclaims", claims, True)
            if not c.get("status", {}).get("allocation")
        ]
        if not pending:
            return
        if time.monotonic() > deadline:
            raise RuntimeError(f"claims not allocated within {timeout}s: {pending}")
        time.sleep(0.5)


def record(cluster: ControlPlane, out: Path) -> None:
    cluster.fake_node(NODE)
    cluster.apply(EXAMPLE_CLASSES)
    cluster.apply(yaml.safe_dump_all(nic_classes()))
    gpu_slices, nic_slices = mig_pool(NODE), shared_nic_pool(NODE)
    cluster.apply(yaml.safe_dump_all(gpu_slices + nic_slices))
    claims = {**GPU_CLAIMS, **NIC_CLAIMS}
    cluster.apply(yaml.safe_dump_all([_claim(n, c, b) for n, (c, b) in claims.items()]))
    cluster.apply(yaml.safe_dump_all([_pod(name) for name in claims]))
    _wait_allocated(cluster, list(claims))
    files = {
        "partitionable.json": ([WHOLE_GPU_CLASS, MIG_CLASS], gpu_slices, list(GPU_CLAIMS)),
        "consumable.json": (list(NIC_CLASSES), nic_slices, list(NIC_CLAIMS)),
    }
    out.mkdir(parents=True, exist_ok=True)
    for filename, (classes, slices, claim_names) in files.items():
        items = [
            *_get(cluster, "deviceclasses", classes, False),
            *_get(cluster, "resourceslices", [s["metadata"]["name"] for s in slices], False),
            *_get(cluster, "resourceclaims", claim_names, True),
        ]
        document = {"apiVersion": "v1", "kind": "List", "items": items}
        (out / filename).write_text(json.dumps(document, indent=2) + "\n", encoding="utf-8")
        print(f"record_slices: {out / filename}: {len(items)} objects", file=sys.stderr)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=FIXTURES, help="directory of the fixtures")
    args = parser.parse_args(argv)
    reason = missing_reason()
    if reason:
        print(f"record_slices: {reason}", file=sys.stderr)
        return 1
    with tempfile.TemporaryDirectory(prefix="record-slices-") as tmp:
        cluster = ControlPlane(Path(tmp) / "run")
        try:
            cluster.up()
            record(cluster, args.out)
        finally:
            cluster.down()
    return 0


if __name__ == "__main__":
    sys.exit(main())
