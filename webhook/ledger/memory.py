"""`MemoryLedger`: the embedded ledger of `draquota serve --state DIR`, records in memory."""

from __future__ import annotations

import time
from collections.abc import Callable

from quota.charge import Charge
from quota.settings import Settings
from quota.usage import Usage
from quota.verdict import Decision
from webhook.ledger import SyncedUsage, UsageView, usage_without, valid_reservation_id
from webhook.ledger.podusage import PodUsage
from webhook.store.clusterstate import ClusterState

__all__ = ["MemoryLedger"]


class MemoryLedger(SyncedUsage):
    """Admission records in memory, behind one in-process lock (the view's).

    Usage = live pods (each charged the larger of its record and its claims now)
    + admissions whose pods have not appeared yet. A record lives while its pod
    holds quota; an admission whose pod never appears stops counting after
    `settings.reservation_ttl_seconds`.
    """

    blocking_io = False

    def __init__(
        self,
        state: ClusterState,
        settings: Settings,
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], float] = time.time,
    ) -> None:
        self._settings = settings
        self._clock = clock
        # uid -> expiry of admissions whose pods are unseen; insertion order is expiry order
        self._expiry: dict[str, float] = {}
        super().__init__(UsageView(PodUsage(state, settings, wall), self._sync))

    def reservations(self) -> dict[str, Charge]:
        """Admissions whose pods have not appeared yet (a snapshot)."""
        return self._synced(lambda pods: pods.reserved())

    def admit(
        self,
        uid: str,
        evaluate: Callable[[Usage], Decision],
        dry_run: bool,
        pod: str = "",
        existing: bool = False,
        cluster_queue: str = "",
        behind: bool = False,
    ) -> Decision:
        if not valid_reservation_id(uid):
            raise ValueError(f"invalid admission id {uid!r:.80}")
        with self.view as pods:
            decision = evaluate(usage_without(pods, uid, pod, existing))
            if dry_run or not decision.allowed or decision.charge is None:
                return decision
            pods.set_record(uid, decision.charge)
            if not existing:
                pods.reserve(uid, decision.charge)
                self._expiry.pop(uid, None)
                self._expiry[uid] = self._clock() + self._settings.reservation_ttl_seconds
            return decision

    def ensure_elected(self) -> None:
        """The embedded ledger is the only one: always elected."""

    def release(self, uids: list[str]) -> None:
        with self.view.lock:
            pods = self.view.pods
            for uid in uids:
                self._expiry.pop(uid, None)
                pods.unreserve(uid)
                pods.set_record(uid, None)

    def _sync(self) -> None:
        pods = self.view.pods
        pods.sync()
        now = self._clock()
        while self._expiry:
            uid, expires = next(iter(self._expiry.items()))
            if pods.is_reserved(uid) and expires > now:
                break
            del self._expiry[uid]
            if pods.is_reserved(uid):  # its pod never came
                pods.unreserve(uid)
                pods.set_record(uid, None)
        departed = pods.drain_departed()
        if departed:
            pods.update_records(dict.fromkeys(departed))
