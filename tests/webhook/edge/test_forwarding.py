"""A replica that is not elected forwards /validate to the elected one, or denies it.

The elected replica is a real HTTPS server on 127.0.0.1 (uvicorn, as `draquota serve` runs
it: `webhook.edge.serve`), with certificates from `certs/`; the reviews are ones the real API
server sent (`forwarding_lab`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import orjson
import pytest
from fastapi import FastAPI, Request, Response

from certs.files import write_material
from certs.material import TlsMaterial
from certs.rotation import issue, renew_serving
from certs.serving import ServingSpec
from quota.settings import Settings
from tests.webhook.builders import FakeBackend, cluster_state
from tests.webhook.forwarding_lab import (
    POD_REF,
    Election,
    closed_port,
    recorded_review,
    serving,
    uid_of,
)
from webhook.edge.app import create_app
from webhook.edge.forwarding import (
    FORWARDED_HEADER,
    UNAVAILABLE,
    Forwarded,
    Forwarder,
    advertise_address,
)
from webhook.edge.review import Outcome, parse_review, review_response
from webhook.ledger.memory import MemoryLedger

pytestmark = pytest.mark.integration

SPEC = ServingSpec()  # the Service's names only: connecting to 127.0.0.1 verifies them by SNI
Answer = Callable[[bytes], Awaitable[tuple[int, bytes]]]


def _material(directory: Path, material: TlsMaterial | None = None) -> TlsMaterial:
    material = material or issue(SPEC, datetime.now(UTC))
    write_material(directory, material)
    return material


async def _allow(body: bytes) -> tuple[int, bytes]:
    outcome = Outcome(True, warnings=("decided by the elected replica",))
    return 200, orjson.dumps(review_response(uid_of(body), outcome, mutating=False))


class ElectedReplica:
    """Stands for the elected replica: keeps what it receives, answers as `answer` says;
    with `close`, closes each connection after its answer (the next one is a new handshake)."""

    def __init__(self, answer: Answer = _allow, close: bool = False) -> None:
        self.received: list[tuple[dict[str, str], bytes, Any]] = []
        self.answered: list[bytes] = []
        self.app = FastAPI()

        @self.app.post("/validate")
        async def validate(request: Request) -> Response:
            body = await request.body()
            self.received.append((dict(request.headers), body, request.client))
            status, content = await answer(body)
            self.answered.append(content)
            headers = {"connection": "close"} if close else None
            return Response(
                content, status_code=status, media_type="application/json", headers=headers
            )


def _forward(forwarder: Forwarder, *bodies: bytes) -> list[Forwarded]:
    async def run() -> list[Forwarded]:
        try:
            return [await forwarder.forward(parse_review(body), body) for body in bodies]
        finally:
            await forwarder.aclose()

    return asyncio.run(run())


def _forwarder(certs: Path, address: str, deadline: float = 2.0) -> Forwarder:
    return Forwarder(Election(lead=False, address=address), certs, deadline, "replica-1")


def _assert_denied(forwarded: Forwarded, body: bytes, why: str) -> None:
    status, content = forwarded.answer
    assert (status, forwarded.outcome) == (200, "unavailable")
    review = orjson.loads(content)
    assert (review["apiVersion"], review["kind"]) == ("admission.k8s.io/v1", "AdmissionReview")
    response = review["response"]
    assert response["uid"] == uid_of(body) and response["allowed"] is False
    assert response["status"]["code"] == 403 and response["status"]["reason"] == UNAVAILABLE
    message = response["status"]["message"]
    assert message.startswith(f"{POD_REF}: ") and message.endswith(": submit again")
    assert why in message


def test_the_body_arrives_byte_identical_with_the_header_and_the_answer_comes_back_as_is(
    tmp_path: Path,
) -> None:
    _material(tmp_path)
    elected = ElectedReplica()
    body = recorded_review()
    with serving(elected.app, tmp_path) as server:
        first, second = _forward(_forwarder(tmp_path, server.url), body, body)
    assert first == second == Forwarded((200, elected.answered[0]), "forwarded")
    (headers, received, client), (_, _, again) = elected.received
    assert received == body
    assert headers[FORWARDED_HEADER.lower()] == "replica-1"
    assert client == again  # one connection, kept alive


def test_without_an_elected_replica_the_request_is_denied_naming_the_object(
    tmp_path: Path,
) -> None:
    _material(tmp_path)
    body = recorded_review()
    [forwarded] = _forward(_forwarder(tmp_path, ""), body)
    _assert_denied(forwarded, body, "no replica is elected")


def test_an_unreachable_elected_replica_is_denied(tmp_path: Path) -> None:
    _material(tmp_path)
    body = recorded_review("job-create")
    [forwarded] = _forward(_forwarder(tmp_path, f"https://127.0.0.1:{closed_port()}"), body)
    response = orjson.loads(forwarded.answer[1])["response"]
    assert forwarded.outcome == "unavailable" and response["allowed"] is False
    assert response["uid"] == uid_of(body)
    assert response["status"]["message"].startswith("Job team-a/")


def test_an_elected_replica_that_does_not_answer_in_time_is_denied(tmp_path: Path) -> None:
    _material(tmp_path)

    async def late(body: bytes) -> tuple[int, bytes]:
        await asyncio.sleep(3)
        return await _allow(body)

    body = recorded_review()
    with serving(ElectedReplica(late).app, tmp_path) as server:
        [forwarded] = _forward(_forwarder(tmp_path, server.url, deadline=0.1), body)
    _assert_denied(forwarded, body, "did not answer within 0.6s")


async def _server_error(body: bytes) -> tuple[int, bytes]:
    return 500, b'{"error": "internal error", "code": 500}'


async def _not_json(body: bytes) -> tuple[int, bytes]:
    return 200, b"<html>a proxy's error page</html>"


async def _another_uid(body: bytes) -> tuple[int, bytes]:
    review = review_response("another-uid", Outcome(True), mutating=False)
    return 200, orjson.dumps(review)


async def _no_verdict(body: bytes) -> tuple[int, bytes]:
    review = review_response(uid_of(body), Outcome(True), mutating=False)
    del review["response"]["allowed"]  # type: ignore[misc]
    return 200, orjson.dumps(review)


@pytest.mark.parametrize(
    ("answer", "why"),
    [
        (_server_error, "answered HTTP 500"),
        (_not_json, "not an AdmissionReview for this request"),
        (_another_uid, "not an AdmissionReview for this request"),
        (_no_verdict, "not an AdmissionReview for this request"),
    ],
    ids=["http-500", "not-json", "another-uid", "no-allowed"],
)
def test_an_answer_that_is_not_a_verdict_on_this_request_is_a_denial(
    tmp_path: Path, answer: Answer, why: str
) -> None:
    _material(tmp_path)
    body = recorded_review()
    with serving(ElectedReplica(answer).app, tmp_path) as server:
        [forwarded] = _forward(_forwarder(tmp_path, server.url), body)
    _assert_denied(forwarded, body, why)


def test_a_replica_with_a_certificate_of_another_ca_is_never_sent_the_request(
    tmp_path: Path,
) -> None:
    ours, theirs = tmp_path / "ours", tmp_path / "theirs"
    _material(ours)
    _material(theirs)
    elected = ElectedReplica()
    body = recorded_review()
    with serving(elected.app, theirs) as server:
        [forwarded] = _forward(_forwarder(ours, server.url), body)
    _assert_denied(forwarded, body, "unreachable")
    assert elected.received == []


def test_a_certificate_of_our_ca_for_another_service_is_refused(tmp_path: Path) -> None:
    ours, theirs = tmp_path / "ours", tmp_path / "theirs"
    material = _material(ours)
    other = renew_serving(material, ServingSpec(service="other"), datetime.now(UTC))
    _material(theirs, other)
    elected = ElectedReplica()
    body = recorded_review()
    with serving(elected.app, theirs) as server:
        [forwarded] = _forward(_forwarder(ours, server.url), body)
    _assert_denied(forwarded, body, "unreachable")
    assert elected.received == []


def test_a_new_ca_and_certificate_are_used_once_written(tmp_path: Path) -> None:
    _material(tmp_path)
    elected = ElectedReplica(close=True)
    body = recorded_review()
    with serving(elected.app, tmp_path) as server:
        forwarder = _forwarder(tmp_path, server.url)

        async def run() -> list[Forwarded]:
            try:
                before = await forwarder.forward(parse_review(body), body)
                _material(tmp_path)  # a new CA: the old one signs nothing served from now on
                assert server.reloader.check()
                return [before, await forwarder.forward(parse_review(body), body)]
            finally:
                await forwarder.aclose()

        outcomes = [forwarded.outcome for forwarded in asyncio.run(run())]
    assert outcomes == ["forwarded", "forwarded"]
    assert len(elected.received) == 2


def test_an_elected_replica_that_requires_client_certificates_accepts_the_replicas(
    tmp_path: Path,
) -> None:
    replicas, api_server = tmp_path / "tls", tmp_path / "api-server"
    _material(replicas)
    _material(api_server)  # another CA: the one that signs the API server's client certificate
    backend = FakeBackend(cluster_state(2))
    ledger = MemoryLedger(backend.state, Settings())
    app = create_app(backend, ledger, Settings(), require_client_cert=True)
    body = recorded_review()
    with serving(app, replicas, client_ca=api_server / "ca.crt") as server:
        forwarder = _forwarder(replicas, server.url)

        async def run() -> list[Forwarded]:
            try:
                before = await forwarder.forward(parse_review(body), body)
                _material(replicas)  # a CA rotation: the replicas' new certificates are trusted
                assert server.reloader.check()
                return [before, await forwarder.forward(parse_review(body), body)]
            finally:
                await forwarder.aclose()

        answers = asyncio.run(run())
    assert [forwarded.outcome for forwarded in answers] == ["forwarded", "forwarded"]
    for forwarded in answers:
        assert orjson.loads(forwarded.answer[1])["response"]["uid"] == uid_of(body)


@pytest.mark.parametrize(
    ("explicit", "host", "pod_ip", "address"),
    [
        ("https://draquota-0.draquota:9443/", "0.0.0.0", "10.0.0.7", "https://draquota-0.draquota:9443"),
        (None, "0.0.0.0", "10.0.0.7", "https://10.0.0.7:8443"),
        (None, "0.0.0.0", "fd00::7", "https://[fd00::7]:8443"),
        (None, "127.0.0.1", "", "https://127.0.0.1:8443"),
        (None, "::1", "", "https://[::1]:8443"),
        (None, "0.0.0.0", "", ""),
        (None, "::", "", ""),
    ],
)  # fmt: skip
def test_the_advertised_address(explicit: str | None, host: str, pod_ip: str, address: str) -> None:
    assert advertise_address(explicit, host, 8443, pod_ip) == address


@pytest.mark.parametrize(
    "explicit",
    ["http://10.0.0.7:8443", "10.0.0.7:8443", "https://h/x", "https://h:99999", "https://h?x=1"],
)
def test_an_advertised_address_that_is_not_an_https_origin_is_refused(explicit: str) -> None:
    with pytest.raises(ValueError, match="--advertise-address"):
        advertise_address(explicit, "0.0.0.0", 8443, "")
