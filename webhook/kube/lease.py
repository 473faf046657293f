"""`LeaseElector`: one replica at a time leads, elected with a coordination.k8s.io/v1 Lease.

Follows client-go's `tools/leaderelection` over its `LeaseLock`:
- the holder renews `spec.renewTime` every `renew_every` seconds with a PUT that carries
  the resourceVersion it read, so of two writers of one version only one succeeds (409);
- another replica takes the lease over only once it has seen the SAME record (holder,
  renewTime, resourceVersion) unchanged for the lease duration on its OWN monotonic
  clock. Nobody compares a renewTime written by one machine with the wall clock of
  another, so wall-clock skew between replicas cannot shorten a lease; only a
  difference in clock *rate* could, and the safety margin below covers a small one;
- the holder counts itself leader only until the start of its last successful write
  plus the duration, minus a margin. Every taker's observation of that write began
  after the write did, so a holder cut off from the API server stops leading before
  anyone can take over;
- an empty holderIdentity means released: anyone takes it at once (`stop()` does that).

`leading()` is the guard for work that must not run twice; the `on_change` hook is only
told at the next attempt, so it must not be what protects that work. `term()` says since
when this replica leads and whether it took the lease from a holder that stopped renewing
(whose work in flight may still land) or from nobody (a released lease, or a new one).
The holder advertises `address` on the Lease (`ADDRESS_ANNOTATION`), where the other
replicas reach it (`holder_address()`). `identity` must be
unique per process (pod name plus a random suffix): two processes sharing one would both
count themselves holder.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from certs.periodic import Periodic
from webhook.kube.client import ApiError, KubeClient, TransportError

__all__ = ["ADDRESS_ANNOTATION", "LeaseElector", "Term", "micro_time"]

log = logging.getLogger("draquota.lease")

Obj = dict[str, Any]
# (holderIdentity, renewTime, resourceVersion): a change in any of them is a sign of life
Record = tuple[str, str, str]

API_VERSION = "coordination.k8s.io/v1"
REQUEST_TIMEOUT = 2.0
MARGIN = 0.1  # of the duration: the holder stops leading this much before a taker may take
ADDRESS_ANNOTATION = "draquota.io/holder-address"


@dataclass(frozen=True)
class Term:
    """This replica's current leadership: `start` on its monotonic clock, and `taken_over`
    when the lease was taken from another holder that had stopped renewing it."""

    start: float
    taken_over: bool


def micro_time(seconds: float) -> str:
    """RFC 3339 with microseconds in UTC, the MicroTime format of Lease times."""
    return datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class LeaseElector:
    """Acquires and renews one Lease; `start()` runs the attempts in a daemon thread."""

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
        on_change: Callable[[bool], object] | None = None,
        address: str = "",
    ) -> None:
        if not identity:
            raise ValueError("lease identity must not be empty: empty means released")
        if not 0 < renew_every < duration * (1 - MARGIN):
            raise ValueError(
                f"lease {namespace}/{name}: renew_every {renew_every} must be positive and "
                f"below the duration {duration} less its margin"
            )
        self.client = client
        self.namespace, self.name, self.identity = namespace, name, identity
        self.path = f"/apis/{API_VERSION}/namespaces/{namespace}/leases/{name}"
        self.duration = duration
        self.margin = duration * MARGIN
        self.clock, self.wall = clock, wall
        self.on_change = on_change
        self.address = address
        self.transitions = 0  # times this replica started or stopped leading
        self._lock = threading.Lock()  # one attempt (or the release) at a time
        self._until = -math.inf  # leading while clock() < _until; read without the lock
        self._was_leading = False  # what on_change was last told
        self._lease: Obj | None = None  # the Lease as last read or written
        self._observed: Record | None = None
        self._observed_at = 0.0  # clock() when _observed was first seen
        self._term: Term | None = None  # set when this replica starts leading
        self._loop = Periodic(f"lease-{name}", renew_every, self.try_acquire_or_renew)

    # -- state ---------------------------------------------------------------------------

    def leading(self) -> bool:
        """True while this replica holds the lease by its own clock (never past expiry)."""
        return self.clock() < self._until

    def holder(self) -> str:
        """The holderIdentity last observed ("" when none or not read yet)."""
        return self._observed[0] if self._observed else ""

    def observed(self) -> bool:
        """Whether an attempt has read or written the Lease (so `holder()` means something)."""
        return self._lease is not None

    def holder_address(self) -> str:
        """The address the holder last observed advertises ("" when none)."""
        if not self.holder() or self._lease is None:
            return ""
        annotations = (self._lease.get("metadata") or {}).get("annotations") or {}
        return str(annotations.get(ADDRESS_ANNOTATION) or "")

    def term(self) -> Term | None:
        """This replica's leadership while it leads, None otherwise."""
        return self._term if self.leading() else None

    # -- loop ----------------------------------------------------------------------------

    def start(self) -> None:
        """Attempt at once (not an interval later: a replica starting knows the holder, or
        becomes it, as soon as it can), then every `renew_every` seconds."""
        threading.Thread(target=self.try_acquire_or_renew, name="lease-first", daemon=True).start()
        self._loop.start()

    def stop(self) -> None:
        """Stop the attempts and, if this replica holds the lease, release it so another
        replica takes over at its next attempt instead of a full duration later."""
        self._loop.stop()
        with self._lock:
            self._until = -math.inf  # stop leading before the lease is handed on
            if self._lease is not None and self.holder() == self.identity:
                self._release(self._lease)
            self._report()

    def try_acquire_or_renew(self) -> bool:
        """One attempt; whether this replica leads after it. API errors are logged and
        leave `leading()` to run out at the expiry of the last successful write."""
        with self._lock:
            try:
                self._attempt()
            except (ApiError, TransportError) as exc:
                log.warning("lease %s/%s: %s", self.namespace, self.name, exc)
            self._report()
            return self.leading()

    # -- one attempt -----------------------------------------------------------------------

    def _attempt(self) -> None:
        # Fast path, as client-go: renew on the version this replica wrote last; a 409
        # (a renewal whose answer was lost, or another writer) falls back to reading.
        if self.leading() and self._lease is not None and self._write(self._lease, False):
            return
        try:
            lease = self.client.request("GET", self.path, timeout=REQUEST_TIMEOUT)
        except ApiError as exc:
            if exc.code != 404:
                raise
            self._create()
            return
        self._observe(lease)
        spec = lease.get("spec") or {}
        holder = spec.get("holderIdentity") or ""
        if holder and holder != self.identity and not self._expired(spec):
            self._until = -math.inf
        elif not self._write(
            lease, acquired=holder != self.identity, taken_over=holder not in ("", self.identity)
        ):
            self._until = -math.inf  # another replica wrote it since the read

    def _observe(self, lease: Obj) -> None:
        record = _record(lease)
        if record != self._observed:
            self._observed, self._observed_at = record, self.clock()
        self._lease = lease

    def _expired(self, spec: Obj) -> bool:
        # Wait the longer of our duration and the one the holder advertises.
        wait = max(self.duration, float(spec.get("leaseDurationSeconds") or 0))
        return self.clock() - self._observed_at >= wait

    def _create(self) -> None:
        started, now = self.clock(), micro_time(self.wall())
        body = {
            "apiVersion": API_VERSION,
            "kind": "Lease",
            "metadata": {"name": self.name, "namespace": self.namespace},
            "spec": {**self._spec(now), "acquireTime": now, "leaseTransitions": 0},
        }
        body = self._advertised(body)
        path = self.path.rsplit("/", 1)[0]
        try:
            created = self.client.request("POST", path, body=body, timeout=REQUEST_TIMEOUT)
        except ApiError as exc:
            if exc.code != 409:
                raise
            self._until = -math.inf  # another replica created it first
            return
        self._won(created, started)

    def _write(self, lease: Obj, acquired: bool, taken_over: bool = False) -> bool:
        """PUT the lease as held by this replica, on the resourceVersion in `lease`; False
        on a 409. With `acquired` it is a takeover: a new acquireTime, one more transition
        (`taken_over`: from a holder that stopped renewing, not from a released lease)."""
        started, now = self.clock(), micro_time(self.wall())
        spec = {**(lease.get("spec") or {}), **self._spec(now)}
        lease = self._advertised(lease)
        if acquired:
            spec["acquireTime"] = now
            spec["leaseTransitions"] = int(spec.get("leaseTransitions") or 0) + 1
        try:
            written = self.client.request(
                "PUT", self.path, body={**lease, "spec": spec}, timeout=REQUEST_TIMEOUT
            )
        except ApiError as exc:
            if exc.code == 409:
                return False
            raise
        self._won(written, started, taken_over)
        return True

    def _spec(self, now: str) -> Obj:
        return {
            "holderIdentity": self.identity,
            "leaseDurationSeconds": math.ceil(self.duration),
            "renewTime": now,
        }

    def _advertised(self, lease: Obj) -> Obj:
        """`lease` with this replica's address in its annotations (when it has one)."""
        if not self.address:
            return lease
        meta = dict(lease.get("metadata") or {})
        meta["annotations"] = {**(meta.get("annotations") or {}), ADDRESS_ANNOTATION: self.address}
        return {**lease, "metadata": meta}

    def _won(self, lease: Obj, started: float, taken_over: bool = False) -> None:
        # Measured from before the request: a taker saw this write only after it began.
        if not self.leading():
            self._term = Term(started, taken_over)
        self._lease = lease
        self._observed, self._observed_at = _record(lease), started
        self._until = started + self.duration - self.margin

    def _release(self, lease: Obj) -> None:
        now = micro_time(self.wall())
        spec = {
            **(lease.get("spec") or {}),
            "holderIdentity": "",
            "leaseDurationSeconds": 1,
            "renewTime": now,
            "acquireTime": now,
        }
        try:
            released = self.client.request(
                "PUT", self.path, body={**lease, "spec": spec}, timeout=REQUEST_TIMEOUT
            )
        except (ApiError, TransportError) as exc:
            log.warning("lease %s/%s: release failed: %s", self.namespace, self.name, exc)
            return
        self._lease = released
        self._observed, self._observed_at = _record(released), self.clock()
        log.info("lease %s/%s released by %s", self.namespace, self.name, self.identity)

    def _report(self) -> None:
        now = self.leading()
        if now == self._was_leading:
            return
        self._was_leading = now
        self.transitions += 1
        log.info(
            "lease %s/%s: %s %s",
            self.namespace,
            self.name,
            self.identity,
            "started leading" if now else f"stopped leading (holder {self.holder()!r})",
        )
        if self.on_change is not None:
            try:
                self.on_change(now)
            except Exception:  # a failing hook must not end the elector's loop
                log.exception("lease %s/%s: on_change failed", self.namespace, self.name)


def _record(lease: Obj) -> Record:
    spec = lease.get("spec") or {}
    meta = lease.get("metadata") or {}
    return (
        str(spec.get("holderIdentity") or ""),
        str(spec.get("renewTime") or ""),
        str(meta.get("resourceVersion") or ""),
    )
