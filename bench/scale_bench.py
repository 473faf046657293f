"""Scale benchmark: one `draquota serve --kubeconfig` replica over a large live cluster.

For each size (nodes x pods, `bench/scale_cluster.py` builds the objects) it starts the
API (tests/fakeapi in a subprocess, its store filled directly; or, with `--kubeconfig`, a
real control plane already populated by `--populate`), then one draquota replica, and
reports: time to /readyz, resident memory (ready, after `--idle` seconds idle, after the
load), full admission (the API server's part played here: /mutate, apply the patch, set
the uid, /validate with dryRun false, then create the pod) p50/p99 and throughput at
`--connections` connections for `--seconds`, and placement p50/p99 measured in this
process on the same objects (warm index, and the index build a claim change costs).
Then the same load against a webhook that allows everything at once (the baseline of
`bench/webhook_bench.py`), in the same run, with the ratios: the floor this harness and
this machine set before draquota decides anything (`--no-floor` skips it).

Every run stops by itself; everything listens on 127.0.0.1 only.

    .venv/bin/python bench/scale_bench.py --size 500x10000 --size 2000x40000 --size 5000x100000
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import os
import signal
import socket
import ssl
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

import httpx  # noqa: E402
import jsonpatch  # noqa: E402
import orjson  # noqa: E402
import yaml  # noqa: E402
from scale_cluster import Size, new_pod, workload  # noqa: E402

from certs.files import write_material  # noqa: E402
from certs.rotation import issue  # noqa: E402
from certs.serving import ServingSpec  # noqa: E402

PYTHON = sys.executable
LIFETIME = 1800.0  # the fake API subprocess exits by itself after this many seconds


# -- the fake API in its own process ---------------------------------------------------


class _OrjsonShim:
    """`json` and `copy` for tests/fakeapi, through orjson: the fake API must not be what
    the benchmark measures (its stdlib JSON and deep copies cost more than draquota)."""

    @staticmethod
    def dumps(obj: Any, **_: Any) -> str:
        return orjson.dumps(obj).decode()

    @staticmethod
    def loads(data: Any) -> Any:
        return orjson.loads(data)

    @staticmethod
    def deepcopy(obj: Any) -> Any:
        return orjson.loads(orjson.dumps(obj))


def _fast_api(port: int) -> Any:
    """tests/fakeapi with paginated lists that copy one page, not the whole store per page."""
    from tests.fakeapi import FakeApiServer
    from tests.fakeapi import server as fake_server
    from tests.fakeapi import store as fake_store
    from tests.fakeapi.server import TYPED_GROUPS, _sort_key

    fake_server.json = _OrjsonShim  # type: ignore[assignment]
    fake_store.copy = _OrjsonShim  # type: ignore[assignment]

    class ScaleApi(FakeApiServer):
        _sorted: dict[str, tuple[int, list[tuple[str, Any]]]] = {}

        def _list(self, res: Any, namespace: str | None, api_version: str, query: Any) -> Any:
            if namespace is not None:
                return super()._list(res, namespace, api_version, query)
            store = self.store
            with store.cond:
                cached = self._sorted.get(res.key)
                if cached is None or cached[0] != store.rv:
                    objects = store._objects[res.key].values()
                    ordered = sorted(((_sort_key(o), o) for o in objects), key=lambda t: t[0])
                    cached = self._sorted[res.key] = (store.rv, ordered)
                rv, ordered = cached
                start = 0
                token = query.get("continue")
                if token:
                    state = json.loads(base64.b64decode(token))
                    start = int(state["index"])
                limit = int(query.get("limit") or 0) or len(ordered)
                page = [dict(obj) for _, obj in ordered[start : start + limit]]
            metadata: dict[str, Any] = {"resourceVersion": str(rv)}
            if start + limit < len(ordered):
                token = json.dumps({"index": start + limit}).encode()
                metadata["continue"] = base64.b64encode(token).decode()
            if res.group in TYPED_GROUPS:
                for item in page:
                    item.pop("kind", None)
                    item.pop("apiVersion", None)
            kind = f"{res.kind}List"
            return {"kind": kind, "apiVersion": api_version, "metadata": metadata, "items": page}

    return ScaleApi(resource_versions=("v1",), bookmark_interval=1.0, port=port)


def _fill(api: Any, size: Size) -> int:
    """Put the cluster straight into the store (no events: informers LIST it)."""
    store = api.store
    count = 0
    for obj in workload(size):
        res = api.resource(obj["kind"])
        meta = obj["metadata"]
        namespace = meta.get("namespace", "") if res.namespaced else ""
        store.rv += 1
        meta["resourceVersion"] = str(store.rv)
        meta.setdefault("uid", str(uuid.uuid4()))
        meta.setdefault("creationTimestamp", "2026-01-01T00:00:00Z")
        store._objects[res.key][(namespace, meta["name"])] = obj
        count += 1
    return count


def serve_fake_api(size: Size, port_file: Path) -> None:
    """Entry of the subprocess: fill, serve, write the port, exit after LIFETIME or SIGTERM."""
    api = _fast_api(0)
    started = time.monotonic()
    count = _fill(api, size)
    api.start()
    port_file.write_text(f"{api.url} {count} {time.monotonic() - started:.1f}")
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    time.sleep(LIFETIME)


# -- the replica -----------------------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _kubeconfig(path: Path, url: str) -> Path:
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "fake", "cluster": {"server": url}}],
        "users": [{"name": "bench", "user": {"token": "not-a-secret"}}],
        "contexts": [{"name": "fake", "context": {"cluster": "fake", "user": "bench"}}],
        "current-context": "fake",
    }
    path.write_text(yaml.safe_dump(config), encoding="utf-8")
    return path


def _certs(directory: Path) -> Path:
    spec = ServingSpec(dns_names=("localhost",), ips=("127.0.0.1",), days=1, ca_days=1)
    write_material(directory, issue(spec, datetime.now(UTC)))
    return directory


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


@contextmanager
def _process(command: list[str], log: Path, env: dict[str, str] | None = None) -> Iterator[Any]:
    with log.open("wb") as out:
        process = subprocess.Popen(
            command, stdout=out, stderr=subprocess.STDOUT, env={**os.environ, **(env or {})}
        )
    try:
        yield process
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def _wait_ready(url: str, context: ssl.SSLContext, process: Any, log: Path, limit: float) -> float:
    started = time.monotonic()
    while time.monotonic() - started < limit:
        if process.poll() is not None:
            raise RuntimeError(f"{log.name}: exited: {log.read_text()[-3000:]}")
        try:
            if httpx.get(f"{url}/readyz", verify=context, timeout=5).status_code == 200:
                return time.monotonic() - started
        except httpx.TransportError:
            pass
        time.sleep(0.1)
    raise RuntimeError(f"{log.name}: not ready after {limit:.0f}s: {log.read_text()[-3000:]}")


# -- the load --------------------------------------------------------------------------


def _review(obj: dict[str, Any], uid: str) -> bytes:
    meta = obj["metadata"]
    request = {
        "uid": uid,
        "kind": {"group": "", "version": "v1", "kind": "Pod"},
        "resource": {"group": "", "version": "v1", "resource": "pods"},
        "operation": "CREATE",
        "namespace": meta["namespace"],
        "name": meta["name"],
        "userInfo": {"username": "bench"},
        "object": obj,
        "dryRun": False,
    }
    return orjson.dumps(
        {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request}
    )


class Load:
    """`connections` workers, each one connection, each admitting pods one after another."""

    def __init__(self, url: str, api: str, context: ssl.SSLContext, create: bool) -> None:
        self.url = url
        self.api = api
        self.context = context
        self.create = create
        self.latencies: list[float] = []
        self.steps: dict[str, list[float]] = {"mutate": [], "validate": []}
        self.outcomes: dict[str, int] = {}
        self._next = 0

    async def _one(self, hook: httpx.AsyncClient, api: httpx.AsyncClient) -> None:
        index = self._next
        self._next += 1
        pod = new_pod(index)
        started = time.perf_counter()
        mutated = (await hook.post("/mutate", content=_review(pod, str(uuid.uuid4())))).json()
        self.steps["mutate"].append(time.perf_counter() - started)
        answer = mutated["response"]
        if answer["allowed"]:
            if answer.get("patch"):
                pod = jsonpatch.apply_patch(pod, orjson.loads(base64.b64decode(answer["patch"])))
            pod["metadata"]["uid"] = str(uuid.uuid4())  # the API server sets it before validation
            validating = time.perf_counter()
            validated = await hook.post("/validate", content=_review(pod, str(uuid.uuid4())))
            self.steps["validate"].append(time.perf_counter() - validating)
            answer = validated.json()["response"]
        self.latencies.append(time.perf_counter() - started)
        reason = "Allowed" if answer["allowed"] else answer["status"].get("reason", "?")
        self.outcomes[reason] = self.outcomes.get(reason, 0) + 1
        if answer["allowed"] and self.create:  # the API server persists the admitted pod
            ns = pod["metadata"]["namespace"]
            await api.post(f"/api/v1/namespaces/{ns}/pods", content=orjson.dumps(pod))

    async def _worker(self, until: float) -> None:
        async with (
            httpx.AsyncClient(base_url=self.url, verify=self.context, timeout=30) as hook,
            httpx.AsyncClient(base_url=self.api, timeout=30) as api,
        ):
            while time.monotonic() < until:
                await self._one(hook, api)

    def run(self, connections: int, seconds: float) -> dict[str, Any]:
        async def main() -> None:
            until = time.monotonic() + seconds
            await asyncio.gather(*(self._worker(until) for _ in range(connections)))

        started = time.monotonic()
        asyncio.run(main())
        elapsed = time.monotonic() - started
        return {
            "admissions": len(self.latencies),
            "per_second": len(self.latencies) / elapsed,
            **_percentiles(self.latencies),
            **{
                f"{step}_{key}": value
                for step, samples in self.steps.items()
                for key, value in _percentiles(samples).items()
            },
            "outcomes": dict(sorted(self.outcomes.items())),
        }


Buckets = dict[str, list[tuple[float, float]]]  # endpoint -> (upper bound, cumulative count)


def served_latency(url: str, context: ssl.SSLContext) -> Buckets:
    """The replica's own answer-time histogram (`draquota_admission_duration_seconds`)."""
    text = httpx.get(f"{url}/metrics", verify=context, timeout=30).text
    out: Buckets = {}
    for line in text.splitlines():
        if not line.startswith("draquota_admission_duration_seconds_bucket{"):
            continue
        labels, value = line.rsplit(" ", 1)
        fields = dict(p.split("=", 1) for p in labels[labels.index("{") + 1 : -1].split(","))
        bound = fields["le"].strip('"')
        upper = float("inf") if bound == "+Inf" else float(bound)
        out.setdefault(fields["endpoint"].strip('"'), []).append((upper, float(value)))
    return out


