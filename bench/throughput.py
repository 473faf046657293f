"""Pod creation throughput under each kind of admission control (issue 30), in one run.

Starts the real v1.36.2 control plane of ../shared/k8s once and runs five phases on it, one
after another, in one namespace (a fake node of 8 GPUs, a 1-GPU ResourceClaimTemplate):

- A: no quota, no webhooks;
- B: the built-in ResourceQuota on `pods`, `cpu`, `memory` and the DRA device-class quota
  `gpu.example.com.deviceclass.resource.k8s.io/devices` (removed afterwards);
- C: an allow-all mutating + validating webhook pair: bench/webhook_bench.py's allow-all app
  on draquota's own uvicorn + TLS stack, registered with draquota's rules, matchConditions,
  failure policy and timeouts (removed afterwards);
- D: draquota installed as the e2e tier does (`tests.e2e.cluster.install`), 1 replica, its
  ClusterQueue covering cpu, memory and GPUs far above what is created;
- E: the same with 2 more replicas, 3 behind the round-robin proxy (its open connections
  cut, so that the API server's new ones spread over the three);
- F (not in the issue, a measurement): the same 3 replicas, the proxy sending everything to
  the elected one: what the two standing by cost the machine, with nothing forwarded;
- S (not in the issue, a measurement), after draquota is removed: C's allow-all pair whose
  /mutate patches each pod with what D's stamped on one (queue label, charge annotation,
  nodeSelector): the floor of any webhook that stamps pods as the specification says;
- W (not in the issue, a measurement), between D and E: S's pair registered instead of
  draquota, whose replica keeps running and following the cluster (its watches, its Lease,
  its queue) but decides nothing: S to W is what following the cluster costs, W to D what
  deciding and recording does.

draquota's replicas are reached through HAProxy (bench/haproxy.py; `--proxy python`: the
e2e tier's proxy, threads in this process), both from the API server and to it.

Each phase: `--pods` creates of "cpu" pods (10m cpu, 16Mi memory), then as many "gpu" pods
(also a claim from the template), `--bursts` times each, from `--clients` concurrent clients
posting raw HTTPS (httpx, the admin's client certificate, keep-alive). Pods name a scheduler
nobody runs. Before each burst an untimed warm-up of one pod per client; every pod is
force-deleted (grace 0) and the phase waits until no pod, no ResourceClaim and (D, E) no
QuotaLedger record of the queue is left, so each burst starts empty. Quotas are set so that
nothing is denied for quota.

Reported per phase and pod kind: creates/s (created / wall time of the burst), p50/p99
create latency (nearest rank), failed creates by the API server's reason; per create: CPU
ms of the control plane and the webhook processes (/proc), webhook calls and their mean
time as the API server measured them, QuotaLedger requests by verb and code, and each
draquota replica's `draquota_ledger_writes_total` by outcome; the ratios of the issue's
"Done when". Bounded: every wait has a timeout and nothing new starts after `--max-seconds`.
Everything started is stopped, also on error or SIGTERM. Only 127.0.0.1 is loaded.

    .venv/bin/python bench/throughput.py [--pods 400] [--clients 8] [--bursts 1] [--json]
                                         [--phases ABCDE]   # a subset, or also F, S, W
"""

from __future__ import annotations

import argparse
import itertools
import os
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import orjson  # noqa: E402
import yaml  # noqa: E402

from bench.allow_all import KINDS as WEBHOOK_KINDS  # noqa: E402
from bench.allow_all import allow_all_server, stamp_patch  # noqa: E402
from bench.haproxy import HAProxy  # noqa: E402
from bench.live import run_live  # noqa: E402
from bench.throughput_figures import apiserver_counters, replica_counters, report  # noqa: E402

__all__ = ["main", "measure"]

NAME = "bench-throughput"  # namespace, ClusterQueue, node prefix
NOBODY = "bench-throughput-nobody"  # the scheduler the pods name: no one runs it
NODE = f"{NAME}-1"
GPU_CLASS = "gpu.example.com"
DEVICE_QUOTA = f"{GPU_CLASS}.deviceclass.resource.k8s.io/devices"
HUGE = "100000"  # every quota: far above what a run creates
WAIT = 180.0  # seconds: the longest any one wait for the cluster may take


