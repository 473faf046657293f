"""Where the dashboard's page model comes from, and how it stays current.

`choose` asks the API server for one object of every resource `draquota serve` watches, at
cluster scope. When all of them may be listed, `ClusterSource` keeps them current with the
webhook's own machinery: `KubeBackend`'s informers (LIST, then WATCH) fill a
`ClusterState`, and usage is what the webhook's ledger computes from it
(`ClusterLedger.usage()`; its reconciler, which deletes records, is never started, so
nothing is written). The cache keeps pods without their conditions (`webhook.kube.trim`),
so why they wait is read from draquota's `Pending` Events, and which workloads it is
preempting from its `Preempted` Events: a LIST of each per refresh, while anything waits (a
preemptor waits until its victims are gone).

The first 403 picks `NamespaceSource` instead, and the page says which resource was
refused: a namespace user (the built-in `edit` role) may read only their namespace's
LocalQueues, pods, Jobs and Events. Those are LISTed on every refresh (2 s): the informers
list and watch at cluster scope only, which such a user may not, and a handful of LISTs of
one namespace needs no machinery of its own.
"""

from __future__ import annotations

from typing import Any, Protocol

from quota.cluster import ClusterView, Obj
from quota.livepods import job_owner, pod_uid
from quota.objectkeys import namespace_of, namespace_or_default
from quota.queuetable import queue_table
from quota.settings import Settings
from quota.waitreport import PENDING_EVENTS
from webhook.commands._cluster import ClusterUnavailable
from webhook.dashboard.model import (
    PREEMPTED_EVENTS,
    cluster_cards,
    namespace_cards,
    preempted,
    routes,
    waiting,
)
from webhook.kube.client import ApiError, KubeClient, TransportError
from webhook.kube.resources import (
    EVENT,
    JOB,
    LOCAL_QUEUE,
    POD,
    ResourceType,
    discover_dra_version,
    list_objects,
    watched_resources,
)

__all__ = ["ClusterSource", "NamespaceSource", "Source", "choose"]


class Source(Protocol):
    scope: str  # what the page shows and how it is kept current, in one line

    def start(self) -> None: ...

    def stop(self) -> None: ...

    def model(self) -> dict[str, Any]:
        """The page model now; ApiError or TransportError when the cluster cannot be read."""
        ...


def _suspended(job: Obj) -> bool:
    return (job.get("spec") or {}).get("suspend") is True


def _involved(view: ClusterView, events: list[Obj]) -> tuple[list[Obj], list[Obj]]:
    """The pods and Jobs the Events are about, as the view has them now (the same UID), and
    the pods of those Jobs."""
    pods: list[Obj] = []
    jobs: list[Obj] = []
    for event in events:
        involved = event.get("involvedObject") or {}
        kind, namespace = involved.get("kind"), namespace_or_default(involved.get("namespace"))
        if kind not in ("Pod", "Job"):
            continue
        obj = view.get(kind, namespace, str(involved.get("name")))
        if obj is not None and pod_uid(obj) == involved.get("uid"):
            (pods if kind == "Pod" else jobs).append(obj)
    for job in jobs:
        namespace = namespace_of(job)
        pods += [p for p in view.list("Pod", namespace) if job_owner(p) == pod_uid(job)]
    return pods, jobs


