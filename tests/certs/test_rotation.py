"""When certificates are renewed, and that the caBundle is published before a new CA is used."""

from __future__ import annotations

import threading
from dataclasses import dataclass
from datetime import datetime, timedelta

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes
from cryptography.x509.oid import ExtendedKeyUsageOID

from certs.keypair import KeyPair
from certs.material import TlsMaterial
from certs.rotation import Rotator, plan, rotate_ca
from certs.serving import ServingSpec
from certs.store import StoreConflict
from tests.certs.conftest import NOW, SPEC

DAY = timedelta(days=1)


@dataclass(frozen=True)
class Case:
    id: str
    at: timedelta  # time after issue
    spec: ServingSpec = SPEC
    renewed: bool = False  # a new serving certificate
    ca_rotated: bool = False


CASES = [
    Case("fresh-certificates-are-kept", at=DAY),
    Case("half-way-is-kept", at=45 * DAY),
    Case("serving-past-two-thirds-is-renewed", at=61 * DAY, renewed=True),
    Case("expired-serving-is-renewed", at=91 * DAY, renewed=True),
    Case(
        "missing-extra-name-is-renewed",
        at=DAY,
        spec=ServingSpec(dns_names=("localhost", "webhook.example"), ips=("127.0.0.1",)),
        renewed=True,
    ),
    Case(
        "other-service-is-renewed",
        at=DAY,
        spec=ServingSpec(service="dq", dns_names=("localhost",), ips=("127.0.0.1",)),
        renewed=True,
    ),
    Case("ca-past-two-thirds-is-rotated", at=244 * DAY, renewed=True, ca_rotated=True),
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_plan(case: Case, material: TlsMaterial) -> None:
    now = NOW + case.at
    step = plan(material, case.spec, now)
    if not case.renewed:
        assert step is None
        return
    assert step is not None
    new, reason = step
    assert reason
    assert new.serving.cert != material.serving.cert
    assert new.serving.cert.not_valid_before_utc < now
    assert plan(new, case.spec, now) is None  # renewing once is enough
    if case.ca_rotated:
        assert new.ca.cert != material.ca.cert
        assert new.bundle == (new.ca.cert, material.ca.cert)
    else:
        assert new.ca == material.ca
        assert new.bundle == material.bundle


def test_nothing_stored_issues_everything() -> None:
    step = plan(None, SPEC, NOW)
    assert step is not None
    new, reason = step
    assert reason == "no certificates yet"
    assert new.bundle == (new.ca.cert,)


def test_old_ca_leaves_the_bundle_only_once_expired(material: TlsMaterial) -> None:
    rotated = rotate_ca(material, SPEC, NOW + 244 * DAY)
    old_ca_expiry = material.ca.cert.not_valid_after_utc
    for at, old_ca_trusted in ((old_ca_expiry - DAY, True), (old_ca_expiry + DAY, False)):
        step = plan(rotated, SPEC, at)
        bundle = step[0].bundle if step else rotated.bundle
        assert bundle[0] == rotated.ca.cert
        assert (material.ca.cert in bundle) is old_ca_trusted


def test_serving_cert_from_another_ca_is_renewed(material: TlsMaterial) -> None:
    other = rotate_ca(material, SPEC, NOW)
    mixed = TlsMaterial(ca=material.ca, bundle=material.bundle, serving=other.serving)
    step = plan(mixed, SPEC, NOW)
    assert step is not None and "not issued by the current CA" in step[1]


def test_a_serving_cert_a_replica_cannot_present_as_client_is_renewed(
    material: TlsMaterial,
) -> None:
    """Issued before replicas forwarded to each other: serverAuth only."""
    current = material.serving.cert
    builder = (
        x509.CertificateBuilder()
        .subject_name(current.subject)
        .issuer_name(current.issuer)
        .public_key(current.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(current.not_valid_before_utc)
        .not_valid_after(current.not_valid_after_utc)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
    )
    for extension in current.extensions:
        if not isinstance(extension.value, x509.ExtendedKeyUsage):
            builder = builder.add_extension(extension.value, extension.critical)
    server_only = builder.sign(material.ca.key.key(), hashes.SHA256())
    old = TlsMaterial(material.ca, material.bundle, KeyPair(server_only, material.serving.key))
    step = plan(old, SPEC, NOW)
    assert step is not None and "client authentication" in step[1]
    assert plan(step[0], SPEC, NOW) is None  # the renewed one is fine


class FakeStore:
    def __init__(self, material: TlsMaterial | None, log: list[str]) -> None:
        self.material = material
        self.log = log
        self.conflicts = 0
        self.other_writer: TlsMaterial | None = None

    def load(self) -> TlsMaterial | None:
        return self.material

    def save(self, material: TlsMaterial) -> None:
        if self.conflicts:
            self.conflicts -= 1
            if self.other_writer is not None:
                self.material = self.other_writer
            raise StoreConflict("changed")
        self.log.append("save")
        self.material = material


class FakePublisher:
    def __init__(self, store: FakeStore, log: list[str]) -> None:
        self.store = store
        self.log = log
        self.published: list[bytes] = []

    def publish(self, bundle_pem: bytes) -> list[str]:
        self.log.append("publish")
        self.published.append(bundle_pem)
        return []


def _rotator(material: TlsMaterial | None, at: datetime) -> tuple[Rotator, FakeStore, list[str]]:
    log: list[str] = []
    store = FakeStore(material, log)
    publisher = FakePublisher(store, log)
    return Rotator(store, SPEC, publisher, interval=3600, clock=lambda: at), store, log


def test_rotator_publishes_the_new_bundle_before_storing_the_new_ca(
    material: TlsMaterial,
) -> None:
    rotator, store, log = _rotator(material, NOW + 244 * DAY)
    assert "CA" in rotator.run_once()
    assert log == ["publish", "save"]
    assert rotator.publisher.published == [store.material.bundle_pem()]
    assert store.material.ca != material.ca


def test_rotator_republishes_an_unchanged_bundle(material: TlsMaterial) -> None:
    # A webhook configuration re-applied without caBundle gets it back within one interval.
    rotator, store, log = _rotator(material, NOW + DAY)
    assert rotator.run_once() == ""
    assert log == ["publish"]
    assert store.material is material


def test_rotator_backs_off_when_another_replica_renewed_first(material: TlsMaterial) -> None:
    rotator, store, _ = _rotator(material, NOW + 61 * DAY)
    store.conflicts = 1
    assert rotator.run_once().startswith("conflict")
    assert store.material is material
    assert rotator.run_once() != ""
    assert store.material is not material


def test_rotator_losing_a_ca_rotation_race_publishes_the_winners_bundle(
    material: TlsMaterial,
) -> None:
    at = NOW + 244 * DAY
    rotator, store, log = _rotator(material, at)
    store.conflicts = 1
    store.other_writer = rotate_ca(material, SPEC, at)  # the other replica's new CA
    rotator.run_once()
    assert log == ["publish", "publish"]
    assert rotator.publisher.published[-1] == store.other_writer.bundle_pem()
    assert store.material is store.other_writer


def test_rotator_start_issues_before_returning_and_stop_ends_the_thread() -> None:
    rotator, store, _ = _rotator(None, NOW)
    rotator.start()
    try:
        assert store.material is not None
        assert any(t.name == "draquota-cert-rotator" for t in threading.enumerate())
    finally:
        rotator.stop()
    assert not any(t.name == "draquota-cert-rotator" for t in threading.enumerate())


def test_rotator_records_errors_and_keeps_running(material: TlsMaterial) -> None:
    rotator, store, _ = _rotator(material, NOW + 61 * DAY)

    def broken_load() -> TlsMaterial | None:
        raise ConnectionError("apiserver unreachable")

    store.load = broken_load  # type: ignore[method-assign]
    rotator.start()
    rotator.stop()
    assert rotator.last_error == "ConnectionError: apiserver unreachable"