# -- objects ------------------------------------------------------------------------------


def pod(name: str, kind: str) -> dict[str, Any]:
    """A "cpu" pod (10m cpu, 16Mi memory) or a "gpu" pod (also a claim from template gpu)."""
    container: dict[str, Any] = {
        "name": "main",
        "image": "registry.example.com/train:1.0",
        "resources": {"requests": {"cpu": "10m", "memory": "16Mi"}},
    }
    spec: dict[str, Any] = {"schedulerName": NOBODY, "containers": [container]}
    if kind == "gpu":
        spec["resourceClaims"] = [{"name": "gpu", "resourceClaimTemplateName": "gpu"}]
        container["resources"]["claims"] = [{"name": "gpu"}]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": spec}


def resource_quota() -> dict[str, Any]:
    hard = {"pods": HUGE, "cpu": HUGE, "memory": f"{HUGE}Gi", DEVICE_QUOTA: HUGE}
    return {
        "apiVersion": "v1",
        "kind": "ResourceQuota",
        "metadata": {"name": NAME, "namespace": NAME},
        "spec": {"hard": hard},
    }


def draquota_objects(installed: Any) -> list[dict[str, Any]]:
    """The e2e scenario's objects (namespace, flavor, ClusterQueue, LocalQueue, template),
    the queue also covering memory, every quota far above what a run creates."""
    from tests.e2e.objects import Flavor, Scenario

    objects = Scenario(installed, NAME, [Flavor("main", int(HUGE), {NODE: 8}, HUGE)]).objects()
    for obj in objects:
        if obj["kind"] == "ClusterQueue":
            group = obj["spec"]["resourceGroups"][0]
            group["coveredResources"].append("memory")
            group["flavors"][0]["resources"].append({"name": "memory", "nominalQuota": "100Ti"})
    return objects


# -- the API server -----------------------------------------------------------------------


def _create(api: Any, body: bytes) -> tuple[float, str | None, str]:
    """One raw POST: (ms, None) when created, else (ms, reason, message)."""
    started = time.perf_counter()
    try:
        answer = api.http.post(
            f"/api/v1/namespaces/{NAME}/pods",
            content=body,
            headers={"Content-Type": "application/json"},
        )
    except Exception as exc:
        return (time.perf_counter() - started) * 1000, type(exc).__name__, str(exc)[:300]
    ms = (time.perf_counter() - started) * 1000
    if answer.status_code == 201:
        return ms, None, ""
    try:
        status = orjson.loads(answer.content)
    except orjson.JSONDecodeError:
        status = {}
    reason = str(status.get("reason") or f"HTTP {answer.status_code}")
    return ms, reason, str(status.get("message", answer.text))[:300]


def burst(apis: list[Any], kind: str, count: int, prefix: str, until: float) -> dict[str, Any]:
    """`count` creates from len(apis) concurrent clients; stops early at `until`."""
    turn = itertools.count()
    lock = threading.Lock()
    latencies: list[float] = []
    failed: Counter[str] = Counter()
    messages: list[str] = []

    def client(api: Any) -> None:
        while (i := next(turn)) < count and time.monotonic() < until:
            ms, reason, message = _create(api, orjson.dumps(pod(f"{prefix}-{i}", kind)))
            with lock:
                if reason is None:
                    latencies.append(ms)
                else:
                    failed[reason] += 1
                    messages.append(f"{reason}: {message}")

    started = time.perf_counter()
    with ThreadPoolExecutor(len(apis)) as pool:
        list(pool.map(client, apis))
    seconds = time.perf_counter() - started
    return {
        "kind": kind,
        "seconds": seconds,
        "latencies_ms": latencies,
        "failed": dict(failed),
        "messages": sorted(set(messages))[:3],
    }


