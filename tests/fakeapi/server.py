"""A small fake Kubernetes API server speaking real HTTP/1.1 on 127.0.0.1.

Serves discovery, LIST (limit/continue, resourceVersion), WATCH (chunked JSON
events, bookmarks, 410 Gone as an ERROR event), GET, POST, PUT (resourceVersion
precondition, 409 Conflict) and DELETE for the resources in `store.RESOURCES`.
Objects of resource.k8s.io are stored as given (no version conversion); only the
configured versions are served.

TokenReviews and SubjectAccessReviews are answered by `reviews` (tests/fakeapi/reviews.py).

Fault injection for tests: `break_watches()`, `force_gone()`, `unreachable("reset" |
"hang")` / `reachable()`, and `latency` seconds added to every response. Pods are evicted
through `pods/NAME/eviction` (`refuse_evictions`: a PodDisruptionBudget's 429).
"""

from __future__ import annotations

import base64
import contextlib
import json
import socket
import threading
import time
from collections.abc import Iterable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

from tests.fakeapi.eviction import evict
from tests.fakeapi.reviews import REVIEW_PATHS, Reviews
from tests.fakeapi.store import RESOURCES, ApiError, Obj, Resource, Store

__all__ = ["FakeApiServer"]

GROUP_VERSIONS = {
    "draquota.io": ("v1beta1",),
    "coordination.k8s.io": ("v1",),
    "batch": ("v1",),
    "scheduling.k8s.io": ("v1",),
}
# Built-in lists omit kind/apiVersion on items, as the real API server does.
TYPED_GROUPS = ("", "resource.k8s.io", "batch", "coordination.k8s.io", "scheduling.k8s.io")


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    # Headers and body are written separately: without TCP_NODELAY the body waits for the
    # client's delayed ACK, about 40 ms per request. The real API server (Go) sets it.
    disable_nagle_algorithm = True
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:
        pass

    # -- plumbing -------------------------------------------------------------------

    def _send(self, code: int, body: Obj) -> None:
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _body(self) -> Obj:
        length = int(self.headers.get("Content-Length") or 0)
        return json.loads(self.rfile.read(length) or b"{}")

    def _drop(self) -> None:
        self.close_connection = True
        with contextlib.suppress(OSError):
            self.connection.shutdown(socket.SHUT_RDWR)

    def _faulted(self) -> bool:
        api = self.server.api
        api.requests += 1
        if api.mode == "hang":
            while api.mode == "hang" and not api.stopping.is_set():
                time.sleep(0.02)
        if api.mode != "ok" or api.stopping.is_set():
            self._drop()
            return True
        if api.latency:
            time.sleep(api.latency)
        return False

    def _dispatch(self, method: str) -> None:
        if self._faulted():
            return
        url = urlsplit(self.path)
        query = {k: v[-1] for k, v in parse_qs(url.query).items()}
        try:
            self.server.api.route(self, method, url.path.rstrip("/"), query)
        except ApiError as exc:
            self._send(exc.code, exc.status())
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True

    def do_GET(self) -> None:
        self._dispatch("GET")

    def do_POST(self) -> None:
        self._dispatch("POST")

    def do_PUT(self) -> None:
        self._dispatch("PUT")

    def do_DELETE(self) -> None:
        self._dispatch("DELETE")


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    api: FakeApiServer

    def handle_error(self, request: Any, client_address: Any) -> None:
        pass  # clients hanging up (faults, stopped informers) are expected here


