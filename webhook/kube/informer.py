"""An informer keeps one kind of object in a ClusterState current, like client-go's reflector.

LIST (paginated) to get a consistent snapshot and its resourceVersion, then WATCH from
that version with bookmarks, re-watching from the last seen version whenever a stream
ends or breaks. A 410 Gone (the version was compacted away, or a list continuation
expired) means events were missed: LIST again. Other errors back off exponentially
with jitter. The informer tracks whether it ever synced and since when it has been
disconnected, which is what readiness is judged on: a healthy open watch is current
by construction, a broken one is stale from the moment it broke.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from quota.cluster import meta_of
from quota.errors import DraquotaError
from webhook.kube.backoff import Backoff
from webhook.kube.client import ApiError, KubeClient, TransportError, WatchStream
from webhook.kube.resources import QUOTA_LEDGER, ResourceType
from webhook.kube.trim import trimmed
from webhook.store.clusterstate import ClusterState

__all__ = ["Informer", "InformerOptions"]

log = logging.getLogger("draquota.kube")
Clock = Callable[[], float]


@dataclass(frozen=True)
class InformerOptions:
    """Knobs of every informer; the defaults suit a real cluster, tests shrink them."""

    page_size: int = 500
    watch_timeout: int = 300  # seconds the server keeps one watch open
    read_timeout: float = 90.0  # a silent watch this long is treated as broken
    backoff_initial: float = 0.2
    backoff_max: float = 10.0


class Informer:
    """One resource's LIST+WATCH loop in a daemon thread, feeding `state`."""

    def __init__(
        self,
        client: KubeClient,
        resource: ResourceType,
        state: ClusterState,
        options: InformerOptions = InformerOptions(),
        clock: Clock = time.monotonic,
    ) -> None:
        self.client = client
        self.resource = resource
        self.state = state
        self.options = options
        self.clock = clock
        self.synced = False
        self.lists = 0
        self.version = ""  # the last resourceVersion seen (list, event or bookmark)
        self.last_error = ""
        self.disconnected_since: float | None = clock()
        self._backoff = Backoff(options.backoff_initial, options.backoff_max)
        self._stop = threading.Event()
        self._stream: WatchStream | None = None
        self._thread: threading.Thread | None = None

    # -- lifecycle --------------------------------------------------------------------

    def start(self) -> None:
        self._stop.clear()
        name = f"informer-{self.resource.plural}"
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 5.0) -> None:
        self._stop.set()
        stream = self._stream
        if stream is not None:
            stream.close()
        if self._thread is not None:
            self._thread.join(timeout)

    def stale_for(self) -> float:
        """Seconds since the cache was last known current; 0 while a watch is open."""
        since = self.disconnected_since
        return 0.0 if since is None else max(0.0, self.clock() - since)

    # -- the loop ---------------------------------------------------------------------

    def _run(self) -> None:
        # self.version advances with every event and bookmark, so a broken stream resumes
        # where it stopped; "" means LIST first.
        while not self._stop.is_set():
            try:
                if not self.version:
                    self._list()
                self._watch(self.version)
            except ApiError as exc:
                if exc.gone:
                    log.info("%s: %s, listing again", self.resource.plural, exc)
                    self.version = ""
                    continue
                self._failed(exc)
            except TransportError as exc:
                self._failed(exc)
            except Exception as exc:  # the informer thread must survive anything
                log.exception("%s: unexpected error", self.resource.plural)
                self._failed(exc)

    def _failed(self, exc: Exception) -> None:
        if self._stop.is_set():
            return
        self.last_error = str(exc)
        if self.disconnected_since is None:
            self.disconnected_since = self.clock()
        delay = self._backoff.next()
        log.warning("%s: %s (retrying in %.2fs)", self.resource.plural, exc, delay)
        self._stop.wait(delay)

    def _connected(self) -> None:
        self.disconnected_since = None
        self.last_error = ""

    def _typed(self, obj: dict[str, Any]) -> dict[str, Any]:
        obj.setdefault("kind", self.resource.kind)
        obj.setdefault("apiVersion", self.resource.api_version)
        if (kept := trimmed(obj)) is not None:
            return kept
        metadata = obj.get("metadata")
        if isinstance(metadata, dict):
            # Who wrote which field: often a third of a real object, and no decision reads it.
            metadata.pop("managedFields", None)
        return obj

    def _list(self) -> str:
        items: list[dict[str, Any]] = []
        token = ""
        while True:
            query: list[tuple[str, Any]] = [("limit", self.options.page_size)]
            if token:
                query.append(("continue", token))
            page = self.client.request("GET", self.resource.path(), query)
            items.extend(self._typed(item) for item in page.get("items") or ())
            metadata = page.get("metadata") or {}
            token = metadata.get("continue") or ""
            if not token:
                break
        self.state.replace_kind(self.resource.kind, self._valid(items))
        self.lists += 1
        self.synced = True
        self._connected()
        self._backoff.reset()
        self.version = str(metadata.get("resourceVersion") or "")
        return self.version

    def _valid(self, items: list[dict[str, Any]]) -> list[dict[str, Any]]:
        valid = []
        for item in items:
            try:
                ClusterState([item])
            except DraquotaError as exc:
                log.warning("%s: skipping object: %s", self.resource.plural, exc)
                continue
            valid.append(item)
        return valid

    def _watch(self, version: str) -> str:
        query = [
            ("resourceVersion", version),
            ("allowWatchBookmarks", "true"),
            ("timeoutSeconds", self.options.watch_timeout),
        ]
        stream = self.client.watch(self.resource.path(), query, self.options.read_timeout)
        self._stream = stream
        if self._stop.is_set():
            stream.close()
            return version
        self._connected()
        for event in stream:
            version = self._apply(event, version)
            self._backoff.reset()
        return version

    def _apply(self, event: dict[str, Any], version: str) -> str:
        kind = event.get("type")
        obj = event.get("object")
        if not isinstance(obj, dict):
            raise TransportError(f"watch {self.resource.plural}: event without an object")
        if kind == "ERROR":
            code = int(obj.get("code") or 500)
            raise ApiError(code, str(obj.get("reason") or ""), str(obj.get("message") or ""))
        version = str((obj.get("metadata") or {}).get("resourceVersion") or version)
        self.version = version
        try:
            if kind in ("ADDED", "MODIFIED") and self._older_than_cached(obj):
                pass
            elif kind in ("ADDED", "MODIFIED"):
                self.state.upsert(self._typed(obj))
            elif kind == "DELETED":
                self._remove(self._typed(obj))
        except DraquotaError as exc:
            log.warning("%s: skipping event: %s", self.resource.plural, exc)
        return version

    def _older_than_cached(self, obj: dict[str, Any]) -> bool:
        """A QuotaLedger event older than the object cached: the ledger caches its own writes
        from their responses, before their watch events arrive, and going back to an older
        shard would make its next write conflict with itself. Versions are compared only
        when both are integers (etcd revisions, as every API server gives them); otherwise
        the event is applied, as for every other kind."""
        if self.resource.kind != QUOTA_LEDGER.kind:
            return False
        cached = self.state.get(*meta_of(self._typed(obj)))
        new, old = _version(obj), _version(cached)
        return new is not None and old is not None and new < old

    def _remove(self, obj: dict[str, Any]) -> None:
        self.state.remove(*meta_of(obj))


def _version(obj: Any) -> int | None:
    metadata = obj.get("metadata") if isinstance(obj, dict) else None
    version = metadata.get("resourceVersion") if isinstance(metadata, dict) else None
    return int(version) if isinstance(version, str) and version.isdigit() else None