def clear(api: Any, ledger: bool) -> None:
    """Force-delete every pod (grace 0) and wait until no pod, no ResourceClaim and (with
    `ledger`: draquota installed) no QuotaLedger record of the queue is left, so that the
    next burst pays for no removal of this one's records."""
    base = f"/api/v1/namespaces/{NAME}/pods"
    api.http.request("DELETE", base, params={"gracePeriodSeconds": "0"}, timeout=120)
    claims = f"/apis/resource.k8s.io/v1/namespaces/{NAME}/resourceclaims"
    wait_for(lambda: not api.call("GET", base)["items"], f"no pod left in {NAME}")
    wait_for(lambda: not api.call("GET", claims)["items"], f"no ResourceClaim left in {NAME}")
    if ledger:
        wait_for(lambda: not _records(api), f"no QuotaLedger record of {NAME} left")


def _records(api: Any) -> list[Any]:
    ledgers = api.call("GET", "/apis/draquota.io/v1beta1/quotaledgers")["items"]
    held = [r for x in ledgers for r in x.get("spec", {}).get("reservations") or []]
    return [r for r in held if r.get("clusterQueue") == NAME]


def wait_for(check: Callable[[], Any], what: str) -> None:
    deadline = time.monotonic() + WAIT
    while not check():
        if time.monotonic() > deadline:
            raise TimeoutError(f"not within {WAIT:.0f}s: {what}")
        time.sleep(0.5)


# -- counters -----------------------------------------------------------------------------


def _cpu_seconds(pid: int) -> float:
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class Counters:
    """Everything counted around a burst: CPU of the processes, the API server's and the
    replicas' counters."""

    def __init__(self, cluster: Any, admin: Any) -> None:
        self.admin = admin
        self.pids: dict[str, int] = {}
        for line in (cluster.run_dir / "pids").read_text(encoding="utf-8").splitlines():
            name, _, pid = line.partition(" ")
            self.pids[name] = int(pid)
        self.replicas: list[Any] = []
        self.proxies: dict[str, Any] = {}  # name: an HAProxy, whose pid a restart changes

    def read(self) -> dict[str, float]:
        out = {f"cpu {name}": _cpu_seconds(pid) for name, pid in self.pids.items()}
        for name, proxy in self.proxies.items():
            out[f"cpu {name}"] = _cpu_seconds(proxy.process.pid)
        out.update(apiserver_counters(self.admin.http.get("/metrics", timeout=60).text))
        for replica in self.replicas:
            out[f"cpu draquota-{replica.index}"] = _cpu_seconds(replica.process.pid)
            out.update(replica_counters(replica.get("/metrics").text, replica.index))
        return out


# -- phases -------------------------------------------------------------------------------


def run_phase(
    phase: str, apis: list[Any], counters: Counters, args: argparse.Namespace, until: float
) -> list[dict[str, Any]]:
    runs = []
    for kind, round_ in itertools.product(("cpu", "gpu"), range(args.bursts)):
        if time.monotonic() > until:
            break
        print(f"phase {phase}: {kind} burst {round_ + 1}", file=sys.stderr, flush=True)
        burst(apis, kind, len(apis), f"warm-{phase}-{kind}-{round_}".lower(), until)
        clear(apis[0], bool(counters.replicas))
        if time.monotonic() > until:
            break  # a burst that could not start is no figure
        before = counters.read()
        clients = _cpu_seconds(os.getpid())  # the clients are this process's threads
        run = burst(apis, kind, args.pods, f"{phase}-{kind}-{round_}".lower(), until)
        clients = _cpu_seconds(os.getpid()) - clients
        after = counters.read()
        run["phase"] = phase
        run["counters"] = {
            k: v - before.get(k, 0.0) for k, v in after.items() if v != before.get(k, 0.0)
        }
        run["counters"]["clients cpu"] = clients
        runs.append(run)
        clear(apis[0], bool(counters.replicas))
    return runs


def _quota_counted(api: Any) -> bool:
    quota = api.call("GET", f"/api/v1/namespaces/{NAME}/resourcequotas/{NAME}")
    return DEVICE_QUOTA in (quota.get("status") or {}).get("hard", {})