def served_quantiles(before: Buckets, after: Buckets, endpoint: str) -> dict[str, float]:
    """p50/p99 in ms of the answers between two scrapes, interpolated within a bucket as
    Prometheus' histogram_quantile does (so only as fine as the buckets)."""
    counts = [(u, c - dict(before.get(endpoint, [])).get(u, 0.0)) for u, c in after[endpoint]]
    total = counts[-1][1]
    out: dict[str, float] = {}
    for name, q in (("p50_ms", 0.5), ("p99_ms", 0.99)):
        rank, lower, below = q * total, 0.0, 0.0
        for upper, count in counts:
            if count >= rank:
                width = (upper if upper != float("inf") else lower) - lower
                share = (rank - below) / max(count - below, 1e-9)
                out[name] = 1000 * (lower + width * share)
                break
            lower, below = upper, count
    return out


def _percentiles(samples: list[float]) -> dict[str, float]:
    if not samples:
        return {"p50_ms": 0.0, "p99_ms": 0.0}
    ordered = sorted(samples)
    return {
        "p50_ms": 1000 * statistics.median(ordered),
        "p99_ms": 1000 * ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))],
    }


# -- placement, in this process --------------------------------------------------------


def placement(size: Size, calls: int = 200) -> dict[str, float]:
    """Placement of a new pod's claims on the cluster's objects: index build, then calls."""
    from quota.claims import expand_pod_claims
    from quota.placement import make_placer
    from webhook.store.clusterstate import ClusterState

    kinds = {"ResourceSlice", "DeviceClass", "ResourceClaim", "Node", "ResourceClaimTemplate",
             "Namespace"}  # fmt: skip
    state = ClusterState(o for o in workload(size) if o["kind"] in kinds)
    placer = make_placer(state)
    claims = expand_pod_claims(new_pod(0), state)
    started = time.perf_counter()
    placer.index()
    build = time.perf_counter() - started
    samples = []
    for i in range(calls):
        pod_claims = expand_pod_claims(new_pod(i), state)
        started = time.perf_counter()
        result = placer(pod_claims, {"example.com/pool": "main"})
        samples.append(time.perf_counter() - started)
        assert result.ok, result
    del claims
    out = _percentiles(samples)
    changed = _after_claim_changes(state, placer, calls)
    return {
        "index_build_ms": 1000 * build,
        **{f"place_{k}": v for k, v in out.items()},
        **{f"changed_{k}": v for k, v in changed.items()},
    }


