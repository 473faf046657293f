"""Start-up and bulk-input benchmark: `serve --state` readiness and `count` over a 10 MB file.

Each measurement runs the real command line in a fresh process twice: as shipped
(libyaml through PyYAML's C loader, orjson) and as the baseline of the same run,
the same command with the pure-Python YAML loader swapped in. Reported: seconds
for each and the ratio baseline / draquota.

1. `draquota serve --state DIR`: DIR holds `--nodes` Nodes as a real cluster lists them
   (labels, status, images), each with a ResourceSlice of 8 GPUs with a driver's
   attributes, written as YAML (6.7 MB for 1000 nodes); timed from process start to
   the first 200 of /readyz.
2. `draquota count FILE --state DIR`: FILE is one multi-document YAML file of
   `--pods` pods (about 10 MB for 32,600 pods), each with two template claims.

Targets (issue 13): serve ready < 5 s with 1000 nodes; count over 10 MB < 15 s.
"""

from __future__ import annotations

import argparse
import json
import os
import ssl
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from webhook_bench import _device_classes, _free_port, _node, _queues, bench_pod  # noqa: E402

from certs.files import write_material  # noqa: E402
from certs.rotation import issue  # noqa: E402
from certs.serving import ServingSpec  # noqa: E402

__all__ = ["build_inputs", "main", "run_benchmark"]

# The command line, optionally with the pure-Python YAML loader (the baseline).
LAUNCHER = """
import sys, yaml
import webhook.store.manifests
if sys.argv[1] == "pure":
    webhook.store.manifests.YAML_LOADER = yaml.SafeLoader
from webhook.cli import main
sys.exit(main(sys.argv[2:]))
"""
MODES = ("libyaml", "pure")


def _rich_node(i: int) -> list[dict[str, Any]]:
    """A Node and its ResourceSlice as `kubectl get -o yaml` shows them in a real cluster:
    labels, status with conditions, addresses and images; GPUs with the attributes a driver
    publishes (about 9 KB of YAML per node)."""
    node, slice_ = _node(i)
    name = node["metadata"]["name"]
    node["metadata"]["labels"].update(
        {
            "kubernetes.io/arch": "amd64",
            "kubernetes.io/os": "linux",
            "node.kubernetes.io/instance-type": "gpu-8x-large",
            "topology.kubernetes.io/region": "region-1",
            "topology.kubernetes.io/zone": f"region-1{'abc'[i % 3]}",
        }
    )
    node["metadata"]["uid"] = f"{i:08x}-0000-4000-8000-000000000000"
    node["metadata"]["creationTimestamp"] = "2026-01-01T00:00:00Z"
    resources = {"cpu": "96", "memory": "1056Gi", "pods": "110", "ephemeral-storage": "1Ti"}
    conditions = [
        {
            "type": kind,
            "status": "False" if kind != "Ready" else "True",
            "reason": f"Kubelet{kind}",
            "message": f"kubelet reports {kind}",
            "lastHeartbeatTime": "2026-01-01T00:00:00Z",
            "lastTransitionTime": "2026-01-01T00:00:00Z",
        }
        for kind in ("MemoryPressure", "DiskPressure", "PIDPressure", "Ready")
    ]
    images = [
        {"names": [f"registry.example.com/team/image-{j}@sha256:{j:064x}"], "sizeBytes": 10**9 + j}
        for j in range(12)
    ]
    node["spec"] = {"podCIDR": f"10.{i // 256}.{i % 256}.0/24", "providerID": f"cloud://{name}"}
    node["status"] = {
        "capacity": resources,
        "allocatable": resources,
        "conditions": conditions,
        "addresses": [
            {"type": "InternalIP", "address": f"10.0.{i // 256}.{i % 256}"},
            {"type": "Hostname", "address": name},
        ],
        "nodeInfo": {
            "kubeletVersion": "v1.34.0",
            "containerRuntimeVersion": "containerd://2.1.0",
            "kernelVersion": "6.8.0",
            "osImage": "Ubuntu 24.04 LTS",
            "architecture": "amd64",
            "operatingSystem": "linux",
        },
        "images": images,
    }
    for d, device in enumerate(slice_["spec"]["devices"]):
        device["attributes"].update(
            {
                "model": {"string": "LATEST-GPU-MODEL"},
                "uuid": {"string": f"gpu-{i:04x}{d:02x}-5f2d-4c1e-9a7b-0c1d2e3f4a5b"},
                "driverVersion": {"version": "1.0.0"},
                "resource.kubernetes.io/pcieRoot": {"string": f"pci0000:{d // 4:02x}"},
            }
        )
    return [node, slice_]