def _draquota(
    cluster: Any,
    work: Path,
    apis: list[Any],
    counters: Counters,
    args: argparse.Namespace,
    until: float,
    stamps: dict[str, Any],
) -> list[dict[str, Any]]:
    """D with 1 replica, then E with 2 more replicas added behind the proxy, then F with the
    proxy sending everything to the elected one. For S, `stamps` gets what D's /mutate
    stamped on a pod of each kind."""
    from tests.e2e.cluster import Replica, install
    from tests.e2e.objects import Scenario

    installed = install(cluster, work / "draquota", replicas=1)
    try:
        counters.replicas = installed.replicas
        if args.proxy == "haproxy":
            _haproxies(installed, counters, work)
        cluster.apply(yaml.safe_dump_all(draquota_objects(installed)))
        wait_for(Scenario(installed, NAME, []).queue_active, "the ClusterQueue Active")
        runs = run_phase("D", apis, counters, args, until) if "D" in args.phases else []
        if "S" in args.phases or "W" in args.phases:
            stamps.update(_stamps(apis[0]))
        if "W" in args.phases:
            with (
                _unregistered(cluster),
                allow_all_server(cluster, work / "w", counters.pids, stamps),
            ):
                runs += run_phase("W", apis, counters, args, until)
        if "E" not in args.phases and "F" not in args.phases:
            return runs
        first = installed.replicas[0]
        for index in (1, 2):
            added = Replica(
                installed.workdir,
                installed.kubeconfig,
                installed.certs,
                installed.config,
                index,
                first.metrics_token,
            ).start()
            installed.replicas.append(added)
            added.wait_ready()
            installed.proxy.add(added.port)
        # the API server keeps its connections of D, all to the first replica: new ones are
        # spread over the three, as a Service's are
        installed.proxy.drop_connections()
        if "E" in args.phases:
            runs += run_phase("E", apis, counters, args, until)
        if "F" in args.phases:
            elected = installed.elected()
            for replica in installed.replicas:
                if replica is not elected:
                    installed.proxy.remove(replica.port)
            installed.proxy.drop_connections()
            runs += run_phase("F", apis, counters, args, until)
        return runs
    finally:
        installed.stop()
        counters.replicas, counters.proxies = [], {}


def _haproxies(installed: Any, counters: Counters, work: Path) -> None:
    """Both of the install's Python proxies (webhook "Service" and API server) replaced by
    HAProxy on the same ports, so that draquota is reached as the allow-all pair is: by a
    process of its own whose CPU is counted, not by threads in this one's GIL."""
    for attr, name in (("api_proxy", "haproxy-api"), ("proxy", "haproxy-webhook")):
        python_proxy = getattr(installed, attr)
        python_proxy.stop()
        proxy = HAProxy(python_proxy.port, python_proxy.backends, work).start()
        setattr(installed, attr, proxy)
        counters.proxies[name] = proxy
    installed.wait_ready()


def _phases(
    cluster: Any, work: Path, apis: list[Any], args: argparse.Namespace, until: float
) -> list[dict[str, Any]]:
    counters, runs = Counters(cluster, apis[0]), []
    if "A" in args.phases:
        runs += run_phase("A", apis, counters, args, until)
    if "B" in args.phases:
        cluster.apply(yaml.safe_dump(resource_quota()))
        wait_for(lambda: _quota_counted(apis[0]), "the ResourceQuota's status")
        runs += run_phase("B", apis, counters, args, until)
        cluster.kubectl("delete", "resourcequota", NAME, "-n", NAME)
    if "C" in args.phases:
        with allow_all_server(cluster, work, counters.pids):
            runs += run_phase("C", apis, counters, args, until)
    stamps: dict[str, Any] = {}
    if any(phase in args.phases for phase in "DEFSW"):
        runs += _draquota(cluster, work, apis, counters, args, until, stamps)
    if "S" in args.phases:
        with _unregistered(cluster), allow_all_server(cluster, work / "s", counters.pids, stamps):
            runs += run_phase("S", apis, counters, args, until)
    return runs


