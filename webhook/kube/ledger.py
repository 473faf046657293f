"""`ClusterLedger`: reservations held across webhook replicas and restarts in QuotaLedger objects.

Admission follows Kubernetes' own ResourceQuota admission: read the ledger object
of the queue's cohort (a GET, for the freshest resourceVersion), evaluate against
live pod usage plus the reservations in it, and if allowed write it back with the
resourceVersion read as precondition. A 409 Conflict means another replica got there
first: read again and evaluate again, a bounded number of times, then fail closed.

Invariants that keep usage exact:
- a reservation and the pod created for it are never both counted: a reservation
  whose id appears in a cached pod's charge annotation is skipped (the pod counts);
- a confirmed reservation is only deleted `confirm_grace` seconds after this replica
  saw the pod, so replicas whose pod cache lags a little still count the reservation;
  a replica lagging more is stale and not ready (it fails closed);
- a reservation whose pod never appeared (denied elsewhere, request failed) stops
  counting at `expiresAt` and the reconciler deletes it.
"""

from __future__ import annotations

import dataclasses
import logging
import random
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from quota.charge import CHARGE_ANNOTATION, Charge
from quota.cluster import ClusterState
from quota.decision import Decision
from quota.errors import DraquotaError
from quota.settings import Settings
from quota.usage import Usage
from webhook.backend import MemoryLedger, reservation_holder, valid_reservation_id
from webhook.kube.client import ApiError, KubeClient, TransportError
from webhook.kube.periodic import Periodic
from webhook.kube.reservations import Reservation, ledger_name, ledger_object, reservations_of
from webhook.kube.resources import QUOTA_LEDGER

__all__ = ["ClusterLedger", "LedgerOptions"]

log = logging.getLogger("draquota.ledger")


@dataclass(frozen=True)
class LedgerOptions:
    max_attempts: int = 20  # reads+writes per admission before failing closed
    retry_delay: float = 0.005  # first pause after a 409, doubled and jittered
    request_timeout: float = 2.0
    reconcile_interval: float = 5.0
    confirm_grace: float = 10.0


class _Backend(Protocol):
    state: ClusterState

    def ready(self) -> tuple[bool, str]: ...

    def attach(self, component: Any) -> None: ...


