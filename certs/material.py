"""Everything the webhook's TLS needs: signing CA, trusted CA bundle, serving certificate."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from cryptography import x509

from certs.bundle import signing_ca
from certs.keypair import KeyPair
from certs.pem import PrivateKeyPEM, certs_from_pem, certs_to_pem

__all__ = ["CA_CRT", "CA_KEY", "KEY_NAMES", "TLS_CRT", "TLS_KEY", "TlsMaterial"]

# Key names of a kubernetes.io/tls Secret (tls.crt, tls.key) plus the CA, so a mounted Secret
# and a certificate directory look the same.
TLS_CRT = "tls.crt"
TLS_KEY = "tls.key"
CA_CRT = "ca.crt"
CA_KEY = "ca.key"
KEY_NAMES = (TLS_CRT, TLS_KEY, CA_CRT, CA_KEY)


@dataclass(frozen=True)
class TlsMaterial:
    ca: KeyPair
    bundle: tuple[x509.Certificate, ...]
    serving: KeyPair

    def bundle_pem(self) -> bytes:
        return certs_to_pem(self.bundle)

    def to_files(self) -> dict[str, bytes]:
        """Contents by key name; tls.key and ca.key are secret."""
        return {
            TLS_CRT: self.serving.cert_pem(),
            TLS_KEY: self.serving.key.reveal(),
            CA_CRT: self.bundle_pem(),
            CA_KEY: self.ca.key.reveal(),
        }

    @classmethod
    def from_files(cls, files: Mapping[str, bytes]) -> TlsMaterial:
        """Parse the four files; ValueError naming the file when one is missing or invalid."""
        for name in KEY_NAMES:
            if not files.get(name):
                raise ValueError(f"{name}: missing or empty")
        try:
            bundle = tuple(certs_from_pem(files[CA_CRT]))
        except ValueError as exc:
            raise ValueError(f"{CA_CRT}: {exc}") from None
        ca_key = PrivateKeyPEM(files[CA_KEY])
        serving_key = PrivateKeyPEM(files[TLS_KEY])
        for name, key in ((CA_KEY, ca_key), (TLS_KEY, serving_key)):
            try:
                key.key()
            except (ValueError, TypeError) as exc:
                raise ValueError(f"{name}: not a usable private key: {exc}") from None
        try:
            serving_cert = certs_from_pem(files[TLS_CRT])[0]
        except ValueError as exc:
            raise ValueError(f"{TLS_CRT}: {exc}") from None
        ca_cert = signing_ca(bundle, ca_key)
        # Keep the signing CA first: it is the one new serving certificates are issued by.
        ordered = (ca_cert, *(c for c in bundle if c != ca_cert))
        serving = KeyPair(serving_cert, serving_key)
        if not serving.matches():
            raise ValueError(f"{TLS_KEY}: does not belong to {TLS_CRT}")
        return cls(ca=KeyPair(ca_cert, ca_key), bundle=ordered, serving=serving)