@contextmanager
def _unregistered(cluster: Any) -> Iterator[None]:
    """draquota's two webhook configurations taken out while inside, put back afterwards."""
    saved = []
    for kind in WEBHOOK_KINDS:
        found = cluster.kubectl("get", kind, "draquota", "-o", "json", check=False)
        if found.returncode == 0:
            config = orjson.loads(found.stdout)
            config["metadata"] = {"name": "draquota", "labels": config["metadata"].get("labels")}
            saved.append(config)
        cluster.kubectl("delete", kind, "draquota", "--ignore-not-found")
    try:
        yield
    finally:
        for config in saved:
            cluster.kubectl("create", "-f", "-", stdin=orjson.dumps(config).decode())


def _stamps(api: Any) -> dict[str, Any]:
    """What draquota's /mutate stamps on a pod of each kind, as a JSON patch (one pod each,
    created, read back and removed)."""
    stamps = {}
    for kind in ("cpu", "gpu"):
        submitted = pod(f"stamp-{kind}", kind)
        _ms, reason, message = _create(api, orjson.dumps(submitted))
        if reason is not None:
            raise RuntimeError(f"the stamp probe's {kind} pod was not created: {message}")
        stored = api.call("GET", f"/api/v1/namespaces/{NAME}/pods/stamp-{kind}")
        stamps[kind] = stamp_patch(submitted, stored)
    clear(api, ledger=True)
    return stamps


def setup(cluster: Any) -> None:
    """The namespace, the DeviceClasses, a node of 8 GPUs and the 1-GPU template."""
    from tests.e2e.objects import POOL_LABEL, SCENARIO_LABEL, Flavor, Scenario

    cluster.apply(ROOT / "manifests" / "examples" / "cluster" / "deviceclasses.yaml")
    cluster.fake_node(NODE, 8, {POOL_LABEL: f"{NAME}-main"})
    plain = Scenario(None, NAME, [Flavor("main", 1, {})]).objects()  # type: ignore[arg-type]
    kept = [o for o in plain if o["kind"] in ("Namespace", "ResourceClaimTemplate")]
    assert kept[0]["metadata"]["labels"] == {SCENARIO_LABEL: NAME}
    cluster.apply(yaml.safe_dump_all(kept))


def measure(args: argparse.Namespace) -> dict[str, Any]:
    from bench.ordinary_ops import Api
    from tests.e2e.cluster import ControlPlane

    started = time.monotonic()
    until = started + args.max_seconds
    load_start = os.getloadavg()
    with tempfile.TemporaryDirectory(
        prefix="draquota-throughput-", ignore_cleanup_errors=True
    ) as tmp:
        work = Path(tmp)
        cluster = ControlPlane(work / "run")
        try:
            cluster.up()
            setup(cluster)
            apis = [Api(cluster.kubeconfig, work) for _ in range(args.clients)]
            try:
                runs = _phases(cluster, work, apis, args, until)
            finally:
                for api in apis:
                    api.close()
        finally:
            cluster.down()
    return {
        "meta": {
            "date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
            "pods": args.pods,
            "clients": args.clients,
            "bursts": args.bursts,
            "cpus": os.cpu_count(),
            "loadavg_start": load_start,
            "loadavg_end": os.getloadavg(),
            "seconds": time.monotonic() - started,
            "truncated": time.monotonic() > until,
        },
        "runs": runs,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pods", type=int, default=400, help="creates per burst")
    parser.add_argument("--clients", type=int, choices=range(1, 65), default=8)
    parser.add_argument(
        "--bursts", type=int, choices=range(1, 11), default=1, help="bursts per phase and pod kind"
    )
    parser.add_argument("--max-seconds", type=float, default=1800.0)
    parser.add_argument(
        "--phases", default="ABCDE", help="which phases to run, in order (default ABCDE)"
    )
    parser.add_argument(
        "--proxy",
        choices=("haproxy", "python"),
        default="haproxy",
        help="what routes to draquota's replicas: HAProxy (default) or the e2e tier's Python proxy",
    )
    parser.add_argument("--json", action="store_true")
    return run_live(parser.parse_args(argv), measure, report)


if __name__ == "__main__":
    sys.exit(main())
