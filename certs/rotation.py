"""Issuing and renewing the webhook's certificates, and the in-process rotator.

Order matters for a handshake never to fail: a new CA is first *published* (the caBundle
holds old and new CA), and only then is a serving certificate signed by it stored for the
server to pick up. A serving certificate is renewed once `renew_at` (2/3) of its lifetime has
passed, so a missed cycle or two still leaves most of a third of its lifetime.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import UTC, datetime

from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.x509.oid import ExtendedKeyUsageOID

from certs.authority import create_ca
from certs.bundle import merge_bundle, prune_bundle
from certs.keypair import lifetime_fraction
from certs.material import TlsMaterial
from certs.periodic import Periodic
from certs.serving import ServingSpec, create_serving_cert, subject_alt_names
from certs.store import BundlePublisher, CertStore, StoreConflict

__all__ = [
    "RENEW_AT",
    "Rotator",
    "issue",
    "plan",
    "renew_serving",
    "rotate_ca",
    "serving_problems",
]

RENEW_AT = 2 / 3
log = logging.getLogger("draquota.certs")


def _utcnow() -> datetime:
    return datetime.now(UTC)


def issue(spec: ServingSpec, now: datetime) -> TlsMaterial:
    """Fresh CA and serving certificate."""
    ca = create_ca(now, days=spec.ca_days)
    return TlsMaterial(ca=ca, bundle=(ca.cert,), serving=create_serving_cert(ca, spec, now))


def renew_serving(material: TlsMaterial, spec: ServingSpec, now: datetime) -> TlsMaterial:
    """A new serving certificate from the current CA; expired CAs leave the bundle."""
    return TlsMaterial(
        ca=material.ca,
        bundle=prune_bundle(material.bundle, now),
        serving=create_serving_cert(material.ca, spec, now),
    )


def rotate_ca(material: TlsMaterial, spec: ServingSpec, now: datetime) -> TlsMaterial:
    """A new CA signs a new serving certificate; the bundle keeps the old CAs until they expire."""
    ca = create_ca(now, days=spec.ca_days)
    return TlsMaterial(
        ca=ca,
        bundle=merge_bundle(ca.cert, material.bundle, now),
        serving=create_serving_cert(ca, spec, now),
    )


def _issued_by(cert: x509.Certificate, ca: x509.Certificate) -> bool:
    try:
        cert.verify_directly_issued_by(ca)
    except (ValueError, TypeError, InvalidSignature):
        return False
    return True


def serving_problems(
    material: TlsMaterial, spec: ServingSpec, now: datetime, renew_at: float = RENEW_AT
) -> list[str]:
    """Why the serving certificate must be replaced (empty: it is fine)."""
    cert = material.serving.cert
    problems = []
    if lifetime_fraction(cert, now) >= renew_at:
        problems.append(f"serving certificate past {renew_at:.0%} of its lifetime")
    dns, ips = subject_alt_names(cert)
    missing = [n for n in spec.all_dns_names() if n not in dns]
    missing += [str(ip) for ip in spec.ip_addresses() if ip not in ips]
    if missing:
        problems.append(f"serving certificate lacks names {', '.join(missing)}")
    if not _issued_by(cert, material.ca.cert):
        problems.append("serving certificate not issued by the current CA")
    if not _client_auth(cert):  # a replica presents it when it forwards an admission
        problems.append("serving certificate not usable for client authentication")
    return problems


def _client_auth(cert: x509.Certificate) -> bool:
    try:
        usage = cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    except x509.ExtensionNotFound:
        return True  # no restriction
    return ExtendedKeyUsageOID.CLIENT_AUTH in usage


def plan(
    material: TlsMaterial | None,
    spec: ServingSpec,
    now: datetime,
    renew_at: float = RENEW_AT,
    force_serving: bool = False,
    force_ca: bool = False,
) -> tuple[TlsMaterial, str] | None:
    """The material to store next and why, or None when nothing needs to change."""
    if material is None:
        return issue(spec, now), "no certificates yet"
    if force_ca or lifetime_fraction(material.ca.cert, now) >= renew_at:
        reason = "CA rotation requested" if force_ca else f"CA past {renew_at:.0%} of its lifetime"
        return rotate_ca(material, spec, now), reason
    problems = serving_problems(material, spec, now, renew_at)
    if force_serving or problems:
        return renew_serving(material, spec, now), "; ".join(problems) or "renewal requested"
    pruned = prune_bundle(material.bundle, now)
    if pruned != material.bundle:
        return TlsMaterial(material.ca, pruned, material.serving), "expired CA left the bundle"
    return None


class Rotator:
    """Keeps the stored certificates valid and the caBundle published, in a background thread.

    `start()` runs one pass synchronously (so certificates exist before the server is ready),
    then repeats every `interval` seconds until `stop()`. Several replicas may run one each:
    the store's optimistic concurrency (StoreConflict) makes all but one writer back off.
    """

    def __init__(
        self,
        store: CertStore,
        spec: ServingSpec | None = None,
        publisher: BundlePublisher | None = None,
        interval: float = 60.0,
        renew_at: float = RENEW_AT,
        clock: Callable[[], datetime] = _utcnow,
    ) -> None:
        self.store = store
        self.spec = spec or ServingSpec()
        self.publisher = publisher
        self.interval = interval
        self.renew_at = renew_at
        self.clock = clock
        self.last_error = ""
        self._periodic = Periodic("draquota-cert-rotator", interval, self._pass)

    def run_once(self) -> str:
        """One pass: renew if needed (publishing the bundle first), else re-publish; what it did."""
        try:
            material = self.store.load()
        except ValueError as exc:
            log.warning("stored certificates unusable, issuing new ones: %s", exc)
            material = None
        step = plan(material, self.spec, self.clock(), self.renew_at)
        if step is None:
            if material is not None and self.publisher is not None:
                self.publisher.publish(material.bundle_pem())
            return ""
        new, reason = step
        if self.publisher is not None:
            self.publisher.publish(new.bundle_pem())
        try:
            self.store.save(new)
        except StoreConflict:
            # Another replica renewed first, and our publish may have replaced its bundle:
            # publish the bundle of the material that won, before any server presents it.
            winner = self.store.load()
            if winner is not None and self.publisher is not None:
                self.publisher.publish(winner.bundle_pem())
            return "conflict: another writer renewed first"
        log.info("certificates renewed: %s", reason)
        return reason

    def _pass(self) -> None:
        try:
            self.run_once()
            self.last_error = ""
        except Exception as exc:  # keep rotating after API errors; readiness reports them
            self.last_error = f"{type(exc).__name__}: {exc}"
            log.warning("certificate rotation failed: %s", self.last_error)

    def start(self) -> None:
        """One pass now (a certificate exists when this returns), then one per interval."""
        if self._periodic.running:
            return
        self._pass()
        self._periodic.start()

    def stop(self, timeout: float = 5.0) -> None:
        self._periodic.stop(timeout)
