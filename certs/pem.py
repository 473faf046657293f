"""PEM encoding of keys and certificates, and a private-key type that never prints."""

from __future__ import annotations

from collections.abc import Sequence

from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa

__all__ = [
    "PrivateKey",
    "PrivateKeyPEM",
    "certs_from_pem",
    "certs_to_pem",
    "new_private_key",
    "public_key_der",
]

PrivateKey = ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey


class PrivateKeyPEM:
    """PEM bytes of a private key; `repr`/`str` are redacted so logs never show it."""

    __slots__ = ("_data",)

    def __init__(self, data: bytes) -> None:
        self._data = bytes(data)

    @classmethod
    def from_key(cls, key: PrivateKey) -> PrivateKeyPEM:
        return cls(
            key.private_bytes(
                serialization.Encoding.PEM,
                serialization.PrivateFormat.PKCS8,
                serialization.NoEncryption(),
            )
        )

    def reveal(self) -> bytes:
        """The PEM bytes, for writing to a 0600 file or a Secret."""
        return self._data

    def key(self) -> PrivateKey:
        key = serialization.load_pem_private_key(self._data, password=None)
        if not isinstance(key, ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey):
            raise ValueError("private key: only EC and RSA keys are supported")
        return key

    def __repr__(self) -> str:
        return "PrivateKeyPEM('**********')"

    __str__ = __repr__

    def __eq__(self, other: object) -> bool:
        return isinstance(other, PrivateKeyPEM) and other._data == self._data

    def __hash__(self) -> int:
        return hash(self._data)


def new_private_key() -> ec.EllipticCurvePrivateKey:
    """A fresh EC P-256 key: fast to generate, accepted by the API server and Go's TLS stack."""
    return ec.generate_private_key(ec.SECP256R1())


def public_key_der(key: PrivateKey | x509.Certificate) -> bytes:
    """DER SubjectPublicKeyInfo, to compare a certificate with a private key."""
    public = key.public_key()
    return public.public_bytes(
        serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    )


def certs_to_pem(certs: Sequence[x509.Certificate]) -> bytes:
    return b"".join(cert.public_bytes(serialization.Encoding.PEM) for cert in certs)


def certs_from_pem(data: bytes) -> list[x509.Certificate]:
    """Every certificate in a PEM bundle, in order; ValueError when there is none."""
    certs = x509.load_pem_x509_certificates(data)
    if not certs:
        raise ValueError("no certificate in PEM data")
    return certs
