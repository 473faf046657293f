"""The wiring of one `draquota serve` replica, in one place.

Which cluster view, ledger and placer the webhook decides with, and the components that
run beside them. `serve` builds one `Wiring` and hands it to the app; the app's lifespan
starts `backend`, which starts the components in the order `InOrder` lists them and
stops them in reverse: the queueing controller stops before the ledger it admits
through, the ledger writes what it admitted, and the Lease is released once nothing can
admit any more.

The Lease elects the replica that admits: the only one that decides admissions that hold
quota (`webhook.ledger.cluster`) and the one that runs the queue. The others forward such
requests to it at the address it advertises on the Lease (`webhook.edge.forwarding`).
"""

from __future__ import annotations

import os
import socket
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from quota.placement import make_placer
from quota.settings import Settings
from webhook.admission.placementcache import CachedPlacer
from webhook.edge.metrics import Metrics
from webhook.kube.metricsauth import Verdict
from webhook.ledger import Ledger
from webhook.ledger.memory import MemoryLedger
from webhook.queueing.preempting import Evictor
from webhook.store.backend import Backend
from webhook.store.statedir import StateDirBackend

if TYPE_CHECKING:
    from webhook.kube.evictor import KubeEvictor
    from webhook.kube.lease import LeaseElector

__all__ = ["LEASE_NAME", "LEASE_NAMESPACE", "InOrder", "Wiring", "embedded", "live"]

LEASE_NAMESPACE = "draquota-system"
LEASE_NAME = "draquota-queueing"


class Component(Protocol):
    def start(self) -> None: ...

    def stop(self) -> None: ...


class InOrder:
    """Components started in the order given and stopped in reverse; warming while any of
    them is (the backend is not ready until the ledger and the placement index are warm)."""

    def __init__(self, *components: Component) -> None:
        self.components = components

    def warming(self) -> str:
        """Why a component is not ready yet ("" once none is warming)."""
        for component in self.components:
            warming = getattr(component, "warming", None)
            if warming is not None and (why := warming()):
                return str(why)
        return ""

    def start(self) -> None:
        for component in self.components:
            component.start()

    def stop(self) -> None:
        for component in reversed(self.components):
            component.stop()


@dataclass(frozen=True)
class Wiring:
    """What the app decides with; `metrics_auth` (None: /metrics is open) who may scrape;
    `evictor` (None: no preemption at admission) what evicts for Reject-mode reclaim;
    `elector` (None: this replica admits everything itself) which replica admits."""

    backend: Backend
    ledger: Ledger
    placer: CachedPlacer
    metrics_auth: Callable[[str | None], Verdict] | None = None
    evictor: Evictor | None = None
    elector: LeaseElector | None = None


def cached_placer(backend: Backend) -> CachedPlacer:
    return CachedPlacer(make_placer(backend.state), backend.state)


def embedded(backend: StateDirBackend, settings: Settings) -> Wiring:
    """`--state DIR`: the directory's view, an in-memory ledger, nothing else running."""
    return Wiring(backend, MemoryLedger(backend.state, settings), cached_placer(backend))


def live(
    kubeconfig: Path | None,
    in_cluster: bool,
    settings: Settings,
    metrics: Metrics,
    *,
    metrics_auth: bool = True,
    address: str = "",
) -> Wiring | str:
    """A live cluster: informers, the QuotaLedger, queue status, the placement index warmed
    before ready, and the Lease-elected admitting replica and queueing controller; with
    `metrics_auth`, /metrics for whom the API server allows (TokenReview +
    SubjectAccessReview); `address` where the other replicas reach this one when it is
    elected. A string says why not.
    """
    try:
        from certs.kube import api_client
        from webhook.kube.backend import KubeBackend
        from webhook.kube.client import KubeClient
        from webhook.kube.evictor import KubeEvictor
        from webhook.kube.lease import LeaseElector
        from webhook.kube.metricsauth import MetricsAuth
        from webhook.kube.queuestatus import QueueStatusWriter
        from webhook.kube.warmup import WarmUp
        from webhook.ledger.cluster import ClusterLedger
    except ImportError as exc:
        return f"the live-cluster backend is not available in this build: {exc}"
    try:
        client = KubeClient(api_client(kubeconfig, in_cluster))
    except Exception as exc:  # the kubernetes client's config errors have no common base
        where = "in-cluster config" if in_cluster else f"kubeconfig {kubeconfig}"
        return f"cannot build a Kubernetes client from the {where}: {exc}"
    backend = KubeBackend(client)
    namespace = os.environ.get("POD_NAMESPACE") or LEASE_NAMESPACE
    identity = f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    elector = LeaseElector(client, namespace, LEASE_NAME, identity, address=address)
    ledger = ClusterLedger(client, backend, settings, elector=elector)
    placer = cached_placer(backend)
    evictor = KubeEvictor(client)  # it writes waiting pods, and evicts for preemption
    index = getattr(placer.placer, "index", None)
    backend.attach(
        InOrder(
            elector,  # released last: after the ledger has written what it admitted
            ledger,
            QueueStatusWriter(client, backend, ledger, settings, leading=elector.leading),
            WarmUp(
                "placement-warm-up",
                backend,
                index if index is not None else lambda: None,
                "building the placement index",
                ready_on_failure=True,  # the first admission builds it then
            ),
            _queueing(backend, ledger, settings, placer, metrics, evictor, elector),
        )
    )
    auth = MetricsAuth(client).check if metrics_auth else None
    return Wiring(backend, ledger, placer, auth, evictor, elector)


def _queueing(
    backend: Backend,
    ledger: Ledger,
    settings: Settings,
    placer: CachedPlacer,
    metrics: Metrics,
    writer: KubeEvictor,
    elector: LeaseElector,
) -> Component:
    """The queueing controller, run by the elected replica; `writer` writes waiting pods
    and evicts for preemption."""
    from webhook.queueing.controller import QueueController

    return QueueController(
        backend,
        ledger,
        settings,
        placer,
        writer,
        leading=elector.leading,
        metrics=metrics,
        evictor=writer,
    )
