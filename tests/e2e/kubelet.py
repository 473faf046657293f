"""`FakeKubelet`: what the kubelet of every fake node would write, for scenarios that need
pods to run, become Ready, finish and go away (../shared/k8s has no kubelet).

While started, it polls the pods of its namespaces: a bound pod that is still Pending is
marked Running and Ready through `pods/status` (so Deployments and StatefulSets roll
forward), and a bound pod being deleted is removed with grace period 0 once seen (as the
kubelet confirms a deletion when its containers have stopped). `succeed` ends a pod as its
containers exiting 0 would. Pods it is told to `hold` are left alone.
"""

from __future__ import annotations

import datetime as dt
import threading
from collections.abc import Iterable, Sequence
from typing import Any

from kubernetes import client as k8s

__all__ = ["FakeKubelet"]


def _now() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _container_states(pod: k8s.V1Pod, state: dict[str, Any], ready: bool) -> list[dict[str, Any]]:
    return [
        {"name": c.name, "image": c.image, "imageID": "", "ready": ready, "restartCount": 0,
         "started": ready, "state": state}
        for c in pod.spec.containers
    ]  # fmt: skip


def _conditions(ready: bool, reason: str = "") -> list[dict[str, Any]]:
    status = "True" if ready else "False"
    extra = {"reason": reason} if reason else {}
    return [
        {"type": "Initialized", "status": "True", "lastTransitionTime": _now()},
        {"type": "Ready", "status": status, "lastTransitionTime": _now(), **extra},
        {"type": "ContainersReady", "status": status, "lastTransitionTime": _now(), **extra},
    ]


class FakeKubelet:
    """Runs, readies and finishes the bound pods of `namespaces`, every `interval` seconds."""

    def __init__(self, api: k8s.ApiClient, namespaces: Sequence[str], interval: float = 0.2):
        self.core = k8s.CoreV1Api(api)
        self.namespaces = list(namespaces)
        self.interval = interval
        self.hold: set[tuple[str, str]] = set()  # (namespace, name): left as they are
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="fake-kubelet", daemon=True)

    def __enter__(self) -> FakeKubelet:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(10)

    def _loop(self) -> None:
        while not self._stop.wait(self.interval):
            for namespace in self.namespaces:
                try:
                    self.sync(self.core.list_namespaced_pod(namespace).items)
                except k8s.ApiException:
                    continue  # a pod changed under us: the next round sees it as it is now

    def sync(self, pods: Iterable[k8s.V1Pod]) -> None:
        for pod in pods:
            meta = pod.metadata
            if not pod.spec.node_name or (meta.namespace, meta.name) in self.hold:
                continue
            if meta.deletion_timestamp is not None:
                self._finish_deletion(pod)
            elif pod.status.phase == "Pending":
                self._run(pod)

    def _run(self, pod: k8s.V1Pod) -> None:
        state = {"running": {"startedAt": _now()}}
        status = {
            "phase": "Running",
            "startTime": _now(),
            "podIP": "10.0.0.1",
            "conditions": _conditions(ready=True),
            "containerStatuses": _container_states(pod, state, ready=True),
        }
        self._status(pod, status)

    def succeed(self, namespace: str, name: str) -> None:
        """Every container of the pod exited 0: the pod is Succeeded."""
        pod = self.core.read_namespaced_pod(name, namespace)
        state = {"terminated": {"exitCode": 0, "reason": "Completed", "startedAt": _now(),
                                "finishedAt": _now()}}  # fmt: skip
        status = {
            "phase": "Succeeded",
            "conditions": _conditions(ready=False, reason="PodCompleted"),
            "containerStatuses": _container_states(pod, state, ready=False),
        }
        self._status(pod, status)

    def _status(self, pod: k8s.V1Pod, status: dict[str, Any]) -> None:
        meta = pod.metadata
        body = {"metadata": {"resourceVersion": meta.resource_version}, "status": status}
        try:
            self.core.patch_namespaced_pod_status(meta.name, meta.namespace, body)
        except k8s.ApiException as exc:
            if exc.status not in (404, 409):
                raise

    def _finish_deletion(self, pod: k8s.V1Pod) -> None:
        meta = pod.metadata
        options = k8s.V1DeleteOptions(
            grace_period_seconds=0, preconditions=k8s.V1Preconditions(uid=meta.uid)
        )
        try:
            self.core.delete_namespaced_pod(meta.name, meta.namespace, body=options)
        except k8s.ApiException as exc:
            if exc.status not in (404, 409):
                raise