class FakeApiServer:
    """Start with `start()`; `url` is the base address for a kubeconfig."""

    def __init__(
        self,
        resource_versions: Iterable[str] = ("v1",),
        bookmark_interval: float = 0.2,
        port: int = 0,
    ) -> None:
        self.store = Store()
        self.reviews = Reviews()  # TokenReview and SubjectAccessReview answers
        self.resource_versions = tuple(resource_versions)
        self.bookmark_interval = bookmark_interval
        self.latency = 0.0
        self.mode = "ok"
        self.requests = 0
        self.calls: list[tuple[str, str]] = []  # (method, path) of every request routed
        self.evictions: list[str] = []  # `ns/name` of every pod an eviction was asked for
        self.refuse_evictions = ""  # set: evictions are refused (429) with this message
        self.watch_generation = 0
        self.stopping = threading.Event()
        self._port = port
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None

    # -- lifecycle and faults -----------------------------------------------------------

    def start(self) -> FakeApiServer:
        self.stopping.clear()
        self._server = _Server(("127.0.0.1", self._port), _Handler)
        self._server.api = self
        self._port = self._server.server_address[1]
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self.stopping.set()
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
        with self.store.cond:
            self.store.cond.notify_all()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._port}"

    def break_watches(self) -> None:
        """Cut every open watch stream mid-flight (no terminating chunk)."""
        with self.store.cond:
            self.watch_generation += 1
            self.store.cond.notify_all()

    def force_gone(self) -> None:
        """Compact history and cut watches: re-watching from an old version gets 410."""
        self.store.compact()
        self.break_watches()

    def unreachable(self, mode: str = "reset") -> None:
        """ "reset": close every connection at once; "hang": accept and never answer."""
        self.mode = mode
        self.break_watches()

    def reachable(self) -> None:
        self.mode = "ok"

    # -- object helpers for tests --------------------------------------------------------

    def resource(self, kind: str) -> Resource:
        return next(r for r in RESOURCES if r.kind == kind)

    def create(self, obj: Obj) -> Obj:
        res = self.resource(obj["kind"])
        return self.store.create(res, obj["metadata"].get("namespace") or "default", obj)

    def update(self, obj: Obj) -> Obj:
        res = self.resource(obj["kind"])
        meta = obj["metadata"]
        namespace = (meta.get("namespace") or "default") if res.namespaced else ""
        return self.store.update(res, namespace, meta["name"], obj)

    def delete(self, kind: str, namespace: str | None, name: str) -> Obj:
        res = self.resource(kind)
        return self.store.delete(res, namespace or "" if not res.namespaced else namespace, name)

    def objects(self, kind: str, namespace: str | None = None) -> list[Obj]:
        return self.store.list(self.resource(kind), namespace)[0]

    # -- routing ---------------------------------------------------------------------

    def _versions(self, group: str) -> tuple[str, ...]:
        if group == "resource.k8s.io":
            return self.resource_versions
        return GROUP_VERSIONS.get(group, ())

    def _group(self, group: str) -> Obj:
        versions = [{"groupVersion": f"{group}/{v}", "version": v} for v in self._versions(group)]
        return {
            "kind": "APIGroup",
            "apiVersion": "v1",
            "name": group,
            "versions": versions,
            "preferredVersion": versions[0],
        }

    def route(self, h: _Handler, method: str, path: str, query: dict[str, str]) -> None:
        self.calls.append((method, path))
        if method == "POST" and path in REVIEW_PATHS:
            return h._send(201, self.reviews.answer(path, h._body()))
        parts = [p for p in path.split("/") if p]
        if parts == ["api"]:
            return h._send(200, {"kind": "APIVersions", "versions": ["v1"]})
        if parts == ["apis"]:
            groups = [
                self._group(g) for g in ("resource.k8s.io", "draquota.io") if self._versions(g)
            ]
            return h._send(200, {"kind": "APIGroupList", "apiVersion": "v1", "groups": groups})
        if len(parts) == 2 and parts[0] == "apis" and self._versions(parts[1]):
            return h._send(200, self._group(parts[1]))
        if parts[:2] == ["api", "v1"]:
            group, version, rest = "", "v1", parts[2:]
        elif len(parts) >= 3 and parts[0] == "apis" and parts[2] in self._versions(parts[1]):
            group, version, rest = parts[1], parts[2], parts[3:]
        else:
            raise ApiError(
                404, "NotFound", f"the server could not find the requested resource {path}"
            )
        if len(rest) >= 3 and rest[-1] == "eviction" and method == "POST":
            res, namespace, name = self._target(group, rest[:-1], path)
            self.evictions.append(f"{namespace}/{name}")
            body, refused = h._body(), self.refuse_evictions
            return h._send(201, evict(self.store, res, namespace or "", name or "", body, refused))
        status_only = len(rest) >= 3 and rest[-1] == "status"
        res, namespace, name = self._target(group, rest[:-1] if status_only else rest, path)
        if status_only and (name is None or method not in ("GET", "PUT")):
            raise ApiError(405, "MethodNotAllowed", f"{method} on a status subresource")
        api_version = f"{group}/{version}" if group else version
        if method == "GET" and name is None and query.get("watch") in ("1", "true"):
            return self._watch(h, res, namespace, api_version, query)
        if method == "GET" and name is None:
            return h._send(200, self._list(res, namespace, api_version, query))
        if method == "POST" and name is None:
            return h._send(201, self.store.create(res, namespace or "", h._body()))
        if name is None:
            raise ApiError(405, "MethodNotAllowed", f"{method} needs a name")
        ns = namespace or ""
        if method == "GET":
            return h._send(200, self.store.get(res, ns, name))
        if method == "PUT":
            return h._send(200, self.store.update(res, ns, name, h._body(), status_only))
        if method == "DELETE":  # with DeleteOptions.preconditions.resourceVersion, if sent
            wanted = (h._body().get("preconditions") or {}).get("resourceVersion")
            return h._send(200, self.store.delete(res, ns, name, wanted))
        raise ApiError(405, "MethodNotAllowed", method)

    def _target(
        self, group: str, rest: list[str], path: str
    ) -> tuple[Resource, str | None, str | None]:
        namespace = None
        if len(rest) >= 3 and rest[0] == "namespaces":
            namespace, rest = rest[1], rest[2:]
        for res in RESOURCES:
            if res.group == group and rest and res.plural == rest[0] and len(rest) <= 2:
                if namespace is not None and not res.namespaced:
                    break
                if res.namespaced and namespace is None and len(rest) == 2:
                    break
                return res, namespace, rest[1] if len(rest) == 2 else None
        raise ApiError(404, "NotFound", f"the server could not find the requested resource {path}")

    def _list(
        self, res: Resource, namespace: str | None, api_version: str, query: dict[str, str]
    ) -> Obj:
        items, rv = self.store.list(res, namespace)
        start = ""
        token = query.get("continue")
        if token:
            state = json.loads(base64.b64decode(token))
            rv, start = state["rv"], state["start"]
            if rv < self.store.compacted:
                raise ApiError(
                    410,
                    "Expired",
                    "the provided continue parameter is too old to display a consistent list",
                )
        items = [o for o in items if _sort_key(o) > start] if start else items
        limit = int(query.get("limit") or 0)
        metadata: Obj = {"resourceVersion": str(rv)}
        if limit and len(items) > limit:
            items = items[:limit]
            state = {"rv": rv, "start": _sort_key(items[-1])}
            metadata["continue"] = base64.b64encode(json.dumps(state).encode()).decode()
        if res.group in TYPED_GROUPS:
            for item in items:
                item.pop("kind", None)
                item.pop("apiVersion", None)
        return {
            "kind": f"{res.kind}List",
            "apiVersion": api_version,
            "metadata": metadata,
            "items": items,
        }

    def _watch(
        self,
        h: _Handler,
        res: Resource,
        namespace: str | None,
        api_version: str,
        query: dict[str, str],
    ) -> None:
        h.send_response(200)
        h.send_header("Content-Type", "application/json")
        h.send_header("Transfer-Encoding", "chunked")
        h.end_headers()

        def send(event: Obj) -> None:
            data = json.dumps(event).encode() + b"\n"
            h.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
            h.wfile.flush()

        generation = self.watch_generation
        deadline = time.monotonic() + float(query.get("timeoutSeconds") or 1800)
        bookmarks = query.get("allowWatchBookmarks") in ("1", "true")
        last_bookmark = time.monotonic()
        rv_text = query.get("resourceVersion") or "0"
        if rv_text == "0":
            items, rv = self.store.list(res, namespace)
            for item in items:
                send({"type": "ADDED", "object": item})
        else:
            rv = int(rv_text)
        while True:
            try:
                events, current = self._next_events(rv, res, namespace)
            except ApiError as exc:
                send({"type": "ERROR", "object": exc.status()})
                break
            if generation != self.watch_generation or self.stopping.is_set() or self.mode != "ok":
                h._drop()
                return
            for event in events:
                send({"type": event.type, "object": event.obj})
                rv = event.rv
            now = time.monotonic()
            if bookmarks and not events and now - last_bookmark >= self.bookmark_interval:
                rv = current
                meta = {"resourceVersion": str(rv)}
                send(
                    {
                        "type": "BOOKMARK",
                        "object": {"kind": res.kind, "apiVersion": api_version, "metadata": meta},
                    }
                )
                last_bookmark = now
            if now >= deadline:
                break
        h.wfile.write(b"0\r\n\r\n")
        h.wfile.flush()

    def _next_events(self, rv: int, res: Resource, namespace: str | None) -> tuple[list[Any], int]:
        with self.store.cond:
            events = self.store.events_after(rv, res, namespace)
            if not events:
                self.store.cond.wait(0.05)
                events = self.store.events_after(rv, res, namespace)
            return events, self.store.rv


def _sort_key(obj: Obj) -> str:
    meta = obj["metadata"]
    return f"{meta.get('namespace', '')}/{meta['name']}"
