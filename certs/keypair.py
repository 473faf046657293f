"""A certificate together with its private key."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from cryptography import x509

from certs.pem import PrivateKeyPEM, certs_to_pem, public_key_der

__all__ = ["KeyPair", "lifetime_fraction"]


@dataclass(frozen=True)
class KeyPair:
    cert: x509.Certificate
    key: PrivateKeyPEM

    def cert_pem(self) -> bytes:
        return certs_to_pem([self.cert])

    def matches(self) -> bool:
        """True when the private key belongs to the certificate."""
        return public_key_der(self.key.key()) == public_key_der(self.cert)


def lifetime_fraction(cert: x509.Certificate, now: datetime) -> float:
    """How much of the validity period has passed at `now`: 0 at notBefore, 1 at notAfter."""
    start, end = cert.not_valid_before_utc, cert.not_valid_after_utc
    total = (end - start).total_seconds()
    if total <= 0:
        return 1.0
    return (now - start).total_seconds() / total
