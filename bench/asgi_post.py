"""One AdmissionReview POSTed straight to an ASGI app in process: no socket, no TLS, so a
benchmark or a trace sees the app's own work only."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import orjson

__all__ = ["post_review"]


async def post_review(app: Callable[..., Any], path: str, body: bytes) -> dict[str, Any]:
    """The `response` of the AdmissionReview the app answers to `body` at `path`."""
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": body, "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    headers = [(b"content-type", b"application/json"), (b"content-length", b"%d" % len(body))]
    scope = {
        "type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "POST",
        "scheme": "https", "path": path, "raw_path": path.encode(), "query_string": b"",
        "root_path": "", "headers": headers, "client": ("127.0.0.1", 1),
        "server": ("127.0.0.1", 443), "state": {},
    }  # fmt: skip
    await app(scope, receive, send)
    if sent[0]["status"] != 200:
        raise RuntimeError(f"{path}: HTTP {sent[0]['status']}")
    review: dict[str, Any] = orjson.loads(b"".join(m.get("body", b"") for m in sent[1:]))
    return dict(review["response"])
