"""Placement benchmark: 1000 nodes x 8 GPUs plus a partitionable-GPU pool with counters.

Places a pod with two template claims (2 GPUs on one PCIe root + 1 GPU partition
with >= 10Gi) and reports p50/p99 with the CEL cache and the placement index warm,
the memory the index holds, and the ratio against a baseline measured in the same
run (one dict-lookup pass over every device: "is it allocated?"). 900 of the 1000
nodes have 7 of their 8 GPUs allocated, so placement has to skip them (the per-class
free-device index does that without running the search).

Run: .venv/bin/python bench/allocator_bench.py [--nodes 1000] [--rounds 300]
Not a CI test: timings are printed, never asserted.
"""

from __future__ import annotations

import argparse
import gc
import statistics
import time
import tracemalloc
from typing import Any

from quota.claims import PodClaim
from quota.claimspec import parse_claim_spec
from quota.devices import claim_devices
from quota.placement import make_placer
from webhook.store.clusterstate import ClusterState

GPU = "gpu.example.com"
ROOT = "resource.kubernetes.io/pcieRoot"


def _class(name: str, kind: str) -> dict[str, Any]:
    expression = f'device.driver == "{GPU}" && device.attributes["{GPU}"].type == "{kind}"'
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceClass",
        "metadata": {"name": name},
        "spec": {"selectors": [{"cel": {"expression": expression}}]},
    }


def _gpu(i: int) -> dict[str, Any]:
    return {
        "name": f"gpu-{i}",
        "attributes": {
            "type": {"string": "gpu"},
            "index": {"int": i},
            "driverVersion": {"version": "1.2.3"},
            ROOT: {"string": f"pci-{i // 4}"},
        },
        "capacity": {"memory": {"value": "80Gi"}},
    }


def _partitionable_pool() -> list[dict[str, Any]]:
    counters = [
        {"name": f"gpu-{g}-counters", "counters": {"memory": {"value": "80Gi"}}} for g in range(2)
    ]
    devices = []
    for g in range(2):
        for size, parts in (("80Gi", 1), ("40Gi", 2), ("20Gi", 4)):
            for p in range(parts):
                devices.append(
                    {
                        "name": f"gpu-{g}-{size}-{p}",
                        "attributes": {"type": {"string": "partition"}},
                        "capacity": {"memory": {"value": size}},
                        "consumesCounters": [
                            {
                                "counterSet": f"gpu-{g}-counters",
                                "counters": {"memory": {"value": size}},
                            }
                        ],
                    }
                )
    selector = {
        "nodeSelectorTerms": [
            {"matchExpressions": [{"key": "dra", "operator": "In", "values": ["true"]}]}
        ]
    }
    pool = {"name": "shared-partitions", "generation": 1, "resourceSliceCount": 2}
    return [
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceSlice",
            "metadata": {"name": "partitions-counters"},
            "spec": {
                "driver": GPU,
                "pool": pool,
                "nodeSelector": selector,
                "sharedCounters": counters,
            },
        },
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceSlice",
            "metadata": {"name": "partitions-devices"},
            "spec": {"driver": GPU, "pool": pool, "nodeSelector": selector, "devices": devices},
        },
    ]


def build_cluster(nodes: int, busy: int) -> ClusterState:
    objects: list[dict[str, Any]] = [_class(GPU, "gpu"), _class("partition." + GPU, "partition")]
    objects += _partitionable_pool()
    for n in range(nodes):
        name = f"node-{n:04d}"
        objects.append({"kind": "Node", "metadata": {"name": name, "labels": {"dra": "true"}}})
        objects.append(
            {
                "apiVersion": "resource.k8s.io/v1",
                "kind": "ResourceSlice",
                "metadata": {"name": f"{name}-gpus"},
                "spec": {
                    "driver": GPU,
                    "nodeName": name,
                    "pool": {"name": name, "generation": 1, "resourceSliceCount": 1},
                    "devices": [_gpu(i) for i in range(8)],
                },
            }
        )
        if n < busy:
            results = [
                {"request": "gpu", "driver": GPU, "pool": name, "device": f"gpu-{i}"}
                for i in range(1, 8)
            ]
            objects.append(
                {
                    "apiVersion": "resource.k8s.io/v1",
                    "kind": "ResourceClaim",
                    "metadata": {"name": f"busy-{n}", "namespace": "bench"},
                    "spec": {"devices": {"requests": []}},
                    "status": {"allocation": {"devices": {"results": results}}},
                }
            )
    return ClusterState(objects)


