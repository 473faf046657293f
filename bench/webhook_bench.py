"""Load benchmark: `draquota serve --state` against a minimal allow-all webhook on the same stack.

Both servers are uvicorn + FastAPI over TLS (the same SSLContext construction),
started one after the other on 127.0.0.1 and driven by `wrk` with the same
AdmissionReviews: a pod with two ResourceClaimTemplate claims in a cluster of
`--nodes` nodes, each publishing a ResourceSlice of 8 GPUs. Every request has
its own uid (and so its own reservation), as the API server sends them.

Reported per target: requests/s, p50 and p99 latency, errors; and the ratios
draquota/baseline. "Full admission" is one /mutate plus one /validate call, so
its throughput is 1 / (1/mutate + 1/validate) against the baseline answering
the same two calls (baseline/2). The floor is the same allow-all on draquota's own
ASGI layer, without FastAPI's per-request layers: against it, what is left is the
cost of draquota's decisions.
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import jsonpatch
import orjson
import yaml
from fastapi import FastAPI, Request, Response

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from certs.files import write_material  # noqa: E402
from certs.rotation import issue  # noqa: E402
from certs.serving import ServingSpec  # noqa: E402

__all__ = [
    "admission_bodies",
    "allow_all_app",
    "allow_all_floor_app",
    "build_cluster",
    "main",
    "probe_review",
    "run_benchmark",
]

EXAMPLES = ROOT / "manifests" / "examples" / "cluster"
NAMESPACE = "bench"
GPU_CLASS = "gpu.example.com"
FLAVOR_LABEL = "bench.example.com/pool"
UID = "@@UID@@"


def _allowed(review: Any, patch: list[Any] | None = None) -> bytes:
    """The review's request allowed, with `patch` (a JSON patch) when one is given."""
    response: dict[str, Any] = {"uid": review["request"]["uid"], "allowed": True}
    if patch:
        response["patchType"] = "JSONPatch"
        response["patch"] = base64.b64encode(orjson.dumps(patch)).decode()
    answer = {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": response}
    return orjson.dumps(answer)


def _stamped(review: Any, stamps: Mapping[str, Any]) -> bytes:
    """Allowed, with the JSON patch of `stamps` for the pod's kind: "gpu" when it names a
    claim, else "cpu" (bench/throughput.py's two pods)."""
    spec = (review["request"].get("object") or {}).get("spec") or {}
    return _allowed(review, stamps["gpu" if spec.get("resourceClaims") else "cpu"])


def allow_all_app(stamps: Mapping[str, Any] | None = None) -> Any:
    """The baseline: a FastAPI webhook that parses the review and allows everything. With
    `stamps`, its /mutate also patches each pod as `_stamped` says."""
    app = FastAPI(openapi_url=None, docs_url=None, redoc_url=None)

    @app.post("/mutate")
    async def mutate(request: Request) -> Response:
        review = orjson.loads(await request.body())
        answer = _allowed(review) if stamps is None else _stamped(review, stamps)
        return Response(answer, media_type="application/json")

    @app.post("/validate")
    async def validate(request: Request) -> Response:
        return Response(_allowed(orjson.loads(await request.body())), media_type="application/json")

    @app.get("/healthz")
    @app.get("/readyz")
    async def healthz() -> Response:
        return Response(b'{"status":"ok"}', media_type="application/json")

    return app


def allow_all_floor_app() -> Any:
    """The floor: the same allow-all on draquota's own ASGI layer (`webhook.edge.asgi`), where its
    admission routes are answered. Against it, draquota's figures are the cost of its
    decisions alone; the baseline above also pays FastAPI's layers per request."""
    from webhook.edge.asgi import WebhookApp, read_body

    app = WebhookApp(openapi_url=None, docs_url=None, redoc_url=None)

    async def allow(scope: Any, receive: Any) -> tuple[int, bytes]:
        return 200, _allowed(orjson.loads(await read_body(scope, receive, 3 << 20)))

    @app.get("/healthz")
    @app.get("/readyz")
    async def healthz() -> Response:
        return Response(b'{"status":"ok"}', media_type="application/json")

    app.endpoints.update({"/mutate": allow, "/validate": allow})
    return app


def _serve_allow_all(
    cert_dir: Path, port: int, floor: bool = False, stamps: Path | None = None
) -> None:
    from webhook.edge.serve import server_context, webhook_server

    context, reloader = server_context(cert_dir)
    if floor:
        app = allow_all_floor_app()
    else:
        app = allow_all_app(orjson.loads(stamps.read_bytes()) if stamps else None)
    webhook_server(app, "127.0.0.1", port, context, reloader).run()


def _device_classes() -> list[dict[str, Any]]:
    source = EXAMPLES / "deviceclasses.yaml"
    if source.is_file():
        return [d for d in yaml.safe_load_all(source.read_text()) if d]
    return [
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "DeviceClass",
            "metadata": {"name": GPU_CLASS},
            "spec": {"selectors": [{"cel": {"expression": f'device.driver == "{GPU_CLASS}"'}}]},
        }
    ]


