"""`LeaseElector`: one replica at a time runs the queueing controller, by a coordination.k8s.io
Lease, as client-go's leaderelection does it.

A replica leads while it renews the Lease within `duration`. Another replica takes
the Lease over only when it has seen the same record (holder, renewTime,
resourceVersion) unchanged for `duration` on its own monotonic clock, so a replica
whose wall clock is wrong can neither cut a lease short nor keep one alive. Every
write carries the resourceVersion read: of two replicas racing for the Lease, one
gets a 409 and does not lead. A replica stops leading `margin` before its lease
could expire in the eyes of the others, and on a clean stop it clears the holder
so that another takes over at once.
"""

from __future__ import annotations

import datetime as dt
import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from webhook.kube.client import ApiError, KubeClient, TransportError
from webhook.kube.resources import ResourceType

__all__ = ["LEASE", "LeaseElector"]

log = logging.getLogger("draquota.lease")

LEASE = ResourceType("Lease", "coordination.k8s.io", "v1", "leases", True)
_TIMEOUT = (2.0, 5.0)


def _micro_time(seconds: float) -> str:
    return dt.datetime.fromtimestamp(seconds, dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class LeaseElector:
    """Holds or watches Lease `namespace/name` for replica `identity`."""

    def __init__(
        self,
        client: KubeClient,
        namespace: str,
        name: str,
        identity: str,
        duration: float = 15.0,
        renew_every: float = 2.0,
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], float] = time.time,
    ) -> None:
        self.client = client
        self.namespace, self.name, self.identity = namespace, name, identity
        self.duration, self.renew_every = duration, renew_every
        self.margin = min(2.0, duration / 4)
        self.clock, self.wall = clock, wall
        self.transitions = 0  # times this replica took the Lease
        self._renewed: float | None = None  # when this replica last wrote the Lease as holder
        self._observed: tuple[Any, ...] = ()  # the record last seen held by someone else
        self._observed_at = 0.0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def path(self) -> str:
        return LEASE.path(self.namespace, self.name)

    def leading(self) -> bool:
        """This replica holds the Lease now, with time to spare before it could expire."""
        renewed = self._renewed
        return renewed is not None and self.clock() - renewed < self.duration - self.margin

    def try_acquire_or_renew(self) -> bool:
        """One attempt: create, renew or take over the Lease. True when this replica leads."""
        started = self.clock()
        try:
            lease = self.client.request("GET", self.path, timeout=_TIMEOUT)
        except ApiError as exc:
            if exc.code != 404:
                return self._failed(exc)
            return self._write("POST", self._body(None), started)
        except TransportError as exc:
            return self._failed(exc)
        spec = lease.get("spec") or {}
        holder = spec.get("holderIdentity") or ""
        if holder and holder != self.identity and not self._expired(lease, started):
            self._renewed = None
            return False
        return self._write("PUT", self._body(lease), started)

    def _expired(self, lease: dict[str, Any], now: float) -> bool:
        spec = lease.get("spec") or {}
        record = (
            spec.get("holderIdentity"),
            spec.get("renewTime"),
            (lease.get("metadata") or {}).get("resourceVersion"),
        )
        if record != self._observed:
            self._observed, self._observed_at = record, now
            return False
        seconds = spec.get("leaseDurationSeconds")
        duration = seconds if isinstance(seconds, int) and seconds > 0 else self.duration
        return now - self._observed_at > duration

    def _body(self, lease: dict[str, Any] | None) -> dict[str, Any]:
        now = _micro_time(self.wall())
        spec = dict((lease or {}).get("spec") or {})
        if spec.get("holderIdentity") != self.identity:
            spec["acquireTime"] = now
            spec["leaseTransitions"] = int(spec.get("leaseTransitions") or 0) + (lease is not None)
        spec.update(
            holderIdentity=self.identity, leaseDurationSeconds=int(self.duration), renewTime=now
        )
        metadata = dict((lease or {}).get("metadata") or {})
        metadata.update(name=self.name, namespace=self.namespace)
        return {
            "apiVersion": LEASE.api_version,
            "kind": "Lease",
            "metadata": metadata,
            "spec": spec,
        }

    def _write(self, method: str, body: dict[str, Any], started: float) -> bool:
        path = self.path if method == "PUT" else LEASE.path(self.namespace)
        try:
            self.client.request(method, path, body=body, timeout=_TIMEOUT)
        except ApiError as exc:
            if exc.code == 409:  # another replica wrote first
                self._renewed = None
                return False
            return self._failed(exc)
        except TransportError as exc:
            return self._failed(exc)
        if self._renewed is None:
            self.transitions += 1
            log.info("leading: holds Lease %s/%s", self.namespace, self.name)
        self._renewed = started  # counted from before the read: never longer than the others
        return True

    def _failed(self, exc: Exception) -> bool:
        log.warning("Lease %s/%s: %s", self.namespace, self.name, exc)
        return self.leading()  # still leading until the lease could have expired

    def start(self) -> None:
        if self._thread is None:
            self._stop.clear()
            self._thread = threading.Thread(target=self._loop, name="lease", daemon=True)
            self._thread.start()

    def stop(self) -> None:
        """Stop renewing and, when leading, clear the holder so that another takes over now."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(5)
            self._thread = None
        if self.leading():
            self._release()

    def _loop(self) -> None:
        while True:
            self.try_acquire_or_renew()
            if self._stop.wait(self.renew_every):
                return

    def _release(self) -> None:
        self._renewed = None
        try:
            lease = self.client.request("GET", self.path, timeout=_TIMEOUT)
            if (lease.get("spec") or {}).get("holderIdentity") != self.identity:
                return
            lease["spec"] = {**lease["spec"], "holderIdentity": "", "leaseDurationSeconds": 1}
            self.client.request("PUT", self.path, body=lease, timeout=_TIMEOUT)
        except (ApiError, TransportError) as exc:
            log.warning("Lease %s/%s not released: %s", self.namespace, self.name, exc)
