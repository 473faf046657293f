"""The CA bundle published as caBundle: the signing CA first, then older CAs still trusted.

During a CA rotation the bundle holds the old and the new CA, so a client that trusts the
bundle accepts a serving certificate signed by either one; an old CA leaves the bundle only
when it has expired.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import datetime

from cryptography import x509
from cryptography.hazmat.primitives import serialization

from certs.pem import PrivateKeyPEM, public_key_der

__all__ = ["merge_bundle", "prune_bundle", "signing_ca"]


def _der(cert: x509.Certificate) -> bytes:
    return cert.public_bytes(serialization.Encoding.DER)


def merge_bundle(
    first: x509.Certificate, others: Iterable[x509.Certificate], now: datetime
) -> tuple[x509.Certificate, ...]:
    """`first`, then every other unexpired CA not already present, in order."""
    seen = {_der(first)}
    merged = [first]
    for cert in others:
        if _der(cert) in seen or cert.not_valid_after_utc <= now:
            continue
        seen.add(_der(cert))
        merged.append(cert)
    return tuple(merged)


def prune_bundle(bundle: Sequence[x509.Certificate], now: datetime) -> tuple[x509.Certificate, ...]:
    """The bundle without expired CAs (the first, signing, CA is always kept)."""
    if not bundle:
        return ()
    return merge_bundle(bundle[0], bundle[1:], now)


def signing_ca(bundle: Sequence[x509.Certificate], key: PrivateKeyPEM) -> x509.Certificate:
    """The CA of the bundle that belongs to `key`; ValueError when none does."""
    public = public_key_der(key.key())
    for cert in bundle:
        if public_key_der(cert) == public:
            return cert
    raise ValueError("ca.key belongs to no certificate of ca.crt")
