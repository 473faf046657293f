"""A real Kubernetes control plane with draquota installed, for the e2e tier and its reusers.

`ControlPlane` starts the v1.36.2 control plane of `../shared/k8s` (or $DRAQUOTA_K8S_DIR)
with its `up.sh RUN_DIR` and stops it with `down.sh`. `install()` does what
docs/operations.md tells an admin for a webhook served outside the cluster: render
`manifests/overlays/local` with `kubectl kustomize`, apply it, make certificates with
`draquota certs generate`, publish the CA with `draquota certs inject`, and run
`draquota serve --kubeconfig` as several replicas with the ServiceAccount's token (so the
shipped RBAC is what they get) behind a round-robin TCP proxy on 127.0.0.1, the address
the webhook configurations name. Their /metrics answers only a reader the API server allows:
`install()` binds a ServiceAccount to `draquota-metrics-reader` (manifests/monitoring/) as an
admin binds Prometheus's, and `Replica.get("/metrics")` and `Replica.metric` send its token.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import os
import re
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import yaml

__all__ = [
    "KUBECTL",
    "OVERLAY",
    "REPO",
    "WEBHOOKS",
    "ControlPlane",
    "Draquota",
    "Replica",
    "RoundRobinProxy",
    "eventually",
    "free_port",
    "grant_metrics_reader",
    "install",
    "k8s_dir",
    "missing_reason",
    "run_draquota",
    "running_cluster",
]

REPO = Path(__file__).resolve().parents[2]
OVERLAY = REPO / "manifests" / "overlays" / "local"
OVERLAY_URL = "https://127.0.0.1:8443/"
KUBECTL = os.environ.get("KUBECTL", "kubectl")
ELECTION_LEASE = "draquota-queueing"
NAMESPACE = "draquota-system"
SERVICE_ACCOUNT = "draquota"
METRICS_READER = "metrics-reader"  # a ServiceAccount bound to draquota-metrics-reader
READER_ROLE = REPO / "manifests" / "monitoring" / "metrics-reader.yaml"


# The API server's counters of admission calls that went wrong (not denials: those are
# `error_type="no_error"`).
_ADMISSION_ERROR = re.compile(
    r"(?P<metric>apiserver_admission_match_condition_evaluation_errors_total"
    r"|apiserver_admission_webhook_rejection_count)\{(?P<labels>[^}]*)\} (?P<value>\S+)$"
)
WEBHOOKS = ("mutate.draquota.io", "validate.draquota.io")


def k8s_dir() -> Path:
    """Where the control plane's scripts and binaries are: $DRAQUOTA_K8S_DIR or ../shared/k8s."""
    configured = os.environ.get("DRAQUOTA_K8S_DIR")
    return Path(configured) if configured else REPO.parent / "shared" / "k8s"


