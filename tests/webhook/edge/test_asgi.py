"""The admission routes answered at the ASGI level: what an HTTP client sees of them."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

import orjson
import pytest
from starlette.types import Receive, Scope

from webhook.edge.asgi import Answer, BadBody, WebhookApp, json_answer, read_body

LIMIT = 64


def _app() -> tuple[WebhookApp, list[bytes]]:
    """An app whose /echo answers the body it read, and whose /boom fails."""
    app = WebhookApp(openapi_url=None, docs_url=None, redoc_url=None)
    bodies: list[bytes] = []

    async def echo(scope: Scope, receive: Receive) -> Answer:
        try:
            body = await read_body(scope, receive, LIMIT)
        except BadBody as exc:
            return exc.answer
        bodies.append(body)
        return json_answer(200, {"body": body.decode()})

    async def boom(scope: Scope, receive: Receive) -> Answer:
        raise RuntimeError("a bug")

    @app.get("/healthz")
    async def healthz() -> dict[str, str]:
        return {"status": "ok"}

    app.endpoints.update({"/echo": echo, "/boom": boom})
    return app, bodies


def _call(
    app: WebhookApp,
    path: str,
    chunks: Sequence[bytes] = (b"",),
    method: str = "POST",
    headers: Sequence[tuple[bytes, bytes]] = (),
    disconnect: bool = False,
) -> list[dict[str, Any]]:
    """The messages the app sends for one request whose body arrives in `chunks` (then a
    disconnect, with `disconnect`)."""
    messages = [
        {"type": "http.request", "body": c, "more_body": i < len(chunks) - 1 or disconnect}
        for i, c in enumerate(chunks)
    ]
    if disconnect:
        messages.append({"type": "http.disconnect"})
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return messages.pop(0) if messages else {"type": "http.disconnect"}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    scope = {
        "type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": method,
        "scheme": "https", "path": path, "raw_path": path.encode(), "query_string": b"",
        "root_path": "", "headers": list(headers), "client": ("127.0.0.1", 1),
        "server": ("127.0.0.1", 443),
    }  # fmt: skip
    asyncio.run(app(scope, receive, send))
    return sent


def _status_headers_body(sent: list[dict[str, Any]]) -> tuple[int, dict[bytes, bytes], bytes]:
    start, *rest = sent
    body = b"".join(m.get("body", b"") for m in rest)
    return start["status"], dict(start["headers"]), body


def test_body_in_chunks_is_read_whole_and_answered_with_its_length() -> None:
    app, bodies = _app()
    status, headers, body = _status_headers_body(_call(app, "/echo", [b'{"a"', b":", b"1}"]))
    assert (status, bodies) == (200, [b'{"a":1}'])
    assert headers[b"content-type"] == b"application/json"
    assert headers[b"content-length"] == str(len(body)).encode()
    assert orjson.loads(body) == {"body": '{"a":1}'}


@pytest.mark.parametrize(
    ("chunks", "headers", "status"),
    [
        ([b"x" * (LIMIT + 1)], [(b"content-length", b"%d" % (LIMIT + 1))], 413),
        ([b"x" * 40, b"x" * 40], [], 413),  # no Content-Length: counted as it streams
        ([b"x"], [(b"content-length", b"1x")], 400),
    ],
    ids=["declared-too-large", "streamed-too-large", "bad-content-length"],
)
def test_a_body_that_cannot_be_read_is_refused_with_a_json_error(
    chunks: list[bytes], headers: list[tuple[bytes, bytes]], status: int
) -> None:
    app, bodies = _app()
    got, _, body = _status_headers_body(_call(app, "/echo", chunks, headers=headers))
    assert (got, bodies) == (status, [])
    assert orjson.loads(body)["code"] == status


def test_another_method_is_not_allowed() -> None:
    app, bodies = _app()
    status, headers, _ = _status_headers_body(_call(app, "/echo", method="GET"))
    assert (status, headers[b"allow"], bodies) == (405, b"POST", [])


def test_a_client_that_leaves_before_its_body_ends_gets_nothing() -> None:
    app, bodies = _app()
    assert _call(app, "/echo", [b"partial"], disconnect=True) == []
    assert bodies == []


def test_an_endpoint_error_is_a_500_json_answer_and_logged(
    caplog: pytest.LogCaptureFixture,
) -> None:
    app, _ = _app()
    status, _, body = _status_headers_body(_call(app, "/boom"))
    assert (status, orjson.loads(body)["code"]) == (500, 500)
    assert "admission endpoint failed" in caplog.text


def test_other_paths_are_fastapi_routes() -> None:
    app, bodies = _app()
    status, _, body = _status_headers_body(_call(app, "/healthz", method="GET"))
    assert (status, orjson.loads(body), bodies) == (200, {"status": "ok"}, [])
    assert _status_headers_body(_call(app, "/nowhere"))[0] == 404
