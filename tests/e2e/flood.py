"""One team flooding draquota with decisions that are expensive to make, and another team's
pod creates timed meanwhile (issue 29, item 4): shared by tests/e2e/test_fairness.py and
bench/fairness.py.

The flood is what a namespace admin can do with their own token: loops that each create a
ResourceClaimTemplate of 16 requests whose 4 CEL selectors test `device.driver in [300
literals]`, then a pod claiming from it. A template per pod makes every placement new (none
is answered from a cache), and the pods name a scheduler nobody runs. Every loop is bounded
in pods and in time, and stops by itself.
"""

from __future__ import annotations

import json
import threading
import time
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kubernetes import client as k8s
from kubernetes import config as k8s_config

from tests.e2e.objects import GPU_CLASS, IMAGE, UNSCHEDULED

__all__ = ["Flood", "Outcome", "create_pod", "expensive_template", "plain_pod", "quantile"]

REQUESTS = 16
SELECTORS = 4
LITERALS = 300


def expensive_template(name: str) -> dict[str, Any]:
    """16 requests x 4 selectors `device.driver in [300 literals]`, the last literal the real
    driver: each selector scans the whole list before it matches."""
    drivers = [f"driver-{i}.example.com" for i in range(LITERALS - 1)] + [GPU_CLASS]
    listed = ", ".join(json.dumps(d) for d in drivers)
    selectors = [{"cel": {"expression": f"device.driver in [{listed}]"}}] * SELECTORS
    requests = [
        {"name": f"r{i}", "exactly": {"deviceClassName": GPU_CLASS, "selectors": selectors}}
        for i in range(REQUESTS)
    ]
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": name},
        "spec": {"spec": {"devices": {"requests": requests}}},
    }


def plain_pod(name: str, template: str | None = None) -> dict[str, Any]:
    """A pod of 10m cpu, claiming from `template` if given, for a scheduler nobody runs."""
    container: dict[str, Any] = {
        "name": "main",
        "image": IMAGE,
        "resources": {"requests": {"cpu": "10m"}},
    }
    spec: dict[str, Any] = {"schedulerName": UNSCHEDULED, "containers": [container]}
    if template is not None:
        spec["resourceClaims"] = [{"name": "devices", "resourceClaimTemplateName": template}]
        container["resources"]["claims"] = [{"name": "devices"}]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": spec}


@dataclass(frozen=True)
class Outcome:
    """A create as its user saw it: `Created`, or the reason of the API server's answer."""

    reason: str
    seconds: float
    message: str = ""


def create_pod(api: k8s.CoreV1Api, namespace: str, pod: dict[str, Any]) -> Outcome:
    started = time.perf_counter()
    try:
        api.create_namespaced_pod(namespace, pod, _request_timeout=30)
    except k8s.ApiException as exc:
        body = json.loads(exc.body or "{}") if (exc.body or "").startswith("{") else {}
        reason = str(body.get("reason") or exc.status)
        return Outcome(reason, time.perf_counter() - started, str(body.get("message", ""))[:300])
    return Outcome("Created", time.perf_counter() - started)


def quantile(values: list[float], q: float) -> float:
    """The q-quantile, nearest rank: with 100 values, p99 is the 99th smallest."""
    ordered = sorted(values)
    return ordered[max(0, min(len(ordered) - 1, round(q * len(ordered)) - 1))]


@dataclass
class Flood:
    """`loops` threads of `kubeconfig`'s user in `namespace`, each creating at most `pods`
    template + pod pairs and stopping after `seconds` (or `stop()`)."""

    kubeconfig: Path
    namespace: str
    loops: int = 6
    pods: int = 40
    seconds: float = 60.0
    outcomes: Counter[str] = field(default_factory=Counter)
    _stop: threading.Event = field(default_factory=threading.Event)
    _pool: ThreadPoolExecutor | None = None
    _started: threading.Event = field(default_factory=threading.Event)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _active: int = 0

    def start(self) -> Flood:
        self._pool = ThreadPoolExecutor(self.loops, thread_name_prefix="flood")
        until = time.monotonic() + self.seconds
        self._active = self.loops
        for loop in range(self.loops):
            self._pool.submit(self._loop, loop, until)
        return self

    def wait_started(self, timeout: float = 60.0) -> bool:
        """True once the first flood create has been answered."""
        return self._started.wait(timeout)

    def active(self) -> int:
        """Loops still creating (neither at their bound nor stopped)."""
        with self._lock:
            return self._active

    def stop(self) -> Counter[str]:
        self._stop.set()
        if self._pool is not None:
            self._pool.shutdown(wait=True)
        return self.outcomes

    def _loop(self, loop: int, until: float) -> None:
        client = k8s_config.new_client_from_config(config_file=str(self.kubeconfig))
        core, resource = k8s.CoreV1Api(client), k8s.CustomObjectsApi(client)
        try:
            for i in range(self.pods):
                if self._stop.is_set() or time.monotonic() > until:
                    return
                name = f"flood-{loop}-{i}"
                self._attempt(lambda n=name: self._template(resource, n))
                outcome = create_pod(core, self.namespace, plain_pod(name, name))
                self._count(outcome.reason)
                self._started.set()
        finally:
            client.close()
            with self._lock:
                self._active -= 1

    def _template(self, resource: k8s.CustomObjectsApi, name: str) -> None:
        resource.create_namespaced_custom_object(
            "resource.k8s.io", "v1", self.namespace, "resourceclaimtemplates",
            expensive_template(name), _request_timeout=30,
        )  # fmt: skip

    def _attempt(self, call: Callable[[], object]) -> None:
        try:
            call()
        except k8s.ApiException as exc:
            self._count(f"template {exc.status}")

    def _count(self, reason: str) -> None:
        with self._lock:
            self.outcomes[reason] += 1
