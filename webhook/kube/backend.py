"""`KubeBackend`: the live cluster view, kept current by one informer per watched resource."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

from quota.errors import DraquotaError
from webhook.edge.runner import offload_if_inline
from webhook.kube.backoff import Backoff
from webhook.kube.client import ApiError, KubeClient, TransportError
from webhook.kube.informer import Informer, InformerOptions
from webhook.kube.resources import DRA_GROUP, ResourceType, discover_dra_version, watched_resources
from webhook.store.clusterstate import ClusterState

__all__ = ["KubeBackend"]

log = logging.getLogger("draquota.kube")
DEFAULT_OPTIONS = InformerOptions()


class KubeBackend:
    """Backend over a live API server.

    `start()` returns at once: discovery of the resource.k8s.io version and the
    informers run in daemon threads. `ready()` is false until discovery succeeded
    and every cache synced, and false again, with the reason, while any cache has
    been disconnected for longer than `max_staleness` seconds.
    """

    blocking_io = True

    def __init__(
        self,
        client: KubeClient,
        options: InformerOptions = DEFAULT_OPTIONS,
        max_staleness: float = 30.0,
        fetch_timeout: float = 1.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.client = client
        self.options = options
        self.max_staleness = max_staleness
        self.fetch_timeout = fetch_timeout
        self.clock = clock
        self.state = ClusterState()
        self.dra_version: str | None = None
        self.informers: list[Informer] = []
        self._discovered = False
        self._discovery_error = "not started"
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._companions: list[Any] = []

    def attach(self, component: Any) -> None:
        """Start and stop `component` (anything with start()/stop(), e.g. the ledger) with this."""
        self._companions.append(component)

    def start(self) -> None:
        self._stop.clear()
        for component in self._companions:
            component.start()
        self._discovery_error = "discovering API versions"
        self._thread = threading.Thread(target=self._discover, name="kube-discovery", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(5)
        with self._lock:
            informers = list(self.informers)
        for informer in informers:
            informer.stop()
        for component in self._companions:
            component.stop()

    def _discover(self) -> None:
        backoff = Backoff(self.options.backoff_initial, self.options.backoff_max)
        while not self._stop.is_set():
            try:
                version = discover_dra_version(self.client)
            except (ApiError, TransportError) as exc:
                self._discovery_error = f"API discovery failed: {exc}"
                self._stop.wait(backoff.next())
                continue
            if version is None:
                self._discovery_error = (
                    f"{DRA_GROUP} is not served in version v1, v1beta2 or v1beta1 "
                    "(is DynamicResourceAllocation enabled?)"
                )
                log.error(self._discovery_error)
                self._discovered = True
                return
            log.info("using %s/%s", DRA_GROUP, version)
            with self._lock:
                if self._stop.is_set():
                    return
                self.informers = [
                    Informer(self.client, resource, self.state, self.options, self.clock)
                    for resource in watched_resources(version)
                ]
                for informer in self.informers:
                    informer.start()
                # Only now: ready() must never see discovery done and no informer to wait for
                # (an empty view admits every pod as not managed).
                self.dra_version = version
                self._discovered = True
            return

    def ready(self) -> tuple[bool, str]:
        """Caches synced and current, and every attached component done warming up (the
        ledger's first load of records and pod usage, which the first admission would
        otherwise pay for)."""
        ready, why = self.caches_ready()
        if not ready:
            return ready, why
        for component in self._companions:
            warming = getattr(component, "warming", None)
            if warming is not None and (why := warming()):
                return False, why
        return True, ""

    def caches_ready(self) -> tuple[bool, str]:
        """Discovery done and every informer synced and not stale."""
        if not self._discovered or self.dra_version is None:
            return False, self._discovery_error
        if not self.informers:
            return False, "caches not started yet"
        for informer in self.informers:
            plural = informer.resource.plural
            if not informer.synced:
                return False, f"cache {plural} not synced yet{_cause(informer.last_error)}"
            stale = informer.stale_for()
            if stale > self.max_staleness:
                return False, (
                    f"cache {plural} stale for {stale:.0f}s (limit {self.max_staleness:g}s)"
                    f"{_cause(informer.last_error)}"
                )
        return True, ""

    def wait_until_ready(self, timeout: float) -> bool:
        """Block until ready() or timeout; for startup and tests."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.ready()[0]:
                return True
            time.sleep(0.02)
        return self.ready()[0]

    def relists(self) -> Mapping[str, int]:
        """LISTs after the first per resource (410 Gone recoveries), for the metrics."""
        return {i.resource.plural: max(0, i.lists - 1) for i in self.informers}

    def resource(self, kind: str) -> ResourceType | None:
        return next((i.resource for i in self.informers if i.resource.kind == kind), None)

    def fetch(self, kind: str, namespace: str | None, name: str) -> Mapping[str, Any] | None:
        """One GET with a short timeout, cached; None when absent or on error (fail closed)."""
        resource = self.resource(kind)
        if resource is None:
            return None
        path = resource.path(namespace if resource.namespaced else None, name)
        offload_if_inline(f"GET {path}")
        timeout = (self.fetch_timeout, self.fetch_timeout)
        try:
            obj = self.client.request("GET", path, timeout=timeout)
        except ApiError as exc:
            if exc.code != 404:
                log.warning("fetch %s failed: %s", path, exc)
            return None
        except TransportError as exc:
            log.warning("fetch %s failed: %s", path, exc)
            return None
        obj.setdefault("kind", resource.kind)
        obj.setdefault("apiVersion", resource.api_version)
        try:
            self.state.upsert(obj)
        except DraquotaError as exc:
            log.warning("fetch %s: invalid object: %s", path, exc)
            return None
        return obj


def _cause(error: str) -> str:
    return f": {error}" if error else ""
