"""Ordinary traffic with draquota installed: the latency its webhooks add to everyday operations.

Starts the real v1.36.2 control plane and installs draquota as the e2e tier does
(`tests.e2e.cluster.running_cluster`: the local overlay applied, certificates, `--replicas`
`draquota serve` processes behind a proxy on 127.0.0.1), makes a namespace draquota manages
(ClusterQueue, LocalQueue `default`, a flavor with one fake node of 8 GPUs) and one it does
not, then times each operation below through the API server (httpx with the admin
kubeconfig, keep-alive connections; no kubectl in the timed path):

- on a pod in each namespace: label, annotate, and a merge, JSON and strategic patch;
- a Deployment's `spec.replicas` patched (and through its `/scale` subresource, as
  `kubectl scale` does); a Deployment with its ReplicaSet and pod deleted with propagation
  Background, Foreground and Orphan, until the Deployment is gone (a watch sees DELETED);
- pod create: a plain pod and a pod with a claim from a 1-GPU ResourceClaimTemplate;
- a Job of two pods: the second pod marked Succeeded through `pods/status` (the first one
  before the clock starts), until the Job controller removed the finalizers and the Job has
  its `Complete` condition;
- an eviction through `pods/eviction`.

Each operation runs in two phases of the same run: with draquota's
MutatingWebhookConfiguration and ValidatingWebhookConfiguration installed, and with both
removed (saved with `kubectl get -o yaml`, deleted, created again). The replicas keep
running in both. The phases alternate `--rounds` times (with, without, with, without, ...)
so drift of the machine's load falls on both; a phase starts once a dry-run probe shows the
API server calls (or no longer calls) both webhooks, and with one untimed pass of every
operation. Reported per operation: the median with and without, the added median and the
ratio, and every failure, with its message. Pods name a scheduler nobody runs (no kubelet
here: they would never run anyway), so the scheduler adds no load of its own.

Bounded: `--repeat` samples per operation and phase kind, every wait has a timeout, an
operation that failed 3 times in a row is left out of the rest of its phase, and no new
pass starts after `--max-seconds`. Everything started is stopped, also on error or SIGTERM.

    .venv/bin/python bench/ordinary_ops.py [--replicas 1] [--repeat 30] [--rounds 2] [--json]
"""

from __future__ import annotations

import argparse
import os
import ssl
import statistics
import subprocess
import sys
import tempfile
import time
from base64 import b64decode
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from functools import partial
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import httpx  # noqa: E402
import orjson  # noqa: E402
import yaml  # noqa: E402

from bench.live import run_live  # noqa: E402
from quota.charge import CHARGE_ANNOTATION, QUEUE_LABEL  # noqa: E402

__all__ = ["Row", "main", "measure", "report", "summarize", "table"]

WITH, WITHOUT = "with", "without"
NAME = "ordinary-ops"  # the managed namespace, its ClusterQueue and node prefix
FREE = "ordinary-ops-free"  # a namespace no ClusterQueue selects
NOBODY = "ordinary-ops-nobody"  # the scheduler the pods name: no one runs it
IMAGE = "registry.example.com/train"
DEADLINE = 10**6  # activeDeadlineSeconds may only go down: patches count down from here
WEBHOOK_KINDS = ("mutatingwebhookconfiguration", "validatingwebhookconfiguration")
PATCH_TYPES = {
    "merge": "application/merge-patch+json",
    "json": "application/json-patch+json",
    "strategic": "application/strategic-merge-patch+json",
}
TRAFFIC = {  # counters of the API server's /metrics, by a shorter name
    "apiserver_admission_webhook_request_total": "calls",
    "apiserver_admission_match_condition_exclusions_total": "excluded",
    "apiserver_admission_match_condition_evaluation_errors_total": "condition errors",
}
WAIT = 60.0  # seconds: the longest any one step may wait for the cluster
GIVE_UP = 3  # failures in a row after which an operation is left out of the rest of a phase


# -- figures (pure) ----------------------------------------------------------------------