def _template(name: str, count: int) -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": {
            "spec": {
                "devices": {
                    "requests": [
                        {"name": "gpu", "exactly": {"deviceClassName": GPU_CLASS, "count": count}}
                    ]
                }
            }
        },
    }


def _queues() -> list[dict[str, Any]]:
    gpus = {
        "name": "gpus",
        "kind": "DeviceClass",
        "deviceClassNames": [GPU_CLASS],
        "nominalQuota": 10_000_000,
    }
    return [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}},
        {
            "apiVersion": "draquota.io/v1beta1",
            "kind": "ResourceFlavor",
            "metadata": {"name": "bench-gpu"},
            "spec": {"nodeLabels": {FLAVOR_LABEL: "gpu"}},
        },
        {
            "apiVersion": "draquota.io/v1beta1",
            "kind": "ClusterQueue",
            "metadata": {"name": "bench"},
            "spec": {
                "namespaceSelector": {},
                "resourceGroups": [
                    {
                        "coveredResources": ["gpus"],
                        "flavors": [{"name": "bench-gpu", "resources": [gpus]}],
                    }
                ],
            },
        },
        {
            "apiVersion": "draquota.io/v1beta1",
            "kind": "LocalQueue",
            "metadata": {"name": "default", "namespace": NAMESPACE},
            "spec": {"clusterQueue": "bench"},
        },
        _template("one-gpu", 1),
        _template("gpu-pair", 2),
    ]


def _node(i: int) -> list[dict[str, Any]]:
    name = f"bench-node-{i:04d}"
    devices = [
        {
            "name": f"gpu-{d}",
            "attributes": {"type": {"string": "gpu"}, "index": {"int": d}},
            "capacity": {"memory": {"value": "80Gi"}},
        }
        for d in range(8)
    ]
    return [
        {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {
                "name": name,
                "labels": {FLAVOR_LABEL: "gpu", "kubernetes.io/hostname": name},
            },
        },
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceSlice",
            "metadata": {"name": f"{name}-{GPU_CLASS}"},
            "spec": {
                "driver": GPU_CLASS,
                "nodeName": name,
                "pool": {"name": name, "generation": 1, "resourceSliceCount": 1},
                "devices": devices,
            },
        },
    ]


def build_cluster(directory: Path, nodes: int) -> None:
    """A state dir: the example DeviceClasses, one big GPU queue, `nodes` nodes with slices."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "deviceclasses.yaml").write_text(yaml.safe_dump_all(_device_classes()))
    (directory / "queues.yaml").write_text(yaml.safe_dump_all(_queues()))
    objects = [obj for i in range(nodes) for obj in _node(i)]
    (directory / "nodes.json").write_text(json.dumps({"kind": "List", "items": objects}))


def bench_pod(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": {
            "containers": [
                {
                    "name": "train",
                    "image": "example.com/train:1",
                    "resources": {"claims": [{"name": "gpu"}, {"name": "pair"}]},
                }
            ],
            "resourceClaims": [
                {"name": "gpu", "resourceClaimTemplateName": "one-gpu"},
                {"name": "pair", "resourceClaimTemplateName": "gpu-pair"},
            ],
        },
    }


def review(obj: dict[str, Any], uid: str) -> dict[str, Any]:
    return {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": uid,
            "kind": {"group": "", "version": "v1", "kind": "Pod"},
            "resource": {"group": "", "version": "v1", "resource": "pods"},
            "operation": "CREATE",
            "namespace": NAMESPACE,
            "name": obj["metadata"]["name"],
            "userInfo": {"username": "bench"},
            "object": obj,
            "dryRun": False,
        },
    }


LUA = """
local parts = {%s}
local path = "%s"
local headers = {["Content-Type"] = "application/json"}
local counter = 0
local threads = {}
local next_id = 1

