"""The self-signed certificate authority that signs the webhook's serving certificate."""

from __future__ import annotations

from datetime import datetime, timedelta

from cryptography import x509
from cryptography.hazmat.primitives import hashes
from cryptography.x509.oid import NameOID

from certs.keypair import KeyPair
from certs.pem import PrivateKeyPEM, new_private_key

__all__ = ["BACKDATE", "CA_COMMON_NAME", "create_ca"]

CA_COMMON_NAME = "draquota-ca"
# Certificates start a little in the past so that a peer whose clock lags still accepts them.
BACKDATE = timedelta(minutes=5)


def create_ca(now: datetime, days: int = 3650, common_name: str = CA_COMMON_NAME) -> KeyPair:
    """A new CA: cA=true, pathLen 0, keyCertSign + cRLSign, valid `days` from `now`."""
    if days < 1:
        raise ValueError(f"CA validity must be at least 1 day, got {days}")
    key = new_private_key()
    # The serial number in the name keeps old and new CA apart in a bundle during rotation.
    serial = x509.random_serial_number()
    name = x509.Name(
        [
            x509.NameAttribute(NameOID.COMMON_NAME, common_name),
            x509.NameAttribute(NameOID.SERIAL_NUMBER, format(serial, "x")[:64]),
        ]
    )
    ski = x509.SubjectKeyIdentifier.from_public_key(key.public_key())
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(serial)
        .not_valid_before(now - BACKDATE)
        .not_valid_after(now + timedelta(days=days))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(ski, critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_subject_key_identifier(ski), critical=False
        )
        .sign(key, hashes.SHA256())
    )
    return KeyPair(cert=cert, key=PrivateKeyPEM.from_key(key))
