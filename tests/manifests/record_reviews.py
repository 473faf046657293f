"""Record the AdmissionReview requests a real API server sends draquota's webhooks.

    .venv/bin/python -m tests.manifests.record_reviews [--out DIR] [--all FILE]

starts the Kubernetes v1.36.2 control plane of ../shared/k8s (`tests.e2e.cluster.ControlPlane`),
serves an allow-all HTTPS webhook on 127.0.0.1 that keeps every `request` it receives, and
registers it as both webhooks of manifests/base/webhooks.yaml: every field as there (`rules`,
`namespaceSelector`, `matchPolicy`, ...) but `clientConfig`, which names the recorder, and
without the matchConditions, so every request the rules select arrives. Then it performs the
ordinary traffic of a cluster: kubectl as the cluster admin, and what the Job, ReplicaSet,
Deployment, StatefulSet, DaemonSet, ResourceClaim and garbage-collector controllers do in reply
(there is no kubelet: a pod is marked Succeeded through pods/status by hand). Each `Want` keeps
one kind of request as tests/manifests/fixtures/admission/NAME.json (`--out` elsewhere; files
of an earlier recording are replaced), and `index.json` says what produced each one and which
webhooks the API server called for it. Requests not kept are summarised on stderr (`--all` saves
them) so that a new kind of traffic is noticed. The control plane is stopped at the end,
whatever happens.

/mutate and /validate each get their own AdmissionReview (own uid; the validating call sees what
storage filled in after mutation: uid, creationTimestamp, a generated name, a bumped generation).
Every request /mutate receives, /validate receives too (its rules are a superset), so the
validating copy is the one kept, whole; the mutating call is recognised by operation, resource,
user and object.
"""

from __future__ import annotations

import argparse
import base64
import copy
import json
import shlex
import signal
import ssl
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import FrameType
from typing import Any

from tests.e2e.cluster import ControlPlane, free_port, missing_reason, run_draquota
from tests.manifests.loader import ROOT, only