function setup(thread)
  thread:set("tid", next_id)
  next_id = next_id + 1
  table.insert(threads, thread)
end

function init(args)
  tid = wrk.thread:get("tid")
end

function request()
  counter = counter + 1
  local uid = string.format("b%%d-%%d", tid, counter)
  return wrk.format("POST", path, headers, table.concat(parts, uid))
end

function done(summary, latency, requests)
  local e = summary.errors
  io.write(string.format(
    'WRKJSON {"requests": %%d, "duration_us": %%d, "p50_us": %%d, "p99_us": %%d, "errors": %%d}\\n',
    summary.requests, summary.duration, latency:percentile(50), latency:percentile(99),
    e.connect + e.read + e.write + e.status + e.timeout))
end
"""


def _lua(body: bytes, path: str) -> str:
    parts = body.decode().split(UID)
    return LUA % (", ".join(json.dumps(p) for p in parts), path)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextmanager
def _server(
    command: list[str], port: int, cert_dir: Path, log: Path, pids: dict[str, int] | None = None
) -> Iterator[str]:
    url = f"https://127.0.0.1:{port}"
    with log.open("wb") as out:
        process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT)
    if pids is not None:
        pids[url] = process.pid
    try:
        context = ssl.create_default_context(cafile=str(cert_dir / "ca.crt"))
        deadline = time.monotonic() + 120
        while True:
            if process.poll() is not None:
                raise RuntimeError(f"{command[0:4]} exited: {log.read_text()[-2000:]}")
            try:
                if httpx.get(f"{url}/healthz", verify=context).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError("server did not start")
            time.sleep(0.2)
        yield url
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def _cpu_seconds(pid: int) -> float | None:
    """User + system CPU time of a process so far (None where /proc does not tell)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _wrk(
    url: str,
    path: str,
    body: bytes,
    seconds: int,
    connections: int,
    work: Path,
    pid: int | None = None,
) -> dict:
    """wrk's figures; with the server's `pid`, also its CPU time per request (`cpu_us`): what
    the server spends, whoever of wrk and the server is the bottleneck."""
    before = _cpu_seconds(pid) if pid is not None else None
    script = work / f"{path.strip('/')}-{connections}.lua"
    script.write_text(_lua(body, path))
    command = [
        "wrk", "-t", "1", "-c", str(connections), "-d", f"{seconds}s",
        "--timeout", "5s", "-s", str(script), url,
    ]  # fmt: skip
    output = subprocess.run(
        command, capture_output=True, text=True, check=True, timeout=seconds + 60
    )
    line = next(x for x in output.stdout.splitlines() if x.startswith("WRKJSON "))
    result = json.loads(line.removeprefix("WRKJSON "))
    result["rps"] = result["requests"] / (result["duration_us"] / 1e6)
    after = _cpu_seconds(pid) if pid is not None else None
    if before is not None and after is not None and result["requests"]:
        result["cpu_us"] = (after - before) / result["requests"] * 1e6
    return result


PROBE = "probe-0001"  # the uid of the one /mutate call that gives the patch


def probe_review() -> dict[str, Any]:
    """The /mutate call whose answer `admission_bodies` turns into the benchmark's bodies."""
    return review(bench_pod(f"train-{UID}"), PROBE)