def build_inputs(work: Path, nodes: int, pods: int) -> tuple[Path, Path]:
    """A YAML state dir of `nodes` nodes x 8 GPUs, and one YAML file of `pods` pods."""
    state = work / "cluster"
    state.mkdir(parents=True, exist_ok=True)
    dump = yaml.CSafeDumper if hasattr(yaml, "CSafeDumper") else yaml.SafeDumper
    (state / "deviceclasses.yaml").write_text(yaml.dump_all(_device_classes(), Dumper=dump))
    (state / "queues.yaml").write_text(yaml.dump_all(_queues(), Dumper=dump))
    objects = [obj for i in range(nodes) for obj in _rich_node(i)]
    (state / "nodes.yaml").write_text(yaml.dump_all(objects, Dumper=dump))
    pods_file = work / "pods.yaml"
    pods_file.write_text(
        yaml.dump_all((bench_pod(f"pod-{i:05d}") for i in range(pods)), Dumper=dump)
    )
    return state, pods_file


def _command(mode: str, *args: str) -> list[str]:
    return [sys.executable, "-c", LAUNCHER, mode, *args]


def _time_count(mode: str, pods_file: Path, state: Path) -> float:
    start = time.perf_counter()
    subprocess.run(
        _command(mode, "count", str(pods_file), "--state", str(state), "-o", "json"),
        check=True,
        stdout=subprocess.DEVNULL,
        cwd=ROOT,
    )
    return time.perf_counter() - start


def _time_ready(mode: str, state: Path, cert_dir: Path, timeout: float = 120.0) -> float:
    port = _free_port()
    context = ssl.create_default_context(cafile=str(cert_dir / "ca.crt"))
    url = f"https://127.0.0.1:{port}/readyz"
    args = ("serve", "--state", str(state), "--cert-dir", str(cert_dir))
    args += ("--host", "127.0.0.1", "--port", str(port), "--log-level", "WARNING")
    start = time.perf_counter()
    process = subprocess.Popen(_command(mode, *args), cwd=ROOT, stderr=subprocess.DEVNULL)
    try:
        while time.perf_counter() - start < timeout:
            try:
                with urllib.request.urlopen(url, context=context, timeout=1) as response:
                    if response.status == 200:
                        return time.perf_counter() - start
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                pass
            if process.poll() is not None:
                raise RuntimeError(f"draquota serve exited with {process.returncode}")
            time.sleep(0.05)
        raise RuntimeError(f"draquota serve not ready after {timeout} s")
    finally:
        process.terminate()
        process.wait(timeout=30)


def run_benchmark(nodes: int, pods: int, work: Path) -> dict[str, Any]:
    state, pods_file = build_inputs(work, nodes, pods)
    cert_dir = work / "certs"
    spec = ServingSpec(dns_names=("localhost",), ips=("127.0.0.1",), days=1, ca_days=1)
    write_material(cert_dir, issue(spec, datetime.now(UTC)))
    results: dict[str, Any] = {
        "nodes": nodes,
        "pods": pods,
        "pods_file_mb": round(pods_file.stat().st_size / 1e6, 1),
        "state_dir_mb": round(sum(p.stat().st_size for p in state.iterdir()) / 1e6, 1),
        "python": sys.version.split()[0],
        "cpus": os.cpu_count(),
    }
    for mode in MODES:
        results[f"serve_ready_s_{mode}"] = round(_time_ready(mode, state, cert_dir), 2)
        results[f"count_s_{mode}"] = round(_time_count(mode, pods_file, state), 2)
    for what in ("serve_ready_s", "count_s"):
        results[f"{what}_ratio"] = round(results[f"{what}_pure"] / results[f"{what}_libyaml"], 1)
    return results


def report(r: dict[str, Any]) -> str:
    return "\n".join(
        [
            f"inputs: {r['nodes']} nodes x 8 GPUs ({r['state_dir_mb']} MB of YAML), "
            f"{r['pods']} pods in one {r['pods_file_mb']} MB YAML file; "
            f"Python {r['python']}, {r['cpus']} CPUs",
            f"{'':28}{'draquota':>10}{'baseline':>10}{'speed-up':>10}",
            f"{'serve --state ready (s)':28}{r['serve_ready_s_libyaml']:>10}"
            f"{r['serve_ready_s_pure']:>10}{r['serve_ready_s_ratio']:>9}x   target < 5 s",
            f"{'count 10 MB file (s)':28}{r['count_s_libyaml']:>10}"
            f"{r['count_s_pure']:>10}{r['count_s_ratio']:>9}x   target < 15 s",
            "baseline: the same commands with PyYAML's pure-Python loader",
        ]
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--pods", type=int, default=32_600)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="draquota-bench-") as tmp:
        results = run_benchmark(args.nodes, args.pods, Path(tmp))
    print(json.dumps(results, indent=2) if args.json else report(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