def _after_claim_changes(state: Any, placer: Any, calls: int) -> dict[str, float]:
    """A placement right after the scheduler allocated or freed one claim, as in a live
    cluster where nearly every admission follows some claim change."""
    from quota.claims import expand_pod_claims

    allocated = [
        c for c in state.list("ResourceClaim") if (c.get("status") or {}).get("allocation")
    ]
    samples = []
    for i in range(min(calls, 2 * len(allocated))):
        claim = allocated[i // 2]  # freed, then allocated again
        freed = {**claim, "status": {}}
        pod_claims = expand_pod_claims(new_pod(i), state)
        started = time.perf_counter()
        state.upsert(freed if i % 2 == 0 else claim)
        result = placer(pod_claims, {"example.com/pool": "main"})
        samples.append(time.perf_counter() - started)
        assert result.ok, result
    return _percentiles(samples)


# -- one size --------------------------------------------------------------------------


def run_size(args: argparse.Namespace, size: Size, work: Path) -> dict[str, Any]:
    if args.kubeconfig:  # a real control plane, filled by bench/scale_populate.py
        return _measure(args, size, work, "")
    port_file = work / "api-port"
    port_file.unlink(missing_ok=True)
    api_command = [PYTHON, __file__, "--fake-api", f"{size.nodes}x{size.pods}",
                   "--port-file", str(port_file)]  # fmt: skip
    with _process(api_command, work / "fakeapi.log", {"PYTHONPATH": str(ROOT)}) as api_proc:
        deadline = time.monotonic() + 900
        while not port_file.exists() or not port_file.read_text():
            if api_proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError((work / "fakeapi.log").read_text()[-3000:])
            time.sleep(0.5)
        api_url, objects, fill_s = port_file.read_text().split()
        print(f"  fake API: {objects} objects in {fill_s}s at {api_url}", flush=True)
        return _measure(args, size, work, api_url)


def _measure(args: argparse.Namespace, size: Size, work: Path, api_url: str) -> dict[str, Any]:
    certs = _certs(work / "certs")
    kubeconfig = args.kubeconfig or _kubeconfig(work / "kubeconfig", api_url)
    port = _free_port()
    url = f"https://127.0.0.1:{port}"
    command = [
        PYTHON, "-m", "webhook.cli", "serve", "--kubeconfig", str(kubeconfig),
        "--cert-dir", str(certs), "--host", "127.0.0.1", "--port", str(port),
        "--log-level", "WARNING",
        "--metrics-auth", "none",  # the bench scrapes its latency histogram without a token
    ]  # fmt: skip
    if args.config:
        command += ["--config", str(args.config)]
    context = ssl.create_default_context(cafile=str(certs / "ca.crt"))
    log = work / "draquota.log"
    with _process(command, log) as process:
        pid = int(process.pid)
        ready = _wait_ready(url, context, process, log, 300)
        result: dict[str, Any] = {"nodes": size.nodes, "pods": size.pods, "ready_s": ready}
        result["rss_ready_mib"] = rss_mib(pid)
        print(f"  ready in {ready:.1f}s, {result['rss_ready_mib']:.0f} MiB", flush=True)
        time.sleep(args.idle)
        result["rss_idle_mib"] = rss_mib(pid)
        Load(url, api_url, context, create=False).run(args.connections, 2)  # warm-up
        before = served_latency(url, context)
        with _profiler(args.profile, pid, args.seconds):
            load = Load(url, api_url, context, create=not args.kubeconfig).run(
                args.connections, args.seconds
            )
        after = served_latency(url, context)
        result["admission"] = load
        result["served"] = {e: served_quantiles(before, after, e) for e in ("mutate", "validate")}
        result["rss_load_mib"] = rss_mib(pid)
    if not args.no_floor:
        result["floor"] = _floor(args, work, api_url, certs, context)
    print(f"  {json.dumps(result)}", flush=True)
    return result


def _floor(
    args: argparse.Namespace, work: Path, api_url: str, certs: Path, context: ssl.SSLContext
) -> dict[str, Any]:
    """The same load against a webhook that allows everything at once (bench/webhook_bench.py's
    baseline: FastAPI, uvicorn, TLS), in the same run: what the harness, the fake API and this
    machine cost before draquota decides anything."""
    port = _free_port()
    command = [PYTHON, str(ROOT / "bench" / "webhook_bench.py"), "--allow-all-server",
               "--port", str(port), "--cert-dir", str(certs)]  # fmt: skip
    url = f"https://127.0.0.1:{port}"
    log = work / "allow-all.log"
    with _process(command, log) as process:
        _wait_ready(url, context, process, log, 60)
        Load(url, api_url, context, create=False).run(args.connections, 2)  # warm-up
        return Load(url, api_url, context, create=not args.kubeconfig).run(
            args.connections, args.seconds
        )


@contextmanager
def _profiler(output: Path | None, pid: int, seconds: float) -> Iterator[None]:
    """py-spy's collapsed stacks of the replica's GIL holder during the load (`--profile FILE`):
    where its CPU goes, not where its threads wait."""
    if output is None:
        yield
        return
    spy = str(Path(PYTHON).parent / "py-spy")
    command = [spy, "record", "-f", "raw", "-r", "100", "--gil", "--nonblocking", "-o", str(output),
               "-p", str(pid), "-d", str(int(seconds) + 1)]  # fmt: skip
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    yield
    process.wait(timeout=seconds + 60)


def _size(text: str) -> Size:
    nodes, pods = text.lower().split("x")
    return Size(int(nodes), int(pods))


def report(results: list[dict[str, Any]]) -> str:
    lines = [
        "| nodes | pods | ready s | RSS MiB ready → idle → load | admission p50 / p99 ms "
        "| admissions/s | placement p50 / p99 ms | after a claim change p50 / p99 ms "
        "| index build ms |",
        "|---:|---:|---:|---|---|---:|---|---|---:|",
    ]
    for r in results:
        a, p = r["admission"], r.get("placement", {})
        lines.append(
            f"| {r['nodes']} | {r['pods']} | {r['ready_s']:.1f} "
            f"| {r['rss_ready_mib']:.0f} → {r['rss_idle_mib']:.0f} → {r['rss_load_mib']:.0f} "
            f"| {a['p50_ms']:.1f} / {a['p99_ms']:.1f} | {a['per_second']:.0f} "
            f"| {p.get('place_p50_ms', 0):.2f} / {p.get('place_p99_ms', 0):.2f} "
            f"| {p.get('changed_p50_ms', 0):.2f} / {p.get('changed_p99_ms', 0):.2f} "
            f"| {p.get('index_build_ms', 0):.0f} |"
        )
    lines += [
        "",
        "| pods | /mutate p50 / p99 ms, client | served | /validate p50 / p99 ms, client "
        "| served |",
        "|---:|---|---|---|---|",
    ]
    for r in results:
        a, served = r["admission"], r.get("served", {})
        cells = []
        for step in ("mutate", "validate"):
            own = served.get(step, {})
            cells.append(f"{a.get(f'{step}_p50_ms', 0):.1f} / {a.get(f'{step}_p99_ms', 0):.1f}")
            cells.append(f"{own.get('p50_ms', 0):.1f} / {own.get('p99_ms', 0):.1f}")
        lines.append(f"| {r['pods']} | " + " | ".join(cells) + " |")
    floors = [r for r in results if "floor" in r]
    if floors:
        lines += [
            "",
            "| pods | allow-all webhook p50 / p99 ms | admissions/s "
            "| draquota / allow-all: p50 | admissions/s |",
            "|---:|---|---:|---:|---:|",
        ]
    for r in floors:
        a, f = r["admission"], r["floor"]
        lines.append(
            f"| {r['pods']} | {f['p50_ms']:.1f} / {f['p99_ms']:.1f} | {f['per_second']:.0f} "
            f"| {a['p50_ms'] / max(f['p50_ms'], 1e-9):.2f}x "
            f"| {a['per_second'] / max(f['per_second'], 1e-9):.2f} |"
        )
    if len(results) > 1:
        first, last = results[0], results[-1]
        growth = last["admission"]["p50_ms"] / max(first["admission"]["p50_ms"], 1e-9)
        lines.append(f"\nadmission p50 growth {first['pods']} → {last['pods']} pods: {growth:.2f}x")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=_size, action="append", help="NODESxPODS (repeatable)")
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--connections", type=int, default=8)
    parser.add_argument("--idle", type=float, default=60.0, help="seconds idle after ready")
    parser.add_argument("--kubeconfig", type=Path, help="a real control plane, populated")
    parser.add_argument("--config", type=Path, help="draquota's config file (e.g. placement: Off)")
    parser.add_argument("--no-placement", action="store_true")
    parser.add_argument(
        "--no-floor", action="store_true", help="skip the allow-all webhook under the same load"
    )
    parser.add_argument("--profile", type=Path, help="py-spy stacks of the replica")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--fake-api", type=_size, help=argparse.SUPPRESS)
    parser.add_argument("--port-file", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.fake_api:
        serve_fake_api(args.fake_api, args.port_file)
        return 0
    sizes = args.size or [Size(500, 10000)]
    results = []
    with tempfile.TemporaryDirectory(prefix="draquota-scale-") as tmp:
        for size in sizes:
            print(f"{size.nodes} nodes, {size.pods} pods", flush=True)
            work = Path(tmp) / f"{size.nodes}x{size.pods}"
            work.mkdir()
            result = run_size(args, size, work)
            if not args.no_placement:
                result["placement"] = placement(size)
            results.append(result)
    print(json.dumps(results, indent=2) if args.json else report(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