FIXTURES = ROOT / "tests" / "manifests" / "fixtures" / "admission"
COMMAND = ".venv/bin/python -m tests.manifests.record_reviews"
WEBHOOKS = {"mutate": "mutate.draquota.io", "validate": "validate.draquota.io"}
NAMESPACE = "team-a"
ADMIN = "kubernetes-admin"  # the user of up.sh's admin.kubeconfig (system:masters)
CONTROLLER = "system:serviceaccount:kube-system:"  # --use-service-account-credentials
QUEUE = "draquota.io/queue-name"
CHARGE = "draquota.io/charge"
GATE = "draquota.io/admission"
IMAGE = "registry.example.com/app:1.0"
IMAGE_2 = "registry.example.com/app:2.0"
GPU_CLASS = "gpu.example.com"
TYPE = {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview"}

Request = dict[str, Any]
Match = Callable[[Request], bool]


# ------------------------------------------------------------------------- the webhook


class Recorder:
    """An HTTPS server on 127.0.0.1 that allows everything and keeps each request it gets."""

    def __init__(self, certs: Path) -> None:
        self.port = free_port()
        self.received: list[tuple[str, Request]] = []  # (mutate|validate, request), in order
        self._lock = threading.Lock()
        keep = self._keep

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                review = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                keep(self.path.split("?")[0].strip("/"), review["request"])
                answer = {"uid": review["request"]["uid"], "allowed": True}
                body = json.dumps({**TYPE, "response": answer}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(certs / "tls.crt", certs / "tls.key")
        self._server = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        self._server.socket = context.wrap_socket(self._server.socket, server_side=True)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def _keep(self, endpoint: str, request: Request) -> None:
        with self._lock:
            self.received.append((endpoint, request))

    def start(self) -> Recorder:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def since(self, start: int) -> list[tuple[int, str, Request]]:
        with self._lock:
            return [(i, *self.received[i]) for i in range(start, len(self.received))]


def configurations(port: int, ca_bundle: str) -> list[dict[str, Any]]:
    """Both webhook configurations of the manifests, calling the recorder, matchConditions off."""
    found = []
    for kind in ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"):
        config = copy.deepcopy(only(kind, "draquota"))
        for hook in config["webhooks"]:
            path = "mutate" if kind.startswith("Mutating") else "validate"
            hook["clientConfig"] = {
                "url": f"https://127.0.0.1:{port}/{path}",
                "caBundle": ca_bundle,
            }
            hook.pop("matchConditions", None)
        found.append(config)
    return found


# ------------------------------------------------------------------------- what to keep


def _get(obj: Any, *path: str) -> Any:
    for key in path:
        obj = obj.get(key) if isinstance(obj, dict) else None
    return obj


def changed(*path: str) -> Match:
    """The object's value at `path` differs from the old object's."""
    return lambda r: _get(r.get("object"), *path) != _get(r.get("oldObject"), *path)


def _meta(request: Request) -> dict[str, Any]:
    return _get(request.get("object") or request.get("oldObject"), "metadata") or {}


def resource_path(request: Request) -> str:
    """`group/version/resource[/subresource]`, the group left out for the core API."""
    parts = [*request["resource"].values(), request.get("subResource")]
    return "/".join(p for p in parts if p)


def signature(endpoint: str, r: Request) -> str:
    name = _meta(r).get("name") or _meta(r).get("generateName")
    dry = " (dry run)" if r.get("dryRun") else ""
    return (
        f"{endpoint} {r['operation']} {resource_path(r)} {name} by {r['userInfo']['username']}{dry}"
    )


@dataclass(frozen=True)
class Want:
    """One fixture: the first request /validate receives during its step that is `what`
    (`OPERATION group/version/resource[/sub] NAME-PREFIX`, as the summary prints them), by a
    user whose name contains `by`, and `where` holds."""

    fixture: str
    what: str
    by: str = ADMIN
    where: Match = field(default=lambda r: True)
    dry_run: bool = False
    about: str = ""  # what produced it; the step's kubectl command when empty

    def match(self, r: Request) -> bool:
        operation, resource, prefix = self.what.split()
        name = _meta(r).get("name") or _meta(r).get("generateName") or ""
        return (
            (r["operation"], resource_path(r)) == (operation, resource)
            and name.startswith(prefix)
            and self.by in r["userInfo"]["username"]
            and bool(r.get("dryRun")) is self.dry_run
            and self.where(r)
        )


def _key(request: Request) -> tuple[Any, ...]:
    """What the mutating and the validating call of one admission have in common (a generated
    name is known only to the validating one)."""
    meta = _meta(request)
    return (
        request["operation"],
        resource_path(request),
        request.get("namespace"),
        request["userInfo"]["username"],
        bool(request.get("dryRun")),
        meta.get("generateName") or meta.get("name"),
        _get(request.get("oldObject"), "metadata", "resourceVersion"),
    )


@dataclass(frozen=True)
class Kept:
    about: str
    request: Request
    received_by: list[str]


class Session:
    def __init__(self, cluster: ControlPlane, recorder: Recorder) -> None:
        self.cluster = cluster
        self.recorder = recorder
        self.kept: dict[str, Kept] = {}
        self.claimed: set[int] = set()  # indexes into recorder.received

    def k(self, command: str, stdin: dict[str, Any] | None = None) -> str:
        """kubectl in the namespace of the traffic, as the cluster admin."""
        text = None if stdin is None else json.dumps(stdin)
        args = ["-n", NAMESPACE, *shlex.split(command)]
        return self.cluster.kubectl(*args, stdin=text).stdout

    def step(
        self,
        command: str,
        *wants: Want,
        stdin: dict[str, Any] | None = None,
        timeout: float = 60.0,
    ) -> None:
        """Run a kubectl command, then wait for the request of each want."""
        start = len(self.recorder.received)
        self.k(command, stdin)
        manifest = f" <<< {stdin['kind']} {stdin['metadata']['name']}" if stdin else ""
        about = f"kubectl {command}{manifest}"
        missing = list(wants)
        deadline = time.monotonic() + timeout
        while missing:
            received = self.recorder.since(start)
            for want in list(missing):
                for index, endpoint, request in received:
                    if endpoint == "validate" and index not in self.claimed and want.match(request):
                        self._keep(want, want.about or about, index, received)
                        missing.remove(want)
                        break
            if missing and time.monotonic() > deadline:
                seen = "\n  ".join(signature(e, r) for _, e, r in received)
                names = ", ".join(w.fixture for w in missing)
                raise RuntimeError(f"no request for {names} within {timeout}s; seen:\n  {seen}")
            time.sleep(0.2)

    def _keep(
        self, want: Want, about: str, index: int, received: list[tuple[int, str, Request]]
    ) -> None:
        assert want.fixture not in self.kept, want
        request = self.recorder.received[index][1]
        self.claimed.add(index)
        by = [WEBHOOKS["validate"]]
        for other, endpoint, candidate in received:
            fresh = other not in self.claimed and other < index
            if endpoint == "mutate" and fresh and _key(candidate) == _key(request):
                self.claimed.add(other)
                by.insert(0, WEBHOOKS["mutate"])
                break
        self.kept[want.fixture] = Kept(about, request, by)

    def unclaimed(self) -> Counter[str]:
        received = self.recorder.since(0)
        return Counter(signature(e, r) for i, e, r in received if i not in self.claimed)

    def wait_for(self, what: str, command: str, timeout: float = 60.0) -> str:
        """Poll `kubectl get COMMAND -o jsonpath=WHAT` until it prints something."""
        deadline = time.monotonic() + timeout
        while not (out := self.k(f"get {command} -o jsonpath={what}").strip()):
            if time.monotonic() > deadline:
                raise RuntimeError(f"kubectl get {command}: nothing at {what}")
            time.sleep(0.3)
        return out


# ------------------------------------------------------------------------- objects


def container(image: str = IMAGE, claims: tuple[str, ...] = ()) -> dict[str, Any]:
    amount = {"cpu": "100m", "memory": "64Mi"}
    resources: dict[str, Any] = {"requests": amount, "limits": amount}
    if claims:
        resources["claims"] = [{"name": c} for c in claims]
    return {"name": "app", "image": image, "resources": resources}


def pod(name: str, labels: dict[str, str] | None = None, **spec: Any) -> dict[str, Any]:
    metadata = {"name": name, "labels": {"app": name, **(labels or {})}}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": metadata,
        "spec": {"containers": [container()], **spec},
    }


def workload(kind: str, name: str, **spec: Any) -> dict[str, Any]:
    """A Job, CronJob or apps/v1 workload whose pods are labelled app=NAME."""
    template: dict[str, Any] = {
        "metadata": {"labels": {"app": name}},
        "spec": {"containers": [container()]},
    }
    if kind in ("Job", "CronJob"):
        template["spec"]["restartPolicy"] = "Never"
    else:
        spec["selector"] = {"matchLabels": {"app": name}}
    if kind == "CronJob":
        spec["jobTemplate"] = {"spec": {"template": template}}
    else:
        spec["template"] = template
    api = "batch/v1" if kind in ("Job", "CronJob") else "apps/v1"
    return {"apiVersion": api, "kind": kind, "metadata": {"name": name}, "spec": spec}


def claim(version: str, name: str) -> dict[str, Any]:
    exactly = {"deviceClassName": GPU_CLASS, "allocationMode": "ExactCount", "count": 1}
    request = (
        {"name": "gpu", **exactly} if version == "v1beta1" else {"name": "gpu", "exactly": exactly}
    )
    return {
        "apiVersion": f"resource.k8s.io/{version}",
        "kind": "ResourceClaim",
        "metadata": {"name": name},
        "spec": {"devices": {"requests": [request]}},
    }


def _patch(body: Any) -> str:
    return shlex.quote(json.dumps(body))


# ------------------------------------------------------------------------- the traffic


def setup(s: Session) -> None:
    """What the traffic needs; none of it is intercepted."""
    s.cluster.fake_node("node-1", gpus=8)
    s.cluster.kubectl("create", "namespace", NAMESPACE)
    device_class = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceClass",
        "metadata": {"name": GPU_CLASS},
        "spec": {"selectors": [{"cel": {"expression": f"device.driver == '{GPU_CLASS}'"}}]},
    }
    s.k("create -f -", device_class)
    template = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": "gpu"},
        "spec": {"spec": claim("v1", "gpu")["spec"]},
    }
    s.k("create -f -", template)
    s.k("create configmap owner")


