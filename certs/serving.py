"""The webhook's serving certificate, signed by the draquota CA."""

from __future__ import annotations

import ipaddress
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from cryptography import x509
from cryptography.hazmat.primitives import hashes
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from certs.authority import BACKDATE
from certs.keypair import KeyPair
from certs.pem import PrivateKeyPEM, new_private_key

__all__ = [
    "ServingSpec",
    "create_serving_cert",
    "service_dns_names",
    "spec_from_cert",
    "subject_alt_names",
]


def service_dns_names(service: str, namespace: str) -> tuple[str, ...]:
    """The names the API server may use to reach a Service: svc, svc.ns, svc.ns.svc, FQDN."""
    return (
        service,
        f"{service}.{namespace}",
        f"{service}.{namespace}.svc",
        f"{service}.{namespace}.svc.cluster.local",
    )


@dataclass(frozen=True)
class ServingSpec:
    """What the serving certificate must cover and how long certificates live."""

    service: str = "draquota"
    namespace: str = "draquota-system"
    dns_names: tuple[str, ...] = ()
    ips: tuple[str, ...] = ()
    days: int = 365
    ca_days: int = 3650

    def all_dns_names(self) -> tuple[str, ...]:
        names = service_dns_names(self.service, self.namespace) + self.dns_names
        return tuple(dict.fromkeys(names))

    def ip_addresses(self) -> tuple[ipaddress.IPv4Address | ipaddress.IPv6Address, ...]:
        return tuple(dict.fromkeys(ipaddress.ip_address(ip) for ip in self.ips))


def subject_alt_names(
    cert: x509.Certificate,
) -> tuple[set[str], set[ipaddress.IPv4Address | ipaddress.IPv6Address]]:
    """DNS names and IP addresses of a certificate's SubjectAlternativeName (empty if none)."""
    try:
        san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        return set(), set()
    dns = set(san.get_values_for_type(x509.DNSName))
    ips = {
        ip
        for ip in san.get_values_for_type(x509.IPAddress)
        if isinstance(ip, ipaddress.IPv4Address | ipaddress.IPv6Address)  # not networks
    }
    return dns, ips


def create_serving_cert(ca: KeyPair, spec: ServingSpec, now: datetime) -> KeyPair:
    """A leaf for the webhook's replicas: SANs of `spec`, never outliving its CA; serverAuth,
    and clientAuth because a replica presents it to the elected one when it forwards an
    admission (`webhook.edge.forwarding`)."""
    if spec.days < 1:
        raise ValueError(f"serving certificate validity must be at least 1 day, got {spec.days}")
    dns_names = spec.all_dns_names()
    alt_names: Sequence[x509.GeneralName] = [x509.DNSName(n) for n in dns_names] + [
        x509.IPAddress(ip) for ip in spec.ip_addresses()
    ]
    key = new_private_key()
    ca_key = ca.key.key()
    not_after = min(now + timedelta(days=spec.days), ca.cert.not_valid_after_utc)
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, dns_names[2][:64])]))
        .issuer_name(ca.cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - BACKDATE)
        .not_valid_after(not_after)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=True,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=False,
                crl_sign=False,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(
            x509.ExtendedKeyUsage(
                [ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]
            ),
            critical=False,
        )
        .add_extension(x509.SubjectAlternativeName(alt_names), critical=False)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()),
            critical=False,
        )
        .sign(ca_key, hashes.SHA256())
    )
    return KeyPair(cert=cert, key=PrivateKeyPEM.from_key(key))


def spec_from_cert(cert: x509.Certificate, defaults: ServingSpec | None = None) -> ServingSpec:
    """The spec a renewal keeps: the certificate's own names, IPs and lifetime; the Service is
    read from a `svc.ns.svc` name when there is one."""
    base = defaults or ServingSpec()
    dns, ips = subject_alt_names(cert)
    service, namespace = base.service, base.namespace
    for name in sorted(dns):
        parts = name.split(".")
        if len(parts) == 3 and parts[2] == "svc":
            service, namespace = parts[0], parts[1]
            break
    lifetime = cert.not_valid_after_utc - cert.not_valid_before_utc - BACKDATE
    return ServingSpec(
        service=service,
        namespace=namespace,
        dns_names=tuple(sorted(dns - set(service_dns_names(service, namespace)))),
        ips=tuple(sorted(str(ip) for ip in ips)),
        days=max(1, round(lifetime.total_seconds() / 86400)),
        ca_days=base.ca_days,
    )
