"""A seeded generator of realistic claims on 8-GPU nodes (issue 27's placement budget).

Each node has 8 partitionable GPUs in one pool: per GPU a counter set (`memory` in GiB
and 7 compute `slices`, as MIG profiles of an 80 GB GPU) and 9 devices drawing on it,
the whole GPU and 8 partitions (1 x 4g, 2 x 3g, 3 x 2g, 2 x 1g), each with the
attributes `profile`, `gpu` (its physical GPU) and `numa`. Claims ask what people ask of
such nodes: a firstAvailable list from large to small, partitions that share a GPU or
a NUMA node (`matchAttribute`), a few whole GPUs, in pairs or threes per pod. Some of
the devices are already allocated to other claims.

Same seed, same cases: `cases(seed, n)` is what the fixture of recorded results
(`realistic_results.json`, written by `python -m tests.quota.allocator.record_realistic`)
was recorded from.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any

__all__ = ["GPU_CLASS", "PROFILES", "RealisticCase", "cases", "classes", "node", "slices"]

DRIVER = "gpu.example.com"
GPU_CLASS = "gpu.example.com"
GPUS_PER_NODE = 8
# profile -> (memory GiB, compute slices, how many of it one GPU publishes)
PROFILES: dict[str, tuple[int, int, int]] = {
    "full": (80, 7, 1),
    "4g.40gb": (40, 4, 1),
    "3g.40gb": (40, 3, 2),
    "2g.20gb": (20, 2, 3),
    "1g.10gb": (10, 1, 2),
}
NODE = "node-1"


@dataclass(frozen=True)
class RealisticCase:
    id: str
    claims: tuple[dict[str, Any], ...]  # v1 ResourceClaim specs
    allocated: tuple[str, ...]  # device names already allocated to other claims


def classes() -> list[dict[str, Any]]:
    return [
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "DeviceClass",
            "metadata": {"name": GPU_CLASS},
            "spec": {"selectors": [{"cel": {"expression": f'device.driver == "{DRIVER}"'}}]},
        }
    ]


def node() -> dict[str, Any]:
    return {"kind": "Node", "metadata": {"name": NODE}}


def _devices(gpu: int) -> list[dict[str, Any]]:
    out = []
    for profile, (memory, compute, count) in PROFILES.items():
        for i in range(count):
            suffix = "" if profile == "full" else f"-{profile}-{i}"
            out.append(
                {
                    "name": f"gpu-{gpu}{suffix}",
                    "attributes": {
                        "profile": {"string": profile},
                        "gpu": {"int": gpu},
                        "numa": {"int": gpu // 4},
                    },
                    "consumesCounters": [
                        {
                            "counterSet": f"gpu-{gpu}",
                            "counters": {
                                "memory": {"value": f"{memory}Gi"},
                                "slices": {"value": str(compute)},
                            },
                        }
                    ],
                }
            )
    return out


def slices() -> list[dict[str, Any]]:
    """The node's pool: one slice of counter sets, one of devices."""
    pool = {"name": NODE, "generation": 1, "resourceSliceCount": 2}
    counters = [
        {"name": f"gpu-{g}", "counters": {"memory": {"value": "80Gi"}, "slices": {"value": "7"}}}
        for g in range(GPUS_PER_NODE)
    ]
    return [
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceSlice",
            "metadata": {"name": f"{NODE}-counters"},
            "spec": {"driver": DRIVER, "pool": pool, "nodeName": NODE, "sharedCounters": counters},
        },
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceSlice",
            "metadata": {"name": f"{NODE}-gpus"},
            "spec": {
                "driver": DRIVER,
                "pool": pool,
                "nodeName": NODE,
                "devices": [d for g in range(GPUS_PER_NODE) for d in _devices(g)],
            },
        },
    ]


def _exact(profile: str, count: int) -> dict[str, Any]:
    selector = f'device.attributes["{DRIVER}"].profile == "{profile}"'
    return {
        "deviceClassName": GPU_CLASS,
        "count": count,
        "selectors": [{"cel": {"expression": selector}}],
    }


def _request(rng: random.Random, name: str) -> dict[str, Any]:
    """One request: a profile, or a firstAvailable list of 2-3 profiles from large to small."""
    names = list(PROFILES)
    if rng.random() < 0.5:
        return {"name": name, "exactly": _exact(rng.choice(names), rng.choice((1, 1, 2, 3)))}
    start = rng.randrange(len(names) - 1)
    chosen = names[start : start + rng.choice((2, 3))]
    alternatives = []
    for i, profile in enumerate(chosen):
        count = min(8, (2**i) * rng.choice((1, 1, 2)))
        alternatives.append({"name": f"{name}-{i}", **_exact(profile, count)})
    return {"name": name, "firstAvailable": alternatives}


def _claim(rng: random.Random) -> dict[str, Any]:
    requests = [_request(rng, f"r{i}") for i in range(rng.choice((1, 1, 2)))]
    devices: dict[str, Any] = {"requests": requests}
    if rng.random() < 0.4:
        attribute = rng.choice(("gpu", "numa"))
        devices["constraints"] = [{"matchAttribute": f"{DRIVER}/{attribute}"}]
    return {"devices": devices}


def _allocated(rng: random.Random) -> tuple[str, ...]:
    """Devices held by other claims: some GPUs whole, some partitions, within the counters."""
    held = []
    for gpu in range(GPUS_PER_NODE):
        use = rng.random()
        if use < 0.15:
            held.append(f"gpu-{gpu}")
        elif use < 0.35:
            held.append(f"gpu-{gpu}-{rng.choice(('3g.40gb', '2g.20gb', '1g.10gb'))}-0")
    return tuple(held)


def cases(seed: int = 27, n: int = 300) -> list[RealisticCase]:
    rng = random.Random(seed)
    out = []
    for i in range(n):
        claims = tuple(_claim(rng) for _ in range(rng.choice((1, 2, 2))))
        out.append(RealisticCase(f"realistic-{seed}-{i:03d}", claims, _allocated(rng)))
    return out