def webhooks_live(s: Session) -> None:
    """Dry-run creates until one reaches the recorder: the API server has the configurations."""
    deadline = time.monotonic() + 60
    while not s.recorder.received:
        if time.monotonic() > deadline:
            raise RuntimeError("the API server never called the recorder")
        s.k("create -f - --dry-run=server", pod("probe"))
        time.sleep(0.5)
    time.sleep(1)
    s.claimed.update(range(len(s.recorder.received)))


def pods(s: Session) -> None:
    s.step("create -f -", Want("pod-create-plain", "CREATE v1/pods plain"), stdin=pod("plain"))
    with_claim = pod(
        "claimed",
        resourceClaims=[{"name": "gpu", "resourceClaimTemplateName": "gpu"}],
        containers=[container(claims=("gpu",))],
    )
    s.step(
        "create -f -",
        Want("pod-create-with-claim-template", "CREATE v1/pods claimed"),
        Want(
            "resourceclaim-create-by-resourceclaim-controller",
            "CREATE resource.k8s.io/v1/resourceclaims claimed-gpu-",
            by=CONTROLLER,
            about="the resourceclaim controller creates the claim of pod claimed from its template",
        ),
        stdin=with_claim,
    )
    queued = pod("queued", {QUEUE: "gpus"})
    queued["metadata"]["annotations"] = {CHARGE: '{"clusterQueue":"a"}'}
    s.step("create -f -", Want("pod-create-queue-label", "CREATE v1/pods queued"), stdin=queued)
    gated = pod("gated", {QUEUE: "gpus"}, schedulingGates=[{"name": GATE}])
    s.step("create -f -", Want("pod-create-scheduling-gate", "CREATE v1/pods gated"), stdin=gated)
    s.step(
        "create -f - --dry-run=server",
        Want("pod-create-dry-run", "CREATE v1/pods dry", dry_run=True),
        stdin=pod("dry"),
    )

    def update(fixture: str, name: str, *path: str, **kw: Any) -> Want:
        return Want(fixture, f"UPDATE v1/pods {name}", where=changed(*path), **kw)

    image = {"spec": {"containers": [{"name": "app", "image": IMAGE_2}]}}
    owner = s.k("get configmap owner -o jsonpath={.metadata.uid}")
    reference = {"apiVersion": "v1", "kind": "ConfigMap", "name": "owner", "uid": owner}
    resized = {"requests": {"cpu": "200m"}, "limits": {"cpu": "200m"}}
    charge = shlex.quote(json.dumps({"clusterQueue": "b"}))
    for command, want in [
        (
            "label pod plain tier=web",
            update("pod-update-kubectl-label", "plain", "metadata", "labels"),
        ),
        (
            "label pod plain stage=test --dry-run=server",
            update("pod-update-kubectl-label-dry-run", "plain", "metadata", "labels", dry_run=True),
        ),
        (
            "annotate pod plain example.com/note=hello",
            update("pod-update-kubectl-annotate", "plain", "metadata", "annotations"),
        ),
        (
            "patch pod plain --type=merge -p " + _patch({"metadata": {"labels": {"team": "a"}}}),
            update("pod-update-kubectl-patch-merge", "plain", "metadata", "labels"),
        ),
        (
            "patch pod plain --type=json -p "
            + _patch([{"op": "add", "path": "/metadata/annotations/reviewed", "value": "yes"}]),
            update("pod-update-kubectl-patch-json", "plain", "metadata", "annotations"),
        ),
        (
            "patch pod plain -p " + _patch(image),
            update("pod-update-kubectl-patch-strategic", "plain", "spec", "containers"),
        ),
        (
            "patch pod gated --type=json -p "
            + _patch([{"op": "remove", "path": "/spec/schedulingGates"}]),
            update("pod-update-scheduling-gate-removed", "gated", "spec", "schedulingGates"),
        ),
        (
            "patch pod plain --type=merge -p "
            + _patch({"metadata": {"ownerReferences": [reference]}}),
            update("pod-update-owner-reference-added", "plain", "metadata", "ownerReferences"),
        ),
        (
            "patch pod plain --type=json -p "
            + _patch([{"op": "remove", "path": "/metadata/ownerReferences"}]),
            update("pod-update-owner-reference-removed", "plain", "metadata", "ownerReferences"),
        ),
        (
            f"label pod queued {QUEUE}=cpus --overwrite",
            update("pod-update-queue-label-changed", "queued", "metadata", "labels", QUEUE),
        ),
        (
            f"annotate pod queued {CHARGE}={charge} --overwrite",
            update("pod-update-charge-annotation-changed", "queued", "metadata", "annotations"),
        ),
        (
            f"label pod queued {QUEUE}-",
            update("pod-update-queue-label-removed", "queued", "metadata", "labels", QUEUE),
        ),
        (
            "patch pod plain --subresource=resize -p "
            + _patch({"spec": {"containers": [{"name": "app", "resources": resized}]}}),
            Want("pod-resize", "UPDATE v1/pods/resize plain"),
        ),
        (
            "patch pod plain --type=merge -p "
            + _patch({"metadata": {"finalizers": ["example.com/hold"]}}),
            update("pod-update-finalizer-added", "plain", "metadata", "finalizers"),
        ),
    ]:
        s.step(command, want)

    applied = pod("applied")
    s.k("apply -f -", applied)
    applied["metadata"]["labels"]["tier"] = "web"
    s.step(
        "apply -f -",
        update(
            "pod-update-kubectl-apply",
            "applied",
            "metadata",
            "labels",
            about="kubectl apply -f - <<< Pod applied, again with a label added",
        ),
        stdin=applied,
    )
    s.k("delete pod plain --wait=false")
    s.step(
        "patch pod plain --type=json -p "
        + _patch([{"op": "remove", "path": "/metadata/finalizers"}]),
        update(
            "pod-update-finalizer-removed-while-terminating",
            "plain",
            "metadata",
            "finalizers",
            about="kubectl delete pod plain --wait=false, then kubectl patch off its finalizer",
        ),
    )


