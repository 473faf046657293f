"""Attack 12: anyone who can reach the webhook port could hold quota with made-up reviews.

`draquota serve --client-ca FILE` answers /mutate and /validate only for TLS clients
with a certificate that CA signed (the API server's webhook client certificate);
probes and scrapes without one still reach /healthz, /readyz and /metrics.
"""

from __future__ import annotations

import ssl
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import orjson
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from certs.authority import create_ca
from certs.keypair import KeyPair
from tests.webhook.builders import pod, review
from tests.webhook.edge.test_serve import Server

pytestmark = pytest.mark.integration


def client_cert(ca: KeyPair, directory: Path, name: str) -> tuple[Path, Path]:
    """A client certificate (clientAuth) for `name`, signed by `ca`: (cert file, key file)."""
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.now(UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)]))
        .issuer_name(ca.cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - timedelta(minutes=5))
        .not_valid_after(now + timedelta(days=1))
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False)
        .sign(ca.key.key(), hashes.SHA256())
    )
    cert_file, key_file = directory / f"{name}.crt", directory / f"{name}.key"
    cert_file.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_file.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return cert_file, key_file


@pytest.fixture
def guarded(tmp_path: Path) -> Iterator[tuple[Server, KeyPair]]:
    ca = create_ca(datetime.now(UTC), common_name="apiserver-webhook-client-ca")
    (tmp_path / "client-ca.crt").write_bytes(ca.cert_pem())
    server = Server(tmp_path, "--client-ca", str(tmp_path / "client-ca.crt"))
    try:
        server.wait_ready()
        yield server, ca
    finally:
        server.stop()


def _validate(server: Server, cert: tuple[Path, Path] | None) -> httpx.Response:
    context = server.context()
    if cert is not None:
        context.load_cert_chain(*map(str, cert))
    with httpx.Client(base_url=server.url, verify=context) as client:
        return client.post("/validate", content=orjson.dumps(review(pod("p"))))


def test_12_only_a_client_the_api_servers_ca_signed_is_answered(
    guarded: tuple[Server, KeyPair], tmp_path: Path
) -> None:
    server, ca = guarded
    refused = _validate(server, None)
    assert refused.status_code == 403
    assert "client certificate" in refused.json()["error"]
    with httpx.Client(base_url=server.url, verify=server.context()) as client:
        assert client.get("/healthz").status_code == 200  # kubelet probes carry no certificate
        assert client.get("/readyz").status_code == 200
        assert "draquota_bad_requests_total" in client.get("/metrics").text
    # a certificate from any other CA fails the handshake itself
    stranger = create_ca(datetime.now(UTC), common_name="someone-else")
    with pytest.raises((httpx.TransportError, ssl.SSLError)):
        _validate(server, client_cert(stranger, tmp_path, "intruder"))
    answered = _validate(server, client_cert(ca, tmp_path, "kube-apiserver"))
    assert answered.status_code == 200
    assert answered.json()["response"]["uid"]