@dataclass(frozen=True)
class Row:
    """One operation's medians (ms) with and without draquota's webhooks, and its failures."""

    operation: str
    with_ms: float | None
    without_ms: float | None
    samples: tuple[int, int]  # successful samples with, without
    failed: tuple[int, int]  # failures with, without
    failure: str = ""  # the first failure's message (with draquota first)

    @property
    def added_ms(self) -> float | None:
        if self.with_ms is None or self.without_ms is None:
            return None
        return self.with_ms - self.without_ms

    @property
    def ratio(self) -> float | None:
        if self.with_ms is None or not self.without_ms:
            return None
        return self.with_ms / self.without_ms


def summarize(
    operations: Sequence[str],
    samples: Mapping[str, Mapping[str, Sequence[float]]],
    failures: Mapping[str, Mapping[str, Sequence[str]]],
) -> list[Row]:
    """Rows in the order of `operations`; `samples[op][phase]` are ms, `failures[op][phase]`
    messages, phase `with` or `without`."""
    rows = []
    for op in operations:
        got = samples.get(op, {})
        bad = failures.get(op, {})
        medians = [statistics.median(got[p]) if got.get(p) else None for p in (WITH, WITHOUT)]
        messages = [*bad.get(WITH, ()), *bad.get(WITHOUT, ())]
        rows.append(
            Row(
                op,
                medians[0],
                medians[1],
                (len(got.get(WITH, ())), len(got.get(WITHOUT, ()))),
                (len(bad.get(WITH, ())), len(bad.get(WITHOUT, ()))),
                messages[0] if messages else "",
            )
        )
    return rows


def _ms(value: float | None, signed: bool = False) -> str:
    if value is None:
        return "n/a"
    return f"{value:+.1f}" if signed else f"{value:.1f}"


def table(rows: Sequence[Row]) -> str:
    """A Markdown table: medians with / without, added median, ratio, failures."""
    lines = [
        "| operation | with ms | without ms | added ms | ratio | n | failed (with / without) |",
        "|---|---:|---:|---:|---:|---|---|",
    ]
    for r in rows:
        ratio = "n/a" if r.ratio is None else f"{r.ratio:.2f}"
        failed = "" if r.failed == (0, 0) else f"**{r.failed[0]} / {r.failed[1]}**"
        lines.append(
            f"| {r.operation} | {_ms(r.with_ms)} | {_ms(r.without_ms)} "
            f"| {_ms(r.added_ms, signed=True)} | {ratio} | {r.samples[0]} / {r.samples[1]} "
            f"| {failed} |"
        )
    notes = [f"- {r.operation}: {r.failure}" for r in rows if r.failure]
    if notes:
        lines += ["", "Failures (first message of each operation):", *notes]
    return "\n".join(lines)


def report(result: Mapping[str, Any]) -> str:
    meta = result["meta"]
    load, measuring, end = (
        " ".join(f"{x:.2f}" for x in meta[key])
        for key in ("loadavg_start", "loadavg_measure", "loadavg_end")
    )
    head = [
        f"{meta['date']}  replicas {meta['replicas']}, {meta['repeat']} samples per operation "
        f"and phase kind over {meta['rounds']} rounds ({' '.join(meta['phases'])}), "
        f"{meta['seconds']:.0f} s",
        f"load average before the cluster started {load}, when measuring started {measuring}, "
        f"at the end {end}; {meta['cpus']} CPUs",
    ]
    head.append(f"source: {meta['source']}")
    if meta.get("truncated"):
        head.append(f"stopped early: --max-seconds {meta['max_seconds']} reached")
    head += [f"gave up: {line}" for line in meta.get("given_up", [])]
    rows = [Row(**{**r, "samples": tuple(r["samples"]), "failed": tuple(r["failed"])})
            for r in result["rows"]]  # fmt: skip
    traffic = [f"  {value:6.0f}  {key}" for key, value in result["traffic"].items()]
    tail = ["", "The API server's draquota webhook counters, measured passes with draquota:"]
    return "\n".join([*head, "", table(rows), *tail, *(traffic or ["  (none)"])])


# -- the API server, through httpx ----------------------------------------------------------


def one_line(message: str, head: int = 120, tail: int = 160) -> str:
    """A message on one line, its middle elided when long: a denial by a matchCondition
    quotes the whole expression before the error it ends with."""
    text = " ".join(message.split())
    return text if len(text) <= head + tail + 5 else f"{text[:head]} ... {text[-tail:]}"