def admission_bodies(response: Mapping[str, Any]) -> tuple[bytes, bytes]:
    """The /mutate body, and the /validate body the API server would send after the patch
    of `response` (draquota's answer to `probe_review()`); both carry UID to replace."""
    if not response["allowed"] or "patch" not in response:
        raise RuntimeError(f"draquota did not admit the benchmark pod: {response}")
    pod = bench_pod(f"train-{UID}")
    ops = orjson.loads(base64.b64decode(response["patch"]))
    mutated = jsonpatch.apply_patch(pod, ops)
    mutated["metadata"]["uid"] = UID  # the API server names the pod before /validate
    validate = orjson.dumps(review(mutated, UID)).replace(PROBE.encode(), UID.encode())
    return orjson.dumps(review(pod, UID)), validate


def _mutated_body(url: str, cert_dir: Path) -> tuple[bytes, bytes]:
    """The benchmark's two bodies (`admission_bodies`), probing draquota at `url`."""
    context = ssl.create_default_context(cafile=str(cert_dir / "ca.crt"))
    probe = orjson.dumps(probe_review())
    answer = httpx.post(f"{url}/mutate", content=probe, verify=context).json()
    return admission_bodies(answer["response"])


def _decisions(url: str, cert_dir: Path) -> dict[str, float]:
    """Answers by endpoint, allowed and reason, from draquota's own metrics (a sanity check)."""
    context = ssl.create_default_context(cafile=str(cert_dir / "ca.crt"))
    text = httpx.get(f"{url}/metrics", verify=context).text
    counts: dict[str, float] = {}
    for line in text.splitlines():
        if line.startswith("draquota_admission_decisions_total{"):
            labels, value = line.rsplit(" ", 1)
            fields = dict(
                part.split("=", 1) for part in labels[labels.index("{") + 1 : -1].split(",")
            )
            endpoint, reason = fields["endpoint"].strip('"'), fields["reason"].strip('"')
            key = f"{endpoint} {reason}"
            counts[key] = counts.get(key, 0) + float(value)
    return counts


