"""Three real `draquota serve --kubeconfig` processes over HTTPS against one fake API server.

The test plays the kube-apiserver: for each pod it calls /mutate, applies the patch,
calls /validate with the mutated pod, and creates the pod only when both allowed it.
A replica that does not answer rejects the pod (failurePolicy: Fail).
"""

from __future__ import annotations

import base64
import os
import re
import signal
import socket
import ssl
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import jsonpatch
import orjson
import pytest

from certs.files import write_material
from certs.rotation import issue
from certs.serving import ServingSpec
from tests.fakeapi import FakeApiServer
from tests.webhook.kube.objects import NAMESPACE, QUEUE, cluster_objects, gpu_pod
from tests.webhook.kube.test_backend import eventually

pytestmark = [pytest.mark.integration, pytest.mark.slow]

QUOTA = 100
PODS = 300
TTL = 4
DEADLINE = 30.0


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


SCRAPER = "scraper-token"  # a token the fake API server's TokenReview accepts


class Replica:
    """One `draquota serve` process on its own port."""

    def __init__(self, tmp: Path, kubeconfig: Path, certs: Path, config: Path, index: int) -> None:
        self.port = _free_port()
        self.url = f"https://127.0.0.1:{self.port}"
        self.args = [
            sys.executable, "-m", "webhook.cli", "serve",
            "--kubeconfig", str(kubeconfig), "--cert-dir", str(certs), "--config", str(config),
            "--host", "127.0.0.1", "--port", str(self.port), "--log-level", "WARNING",
        ]  # fmt: skip
        self.log = tmp / f"replica-{index}.log"
        self.context = ssl.create_default_context(cafile=str(certs / "ca.crt"))
        self.process = self._spawn()
        self.http = httpx.Client(base_url=self.url, verify=self.context, timeout=10)

    def _spawn(self) -> subprocess.Popen[bytes]:
        with self.log.open("ab") as out:
            return subprocess.Popen(
                self.args,
                stdout=out,
                stderr=subprocess.STDOUT,
                env={**os.environ, "PYTHONUNBUFFERED": "1"},
            )

    def wait_ready(self) -> None:
        deadline = time.monotonic() + DEADLINE
        while time.monotonic() < deadline:
            assert self.process.poll() is None, self.log.read_text()
            try:
                if self.http.get("/readyz").status_code == 200:
                    return
            except httpx.TransportError:
                pass
            time.sleep(0.1)
        raise AssertionError(f"replica not ready: {self.log.read_text()[-2000:]}")

    def kill(self) -> None:
        self.process.send_signal(signal.SIGKILL)
        self.process.wait(DEADLINE)

    def restart(self) -> None:
        self.process = self._spawn()

    def stop(self) -> None:
        self.http.close()  # idle keep-alive connections would hold up uvicorn's graceful shutdown
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(DEADLINE)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(DEADLINE)

    def usage(self) -> float:
        # live replicas answer /metrics only to a reader the API server allows (the fixture's)
        text = self.http.get("/metrics", headers={"Authorization": f"Bearer {SCRAPER}"}).text
        labels = f'cluster_queue="{QUEUE}",flavor="default",resource="gpu"'
        pattern = rf"draquota_queue_usage{{{labels}}} (\S+)"
        found = re.search(pattern, text)
        return float(found.group(1)) if found else 0.0


def _review(obj: dict[str, Any]) -> bytes:
    request = {
        "uid": str(uuid.uuid4()),
        "kind": {"group": "", "version": "v1", "kind": "Pod"},
        "resource": {"group": "", "version": "v1", "resource": "pods"},
        "operation": "CREATE",
        "namespace": NAMESPACE,
        "name": obj["metadata"]["name"],
        "userInfo": {"username": "alice"},
        "object": obj,
        "oldObject": None,
        "dryRun": False,
    }
    return orjson.dumps(
        {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request}
    )


