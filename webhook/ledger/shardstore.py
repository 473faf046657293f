"""`ShardStore`: the QuotaLedger objects of the ledger as the API server has them.

Every read and write here goes to the API server, and what it answers goes into the
cluster view too, so that the next decision builds on it. Writes carry the
resourceVersion read as precondition; ApiError 409 (someone was first) or 404 (the
shard is gone) tell the caller its view is behind.

How a shard comes and goes (`webhook.ledger.reservations` says why):
- created: only by whoever moved the ledger's head to its index, with the head's
  resourceVersion as precondition (`create`); then the head is read again, and if it
  moved past the new shard while nobody sealed it, the shard came too late (one of that
  name was created, sealed and deleted meanwhile) and its entries are taken out again;
- deleted: only when empty, below the head's index, with the resourceVersion of the
  empty shard as precondition (`delete`): a shard written since stays.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from webhook.kube.client import ApiError, KubeClient, TransportError
from webhook.kube.resources import QUOTA_LEDGER
from webhook.ledger.counts import LedgerCounts
from webhook.ledger.reservations import (
    Reservation,
    Shard,
    head_name,
    head_object,
    head_top,
    ledger_object,
    shard_name,
)
from webhook.store.clusterstate import ClusterState

__all__ = ["ShardStore"]

log = logging.getLogger("draquota.ledger")


class ShardStore:
    """Reads, writes, creations and deletions of QuotaLedger objects; `conflicts` counts the
    writes refused because another writer was first."""

    def __init__(
        self,
        client: KubeClient,
        state: ClusterState,
        counts: LedgerCounts,
        request_timeout: float,
        max_attempts: int,
    ) -> None:
        self.client = client
        self.state = state
        self.counts = counts
        self.timeout = (request_timeout, request_timeout)
        self.max_attempts = max_attempts
        self.conflicts = 0

    def get(self, name: str) -> dict[str, Any] | None:
        """GET a QuotaLedger; None when there is none of that name (and the view forgets the
        one it may still hold: a shard is deleted only once it holds no record)."""
        try:
            obj = self.client.request("GET", QUOTA_LEDGER.path(name=name), timeout=self.timeout)
        except ApiError as exc:
            if exc.code == 404:
                self.state.remove(QUOTA_LEDGER.kind, None, name)
                return None
            raise
        self._remember(obj)
        return obj

    def read(self, name: str) -> Shard:
        """The shard now (without a resourceVersion when there is none)."""
        obj = self.get(name)
        return Shard.of(obj) if obj is not None else Shard(name)

    def read_top(self, base: str) -> int | None:
        """The index the head of `base` says was created last, now."""
        return head_top(self.get(head_name(base)))

    def write(self, shard: Shard, entries: list[Reservation], sealed: bool = False) -> None:
        """Create (no resourceVersion) or update with the resourceVersion read."""
        body = ledger_object(shard, entries, sealed)
        if not shard.resource_version:
            path, method = QUOTA_LEDGER.path(), "POST"
        else:
            path, method = QUOTA_LEDGER.path(name=shard.name), "PUT"
        self._remember(self.client.request(method, path, body=body, timeout=self.timeout))

    def append(self, base: str, shard: Shard, new: list[Reservation], limit: int) -> bool:
        """Write `new` to `shard`, the active shard of `base` as read (an entry of the same id
        replaced; created when it has no resourceVersion), or, when that would take it over
        `limit` bytes, seal it without them (the caller writes them to the next shard then);
        whether it was sealed. ApiError 409 or 404 when `shard` is not as read any more."""
        ids = {entry.id for entry in new}
        entries = [entry for entry in shard.entries if entry.id not in ids]
        full = bool(entries) and sum(entry.size for entry in [*entries, *new]) > limit
        if shard.resource_version:
            self.write(shard, entries if full else [*entries, *new], sealed=full)
        else:
            self.create(base, shard, new)
        return full

    def create(self, base: str, shard: Shard, entries: list[Reservation]) -> None:
        """Create `shard`, the next shard of `base`, with `entries`: move the head to its
        index first, then create it, then check the head did not move past it unsealed.
        ApiError 409 when another replica was first, or when the shard is not the next one
        as the cached head has it (the view is behind: the caller reads again)."""
        index = shard.index
        head = self.state.get(QUOTA_LEDGER.kind, None, head_name(base))
        top = head_top(head)
        if top is not None and top >= index:
            raise ApiError(409, "Conflict", f"QuotaLedger {shard.name}: not the next shard")
        version = str(((head or {}).get("metadata") or {}).get("resourceVersion") or "")
        body = head_object(base, index, version)
        if version:
            path, method = QUOTA_LEDGER.path(name=head_name(base)), "PUT"
        else:
            path, method = QUOTA_LEDGER.path(), "POST"
        self._remember(self.client.request(method, path, body=body, timeout=self.timeout))
        self.write(shard, entries)
        if self.read_top(base) == index or self.read(shard.name).sealed:
            return
        ours = {e.id for e in entries}
        self.rewrite(shard.name, lambda e: e.id in ours)
        raise ApiError(409, "Conflict", f"QuotaLedger {shard.name} came after its index")

    def create_empty(self, name: str) -> None:
        """Create a shard the head names that its creator has not created (yet)."""
        try:
            self.write(Shard(name), [])
        except ApiError as exc:
            if exc.code != 409:  # 409: created meanwhile, which is what was wanted
                raise

    def delete(self, name: str, version: str) -> str:
        """DELETE a shard if it still has `version`; the outcome, as `LedgerCounts` counts."""
        body = {
            "apiVersion": "v1",
            "kind": "DeleteOptions",
            "preconditions": {"resourceVersion": version},
        }
        path = QUOTA_LEDGER.path(name=name)
        try:
            self.client.request("DELETE", path, body=body, timeout=self.timeout)
        except ApiError as exc:
            if exc.code in (404, 409):
                return "gone" if exc.code == 404 else "conflict"
            log.warning("ledger %s: deleting: %s", name, exc)
            return "error"
        except TransportError as exc:
            log.warning("ledger %s: deleting: %s", name, exc)
            return "error"
        return "deleted"

    def locate(self, base: str, top: Callable[[], int | None]) -> None:
        """Bring the shard of `base` created last into the view as the API server has it now
        (after a conflict: the view is behind), with every shard created since the view's
        (sealed now, or deleted: their records count, or are gone). `top`: the index of that
        shard as the view has it, caught up.

        The shard is read before the head, and believed only if the head has not moved past
        it since: a shard read at an index the head had left may be one created late, below
        the active one. A shard the head names that does not exist yet is created empty
        (its creator, between its two writes, then conflicts and writes to it as anyone
        else does), and believed on the same terms."""
        for _ in range(self.max_attempts):
            index = top()
            if index is None:
                if self.read_top(base) is None:
                    return  # a new ledger: its first shard is created through its head
                continue
            shard = self.read(shard_name(base, index))
            if self._moved_past(base, index):
                continue
            if not shard.resource_version:
                self.create_empty(shard.name)
                if self._moved_past(base, index):
                    continue
            return

    def _moved_past(self, base: str, top: int) -> bool:
        """The head of `base`, read now, names a shard after `top`; the shards in between are
        read into the view then (the next one is read by the caller)."""
        head = self.read_top(base)
        if head is None or head <= top:
            return False
        for index in range(top + 1, head):
            self.read(shard_name(base, index))
        return True

    def rewrite(
        self, name: str, drop: Callable[[Reservation], bool], outcome: str = "removed"
    ) -> int:
        """Remove matching entries from one shard, read again after each conflict; how many
        went (the cohort's lock is the caller's). They are counted as `outcome` ("": not
        counted, moved to another shard)."""
        for _ in range(self.max_attempts):
            try:
                shard = self.read(name)
                if not shard.resource_version:
                    return 0
                gone = [e for e in shard.entries if drop(e)]
                if not gone:
                    return 0
                self.write(shard, [e for e in shard.entries if not drop(e)], shard.sealed)
                if outcome:
                    self.counts.records((e.cluster_queue for e in gone), outcome)
                return len(gone)
            except ApiError as exc:
                if exc.code != 409:
                    log.warning("ledger %s: %s", name, exc)
                    return 0
                self.conflicts += 1
            except TransportError as exc:
                log.warning("ledger %s: %s", name, exc)
                return 0
        return 0

    def _remember(self, obj: dict[str, Any]) -> None:
        obj.setdefault("kind", QUOTA_LEDGER.kind)
        obj.setdefault("apiVersion", QUOTA_LEDGER.api_version)
        self.state.upsert(obj)
