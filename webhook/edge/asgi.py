"""The admission endpoints at the ASGI level: a body read within a limit, a JSON answer.

`/mutate` and `/validate` are the only routes the API server calls, once per admission,
and an admission's own work is a few tens of microseconds: the layers a framework wraps
around a route (error, telemetry, body-limit and exception middleware, routing, a
request and a response object) cost about as much again on every call. So `WebhookApp`
answers those paths itself, from the ASGI scope, and hands every other request (probes,
metrics, lifespan) to FastAPI as usual. What those layers gave the admission routes is
kept here: 405 for another method, a body read within a limit (`read_body`), nothing
sent to a client that left, and a 500 for an error the endpoint did not handle.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any

import orjson
from fastapi import FastAPI
from starlette.types import Receive, Scope, Send

__all__ = [
    "Answer",
    "BadBody",
    "Endpoint",
    "Receive",
    "Scope",
    "Send",
    "WebhookApp",
    "json_answer",
    "read_body",
]

Answer = tuple[int, bytes]  # (HTTP status, the JSON document, encoded)
# An endpoint reads its request (scope, and the body through `read_body`) and answers.
Endpoint = Callable[[Scope, Receive], Awaitable[Answer]]

log = logging.getLogger("draquota.admission")


class BadBody(Exception):
    """The body cannot be read as sent: over the limit, or a Content-Length that is not a
    number. `answer` is what to send back."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.answer = json_answer(status, {"error": message, "code": status})


class _Disconnected(Exception):
    """The client went away before its body was complete: nobody to answer."""


def json_answer(status: int, document: Any) -> Answer:
    return status, orjson.dumps(document)


async def read_body(scope: Scope, receive: Receive, limit: int) -> bytes:
    """The whole request body; `BadBody` as soon as it is known to exceed `limit` bytes."""
    for name, value in scope["headers"]:
        if name == b"content-length":
            try:
                declared = int(value)
            except ValueError:
                raise BadBody(400, "invalid Content-Length header") from None
            if declared > limit:
                raise BadBody(413, f"request body larger than {limit} bytes")
            break
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise _Disconnected
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            raise BadBody(413, f"request body larger than {limit} bytes")
        chunks.append(chunk)
        if not message.get("more_body", False):
            return chunks[0] if len(chunks) == 1 else b"".join(chunks)


class WebhookApp(FastAPI):
    """FastAPI, with the POST routes in `endpoints` (path -> endpoint) answered before it.

    Whatever an endpoint raises is logged and answered with a 500 and a JSON error, as
    FastAPI's error middleware would.
    """

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.endpoints: dict[str, Endpoint] = {}

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        endpoint = self.endpoints.get(scope["path"]) if scope["type"] == "http" else None
        if endpoint is None:
            await super().__call__(scope, receive, send)
        elif scope["method"] != "POST":
            await _send(send, 405, b"Method Not Allowed", b"text/plain; charset=utf-8", POST)
        else:
            try:
                status, body = await endpoint(scope, receive)
            except _Disconnected:
                return
            except Exception:
                log.exception("admission endpoint failed", extra={"endpoint": scope["path"]})
                status, body = json_answer(500, {"error": "internal error", "code": 500})
            await _send(send, status, body)


POST = [(b"allow", b"POST")]


async def _send(
    send: Send,
    status: int,
    body: bytes,
    media_type: bytes = b"application/json",
    headers: list[tuple[bytes, bytes]] | None = None,
) -> None:
    fields = [(b"content-type", media_type), (b"content-length", b"%d" % len(body))]
    start = {"type": "http.response.start", "status": status, "headers": fields + (headers or [])}
    await send(start)
    await send({"type": "http.response.body", "body": body})