class ApiError(Exception):
    def __init__(self, method: str, path: str, status: int, message: str) -> None:
        super().__init__(f"{method} {path}: {status}: {message}")
        self.status = status
        self.message = message


class Api:
    """The API server as the admin user of a kubeconfig (client certificate), one client."""

    def __init__(self, kubeconfig: Path, workdir: Path) -> None:
        config = yaml.safe_load(kubeconfig.read_text(encoding="utf-8"))
        cluster = config["clusters"][0]["cluster"]
        user = config["users"][0]["user"]
        files = {}
        for key in ("certificate-authority-data", "client-certificate-data", "client-key-data"):
            source = cluster if key.startswith("certificate-authority") else user
            path = workdir / f"admin-{key}.pem"
            path.write_bytes(b64decode(source[key]))
            path.chmod(0o600)
            files[key] = str(path)
        context = ssl.create_default_context(cafile=files["certificate-authority-data"])
        context.load_cert_chain(files["client-certificate-data"], files["client-key-data"])
        self.http = httpx.Client(base_url=cluster["server"], verify=context, timeout=30)

    def close(self) -> None:
        self.http.close()

    def call(
        self,
        method: str,
        path: str,
        body: Any = None,
        params: Mapping[str, str] | None = None,
        patch: str | None = None,
    ) -> Any:
        headers = {"Content-Type": PATCH_TYPES[patch] if patch else "application/json"}
        content = None if body is None else orjson.dumps(body)
        answer = self.http.request(method, path, content=content, params=params, headers=headers)
        if answer.status_code >= 400:
            try:
                message = answer.json().get("message", answer.text)
            except ValueError:
                message = answer.text
            raise ApiError(method, path, answer.status_code, one_line(message))
        return answer.json() if answer.content else None

    def items(self, path: str, selector: str) -> list[dict[str, Any]]:
        return list(self.call("GET", path, params={"labelSelector": selector})["items"])

    def gone(self, path: str) -> bool:
        try:
            self.call("GET", path)
        except ApiError as error:
            if error.status == 404:
                return True
            raise
        return False

    @contextmanager
    def watch(self, path: str, name: str) -> Iterator[Iterator[dict[str, Any]]]:
        """Events of one object, once the watch is live (its first event, the object as it
        is now, has been read); the server ends the watch after WAIT seconds."""
        params = {
            "watch": "true",
            "fieldSelector": f"metadata.name={name}",
            "timeoutSeconds": str(int(WAIT)),
        }
        timeout = httpx.Timeout(10, read=WAIT + 10)
        with self.http.stream("GET", path, params=params, timeout=timeout) as answer:
            if answer.status_code >= 400:
                raise ApiError("WATCH", path, answer.status_code, answer.read().decode()[:500])
            events = (orjson.loads(line) for line in answer.iter_lines() if line)
            next(events)
            yield events


def until_event(
    events: Iterator[dict[str, Any]], wanted: Callable[[dict[str, Any]], bool], what: str
) -> float:
    """perf_counter() when the first wanted event is read."""
    for event in events:
        if event.get("type") == "ERROR":
            raise ApiError("WATCH", what, 0, one_line(str(event.get("object"))))
        if wanted(event):
            return time.perf_counter()
    raise TimeoutError(f"not within {WAIT:.0f}s: {what}")


def until(
    check: Callable[[], Any], what: str, timeout: float = WAIT, interval: float = 0.05
) -> Any:
    deadline = time.monotonic() + timeout
    while not (value := check()):
        if time.monotonic() > deadline:
            raise TimeoutError(f"not within {timeout:.0f}s: {what}")
        time.sleep(interval)
    return value


def timed(action: Callable[[], Any]) -> float:
    start = time.perf_counter()
    action()
    return (time.perf_counter() - start) * 1000


def webhook_traffic(api: Api) -> dict[str, float]:
    """The API server's counters of draquota's webhooks: calls by operation, type and
    rejection, requests its matchConditions excluded, and matchCondition errors."""
    counters = {}
    for line in api.http.get("/metrics").text.splitlines():
        name, _, rest = line.partition("{")
        if name in TRAFFIC and "draquota.io" in rest:
            labels, _, value = rest.rpartition("} ")
            counters[f"{TRAFFIC[name]}{{{labels}}}"] = float(value)
    return counters