def jobs(s: Session) -> None:
    by_job_controller = f"{CONTROLLER}job-controller"
    s.step(
        "create -f -",
        Want("job-create", "CREATE batch/v1/jobs train"),
        Want(
            "pod-create-by-job-controller",
            "CREATE v1/pods train-",
            by=by_job_controller,
            about="the Job controller creates a pod of Job train (with its tracking finalizer)",
        ),
        stdin=workload("Job", "train", completions=3, parallelism=1),
    )
    first = s.wait_for("{.items[0].metadata.name}", "pods -l job-name=train")
    # what a kubelet would report; none runs here
    status = {"status": {"phase": "Succeeded"}}
    s.step(
        f"patch pod {first} --subresource=status --type=merge -p {_patch(status)}",
        Want(
            "pod-update-job-controller-removes-finalizer",
            f"UPDATE v1/pods {first}",
            by=by_job_controller,
            where=changed("metadata", "finalizers"),
            about="the Job controller removes batch.kubernetes.io/job-tracking from a pod"
            " marked Succeeded (kubectl patch pod --subresource=status, as a kubelet would)",
        ),
    )
    s.step(
        "patch job train --type=merge -p " + _patch({"spec": {"suspend": True}}),
        Want("job-update-suspend", "UPDATE batch/v1/jobs train"),
        Want(
            "pod-update-job-controller-removes-finalizer-on-suspend",
            "UPDATE v1/pods train-",
            by=by_job_controller,
            where=changed("metadata", "finalizers"),
            about="the Job controller removes batch.kubernetes.io/job-tracking from the running"
            " pod of a suspended Job, which it deletes",
        ),
    )
    s.step(
        "patch job train --type=merge -p " + _patch({"spec": {"suspend": False}}),
        Want("job-update-resume", "UPDATE batch/v1/jobs train"),
    )
    s.step(
        "annotate job train example.com/owner=ml",
        Want("job-update-annotation-only", "UPDATE batch/v1/jobs train"),
    )
    s.step(
        "create -f -",
        Want("cronjob-create", "CREATE batch/v1/cronjobs nightly"),
        stdin=workload("CronJob", "nightly", schedule="0 3 * * *"),
    )
    s.step(
        "patch cronjob nightly --type=merge -p " + _patch({"spec": {"schedule": "0 4 * * *"}}),
        Want("cronjob-update-schedule", "UPDATE batch/v1/cronjobs nightly"),
    )