class ClusterLedger:
    """Ledger over QuotaLedger objects; `start()` runs the reconciler (KubeBackend does it)."""

    blocking_io = True

    def __init__(
        self,
        client: KubeClient,
        backend: _Backend,
        settings: Settings,
        options: LedgerOptions = LedgerOptions(),
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.client = client
        self.backend = backend
        self.state = backend.state
        self.settings = settings
        self.options = options
        self.clock = clock
        self.conflicts = 0
        self._pods = MemoryLedger(self.state, settings)  # live pod usage, kept incrementally
        self._locks: dict[str, threading.Lock] = {}
        self._locks_guard = threading.Lock()
        self._index_lock = threading.Lock()
        self._index_revision: tuple[int, ...] = ()
        self._index: dict[str, str] = {}
        self._confirmed_at: dict[str, float] = {}
        self._reconciler = Periodic(
            "ledger", options.reconcile_interval, self.reconcile, lambda: backend.ready()[0]
        )
        backend.attach(self)

    # -- Ledger protocol -------------------------------------------------------------

    def usage(self) -> Usage:
        return self._usage_with(self._cached_ledgers())

    def admit(
        self,
        reservation: str,
        evaluate: Callable[[Usage], Decision],
        dry_run: bool,
        pod: str = "",
    ) -> Decision:
        if not valid_reservation_id(reservation):
            raise ValueError(f"invalid reservation id {reservation!r:.80}")
        ledgers = self._cached_ledgers()
        decision = self._evaluate(evaluate, ledgers, exclude=reservation)
        if decision.charge is None:
            return decision
        name = ledger_name(self.state, decision.charge.cluster_queue)
        delay = self.options.retry_delay
        with self._lock_for(name):
            for _ in range(self.options.max_attempts):
                try:
                    current = self._read(name)
                except (ApiError, TransportError) as exc:
                    return _fail_closed(decision, name, str(exc))
                ledgers[name] = reservations_of(current)
                decision = self._evaluate(evaluate, ledgers, exclude=reservation)
                if dry_run or not decision.allowed or decision.charge is None:
                    return decision
                if ledger_name(self.state, decision.charge.cluster_queue) != name:
                    return _fail_closed(decision, name, "the queue's cohort changed")
                try:
                    self._write(
                        name, current, self._with(ledgers[name], reservation, decision, pod)
                    )
                except ApiError as exc:
                    if exc.code != 409:
                        return _fail_closed(decision, name, str(exc))
                    self.conflicts += 1
                    time.sleep(delay * (1 + random.random()))
                    delay = min(delay * 2, 0.2)
                    continue
                except TransportError as exc:
                    return _fail_closed(decision, name, str(exc))
                return decision
        return _fail_closed(decision, name, "too many concurrent updates")

    def release(self, reservation: str) -> None:
        for name, entries in self._cached_ledgers().items():
            if any(e.id == reservation for e in entries):
                self._rewrite(name, lambda e: e.id == reservation)

    # -- reconciler ------------------------------------------------------------------

    def start(self) -> None:
        self._reconciler.start()

    def stop(self) -> None:
        self._reconciler.stop()

    def reconcile(self) -> int:
        """One pass: delete expired and long-confirmed reservations; how many went."""
        now = self.clock()
        confirmed = self._confirmed()
        held: set[str] = set()
        dropped = 0
        for name, entries in self._cached_ledgers().items():
            for entry in entries:
                held.add(entry.id)
                if entry.id in confirmed:
                    self._confirmed_at.setdefault(entry.id, now)
            if any(self._droppable(e, now, confirmed) for e in entries):
                dropped += self._rewrite(name, lambda e: self._droppable(e, now, confirmed))
        for rid in set(self._confirmed_at) - held:
            del self._confirmed_at[rid]
        return dropped

    def _droppable(self, entry: Reservation, now: float, confirmed: Mapping[str, str]) -> bool:
        if entry.id in confirmed:
            seen = self._confirmed_at.get(entry.id, now)
            return now - seen >= self.options.confirm_grace
        return entry.expires_at <= now

    # -- mechanics -------------------------------------------------------------------

    def _lock_for(self, name: str) -> threading.Lock:
        with self._locks_guard:
            return self._locks.setdefault(name, threading.Lock())

    def _cached_ledgers(self) -> dict[str, list[Reservation]]:
        return {
            str(obj["metadata"]["name"]): reservations_of(obj)
            for obj in self.state.list(QUOTA_LEDGER.kind)
        }

    def _confirmed(self) -> dict[str, str]:
        """Reservation id -> pod key, for every cached pod whose charge names a reservation."""
        revision = self.state.revision("Pod")
        with self._index_lock:
            if revision != self._index_revision:
                index: dict[str, str] = {}
                for pod in self.state.list("Pod"):
                    metadata = pod.get("metadata") or {}
                    key = f"{metadata.get('namespace')}/{metadata.get('name')}"
                    annotations = metadata.get("annotations") or {}
                    text = annotations.get(CHARGE_ANNOTATION)
                    if not isinstance(text, str):
                        continue
                    try:
                        rid = Charge.from_annotation(text, key).reservation
                    except DraquotaError:
                        continue
                    if rid:
                        index[rid] = key
                        index[reservation_holder(rid, key)] = key  # as the webhook reserves
                self._index, self._index_revision = index, revision
            return self._index

    def _usage_with(self, ledgers: Mapping[str, list[Reservation]]) -> Usage:
        return self._add_reservations(self._pods.usage(), ledgers)

    def _evaluate(
        self,
        evaluate: Callable[[Usage], Decision],
        ledgers: Mapping[str, list[Reservation]],
        exclude: str,
    ) -> Decision:
        """Evaluate on live pods plus outstanding reservations, without copying every holder."""
        return self._pods.with_usage(
            lambda pods: evaluate(self._add_reservations(pods, ledgers, exclude))
        )

    def _add_reservations(
        self, usage: Usage, ledgers: Mapping[str, list[Reservation]], exclude: str = ""
    ) -> Usage:
        confirmed = self._confirmed()
        now = self.clock()
        for entries in ledgers.values():
            for entry in entries:
                if entry.id == exclude or entry.id in confirmed or entry.expires_at <= now:
                    continue
                charge = entry.parsed_charge()
                if charge is not None:
                    usage.add(entry.id, charge)
        return usage

    def _with(
        self, entries: list[Reservation], reservation: str, decision: Decision, pod: str
    ) -> list[Reservation]:
        assert decision.charge is not None
        now = self.clock()
        kept = [e for e in entries if e.id != reservation and e.expires_at > now]
        expires = now + self.settings.reservation_ttl_seconds
        charge = decision.charge.to_annotation()
        kept.append(Reservation(reservation, decision.charge.cluster_queue, pod, charge, expires))
        return kept

    def _read(self, name: str) -> dict[str, Any] | None:
        timeout = (self.options.request_timeout, self.options.request_timeout)
        try:
            return self.client.request("GET", QUOTA_LEDGER.path(name=name), timeout=timeout)
        except ApiError as exc:
            if exc.code == 404:
                return None
            raise

    def _write(
        self, name: str, current: Mapping[str, Any] | None, entries: list[Reservation]
    ) -> None:
        """Create or update with the resourceVersion read; ApiError 409 when someone was first."""
        timeout = (self.options.request_timeout, self.options.request_timeout)
        if current is None:
            body = ledger_object(name, entries, None)
            written = self.client.request("POST", QUOTA_LEDGER.path(), body=body, timeout=timeout)
        else:
            version = str((current.get("metadata") or {}).get("resourceVersion") or "")
            body = ledger_object(name, entries, version)
            path = QUOTA_LEDGER.path(name=name)
            written = self.client.request("PUT", path, body=body, timeout=timeout)
        written.setdefault("kind", QUOTA_LEDGER.kind)
        written.setdefault("apiVersion", QUOTA_LEDGER.api_version)
        self.state.upsert(written)

    def _rewrite(self, name: str, drop: Callable[[Reservation], bool]) -> int:
        """Remove matching entries from one ledger, retrying on conflict; how many went."""
        with self._lock_for(name):
            for _ in range(self.options.max_attempts):
                try:
                    current = self._read(name)
                    if current is None:
                        return 0
                    entries = reservations_of(current)
                    kept = [e for e in entries if not drop(e)]
                    if len(kept) == len(entries):
                        return 0
                    self._write(name, current, kept)
                    return len(entries) - len(kept)
                except ApiError as exc:
                    if exc.code != 409:
                        log.warning("ledger %s: %s", name, exc)
                        return 0
                    self.conflicts += 1
                except TransportError as exc:
                    log.warning("ledger %s: %s", name, exc)
                    return 0
        return 0


def _fail_closed(decision: Decision, name: str, why: str) -> Decision:
    return dataclasses.replace(
        decision,
        allowed=False,
        code=403,
        reason="LedgerUnavailable",
        message=f"draquota cannot reserve quota now: QuotaLedger {name}: {why}; retry",
        charge=None,
    )
