"""The CA and serving certificate are what the API server's TLS client accepts."""

from __future__ import annotations

import ipaddress
import subprocess
from datetime import timedelta
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.x509.oid import ExtendedKeyUsageOID
from cryptography.x509.verification import DNSName, IPAddress, PolicyBuilder, Store

from certs.files import write_material
from certs.material import TlsMaterial
from certs.rotation import issue, rotate_ca
from certs.serving import ServingSpec, create_serving_cert
from tests.certs.conftest import NOW, SPEC

SERVICE_NAMES = [
    "draquota",
    "draquota.draquota-system",
    "draquota.draquota-system.svc",
    "draquota.draquota-system.svc.cluster.local",
]


def _ext(cert: x509.Certificate, kind: type) -> object:
    return cert.extensions.get_extension_for_class(kind)


def test_ca_is_a_ca_that_may_only_sign(material: TlsMaterial) -> None:
    ca = material.ca.cert
    basic = _ext(ca, x509.BasicConstraints)
    assert basic.critical and basic.value.ca and basic.value.path_length == 0
    usage = _ext(ca, x509.KeyUsage).value
    assert usage.key_cert_sign and usage.crl_sign
    assert ca.subject == ca.issuer
    assert ca.not_valid_after_utc - NOW == timedelta(days=SPEC.ca_days)


def test_serving_cert_covers_the_service_names_and_extra_names(material: TlsMaterial) -> None:
    san = _ext(material.serving.cert, x509.SubjectAlternativeName).value
    assert san.get_values_for_type(x509.DNSName) == [*SERVICE_NAMES, "localhost"]
    assert san.get_values_for_type(x509.IPAddress) == [ipaddress.ip_address("127.0.0.1")]


def test_serving_cert_is_a_server_leaf(material: TlsMaterial) -> None:
    cert = material.serving.cert
    assert _ext(cert, x509.BasicConstraints).value.ca is False
    usage = _ext(cert, x509.KeyUsage).value
    assert usage.digital_signature and usage.key_encipherment and not usage.key_cert_sign
    assert list(_ext(cert, x509.ExtendedKeyUsage).value) == [
        ExtendedKeyUsageOID.SERVER_AUTH,
        ExtendedKeyUsageOID.CLIENT_AUTH,  # presented by a replica forwarding an admission
    ]
    assert cert.not_valid_after_utc - NOW == timedelta(days=SPEC.days)
    assert cert.not_valid_before_utc < NOW  # backdated for peers whose clock lags
    assert material.serving.matches()


def test_serving_cert_never_outlives_its_ca(material: TlsMaterial) -> None:
    long = create_serving_cert(material.ca, ServingSpec(days=10 * 365), NOW)
    assert long.cert.not_valid_after_utc == material.ca.cert.not_valid_after_utc


@pytest.mark.parametrize(
    "subject",
    [DNSName(n) for n in SERVICE_NAMES]
    + [DNSName("localhost"), IPAddress(ipaddress.ip_address("127.0.0.1"))],
    ids=lambda s: str(s.value),
)
def test_rfc5280_verifier_accepts_the_chain_for_every_name(
    material: TlsMaterial, subject: DNSName | IPAddress
) -> None:
    verifier = (
        PolicyBuilder().store(Store(list(material.bundle))).time(NOW).build_server_verifier(subject)
    )
    chain = verifier.verify(material.serving.cert, [])
    assert chain[-1] == material.ca.cert


def test_rfc5280_verifier_rejects_other_names_and_expired_certs(material: TlsMaterial) -> None:
    store = Store(list(material.bundle))
    wrong_name = PolicyBuilder().store(store).time(NOW).build_server_verifier(DNSName("evil"))
    with pytest.raises(x509.verification.VerificationError):
        wrong_name.verify(material.serving.cert, [])
    later = NOW + timedelta(days=SPEC.days + 1)
    expired = PolicyBuilder().store(store).time(later).build_server_verifier(DNSName("draquota"))
    with pytest.raises(x509.verification.VerificationError):
        expired.verify(material.serving.cert, [])


def _openssl_verify(
    ca_file: Path, cert_file: Path, purpose: str = "sslserver"
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["openssl", "verify", "-purpose", purpose, "-CAfile", str(ca_file), str(cert_file)],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )


def test_openssl_verifies_the_chain_before_and_after_a_ca_rotation(tmp_path: Path) -> None:
    # openssl checks against the real clock, so this material is issued now.
    from datetime import UTC, datetime

    now = datetime.now(UTC)
    before = issue(SPEC, now)
    write_material(tmp_path / "before", before)
    after = rotate_ca(before, SPEC, now)
    write_material(tmp_path / "after", after)
    (tmp_path / "old-ca.crt").write_bytes(before.bundle_pem())

    ok = _openssl_verify(tmp_path / "before" / "ca.crt", tmp_path / "before" / "tls.crt")
    assert ok.returncode == 0, ok.stderr
    # The rotated bundle trusts the old serving certificate and the new one ...
    for served in ("before", "after"):
        result = _openssl_verify(tmp_path / "after" / "ca.crt", tmp_path / served / "tls.crt")
        assert result.returncode == 0, result.stderr
    # ... while the old CA alone does not trust the new one: the bundle is what matters.
    result = _openssl_verify(tmp_path / "old-ca.crt", tmp_path / "after" / "tls.crt")
    assert result.returncode != 0


def test_openssl_accepts_the_serving_certificate_as_a_client_certificate(tmp_path: Path) -> None:
    # A replica presents it to the elected one, whose TLS server checks this purpose.
    from datetime import UTC, datetime

    write_material(tmp_path, issue(SPEC, datetime.now(UTC)))
    result = _openssl_verify(tmp_path / "ca.crt", tmp_path / "tls.crt", purpose="sslclient")
    assert result.returncode == 0, result.stderr