def apps(s: Session) -> None:
    by_deployment_controller = f"{CONTROLLER}deployment-controller"
    s.step(
        "create -f -",
        Want("deployment-create", "CREATE apps/v1/deployments web"),
        Want(
            "replicaset-create-by-deployment-controller",
            "CREATE apps/v1/replicasets web-",
            by=by_deployment_controller,
            about="the Deployment controller creates the ReplicaSet of Deployment web",
        ),
        Want(
            "pod-create-by-replicaset-controller",
            "CREATE v1/pods web-",
            by=f"{CONTROLLER}replicaset-controller",
            about="the ReplicaSet controller creates a pod of Deployment web",
        ),
        stdin=workload("Deployment", "web", replicas=1),
    )
    s.step(
        "scale deployment web --replicas=2",
        Want(
            "replicaset-update-replicas-by-deployment-controller",
            "UPDATE apps/v1/replicasets web-",
            by=by_deployment_controller,
            where=changed("spec", "replicas"),
            about="kubectl scale deployment web (deployments/scale, not intercepted): the"
            " Deployment controller scales its ReplicaSet",
        ),
    )
    s.step(
        "patch deployment web --type=merge -p " + _patch({"spec": {"replicas": 3}}),
        Want("deployment-update-replicas", "UPDATE apps/v1/deployments web"),
    )
    s.step(
        "patch deployment web --dry-run=server --type=merge -p "
        + _patch({"spec": {"replicas": 1}}),
        Want("deployment-update-replicas-dry-run", "UPDATE apps/v1/deployments web", dry_run=True),
    )
    s.step(
        "annotate deployment web example.com/owner=web-team",
        Want("deployment-update-annotation-only", "UPDATE apps/v1/deployments web"),
        Want(
            "replicaset-update-annotations-by-deployment-controller",
            "UPDATE apps/v1/replicasets web-",
            by=by_deployment_controller,
            where=changed("metadata", "annotations", "example.com/owner"),
            about="the Deployment controller copies a new annotation of Deployment web to its"
            " ReplicaSet",
        ),
    )
    s.step(
        f"label deployment web {QUEUE}=gpus",
        Want("deployment-update-queue-label", "UPDATE apps/v1/deployments web"),
    )
    s.step(
        f"set image deployment/web app={IMAGE_2}",
        Want("deployment-update-image", "UPDATE apps/v1/deployments web"),
    )

    cache = workload("ReplicaSet", "cache", replicas=1)
    s.k("create -f -", cache)
    s.wait_for("{.items[0].metadata.name}", "pods -l app=cache")
    by_collector = f"{CONTROLLER}generic-garbage-collector"
    s.step(
        "delete replicaset cache --cascade=orphan",
        Want(
            "pod-update-garbage-collector-orphans",
            "UPDATE v1/pods cache-",
            by=by_collector,
            about="kubectl delete replicaset cache --cascade=orphan: the garbage collector"
            " removes the ownerReference of its pod",
        ),
        Want(
            "replicaset-update-garbage-collector-removes-orphan-finalizer",
            "UPDATE apps/v1/replicasets cache",
            by=by_collector,
            about="kubectl delete replicaset cache --cascade=orphan: the garbage collector"
            " removes the orphan finalizer once the pods are orphaned",
        ),
    )
    s.step(
        "create -f -",
        Want(
            "pod-update-replicaset-controller-adopts",
            "UPDATE v1/pods cache-",
            by=f"{CONTROLLER}replicaset-controller",
            where=changed("metadata", "ownerReferences"),
            about="kubectl create a ReplicaSet selecting an orphaned pod: the ReplicaSet"
            " controller adopts it",
        ),
        stdin=cache,
    )

    s.step(
        "create -f -",
        Want("statefulset-create", "CREATE apps/v1/statefulsets db"),
        Want(
            "pod-create-by-statefulset-controller",
            "CREATE v1/pods db-",
            by=f"{CONTROLLER}statefulset-controller",
            about="the StatefulSet controller creates a pod of StatefulSet db",
        ),
        stdin=workload("StatefulSet", "db", replicas=1, serviceName="db"),
    )
    s.step(
        "patch statefulset db --type=merge -p " + _patch({"spec": {"replicas": 2}}),
        Want("statefulset-update-replicas", "UPDATE apps/v1/statefulsets db"),
    )
    s.step(
        "create -f -",
        Want("daemonset-create", "CREATE apps/v1/daemonsets agent"),
        Want(
            "pod-create-by-daemonset-controller",
            "CREATE v1/pods agent-",
            by=f"{CONTROLLER}daemon-set-controller",
            about="the DaemonSet controller creates the pod of DaemonSet agent for node-1",
        ),
        stdin=workload("DaemonSet", "agent"),
    )
    s.step(
        f"set image daemonset/agent app={IMAGE_2}",
        Want("daemonset-update-image", "UPDATE apps/v1/daemonsets agent"),
    )


