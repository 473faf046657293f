"""`WriteBehind`: admission records the elected replica decided but has not written yet.

The elected replica is the only one that decides admissions that hold quota, so it needs
no compare-and-swap to keep its decisions apart: it decides against its own view (which
holds these records from the moment they are decided) and answers at once. The records are
written afterwards, together: one thread writes every cohort's unwritten records in one
write, at most once per `interval` per cohort, so the API server sees a write per batch of
admissions instead of one per admission.

What a record written late risks, and why it is bounded:
- the replica is stopped: it refuses new admissions first, then writes everything
  (`flush`), then releases the Lease; the next replica reads the records and admits at once;
- the replica dies: records of the last moments are lost. Their pods were admitted, so the
  API server creates them and they count as pods; the replica that takes over waits until
  every pod the dead one may have admitted is visible (`webhook.ledger.cluster`), and until then
  admits nothing;
- the API server does not take the writes: admission stops (`oldest_age` past the ledger's
  bound) rather than letting unwritten records pile up.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable

from webhook.ledger.reservations import Reservation

__all__ = ["WriteBehind"]

log = logging.getLogger("draquota.writebehind")

# A batch that could not be written is tried again after this long, doubled up to the cap.
_RETRY_FIRST, _RETRY_CAP = 0.05, 1.0


class WriteBehind:
    """Unwritten records by ledger base, and the thread that writes them.

    `write(base, records)` writes records of one base and returns the ids it wrote (or
    found already written); whatever it did not write stays for the next round. Its caller
    holds no lock of this class, so admissions keep adding records while a batch is out."""

    def __init__(
        self,
        write: Callable[[str, list[Reservation]], set[str]],
        interval: float,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._write = write
        self.interval = interval
        self.clock = clock
        self._lock = threading.Condition()
        self._pending: dict[str, dict[str, tuple[Reservation, float]]] = {}
        self._written_at: dict[str, float] = {}  # base -> when its last batch went out
        self._writing = 0  # batches out now (flush waits for them)
        self._thread: threading.Thread | None = None
        self._stop = False

    # -- admissions ------------------------------------------------------------------

    def add(self, base: str, record: Reservation) -> None:
        """Queue a record decided now; it replaces an unwritten one of the same pod.

        The writer is woken only when the base had nothing waiting: a base with records
        waiting already bounds the writer's wait (`_until_due`), and waking a thread per
        admission costs a GIL hand-off each, under load most of the writer's CPU."""
        with self._lock:
            records = self._pending.setdefault(base, {})
            first = not records
            records.pop(record.id, None)  # to the end: each base's records stay oldest first
            records[record.id] = (record, self.clock())
            if first:
                self._lock.notify_all()

    def discard(self, uids: Iterable[str]) -> set[str]:
        """Forget unwritten records (released before they were written); the ids forgotten."""
        drop, gone = set(uids), set()
        with self._lock:
            for records in self._pending.values():
                for uid in drop & records.keys():
                    del records[uid]
                    gone.add(uid)
        return gone

    def unwritten(self) -> int:
        with self._lock:
            return sum(len(records) for records in self._pending.values())

    def oldest_age(self) -> float:
        """Seconds since the oldest unwritten record was decided (0 when none)."""
        with self._lock:
            times = [
                next(iter(records.values()))[1] for records in self._pending.values() if records
            ]
        return self.clock() - min(times) if times else 0.0

    # -- the writer --------------------------------------------------------------------

    def start(self) -> None:
        with self._lock:
            if self._thread is not None:
                return
            self._stop = False
            self._thread = threading.Thread(
                target=self._run, name="draquota-write-behind", daemon=True
            )
        self._thread.start()

    def stop(self, timeout: float) -> bool:
        """Write what is left (within `timeout` seconds), then stop; whether all was written."""
        flushed = self.flush(timeout)
        with self._lock:
            self._stop = True
            self._lock.notify_all()
            thread, self._thread = self._thread, None
        if thread is not None:
            thread.join(timeout)
        return flushed

    def flush(self, timeout: float) -> bool:
        """Wait until every record added before the call is written; False on timeout."""
        deadline = self.clock() + timeout
        with self._lock:
            self._written_at.clear()  # write now, not at the next interval
            self._lock.notify_all()
            while self._writing or any(self._pending.values()):
                left = deadline - self.clock()
                if left <= 0 or (self._thread is None and not self._writing):
                    return False
                self._lock.wait(min(left, 0.05))
            return True

    def _run(self) -> None:
        delay = _RETRY_FIRST
        while True:
            with self._lock:
                batch = self._next()
                while batch is None and not self._stop:
                    self._lock.wait(self._until_due())
                    batch = self._next()
                if batch is None:
                    return
                self._writing += 1
            base, records = batch
            try:
                written = self._write(base, records)
            except Exception:  # the writer thread must outlive one failed batch
                log.exception("writing %d admission records of %s failed", len(records), base)
                written = set()
            with self._lock:
                self._writing -= 1
                self._settle(base, records, written)
                self._lock.notify_all()
            delay = _RETRY_FIRST if written else min(delay * 2, _RETRY_CAP)
            if not written:
                time.sleep(delay)

    def _next(self) -> tuple[str, list[Reservation]] | None:
        """The base whose batch is due, with its records (under the lock)."""
        now = self.clock()
        for base, records in self._pending.items():
            if records and now - self._written_at.get(base, -1e18) >= self.interval:
                self._written_at[base] = now
                return base, [record for record, _ in records.values()]
        return None

    def _until_due(self) -> float | None:
        """Seconds until some base's batch is due; None (wait for an add) when none waits."""
        now = self.clock()
        waits = [
            self.interval - (now - self._written_at.get(base, -1e18))
            for base, records in self._pending.items()
            if records
        ]
        return max(0.0, min(waits)) if waits else None

    def _settle(self, base: str, sent: list[Reservation], written: set[str]) -> None:
        """Drop the records written, unless a newer one of the same pod came meanwhile."""
        records = self._pending.get(base, {})
        for record in sent:
            queued = records.get(record.id)
            if record.id in written and queued is not None and queued[0] is record:
                del records[record.id]
        if not records:
            self._pending.pop(base, None)
