"""Drivers that publish what devices hold, not just how many there are (issue 27).

Two ResourceSlice pools a fake node can publish, as a driver would:

- a partitionable GPU pool (KEP-4815): per physical A100-40GB a counter set `gpu-N-counters` with
  counter `memory: 40Gi`, the whole GPU `gpu-N` consuming all of it and eight MIG-like
  `1g.5gb` slices `gpu-N-mig-M` consuming 5Gi each, so a whole GPU and a slice are each
  "1 device" but hold 40Gi and 5Gi; the counters live in their own slice of the pool, as
  the v1 API wants;
- a capacity-shared NIC pool (KEP-5075): devices with `allowMultipleAllocations` and a
  `bandwidth` capacity of 100G whose `requestPolicy` rounds requests up, one to
  `validValues` (10G, 25G, 50G, 100G) and one to a `validRange` (10G..100G in steps of 10G).

The DeviceClasses of the GPU pool are the example cluster's (manifests/examples/cluster/
deviceclasses.yaml), so that the e2e tier and `make demo` talk about the same devices; the
NIC classes exist only here. Everything here is plain data: the e2e module and the fixture
recorder (tests/e2e/record_slices.py) create the same objects.
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "GPU_DRIVER",
    "MIG_CLASS",
    "NIC_CLASSES",
    "NIC_DRIVER",
    "RANGE_NIC_CLASS",
    "STEPS_NIC_CLASS",
    "WHOLE_GPU_CLASS",
    "mig_pool",
    "nic_classes",
    "shared_nic_pool",
]

GPU_DRIVER = "gpu.example.com"
WHOLE_GPU_CLASS = "a100.gpu.example.com"
MIG_CLASS = "mig-1g.5gb.gpu.example.com"
NIC_DRIVER = "net.example.com"
STEPS_NIC_CLASS = "steps.net.example.com"
RANGE_NIC_CLASS = "range.net.example.com"
NIC_CLASSES = (STEPS_NIC_CLASS, RANGE_NIC_CLASS)
MODEL = "A100-SXM4-40GB"
API = "resource.k8s.io/v1"


def _slice(name: str, driver: str, node: str, count: int, spec: dict[str, Any]) -> dict[str, Any]:
    pool = {"name": node, "generation": 1, "resourceSliceCount": count}
    body = {"driver": driver, "nodeName": node, "pool": pool, **spec}
    return {"apiVersion": API, "kind": "ResourceSlice", "metadata": {"name": name}, "spec": body}


def _gpu_device(name: str, gpu: int, kind: str, memory: str, **extra: Any) -> dict[str, Any]:
    attributes = {
        "type": {"string": kind},
        "model": {"string": MODEL},
        "index": {"int": gpu},
        **{key: {"string": value} for key, value in extra.items()},
    }
    return {
        "name": name,
        "attributes": attributes,
        "capacity": {"memory": {"value": memory}},
        "consumesCounters": [
            {"counterSet": f"gpu-{gpu}-counters", "counters": {"memory": {"value": memory}}}
        ],
    }


def mig_pool(node: str, gpus: int = 2, slices: int = 8) -> list[dict[str, Any]]:
    """The ResourceSlices of `gpus` partitionable A100-40GB on `node`: one slice of counter
    sets, one of devices (whole GPUs type `whole`, `1g.5gb` slices type `mig`)."""
    counters = [
        {"name": f"gpu-{g}-counters", "counters": {"memory": {"value": "40Gi"}}}
        for g in range(gpus)
    ]
    devices = []
    for g in range(gpus):
        devices.append(_gpu_device(f"gpu-{g}", g, "whole", "40Gi"))
        devices += [
            _gpu_device(f"gpu-{g}-mig-{m}", g, "mig", "5Gi", profile="1g.5gb")
            for m in range(slices)
        ]
    prefix = f"{node}-{GPU_DRIVER}"
    return [
        _slice(f"{prefix}-counters", GPU_DRIVER, node, 2, {"sharedCounters": counters}),
        _slice(f"{prefix}-devices", GPU_DRIVER, node, 2, {"devices": devices}),
    ]


def _nic(name: str, policy: str, request_policy: dict[str, Any]) -> dict[str, Any]:
    return {
        "name": name,
        "allowMultipleAllocations": True,
        "attributes": {"policy": {"string": policy}},
        "capacity": {"bandwidth": {"value": "100G", "requestPolicy": request_policy}},
    }


def shared_nic_pool(node: str) -> list[dict[str, Any]]:
    """One ResourceSlice of two shareable 100G NICs on `node`: `nic-0` rounds bandwidth
    requests up to its validValues, `nic-1` to its validRange; both default to 10G."""
    steps = {"default": "10G", "validValues": ["10G", "25G", "50G", "100G"]}
    valid_range = {"default": "10G", "validRange": {"min": "10G", "max": "100G", "step": "10G"}}
    devices = [_nic("nic-0", "steps", steps), _nic("nic-1", "range", valid_range)]
    return [_slice(f"{node}-{NIC_DRIVER}", NIC_DRIVER, node, 1, {"devices": devices})]


def nic_classes() -> list[dict[str, Any]]:
    """DeviceClasses selecting one NIC each, by its rounding policy."""
    return [
        {
            "apiVersion": API,
            "kind": "DeviceClass",
            "metadata": {"name": name},
            "spec": {
                "selectors": [
                    {
                        "cel": {
                            "expression": f'device.driver == "{NIC_DRIVER}" && '
                            f'device.attributes["{NIC_DRIVER}"].policy == "{name.split(".")[0]}"'
                        }
                    }
                ]
            },
        }
        for name in NIC_CLASSES
    ]