def run_benchmark(nodes: int, seconds: int, connections: int, work: Path) -> dict[str, Any]:
    """Build the cluster, run both servers in turn under wrk, return the figures."""
    state, cert_dir = work / "cluster", work / "certs"
    build_cluster(state, nodes)
    spec = ServingSpec(dns_names=("localhost",), ips=("127.0.0.1",))
    write_material(cert_dir, issue(spec, datetime.now(UTC)))
    draquota = [
        sys.executable, "-m", "webhook.cli", "serve", "--state", str(state),
        "--cert-dir", str(cert_dir), "--host", "127.0.0.1", "--log-level", "WARNING",
    ]  # fmt: skip
    baseline = [sys.executable, str(Path(__file__).resolve()), "--allow-all-server"]
    results: dict[str, Any] = {"nodes": nodes, "seconds": seconds, "connections": connections}
    warm = max(1, seconds // 5)
    port, base_port, floor_port = _free_port(), _free_port(), _free_port()
    base_command = [*baseline, "--port", str(base_port), "--cert-dir", str(cert_dir)]
    floor_command = [*baseline, "--floor", "--port", str(floor_port), "--cert-dir", str(cert_dir)]
    # The servers stay up; one is driven at a time, and the baseline is measured before and
    # after draquota so that a change in the machine's load during the run shows (and averages).
    pids: dict[str, int] = {}
    draquota_log, base_log = work / "draquota.log", work / "baseline.log"
    with (
        _server([*draquota, "--port", str(port)], port, cert_dir, draquota_log, pids) as url,
        _server(base_command, base_port, cert_dir, base_log, pids) as base_url,
        _server(floor_command, floor_port, cert_dir, work / "floor.log", pids) as floor_url,
    ):
        mutate_body, validate_body = _mutated_body(url, cert_dir)
        us, base, floor = pids[url], pids[base_url], pids[floor_url]
        _wrk(base_url, "/validate", validate_body, warm, connections, work)
        before = _wrk(base_url, "/validate", validate_body, seconds, connections, work, base)
        _wrk(url, "/validate", validate_body, warm, connections, work)  # warm caches, placer index
        results["mutate"] = _wrk(url, "/mutate", mutate_body, seconds, connections, work, us)
        results["validate"] = _wrk(url, "/validate", validate_body, seconds, connections, work, us)
        results["decisions"] = _decisions(url, cert_dir)
        _wrk(floor_url, "/validate", validate_body, warm, connections, work)
        floor_run = _wrk(floor_url, "/validate", validate_body, seconds, connections, work, floor)
        results["floor"] = floor_run
        after = _wrk(base_url, "/validate", validate_body, seconds, connections, work, base)
    results["baseline_runs"] = [before, after]
    keys = ("rps", "p50_us", "p99_us", "requests", "errors", "cpu_us")
    results["baseline"] = {
        key: (before[key] + after[key]) / 2 for key in keys if key in before and key in after
    }
    base = results["baseline"]["rps"]
    mutate, validate = results["mutate"]["rps"], results["validate"]["rps"]
    full = 1 / (1 / mutate + 1 / validate)
    results["ratios"] = {
        "mutate/baseline": mutate / base,
        "validate/baseline": validate / base,
        "full_admission/baseline_pair": full / (base / 2),
        "full_admission/floor_pair": full / (results["floor"]["rps"] / 2),
    }
    results["full_admission_rps"] = full
    runs = (results["baseline"], results["floor"], results["mutate"], results["validate"])
    cpu = [r.get("cpu_us") for r in runs]
    if all(cpu):
        # The same comparison in server CPU per request: steadier than req/s on a shared machine.
        base_cpu, floor_cpu, pair_cpu = cpu[0], cpu[1], cpu[2] + cpu[3]
        results["ratios"]["full_admission_cpu/baseline_pair"] = 2 * base_cpu / pair_cpu
        results["ratios"]["full_admission_cpu/floor_pair"] = 2 * floor_cpu / pair_cpu
    return results


def report(results: dict[str, Any]) -> str:
    lines = [
        f"nodes={results['nodes']} connections={results['connections']} "
        f"duration={results['seconds']}s per target (wrk -t1, TLS, 127.0.0.1)",
        f"{'target':<22}{'req/s':>10}{'p50 ms':>10}{'p99 ms':>10}{'errors':>8}"
        f"{'server CPU µs/req':>19}",
    ]
    runs = [("baseline (before)", results["baseline_runs"][0])]
    runs += [(name, results[name]) for name in ("mutate", "validate", "floor")]
    runs += [
        ("baseline (after)", results["baseline_runs"][1]),
        ("baseline (mean)", results["baseline"]),
    ]
    for name, r in runs:
        cpu = f"{r['cpu_us']:>19.0f}" if "cpu_us" in r else f"{'-':>19}"
        lines.append(
            f"{name:<22}{r['rps']:>10.0f}{r['p50_us'] / 1000:>10.2f}"
            f"{r['p99_us'] / 1000:>10.2f}{r['errors']:>8.0f}{cpu}"
        )
    lines.append(
        f"{'full admission':<22}{results['full_admission_rps']:>10.0f}  (mutate + validate)"
    )
    for name, value in sorted(results["decisions"].items()):
        lines.append(f"answers {name:<28}{value:>8.0f}")
    for name, value in results["ratios"].items():
        lines.append(f"ratio {name:<36}{value:>6.2f}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=500)
    parser.add_argument("--seconds", type=int, default=10)
    parser.add_argument("--connections", type=int, default=8)
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    parser.add_argument("--work-dir", type=Path, help="keep the cluster, certs and logs here")
    parser.add_argument("--allow-all-server", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--floor", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--port", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--cert-dir", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--stamps", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.allow_all_server:
        _serve_allow_all(args.cert_dir, args.port, args.floor, args.stamps)
        return 0
    if shutil.which("wrk") is None:
        print("wrk not found: apt-get install wrk", file=sys.stderr)
        return 2
    os.chdir(ROOT)
    if args.work_dir:
        results = run_benchmark(args.nodes, args.seconds, args.connections, args.work_dir)
    else:
        with tempfile.TemporaryDirectory(prefix="draquota-bench-") as tmp:
            results = run_benchmark(args.nodes, args.seconds, args.connections, Path(tmp))
    print(json.dumps(results, indent=2) if args.json else report(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