def pod_claims() -> list[PodClaim]:
    two = {
        "devices": {
            "requests": [{"name": "gpus", "exactly": {"deviceClassName": GPU, "count": 2}}],
            "constraints": [{"matchAttribute": ROOT}],
        }
    }
    part = {
        "devices": {
            "requests": [
                {
                    "name": "slice",
                    "exactly": {
                        "deviceClassName": "partition." + GPU,
                        "selectors": [
                            {
                                "cel": {
                                    "expression": f'device.capacity["{GPU}"].memory'
                                    '.compareTo(quantity("10Gi")) >= 0'
                                }
                            }
                        ],
                    },
                }
            ]
        }
    }
    claims = []
    for name, spec in (("two-gpus", two), ("gpu-slice", part)):
        parsed = parse_claim_spec(spec, "v1", f"ResourceClaimTemplate bench/{name}")
        claims.append(PodClaim(name, "bench", parsed, claim_devices(parsed), template=name))
    return claims


def baseline_pass(state: ClusterState) -> float:
    """One dict-lookup pass over every device: the cheapest possible "where is a free GPU"."""
    allocated = {
        (r["driver"], r["pool"], r["device"])
        for c in state.list("ResourceClaim")
        for r in c["status"]["allocation"]["devices"]["results"]
    }
    start = time.perf_counter()
    free = 0
    for s in state.list("ResourceSlice"):
        spec = s["spec"]
        for d in spec.get("devices") or ():
            if (spec["driver"], spec["pool"]["name"], d["name"]) not in allocated:
                free += 1
    assert free > 0
    return time.perf_counter() - start


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=300)
    args = parser.parse_args()
    busy = args.nodes * 9 // 10
    state = build_cluster(args.nodes, busy)
    claims = pod_claims()
    placer = make_placer(state)

    gc.collect()
    tracemalloc.start()
    before = tracemalloc.take_snapshot()
    first_start = time.perf_counter()
    placement = placer(claims, None)
    first = time.perf_counter() - first_start
    after = tracemalloc.take_snapshot()
    tracemalloc.stop()
    cache_bytes = sum(stat.size_diff for stat in after.compare_to(before, "filename"))
    assert placement.ok, placement.reason
    print(f"placed on {placement.node}; cold first call (index build) {first * 1e3:.1f} ms")

    times = []
    for _ in range(args.rounds):
        start = time.perf_counter()
        placer(claims, None)
        times.append(time.perf_counter() - start)
    baselines = [baseline_pass(state) for _ in range(max(5, args.rounds // 20))]
    p50, p99 = percentile(times, 0.50), percentile(times, 0.99)
    base = statistics.median(baselines)

    big_spec = parse_claim_spec(
        {
            "devices": {
                "requests": [{"name": "gpus", "exactly": {"deviceClassName": GPU, "count": 9}}]
            }
        },
        "v1",
        "ResourceClaimTemplate bench/nine",
    )
    big = [PodClaim("nine", "bench", big_spec, claim_devices(big_spec), template="nine")]
    deny_times = []
    for _ in range(max(5, args.rounds // 10)):
        start = time.perf_counter()
        denied = placer(big, None)
        deny_times.append(time.perf_counter() - start)
    assert not denied.ok

    devices = args.nodes * 8 + 14
    print(
        f"cluster: {args.nodes} nodes x 8 GPUs + 14 partitions ({devices} devices), "
        f"{busy} busy nodes"
    )
    print(f"placement p50 {p50 * 1e3:.3f} ms  p99 {p99 * 1e3:.3f} ms  ({args.rounds} rounds, warm)")
    print(f"baseline dict-lookup pass over all devices: median {base * 1e3:.3f} ms")
    print(f"ratio p50/baseline {p50 / base:.2f}  p99/baseline {p99 / base:.2f}")
    print(
        f"unplaceable pod (9 GPUs): median {statistics.median(deny_times) * 1e3:.3f} ms; "
        f"reason: {denied.reason}"
    )
    print(f"placement index memory (tracemalloc, cold build): {cache_bytes / 2**20:.1f} MiB")


if __name__ == "__main__":
    main()
