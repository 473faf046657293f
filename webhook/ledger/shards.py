"""`ShardIndex`: the QuotaLedger shards one replica has loaded, and the records they add up to.

Plain data in, answers out: the caller hands in shard objects as its cluster view has them
(and a head's index, and the time on its own monotonic clock); nothing here reads the
cluster, a clock or the network. `webhook.ledger.reservations` says what a shard and a head
are.

Invariants:
- a UID's record is the entry of the highest loaded shard holding it (`winner`: a resize
  writes a newer entry to the active shard while the older one still stands below);
- `holders` lists exactly the loaded shards whose entries hold a UID; a UID without one
  has no record, no first-seen time and no place among the reservations;
- a record's first-seen time is when this replica first saw it (or decided it), never what
  the object says: another replica's wall clock cannot make it expire early;
- `reserved_since` keeps the first-seen times of records still counted as reservations,
  oldest first, so that `lapsed` stops at the first one still in time.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import NamedTuple

from quota.cluster import Obj
from webhook.ledger.reservations import Reservation, Shard, shard_index, shard_name

__all__ = ["RecordChange", "ShardIndex", "base_of"]


def base_of(name: str) -> str:
    """The ledger base of a shard or head name (`cohort-a-3` -> `cohort-a`)."""
    return name.rsplit("-", 1)[0]


class RecordChange(NamedTuple):
    """A UID whose record changed with a load: `entry` is its record now (None: gone);
    `charge_changed` says whether what it charges changed too (new records included)."""

    uid: str
    entry: Reservation | None
    charge_changed: bool


class _Loaded(NamedTuple):
    entries: dict[str, Reservation]  # uid -> entry
    sealed: bool
    version: str  # resourceVersion as loaded


class ShardIndex:
    """Shards by name, which hold which UID, the highest of each base, and the records."""

    def __init__(self) -> None:
        self._shards: dict[str, _Loaded] = {}
        self._holders: dict[str, set[str]] = {}  # uid -> names of the shards holding it
        self._bases: dict[str, dict[str, int]] = {}  # base -> its loaded shards' indexes
        self._tops: dict[str, str] = {}  # base -> its highest loaded shard
        self._records: dict[str, Reservation] = {}  # uid -> winning entry
        self._first_seen: dict[str, float] = {}  # uid -> when this replica first saw it
        self._reserved_since: dict[str, float] = {}  # first_seen of reservations, oldest first
        self._empty_since: dict[str, float] = {}  # shard -> since when it was loaded empty

    # -- loading -----------------------------------------------------------------------

    def names(self) -> list[str]:
        """The loaded shards, sorted by name."""
        return sorted(self._shards)

    def apply(self, shards: Iterable[tuple[str, Obj | None]], now: float) -> list[RecordChange]:
        """Take in these shards as the view has them now (None: gone); the records changed."""
        touched: set[str] = set()
        for name, obj in shards:
            touched |= self._load(name, obj, now)
        return [self._settle(uid, now) for uid in touched]

    def _load(self, name: str, obj: Obj | None, now: float) -> set[str]:
        """One shard (or head, which is kept as no shard); the UIDs whose entry changed."""
        old = self._shards.pop(name, _Loaded({}, False, "")).entries
        index = shard_index(name) if obj is not None else None
        shard = Shard.of(obj, old) if obj is not None and index is not None else None
        fresh = {e.id: e for e in shard.entries} if shard is not None else {}
        if shard is not None:
            self._shards[name] = _Loaded(fresh, shard.sealed, shard.resource_version)
        if shard is not None and not fresh:
            self._empty_since.setdefault(name, now)
        else:
            self._empty_since.pop(name, None)
        self._place(base_of(name), name, index if shard is not None else None)
        touched: set[str] = set()
        for uid in old.keys() | fresh.keys():
            if old.get(uid) != fresh.get(uid):
                touched.add(uid)
                holders = self._holders.setdefault(uid, set())
                (holders.add if uid in fresh else holders.discard)(name)
        return touched

    def _settle(self, uid: str, now: float) -> RecordChange:
        entry = self.winner(uid)
        if entry is None:
            self._holders.pop(uid, None)
            self._records.pop(uid, None)
            self._first_seen.pop(uid, None)
            self._reserved_since.pop(uid, None)
            return RecordChange(uid, None, True)
        previous = self._records.get(uid)
        self._records[uid] = entry
        if previous is not None and previous.charge == entry.charge:
            return RecordChange(uid, entry, False)
        self.seen(uid, now)
        return RecordChange(uid, entry, True)

    def _place(self, base: str, name: str, index: int | None) -> None:
        """`name` is a loaded shard of `base` at `index` (None: no longer loaded). The highest
        is kept as it changes: a cohort has hundreds of shards at 100,000 pods, and every
        admission asks for its active one."""
        shards = self._bases.setdefault(base, {})
        shards.pop(name, None)
        top = self._tops.get(base)
        if index is not None:
            shards[name] = index
            if top is None or index > shards.get(top, -1):
                self._tops[base] = name
        elif name == top:  # rare: the highest shard went away
            self._tops.pop(base)
            if shards:
                self._tops[base] = max(shards, key=shards.__getitem__)

    # -- records -----------------------------------------------------------------------

    def has_record(self, uid: str) -> bool:
        return uid in self._records

    def holders(self, uid: str) -> frozenset[str]:
        """The loaded shards holding an entry of `uid`."""
        return frozenset(self._holders.get(uid, ()))

    def winner(self, uid: str) -> Reservation | None:
        """The entry of the highest shard holding `uid` (a resize writes a newer one)."""
        names = self._holders.get(uid) or set()
        best = max(names, key=lambda n: Shard(n).index, default=None)
        return self._shards[best].entries[uid] if best is not None else None

    def seen(self, uid: str, now: float) -> None:
        """This replica sees (or decides) the record of `uid` at `now`, unless it did before;
        the record counts as a reservation from then until `lapsed` says otherwise."""
        if uid not in self._first_seen:
            self._first_seen[uid] = now
            self._reserved_since.setdefault(uid, now)

    def decided(self, uid: str, now: float) -> None:
        """This replica decided the record of `uid` at `now` (not written yet): it counts as a
        reservation from then, like one seen."""
        self._first_seen.setdefault(uid, now)
        self._reserved_since.setdefault(uid, now)

    def expired(self, uid: str, now: float, ttl: float) -> bool:
        """Seen by this replica more than `ttl` ago."""
        seen = self._first_seen.get(uid)
        return seen is not None and now - seen > ttl

    def lapsed(self, now: float, ttl: float, reserved: Callable[[str], bool]) -> list[str]:
        """The reservations that count on their own no more: no longer `reserved` (their pods
        came, or they were taken back) or seen more than `ttl` ago; each is answered once."""
        out: list[str] = []
        while self._reserved_since:  # oldest first: stop at the first one still in time
            uid, seen = next(iter(self._reserved_since.items()))
            if reserved(uid) and now - seen <= ttl:
                break
            del self._reserved_since[uid]
            out.append(uid)
        return out

    # -- shards ------------------------------------------------------------------------

    def entries(self, name: str) -> list[Reservation]:
        """The entries of a loaded shard (none when it is not loaded)."""
        loaded = self._shards.get(name)
        return list(loaded.entries.values()) if loaded is not None else []

    def top(self, base: str, head: int | None) -> int | None:
        """The index of the shard of `base` created last, as this index knows it: `head` (the
        head's, as the caller's view has it), or the highest shard loaded when that is higher
        (a head not caught up with, a ledger written by replicas of an older version). None
        for a new ledger."""
        name = self._tops.get(base)
        loaded = self._bases[base][name] if name is not None else None
        return max((i for i in (head, loaded) if i is not None), default=None)

    def active(self, base: str, head: int | None) -> Shard:
        """The shard of `base` new records go to: the highest one created (`top`), or the one
        after it when that is sealed (shard 0 for a new ledger). Without a resourceVersion it
        is still to be created."""
        top = self.top(base, head)
        if top is None:
            return Shard(shard_name(base, 0))
        name = shard_name(base, top)
        loaded = self._shards.get(name)
        if loaded is None:
            return Shard(name)
        if loaded.sealed:
            return Shard(shard_name(base, top + 1))
        return Shard(name, tuple(loaded.entries.values()), loaded.sealed, loaded.version)

    def sparse(self, name: str, shard_bytes: int) -> bool:
        """A loaded shard, sealed, holding records that fill a quarter of a shard or less."""
        loaded = self._shards.get(name)
        if loaded is None or not loaded.sealed or not loaded.entries:
            return False
        return 4 * sum(entry.size for entry in loaded.entries.values()) <= shard_bytes

    def empty(self, name: str) -> bool:
        """A loaded shard without an entry."""
        loaded = self._shards.get(name)
        return loaded is not None and not loaded.entries

    def empty_for(self, now: float, grace: float) -> list[tuple[str, str]]:
        """(name, resourceVersion) of the loaded shards empty since `grace` before `now`."""
        return [
            (name, self._shards[name].version)
            for name, since in self._empty_since.items()
            if now - since >= grace and self.empty(name)
        ]

    def forget_empty(self, name: str) -> None:
        """The shard was deleted: it is no longer waited on, whenever its removal arrives."""
        self._empty_since.pop(name, None)
