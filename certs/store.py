"""Where TLS material lives: a directory or a Secret, behind one small interface."""

from __future__ import annotations

from typing import Protocol

from certs.material import TlsMaterial

__all__ = ["BundlePublisher", "CertStore", "StoreConflict"]


class StoreConflict(Exception):
    """Someone else changed the stored material since it was loaded (HTTP 409): reload, retry."""


class CertStore(Protocol):
    def load(self) -> TlsMaterial | None:
        """The stored material; None when there is none yet; ValueError when it is unusable."""
        ...

    def save(self, material: TlsMaterial) -> None:
        """Replace the stored material; StoreConflict when it changed since `load`."""
        ...


class BundlePublisher(Protocol):
    def publish(self, bundle_pem: bytes) -> list[str]:
        """Make clients trust `bundle_pem` (e.g. set caBundle); the names it changed."""
        ...