def claims(s: Session) -> None:
    for version in ("v1", "v1beta2", "v1beta1"):
        name = f"gpu-{version}"
        s.step(
            "create -f -",
            Want(
                f"resourceclaim-create-{version}",
                f"CREATE resource.k8s.io/{version}/resourceclaims {name}",
            ),
            stdin=claim(version, name),
        )


# ------------------------------------------------------------------------- the run


def write(session: Session, out: Path, server_version: str) -> None:
    out.mkdir(parents=True, exist_ok=True)
    for stale in out.glob("*.json"):
        stale.unlink()
    fixtures = {}
    for name, kept in session.kept.items():
        text = json.dumps(kept.request, indent=2, ensure_ascii=False)
        (out / f"{name}.json").write_text(text + "\n", encoding="utf-8")
        fixtures[f"{name}.json"] = {"operation": kept.about, "received_by": kept.received_by}
    index = {
        "recorded_with": COMMAND,
        "kubernetes": server_version,
        "namespace": NAMESPACE,
        "about": "Each file is an AdmissionReview request exactly as the API server sent it to"
        " /validate under the rules of manifests/base/webhooks.yaml without matchConditions;"
        " received_by lists the webhooks the API server called for it.",
        "fixtures": fixtures,
    }
    (out / "index.json").write_text(json.dumps(index, indent=2) + "\n", encoding="utf-8")