def missing_reason() -> str | None:
    """Why the e2e tier cannot run here, or None when it can."""
    where = k8s_dir()
    if not (where / "up.sh").is_file() or not (where / "bin" / "SHA256SUMS").is_file():
        return f"no Kubernetes control plane at {where} (set DRAQUOTA_K8S_DIR)"
    if shutil.which(KUBECTL) is None:
        return f"no {KUBECTL} on PATH"
    return None


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def eventually(check: Callable[[], Any], timeout: float = 30.0, interval: float = 0.2) -> Any:
    """Poll `check` until it returns something truthy; its last value (or exception) fails."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            value = check()
        except AssertionError:
            if time.monotonic() > deadline:
                raise
        else:
            if value:
                return value
            if time.monotonic() > deadline:
                raise AssertionError(f"not true within {timeout}s: {check}")
        time.sleep(interval)


# ------------------------------------------------------------------------- control plane


@dataclass
class ControlPlane:
    """One throwaway control plane in `run_dir` (etcd, apiserver, controller-manager, scheduler)."""

    run_dir: Path
    kubeconfig: Path = field(init=False)
    env: dict[str, str] = field(init=False, default_factory=dict)

    def up(self, timeout: float = 180.0) -> ControlPlane:
        # One unpacked copy of the binaries for every run (up.sh checks it against SHA256SUMS).
        cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "draquota"
        env = {
            **os.environ,
            "K8S_BIN_CACHE": os.environ.get("K8S_BIN_CACHE", str(cache / "k8s-bin")),
            # Nodes are watched from etcd itself, not the API server's watch cache, so a watch
            # resumed from a compacted revision ends in 410 at once (a cache answers 410 only
            # once it has rolled past that revision, which a short test cannot wait for).
            "APISERVER_ARGS": f"--watch-cache-sizes=nodes#0 {os.environ.get('APISERVER_ARGS', '')}",
        }
        result = subprocess.run(
            [str(k8s_dir() / "up.sh"), str(self.run_dir)],
            env=env,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
        if result.returncode != 0:
            raise RuntimeError(f"up.sh failed ({result.returncode}): {result.stderr[-3000:]}")
        self.kubeconfig = Path(result.stdout.split()[-1])
        for line in (self.run_dir / "env").read_text(encoding="utf-8").splitlines():
            key, _, value = line.partition("=")
            self.env[key] = value
        return self

    def down(self) -> None:
        subprocess.run(
            [str(k8s_dir() / "down.sh"), str(self.run_dir)],
            capture_output=True,
            timeout=120,
            check=False,
        )

    @property
    def server(self) -> str:
        return self.env["API_SERVER"]

    def kubectl(
        self,
        *args: str,
        stdin: str | None = None,
        check: bool = True,
        kubeconfig: Path | None = None,
        timeout: float = 60.0,
        env: dict[str, str] | None = None,
    ) -> subprocess.CompletedProcess[str]:
        """kubectl as the cluster admin (or as the user of `kubeconfig`); `env` is added to the
        environment (KUBE_EDITOR for `kubectl edit`)."""
        result = subprocess.run(
            [KUBECTL, "--kubeconfig", str(kubeconfig or self.kubeconfig), *args],
            input=stdin,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
            env={**os.environ, **env} if env else None,
        )
        if check and result.returncode != 0:
            raise AssertionError(f"kubectl {' '.join(args)}: {result.stderr.strip()}")
        return result

    def apply(self, manifests: str | Path, *extra: str) -> None:
        if isinstance(manifests, Path):
            self.kubectl("apply", "-f", str(manifests), *extra)
        else:
            self.kubectl("apply", "-f", "-", *extra, stdin=manifests)

    def fake_node(self, name: str, gpus: int = 0, labels: dict[str, str] | None = None) -> None:
        """A Ready node without a kubelet and, with `gpus`, a ResourceSlice of that many GPUs."""
        env = {**os.environ, "KUBECTL": KUBECTL}
        if labels:
            env["NODE_LABELS"] = ",".join(f"{k}={v}" for k, v in labels.items())
        subprocess.run(
            [str(k8s_dir() / "fake-node.sh"), str(self.run_dir), name, str(gpus)],
            env=env,
            capture_output=True,
            check=True,
            timeout=60,
        )

    def etcd(self, method: str, body: dict[str, Any]) -> dict[str, Any]:
        """One call to etcd's v3 JSON gateway (`kv/range`, `kv/compaction`, ...)."""
        url = f"http://127.0.0.1:{self.env['ETCD_PORT']}/v3/{method}"
        answer = httpx.post(url, json=body, timeout=10)
        answer.raise_for_status()
        return dict(answer.json())

    def compact_etcd(self) -> int:
        """Compact etcd to its current revision: every older resourceVersion is gone (410)."""
        revision = int(self.etcd("kv/range", {"key": "AA=="})["header"]["revision"])
        self.etcd("kv/compaction", {"revision": str(revision), "physical": True})
        return revision

    def admission_errors(self, webhooks: Sequence[str]) -> Counter[str]:
        """The API server's own count of admission calls to `webhooks` that went wrong: a
        matchCondition that failed to evaluate, or a rejection for an error (the webhook
        unreachable, timed out, or answering garbage) rather than the webhook's own denial.
        Keys are the metric's label sets as Prometheus prints them."""
        errors: Counter[str] = Counter()
        for line in self.kubectl("get", "--raw", "/metrics").stdout.splitlines():
            match = _ADMISSION_ERROR.match(line)
            if not match or not any(f'name="{w}"' in match["labels"] for w in webhooks):
                continue
            if 'error_type="no_error"' in match["labels"]:
                continue  # the webhook answered, and denied: that is its job
            errors[f"{match['metric']}{{{match['labels']}}}"] += int(float(match["value"]))
        return errors

    def token(self, service_account: str, namespace: str, hours: int = 12) -> str:
        return self.kubectl(
            "create", "token", service_account, "-n", namespace, f"--duration={hours}h"
        ).stdout.strip()

    def token_kubeconfig(
        self, path: Path, service_account: str, namespace: str, server: str | None = None
    ) -> Path:
        """A kubeconfig that authenticates as the ServiceAccount, like a pod's mounted token."""
        ca = self.run_dir / "pki" / "ca.crt"
        user = f"system:serviceaccount:{namespace}:{service_account}"
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [
                {
                    "name": "local",
                    "cluster": {"server": server or self.server, "certificate-authority": str(ca)},
                }
            ],
            "users": [{"name": user, "user": {"token": self.token(service_account, namespace)}}],
            # the context names the ServiceAccount's namespace, as a namespace user's would
            "contexts": [
                {
                    "name": "local",
                    "context": {"cluster": "local", "user": user, "namespace": namespace},
                }
            ],
            "current-context": "local",
        }
        path.write_text(yaml.safe_dump(config), encoding="utf-8")
        path.chmod(0o600)
        return path