class ClusterSource:
    """Every ClusterQueue and everything waiting, from informers (cluster-wide read access)."""

    scope = "Every ClusterQueue, kept current by watches as draquota serve does"

    def __init__(self, client: KubeClient, settings: Settings) -> None:
        from webhook.kube.backend import KubeBackend
        from webhook.ledger.cluster import ClusterLedger
        from webhook.queueing.gatedpods import GatedPods

        self.client, self.settings = client, settings
        self.backend = KubeBackend(client)
        self.ledger = ClusterLedger(client, self.backend, settings)  # read only: never started
        self.gated = GatedPods(self.backend.state)

    def start(self) -> None:
        self.backend.start()

    def stop(self) -> None:
        self.backend.stop()

    def model(self) -> dict[str, Any]:
        ready, why = self.backend.caches_ready()
        if not ready:
            return {"loading": why}
        view = self.backend.state.snapshot()
        table = queue_table(view, self.settings)
        usage = self.ledger.usage()
        local_queues = view.list("LocalQueue")
        pods = self.gated.pods()
        jobs = [job for job in view.list("Job") if _suspended(job)]
        # the cache keeps no pod conditions (webhook.kube.trim): the Events say the same
        # draquota's Events saying why a pod or Job waits (a pod says it in its condition too)
        events: list[Obj] = []
        told: list[Obj] = []
        if pods or jobs:
            events = self._events(PENDING_EVENTS)
            told = self._events(PREEMPTED_EVENTS)
        rows = waiting(pods, jobs, events, routes(local_queues))
        return {
            "scope": self.scope,
            "queues": cluster_cards(table, usage, local_queues, rows),
            "waiting": rows,
            "preempted": preempted(*_involved(view, told), told, routes(local_queues)),
        }

    def _events(self, selector: str) -> list[Obj]:
        return list(list_objects(self.client, EVENT, None, (("fieldSelector", selector),)))


class NamespaceSource:
    """One namespace's LocalQueues (their status carries their ClusterQueue's quota and
    lending), what waits there and what draquota preempts there (its marks on the pods and
    Jobs), LISTed on every refresh (namespace read access)."""

    def __init__(self, client: KubeClient, namespace: str, why: str) -> None:
        self.client, self.namespace = client, namespace
        self.scope = (
            f"Namespace {namespace}: its LocalQueues and what waits there, read every 2 s ({why})"
        )

    def start(self) -> None:
        pass

    def stop(self) -> None:
        pass

    def model(self) -> dict[str, Any]:
        problems = []
        try:
            local_queues = list(list_objects(self.client, LOCAL_QUEUE, self.namespace))
        except ApiError as exc:
            if exc.code != 403:
                raise
            local_queues = []
            problems.append(
                f"cannot list localqueues in namespace {self.namespace} (403 Forbidden): "
                "an admin installs draquota's user roles (manifests/base/user-roles.yaml)"
            )
        pods = list(list_objects(self.client, POD, self.namespace))
        jobs = [job for job in list_objects(self.client, JOB, self.namespace) if _suspended(job)]
        query = (("fieldSelector", f"involvedObject.kind=Job,{PENDING_EVENTS}"),)
        events = list(list_objects(self.client, EVENT, self.namespace, query)) if jobs else []
        return {
            "scope": self.scope,
            "problems": problems,
            "queues": namespace_cards(local_queues),
            "waiting": waiting(pods, jobs, events, routes(local_queues)),
            "preempted": preempted(pods, jobs, (), routes(local_queues)),
        }


def _forbidden(client: KubeClient, resources: tuple[ResourceType, ...]) -> str:
    """Why the cluster-wide view is not allowed ("" when it is): the first resource that may
    not be listed at cluster scope."""
    for resource in resources:
        try:
            client.request("GET", resource.path(), [("limit", 1)])
        except ApiError as exc:
            if exc.code == 403:
                return f"cannot list {resource.plural} at cluster scope: 403 Forbidden"
            raise
    return ""


def choose(client: KubeClient, settings: Settings, namespace: str) -> Source:
    """The cluster-wide source when every watched resource may be listed, else `namespace`'s.
    ClusterUnavailable when the API server cannot be reached or answers another error."""
    server = client.api_client.configuration.host
    try:
        version = discover_dra_version(client)
        if version is None:
            raise ClusterUnavailable(f"{server}: resource.k8s.io is not served (DRA disabled)")
        why = _forbidden(client, watched_resources(version))
    except ApiError as exc:
        raise ClusterUnavailable(f"{server}: {' '.join(str(exc).split())[:300]}") from None
    except TransportError as exc:
        raise ClusterUnavailable(f"{server}: cannot reach the API server: {exc}") from None
    return NamespaceSource(client, namespace, why) if why else ClusterSource(client, settings)