def record(out: Path, everything: Path | None = None) -> None:
    with tempfile.TemporaryDirectory(prefix="draquota-record-") as work:
        cluster = ControlPlane(Path(work) / "run")
        recorder: Recorder | None = None
        try:
            print("record_reviews: starting the control plane", file=sys.stderr)
            cluster.up()
            certs = Path(work) / "tls"
            run_draquota("certs", "generate", "--out", str(certs), "--ip", "127.0.0.1")
            recorder = Recorder(certs).start()
            session = Session(cluster, recorder)
            setup(session)
            ca = base64.b64encode((certs / "ca.crt").read_bytes()).decode()
            for config in configurations(recorder.port, ca):
                cluster.kubectl("create", "-f", "-", stdin=json.dumps(config))
            webhooks_live(session)
            for traffic in (pods, jobs, apps, claims):
                print(f"record_reviews: {traffic.__name__}", file=sys.stderr)
                traffic(session)
            time.sleep(2)  # late controller requests, for the summary
            version = json.loads(cluster.kubectl("version", "-o", "json").stdout)
            write(session, out, version["serverVersion"]["gitVersion"])
            print(f"record_reviews: {len(session.kept)} fixtures in {out}", file=sys.stderr)
            for line, count in sorted(session.unclaimed().items()):
                print(f"  not kept: {count} x {line}", file=sys.stderr)
            if everything is not None:
                received = [{"endpoint": e, "request": r} for e, r in recorder.received]
                everything.write_text(json.dumps(received, indent=1) + "\n", encoding="utf-8")
        finally:
            if recorder is not None:
                recorder.stop()
            cluster.down()


def _interrupted(signum: int, frame: FrameType | None) -> None:
    raise SystemExit(128 + signum)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--out", type=Path, default=FIXTURES, help="default: %(default)s")
    parser.add_argument("--all", type=Path, metavar="FILE", help="also save every request")
    args = parser.parse_args(argv)
    if reason := missing_reason():
        print(f"record_reviews: {reason}", file=sys.stderr)
        return 1
    signal.signal(signal.SIGTERM, _interrupted)  # so that `finally` stops the control plane
    record(args.out, args.all)
    return 0


if __name__ == "__main__":
    sys.exit(main())