# ------------------------------------------------------------------------- the proxy


class RoundRobinProxy:
    """A TCP proxy on 127.0.0.1 that hands each new connection to the next backend in turn,
    like a Service's endpoints: TLS passes through untouched. A backend that refuses the
    connection is skipped (a killed replica leaves the endpoints), so only connections open
    at the moment of a kill fail."""

    def __init__(self, backends: Sequence[int], port: int | None = None) -> None:
        self.backends = list(backends)  # in rotation; mutate with add()/remove()
        self.port = port or free_port()
        self.connections: dict[int, int] = dict.fromkeys(self.backends, 0)
        self._open: set[asyncio.StreamWriter] = set()
        self.hang = False  # accept connections but never answer: an overloaded or stuck replica
        self._turn = itertools.count()
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="proxy", daemon=True)
        self._server: asyncio.AbstractServer | None = None

    def start(self) -> RoundRobinProxy:
        self._thread.start()
        future = asyncio.run_coroutine_threadsafe(self._listen(), self._loop)
        future.result(10)
        return self

    async def _listen(self) -> None:
        if self._server is None:
            self._server = await asyncio.start_server(self._handle, "127.0.0.1", self.port)

    def _call(self, make: Callable[[], Any]) -> Any:
        return asyncio.run_coroutine_threadsafe(make(), self._loop).result(10)

    def add(self, port: int) -> None:
        """Back in rotation (a replica became ready: the endpoints list it again)."""
        if port not in self.backends:
            self.backends.append(port)

    def remove(self, port: int) -> None:
        """Out of rotation (the endpoints controller dropped a replica that is not ready)."""
        if port in self.backends:
            self.backends.remove(port)

    def listen(self) -> None:
        """Accept connections again after close_listener()."""
        self._call(self._listen)

    def close_listener(self) -> None:
        """Stop accepting: clients get `connection refused`, as from a Service with no
        endpoints. Open connections are dropped too."""

        async def close() -> None:
            if self._server is not None:
                self._server.close()
                self._server = None

        self._call(close)
        self.drop_connections()

    def drop_connections(self) -> None:
        """Cut every open connection (both directions), like a network blip."""

        async def drop() -> None:
            for writer in list(self._open):
                writer.transport.abort()

        self._call(drop)

    def stop(self) -> None:
        async def close() -> None:
            if self._server is not None:
                self._server.close()
            for task in asyncio.all_tasks():
                if task is not asyncio.current_task():
                    task.cancel()

        with contextlib.suppress(Exception):
            asyncio.run_coroutine_threadsafe(close(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
        if not self._thread.is_alive():
            self._loop.close()

    async def _connect(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter] | None:
        start = next(self._turn)
        backends = list(self.backends)
        for attempt in range(len(backends)):
            port = backends[(start + attempt) % len(backends)]
            try:
                streams = await asyncio.open_connection("127.0.0.1", port)
            except OSError:
                continue
            self.connections[port] = self.connections.get(port, 0) + 1
            return streams
        return None

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if self.hang:
            self._open.add(writer)
            with contextlib.suppress(OSError, asyncio.CancelledError):
                while await reader.read(65536):
                    pass
            self._open.discard(writer)
            writer.close()
            return
        upstream = await self._connect()
        if upstream is None:
            writer.close()
            return
        up_reader, up_writer = upstream
        self._open.update((writer, up_writer))

        async def pipe(source: asyncio.StreamReader, sink: asyncio.StreamWriter) -> None:
            try:
                while data := await source.read(65536):
                    sink.write(data)
                    await sink.drain()
            except (OSError, asyncio.CancelledError):
                pass
            finally:
                with contextlib.suppress(Exception):
                    sink.close()

        try:
            await asyncio.gather(pipe(reader, up_writer), pipe(up_reader, writer))
        finally:
            self._open.difference_update((writer, up_writer))


# ------------------------------------------------------------------------- replicas


class Replica:
    """One `draquota serve --kubeconfig` process on its own port; `metrics_token` is what
    `get("/metrics")` sends (a token of a ServiceAccount bound to draquota-metrics-reader)."""

    def __init__(
        self,
        workdir: Path,
        kubeconfig: Path,
        certs: Path,
        config: Path,
        index: int,
        metrics_token: str | None = None,
    ):
        self.index = index
        self.metrics_token = metrics_token
        self.port = free_port()
        self.url = f"https://127.0.0.1:{self.port}"
        self.args = [
            sys.executable, "-m", "webhook.cli", "serve",
            "--kubeconfig", str(kubeconfig), "--cert-dir", str(certs), "--config", str(config),
            "--host", "127.0.0.1", "--port", str(self.port), "--log-level", "WARNING",
            "--watch-interval", "0.5",
        ]  # fmt: skip
        self.log = workdir / f"replica-{index}.log"
        self.certs = certs
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> Replica:
        with self.log.open("ab") as out:
            self.process = subprocess.Popen(
                self.args,
                stdout=out,
                stderr=subprocess.STDOUT,
                cwd=REPO,
                env={**os.environ, "PYTHONUNBUFFERED": "1"},
            )
        return self

    def client(self) -> httpx.Client:
        context = ssl.create_default_context(cafile=str(self.certs / "ca.crt"))
        return httpx.Client(base_url=self.url, verify=context, timeout=10)

    def get(self, path: str, token: str | None = None) -> httpx.Response:
        """GET `path` with `token` as bearer token (for /metrics, the reader's by default)."""
        if token is None and path.startswith("/metrics"):
            token = self.metrics_token
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        with self.client() as http:
            return http.get(path, headers=headers)

    def ready(self) -> bool:
        try:
            return self.get("/readyz").status_code == 200
        except httpx.TransportError:
            return False

    def wait_ready(self, timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            assert self.process is not None and self.process.poll() is None, self.tail()
            if self.ready():
                return
            time.sleep(0.2)
        raise AssertionError(f"replica {self.index} not ready: {self.tail()}")

    def tail(self, chars: int = 3000) -> str:
        return self.log.read_text(encoding="utf-8", errors="replace")[-chars:]

    def kill(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
            self.process.wait(30)

    def stop(self) -> None:
        if self.process is None or self.process.poll() is not None:
            return
        self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(15)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(15)

    def metric(self, name: str, **labels: str) -> float | None:
        text = self.get("/metrics").text
        wanted = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
        for line in text.splitlines():
            match = re.match(rf"{re.escape(name)}{{(.*)}} (\S+)$", line)
            if match and ",".join(sorted(match.group(1).split(","))) == wanted:
                return float(match.group(2))
        return None


# ------------------------------------------------------------------------- install


@dataclass
class Draquota:
    """draquota installed in a control plane: replicas, proxy, certificates, configuration."""

    cluster: ControlPlane
    workdir: Path
    certs: Path
    config: Path
    kubeconfig: Path  # the ServiceAccount's
    proxy: RoundRobinProxy  # the webhook "Service": https://127.0.0.1:PORT in the configurations
    api_proxy: RoundRobinProxy  # between the replicas and the API server, to cut their watches
    replicas: list[Replica]
    manifests: str  # what was applied (the rendered overlay)
    # admission errors the API server counted while a test broke draquota on purpose
    excused: Counter[str] = field(default_factory=Counter)

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.proxy.port}"

    def wait_ready(self, timeout: float = 60.0) -> None:
        for replica in self.replicas:
            replica.wait_ready(timeout)

    def elected(self) -> Replica:
        """The replica holding the Lease that elects the one holding quota and running the
        queue (its identity is `<host>-<pid>-<random>`)."""
        lease = json.loads(
            self.cluster.kubectl(
                "get", "lease", ELECTION_LEASE, "-n", "draquota-system", "-o", "json"
            ).stdout
        )
        holder = lease["spec"].get("holderIdentity") or ""
        for replica in self.replicas:
            if replica.process is not None and f"-{replica.process.pid}-" in holder:
                return replica
        raise AssertionError(f"no running replica holds Lease {ELECTION_LEASE}: {holder!r}")

    def stop(self) -> None:
        for replica in self.replicas:
            replica.stop()
        self.proxy.stop()
        self.api_proxy.stop()

    def kill(self, replica: Replica) -> None:
        """SIGKILL one replica; it leaves the rotation as its endpoint would."""
        replica.kill()
        self.proxy.remove(replica.port)

    def restart(self, replica: Replica, timeout: float = 60.0) -> None:
        """Start it again on its port; back in rotation once /readyz answers 200."""
        replica.start()
        replica.wait_ready(timeout)
        self.proxy.add(replica.port)

    @contextlib.contextmanager
    def disrupted(self) -> Iterator[None]:
        """A test breaks the webhook on purpose (stops, hangs or kills replicas): the admission
        errors the API server counts meanwhile are excused from the tier's final check."""
        before = self.cluster.admission_errors(WEBHOOKS)
        try:
            yield
        finally:
            self.excused.update(self.cluster.admission_errors(WEBHOOKS) - before)

    def unexcused_admission_errors(self) -> dict[str, int]:
        """Admission errors the API server counted outside `disrupted()` windows."""
        return dict(self.cluster.admission_errors(WEBHOOKS) - self.excused)

    def stop_serving(self) -> None:
        """The webhook is down: no replica runs and nothing listens on its address."""
        self.proxy.close_listener()
        for replica in self.replicas:
            replica.stop()
            self.proxy.remove(replica.port)

    def start_serving(self, timeout: float = 60.0) -> None:
        for replica in self.replicas:
            if replica.process is None or replica.process.poll() is not None:
                replica.start()
        for replica in self.replicas:
            replica.wait_ready(timeout)
            self.proxy.add(replica.port)
        self.proxy.listen()


def run_draquota(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(
        [sys.executable, "-m", "webhook.cli", *args],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=60,
        check=False,
    )
    if check and result.returncode != 0:
        raise AssertionError(f"draquota {' '.join(args)}: {result.stderr.strip()}")
    return result


def render_overlay(cluster: ControlPlane, port: int) -> str:
    """`kubectl kustomize manifests/overlays/local`, with the webhook URL on `port`."""
    rendered = cluster.kubectl("kustomize", str(OVERLAY)).stdout
    assert OVERLAY_URL in rendered, "the local overlay no longer names https://127.0.0.1:8443/"
    return rendered.replace(OVERLAY_URL, f"https://127.0.0.1:{port}/")


def _config_from(manifests: str) -> str:
    for doc in yaml.safe_load_all(manifests):
        if doc and doc.get("kind") == "ConfigMap" and doc["metadata"]["name"] == "draquota-config":
            return str(doc["data"]["config.yaml"])
    raise AssertionError("the overlay renders no ConfigMap draquota-config")


def grant_metrics_reader(cluster: ControlPlane) -> str:
    """A token of a ServiceAccount bound to draquota-metrics-reader, as docs/operations.md
    says to bind Prometheus's (the role from manifests/monitoring/, not its example binding)."""
    role = next(
        doc
        for doc in yaml.safe_load_all(READER_ROLE.read_text(encoding="utf-8"))
        if doc and doc["kind"] == "ClusterRole"
    )
    cluster.kubectl("apply", "-f", "-", stdin=yaml.safe_dump(role))
    cluster.kubectl("create", "serviceaccount", METRICS_READER, "-n", NAMESPACE)
    cluster.kubectl(
        "create", "clusterrolebinding", f"draquota-metrics-reader-{METRICS_READER}",
        "--clusterrole=draquota-metrics-reader", f"--serviceaccount={NAMESPACE}:{METRICS_READER}",
    )  # fmt: skip
    return cluster.token(METRICS_READER, NAMESPACE)


def install(cluster: ControlPlane, workdir: Path, replicas: int = 3) -> Draquota:
    """Install draquota as docs/operations.md says, serving from `replicas` local processes."""
    workdir.mkdir(parents=True, exist_ok=True)
    proxy_port = free_port()
    manifests = render_overlay(cluster, proxy_port)
    # CRDs first and established, then the rest (a custom resource in the same apply would race).
    cluster.kubectl("apply", "-f", "-", stdin=manifests)
    cluster.kubectl(
        "wait", "--for=condition=Established", "--timeout=60s", "crd", "-l",
        "app.kubernetes.io/part-of=draquota",
    )  # fmt: skip
    certs = workdir / "tls"
    run_draquota("certs", "generate", "--out", str(certs), "--ip", "127.0.0.1")
    run_draquota(
        "certs", "inject", "--ca-file", str(certs / "ca.crt"),
        "--kubeconfig", str(cluster.kubeconfig),
    )  # fmt: skip
    config = workdir / "config.yaml"
    config.write_text(_config_from(manifests), encoding="utf-8")
    api_proxy = RoundRobinProxy([int(cluster.env["API_PORT"])]).start()
    kubeconfig = cluster.token_kubeconfig(
        workdir / "sa.kubeconfig", SERVICE_ACCOUNT, NAMESPACE, f"https://127.0.0.1:{api_proxy.port}"
    )
    reader = grant_metrics_reader(cluster)
    running = [
        Replica(workdir, kubeconfig, certs, config, i, reader).start() for i in range(replicas)
    ]
    proxy = RoundRobinProxy([r.port for r in running], proxy_port).start()
    installed = Draquota(
        cluster, workdir, certs, config, kubeconfig, proxy, api_proxy, running, manifests
    )
    try:
        installed.wait_ready()
    except BaseException:
        installed.stop()
        raise
    return installed


@contextlib.contextmanager
def running_cluster(base: Path, replicas: int = 3) -> Iterator[Draquota]:
    """A control plane under `base` with draquota installed; everything stopped afterwards."""
    base.mkdir(parents=True, exist_ok=True)
    cluster = ControlPlane(base / "run")
    try:
        cluster.up()
        installed = install(cluster, base / "draquota", replicas)
        try:
            yield installed
        finally:
            installed.stop()
    finally:
        cluster.down()