def submit(api: FakeApiServer, replica: Replica, index: int) -> str:
    """What the API server does with pod `index`: mutate, validate, persist; the outcome."""
    pod = gpu_pod(f"p{index}")
    try:
        mutated = replica.http.post("/mutate", content=_review(pod)).json()["response"]
        if mutated["allowed"]:
            if mutated.get("patch"):
                ops = orjson.loads(base64.b64decode(mutated["patch"]))
                pod = jsonpatch.apply_patch(pod, ops)
            pod["metadata"]["uid"] = str(uuid.uuid4())  # set by the API server before validation
            validated = replica.http.post("/validate", content=_review(pod)).json()["response"]
        else:
            validated = mutated
    except httpx.TransportError:
        return "unavailable"
    if not validated["allowed"]:
        status = validated["status"]
        assert status["reason"] == "QuotaExceeded", status
        assert f'exceeds quota of ClusterQueue "{QUEUE}"' in status["message"]
        return "denied"
    api.create(pod)
    return "admitted"


def load(
    api: FakeApiServer,
    replicas: Sequence[Replica],
    indexes: range,
    kill_at: int = -1,
    victim: Replica | None = None,
) -> list[str]:
    def one(index: int) -> str:
        if index == kill_at and victim is not None:
            victim.kill()
        return submit(api, replicas[index % len(replicas)], index)

    with ThreadPoolExecutor(max_workers=12) as pool:
        return list(pool.map(one, indexes))


@pytest.fixture
def replicas(api: FakeApiServer, kubeconfig: Path, tmp_path: Path) -> Iterator[list[Replica]]:
    for obj in cluster_objects(QUOTA):
        api.create(obj)
    api.reviews.token(SCRAPER, "system:serviceaccount:monitoring:prometheus")
    api.reviews.allow("system:serviceaccount:monitoring:prometheus", "/metrics")
    certs = tmp_path / "certs"
    write_material(
        certs, issue(ServingSpec(dns_names=("localhost",), ips=("127.0.0.1",)), datetime.now(UTC))
    )
    config = tmp_path / "config.yaml"
    # no nodes or ResourceSlices in this cluster: quota only, placement is not judged; this
    # test is about exactness under contention on a shared machine, not about deadlines
    config.write_text(
        f'reservationTTLSeconds: {TTL}\nplacement: "Off"\nadmissionDeadlineSeconds: 20\n',
        encoding="utf-8",
    )
    running = [Replica(tmp_path, kubeconfig, certs, config, i) for i in range(3)]
    try:
        for replica in running:
            replica.wait_ready()
        yield running
    finally:
        for replica in running:
            replica.stop()


def test_three_serving_replicas_admit_exactly_the_quota(
    api: FakeApiServer, replicas: list[Replica]
) -> None:
    outcomes = load(api, replicas, range(PODS))
    assert (outcomes.count("admitted"), outcomes.count("denied")) == (QUOTA, PODS - QUOTA)
    assert len(api.objects("Pod")) == QUOTA
    eventually(lambda: all(r.usage() == QUOTA for r in replicas), timeout=DEADLINE)


def elected(api: FakeApiServer, replicas: Sequence[Replica]) -> Replica:
    """The replica holding the Lease that elects the one holding quota."""
    [lease] = api.objects("Lease", "draquota-system")
    holder = lease["spec"].get("holderIdentity") or ""
    return next(r for r in replicas if f"-{r.process.pid}-" in holder)


def test_a_forwarding_replica_killed_and_restarted_keeps_usage_exact(
    api: FakeApiServer, replicas: list[Replica]
) -> None:
    """A replica that is not elected dies mid-burst (the elected one dying is
    tests/e2e/test_elected.py): its requests in flight fail, nothing else does."""
    leader = elected(api, replicas)
    victim = next(r for r in reversed(replicas) if r is not leader)
    others = [r for r in replicas if r is not victim]
    first = load(api, replicas, range(PODS // 2), kill_at=PODS // 8, victim=victim)
    assert "unavailable" in first
    admitted = first.count("admitted")
    time.sleep(TTL + 0.5)  # reservations of answers the dead replica never gave expire
    eventually(lambda: all(r.usage() == admitted for r in others), timeout=DEADLINE)
    victim.restart()
    victim.wait_ready()
    # A record whose pod never came, not yet deleted by a reconciler pass, counts on the
    # restarted replica until the TTL runs out on its own clock: never less than the truth
    # (it can only deny more), and exact once that record is gone or expired.
    assert victim.usage() >= admitted
    eventually(lambda: victim.usage() == admitted, timeout=DEADLINE)
    second = load(api, replicas, range(PODS // 2, PODS))
    assert admitted + second.count("admitted") == QUOTA
    assert len(api.objects("Pod")) == QUOTA
    eventually(lambda: all(r.usage() == QUOTA for r in replicas), timeout=DEADLINE)