def _delta(before: Mapping[str, float], after: Mapping[str, float]) -> dict[str, float]:
    return {k: v - before.get(k, 0.0) for k, v in after.items() if v != before.get(k, 0.0)}


# -- objects ------------------------------------------------------------------------------


def pods(ns: str) -> str:
    return f"/api/v1/namespaces/{ns}/pods"


def deployments(ns: str) -> str:
    return f"/apis/apps/v1/namespaces/{ns}/deployments"


def jobs(ns: str) -> str:
    return f"/apis/batch/v1/namespaces/{ns}/jobs"


def pod_spec(gpus: int) -> dict[str, Any]:
    claims = [{"name": f"gpu-{i}", "resourceClaimTemplateName": "gpu"} for i in range(gpus)]
    container: dict[str, Any] = {
        "name": "main",
        "image": f"{IMAGE}:1.0",
        "resources": {"requests": {"cpu": "10m"}},
    }
    if claims:
        container["resources"]["claims"] = [{"name": c["name"]} for c in claims]
    spec: dict[str, Any] = {"schedulerName": NOBODY, "containers": [container]}
    if claims:
        spec["resourceClaims"] = claims
    return spec


def pod(name: str, gpus: int = 0) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": pod_spec(gpus)}


def deployment(name: str, replicas: int) -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": name}},
            "template": {"metadata": {"labels": {"app": name}}, "spec": pod_spec(1)},
        },
    }


def job(name: str, pods_: int) -> dict[str, Any]:
    spec = {**pod_spec(1), "restartPolicy": "Never"}
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name},
        "spec": {
            "parallelism": pods_,
            "completions": pods_,
            "template": {"metadata": {"labels": {"app": name}}, "spec": spec},
        },
    }


def unmanaged_namespace() -> list[dict[str, Any]]:
    template = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": "gpu", "namespace": FREE},
        "spec": {
            "spec": {
                "devices": {
                    "requests": [{"name": "gpu", "exactly": {"deviceClassName": "gpu.example.com"}}]
                }
            }
        },
    }
    return [{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": FREE}}, template]


def _complete(event: dict[str, Any]) -> bool:
    conditions = event["object"].get("status", {}).get("conditions") or []
    return any(c["type"] == "Complete" and c["status"] == "True" for c in conditions)


# -- the webhook configurations ---------------------------------------------------------------


class Webhooks:
    """draquota's two webhook configurations, saved as `kubectl get -o yaml` shows them, so
    they can be deleted and created again (caBundle included)."""

    def __init__(self, installed: Any, api: Api) -> None:
        self.cluster = installed.cluster
        self.api = api
        self.saved = []
        for kind in WEBHOOK_KINDS:
            obj = yaml.safe_load(self.cluster.kubectl("get", kind, "draquota", "-o", "yaml").stdout)
            meta = obj["metadata"]
            keep = ("name", "labels", "annotations")
            obj["metadata"] = {k: meta[k] for k in keep if k in meta}
            self.saved.append(obj)
        self.installed = True

    def remove(self) -> None:
        for kind in WEBHOOK_KINDS:
            self.cluster.kubectl("delete", kind, "draquota")
        self.installed = False
        until(lambda: self.active() == (False, False), "webhooks no longer called", 30, 0.2)

    def restore(self) -> None:
        self.cluster.kubectl("create", "-f", "-", stdin=yaml.safe_dump_all(self.saved))
        self.installed = True
        until(lambda: self.active() == (True, True), "both webhooks called", 30, 0.2)

    def active(self) -> tuple[bool, bool]:
        """Whether the API server calls the mutating and the validating webhook now, by dry
        run: a new pod gets draquota's charge annotation; a change of an admitted pod's queue
        label is denied (only the validating webhook sees pod updates)."""
        created = self.api.call("POST", pods(NAME), pod("probe"), params={"dryRun": "All"})
        mutating = CHARGE_ANNOTATION in (created["metadata"].get("annotations") or {})
        relabel = {"metadata": {"labels": {QUEUE_LABEL: "ordinary-ops-elsewhere"}}}
        try:
            path = f"{pods(NAME)}/managed"
            self.api.call("PATCH", path, relabel, params={"dryRun": "All"}, patch="merge")
        except ApiError as error:
            if "denied the request" not in error.message:
                raise
            return mutating, True
        return mutating, False


# -- the operations -----------------------------------------------------------------------


@dataclass
class Bench:
    api: Api
    count: int = 0  # every object made gets a new name; patches count down from DEADLINE
    operations: dict[str, Callable[[], float]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        ops = self.operations
        for where, ns in (("managed", NAME), ("unmanaged", FREE)):
            for verb in ("label", "annotate", "patch (merge)", "patch (JSON)", "patch (strategic)"):
                ops[f"pod {verb}, {where}"] = self._pod_patch(ns, verb)
        ops["Deployment spec.replicas patch"] = lambda: self._scale(f"{deployments(NAME)}/web")
        ops["Deployment /scale patch"] = lambda: self._scale(f"{deployments(NAME)}/web/scale")
        for propagation in ("Background", "Foreground", "Orphan"):
            ops[f"Deployment delete, {propagation}"] = self._delete(propagation)
        ops["pod create, plain"] = lambda: self._create(0)
        ops["pod create, 1-GPU claim template"] = lambda: self._create(1)
        ops["Job: last pod Succeeded → Complete"] = self._job
        ops["pod eviction"] = self._evict

    def next(self) -> int:
        self.count += 1
        return self.count

    def set_up(self, installed: Any) -> None:
        from tests.e2e.objects import Flavor, scenario

        scenario(installed, NAME, Flavor("main", 1000, {f"{NAME}-1": 8}))
        installed.cluster.apply(yaml.safe_dump_all(unmanaged_namespace()))
        for ns, name in ((NAME, "managed"), (FREE, "unmanaged")):
            until(partial(self._service_account, ns), f"{ns}/default ServiceAccount", 30, 0.2)
            created = self.api.call("POST", pods(ns), pod(name, 1))
            charged = CHARGE_ANNOTATION in (created["metadata"].get("annotations") or {})
            if charged != (ns == NAME):
                raise RuntimeError(f"pod {ns}/{name}: charged {charged}, expected {ns == NAME}")
        self.api.call("POST", deployments(NAME), deployment("web", 1))

    def _service_account(self, ns: str) -> bool:
        return not self.api.gone(f"/api/v1/namespaces/{ns}/serviceaccounts/default")

    def _pod_patch(self, ns: str, verb: str) -> Callable[[], float]:
        path = f"{pods(ns)}/{'managed' if ns == NAME else 'unmanaged'}"

        def run() -> float:
            i = self.next()
            body: Any
            if verb == "label":
                kind, body = "merge", {"metadata": {"labels": {"ordinary-ops/label": f"v{i}"}}}
            elif verb == "annotate":
                kind, body = "merge", {"metadata": {"annotations": {"ordinary-ops/note": f"{i}"}}}
            elif verb == "patch (merge)":
                kind, body = "merge", {"spec": {"activeDeadlineSeconds": DEADLINE - i}}
            elif verb == "patch (JSON)":
                image = f"{IMAGE}:1.{i}"
                kind, body = (
                    "json",
                    [{"op": "replace", "path": "/spec/containers/0/image", "value": image}],
                )
            else:  # `kubectl set image`
                image = f"{IMAGE}:1.{i}"
                kind, body = (
                    "strategic",
                    {"spec": {"containers": [{"name": "main", "image": image}]}},
                )
            return timed(lambda: self.api.call("PATCH", path, body, patch=kind))

        return run

    def _scale(self, path: str) -> float:
        replicas = 1 + self.next() % 2
        return timed(
            lambda: self.api.call("PATCH", path, {"spec": {"replicas": replicas}}, patch="merge")
        )

    def _delete(self, propagation: str) -> Callable[[], float]:
        def run() -> float:
            name = f"del-{propagation.lower()}-{self.next()}"
            selector = f"app={name}"
            self.api.call("POST", deployments(NAME), deployment(name, 1))
            # the dependents exist before the delete: its ReplicaSet and its pod
            until(lambda: self.api.items(pods(NAME), selector), f"a pod of deployment {name}")
            with self.api.watch(deployments(NAME), name) as events:
                start = time.perf_counter()
                body = {"propagationPolicy": propagation}
                self.api.call("DELETE", f"{deployments(NAME)}/{name}", body)
                end = until_event(
                    events, lambda e: e["type"] == "DELETED", f"deployment {name} DELETED"
                )
            replicasets = f"/apis/apps/v1/namespaces/{NAME}/replicasets"
            if propagation == "Orphan":
                self.api.call(
                    "DELETE", replicasets, {"propagationPolicy": "Background"},
                    params={"labelSelector": selector},
                )  # fmt: skip
            # the next operation starts on a clean namespace, its garbage collected
            until(lambda: not self.api.items(pods(NAME), selector), f"pods of {name} gone")
            return (end - start) * 1000

        return run

    def _create(self, gpus: int) -> float:
        name = f"create-{gpus}-{self.next()}"
        ms = timed(lambda: self.api.call("POST", pods(NAME), pod(name, gpus)))
        self.api.call("DELETE", f"{pods(NAME)}/{name}", {"gracePeriodSeconds": 0})
        return ms

    def _job(self) -> float:
        name = f"job-{self.next()}"
        self.api.call("POST", jobs(NAME), job(name, 2))
        try:

            def tracked() -> list[dict[str, Any]]:
                found = self.api.items(pods(NAME), f"app={name}")
                tracking = "batch.kubernetes.io/job-tracking"
                ready = len(found) == 2 and all(
                    tracking in (p["metadata"].get("finalizers") or []) for p in found
                )
                return found if ready else []

            found = until(tracked, f"job {name}: 2 pods with the job-tracking finalizer")
            first, last = (p["metadata"]["name"] for p in found)
            self._succeed(first)
            until(
                lambda: self.api.call("GET", f"{jobs(NAME)}/{name}")["status"].get("succeeded"),
                f"job {name}: its first pod counted in status.succeeded",
            )
            with self.api.watch(jobs(NAME), name) as events:
                start = time.perf_counter()
                self._succeed(last)
                end = until_event(events, _complete, f"job {name} Complete")
            return (end - start) * 1000
        finally:
            self.api.call("DELETE", f"{jobs(NAME)}/{name}", {"propagationPolicy": "Background"})

    def _succeed(self, name: str) -> None:
        status = {"status": {"phase": "Succeeded"}}
        self.api.call("PATCH", f"{pods(NAME)}/{name}/status", status, patch="merge")

    def _evict(self) -> float:
        name = f"evict-{self.next()}"
        self.api.call("POST", pods(NAME), pod(name))
        eviction = {
            "apiVersion": "policy/v1",
            "kind": "Eviction",
            "metadata": {"name": name, "namespace": NAME},
        }
        ms = timed(lambda: self.api.call("POST", f"{pods(NAME)}/{name}/eviction", eviction))
        until(lambda: self.api.gone(f"{pods(NAME)}/{name}"), f"evicted pod {name} gone", 30)
        return ms


# -- the run ------------------------------------------------------------------------------


@dataclass
class Record:
    """What the measured passes gave: samples and failures per operation and phase, and the
    webhook traffic the API server counted during the passes with draquota installed."""

    samples: dict[str, dict[str, list[float]]] = field(default_factory=dict)
    failures: dict[str, dict[str, list[str]]] = field(default_factory=dict)
    traffic: dict[str, float] = field(default_factory=dict)
    given_up: list[str] = field(default_factory=list)

    def one_pass(self, bench: Bench, phase: str, counted: bool, failing: dict[str, int]) -> None:
        """Every operation once; `failing` counts each one's failures in a row in this phase,
        and one that failed GIVE_UP times in a row is not run again in the phase (each
        failure may have waited WAIT seconds)."""
        for op, run in bench.operations.items():
            if failing.get(op, 0) >= GIVE_UP:
                continue
            try:
                ms = run()
            except (ApiError, TimeoutError, httpx.HTTPError) as error:
                failing[op] = failing.get(op, 0) + 1
                if counted:
                    self.failures.setdefault(op, {}).setdefault(phase, []).append(str(error))
                if failing[op] == GIVE_UP:
                    self.given_up.append(f"{op}: {GIVE_UP} failures in a row {phase} draquota")
                continue
            failing[op] = 0
            if counted:
                self.samples.setdefault(op, {}).setdefault(phase, []).append(ms)


def measure(args: argparse.Namespace) -> dict[str, Any]:
    from tests.e2e.cluster import running_cluster

    started = time.monotonic()
    loadavg_start = os.getloadavg()
    phases = [WITH, WITHOUT] * args.rounds
    per_phase = -(-args.repeat // args.rounds)
    record = Record()
    truncated = False
    with (
        tempfile.TemporaryDirectory(prefix="draquota-ordinary-", ignore_cleanup_errors=True) as tmp,
        running_cluster(Path(tmp), args.replicas) as installed,
    ):
        api = Api(installed.cluster.kubeconfig, Path(tmp))
        try:
            bench = Bench(api)
            bench.set_up(installed)
            webhooks = Webhooks(installed, api)
            loadavg_measure = os.getloadavg()
            for number, phase in enumerate(phases, 1):
                if phase == WITH and not webhooks.installed:
                    webhooks.restore()
                elif phase == WITHOUT and webhooks.installed:
                    webhooks.remove()
                print(
                    f"phase {number}/{len(phases)}: {phase} draquota", file=sys.stderr, flush=True
                )
                failing: dict[str, int] = {}
                record.one_pass(bench, phase, False, failing)  # warm-up
                before = webhook_traffic(api)
                for _ in range(per_phase):
                    if time.monotonic() - started > args.max_seconds:
                        truncated = True
                        break
                    record.one_pass(bench, phase, True, failing)
                if phase == WITH:
                    for key, value in _delta(before, webhook_traffic(api)).items():
                        record.traffic[key] = record.traffic.get(key, 0.0) + value
            operations = list(bench.operations)
        finally:
            api.close()
    rows = summarize(operations, record.samples, record.failures)
    return {
        "meta": {
            "date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
            "replicas": args.replicas,
            "repeat": per_phase * args.rounds,
            "rounds": args.rounds,
            "phases": phases,
            "seconds": time.monotonic() - started,
            "loadavg_start": loadavg_start,
            "loadavg_measure": loadavg_measure,
            "loadavg_end": os.getloadavg(),
            "cpus": os.cpu_count(),
            "truncated": truncated,
            "max_seconds": args.max_seconds,
            "given_up": record.given_up,
            "source": _source(),
        },
        "rows": [
            {
                "operation": r.operation,
                "with_ms": r.with_ms,
                "without_ms": r.without_ms,
                "samples": list(r.samples),
                "failed": list(r.failed),
                "failure": r.failure,
            }
            for r in rows
        ],
        "traffic": dict(sorted(record.traffic.items())),
        "samples": record.samples,
        "failures": record.failures,
    }


def _source() -> str:
    """The commit measured, and whether the manifests differed from it (they are installed
    from the working tree)."""
    git = ["git", "-C", str(ROOT)]
    head = subprocess.run([*git, "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    dirty = subprocess.run(
        [*git, "status", "--porcelain", "manifests"], capture_output=True, text=True
    )
    changed = " (manifests/ changed in the working tree)" if dirty.stdout.strip() else ""
    return f"{head.stdout.strip() or 'unknown commit'}{changed}"


def _bounded(low: int, high: int) -> Callable[[str], int]:
    def parse(text: str) -> int:
        value = int(text)
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(f"must be between {low} and {high}")
        return value

    return parse


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--replicas", type=_bounded(1, 5), default=1)
    parser.add_argument(
        "--repeat", type=_bounded(2, 200), default=30, help="samples per operation and phase kind"
    )
    parser.add_argument("--rounds", type=_bounded(1, 10), default=2, help="with/without pairs")
    parser.add_argument("--max-seconds", type=float, default=1800.0)
    parser.add_argument("--json", action="store_true")
    return run_live(parser.parse_args(argv), measure, report)


if __name__ == "__main__":
    sys.exit(main())
