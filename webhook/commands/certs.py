"""`draquota certs`: generate, rotate, inject and print the webhook's certificates.

draquota certs generate --out DIR [--service NAME] [--namespace NS] [--dns NAME]...
                        [--ip ADDR]... [--days N] [--ca-days N] [--force]
draquota certs rotate   --dir DIR [--ca] [--kubeconfig FILE | --in-cluster]
draquota certs inject   --ca-file FILE (--kubeconfig FILE | --in-cluster | --manifests DIR)
                        [--webhook-configuration NAME] [--crd NAME]...
draquota certs secret   --dir DIR [--name NAME] [--namespace NS]   # TLS Secret YAML on stdout
draquota certs show     --dir DIR                                 # names, issuer and expiry
"""

from __future__ import annotations

import argparse
import sys
from datetime import UTC, datetime
from pathlib import Path

import yaml
from cryptography import x509
from cryptography.x509.oid import NameOID

from certs.files import DirectoryStore, read_files, write_material
from certs.inject import CRD, MUTATING, VALIDATING, KubeAdmissionClient, inject, inject_manifests
from certs.material import TlsMaterial
from certs.pem import certs_from_pem
from certs.rotation import issue, plan
from certs.secret import SECRET_NAME, tls_secret
from certs.serving import ServingSpec, spec_from_cert, subject_alt_names

__all__ = ["configure", "run"]

EXIT_OK = 0
EXIT_BAD_INPUT = 2
_NAMES = {
    NameOID.COMMON_NAME: "CN",
    NameOID.SERIAL_NUMBER: "serialNumber",
    NameOID.ORGANIZATION_NAME: "O",
    NameOID.ORGANIZATIONAL_UNIT_NAME: "OU",
    NameOID.COUNTRY_NAME: "C",
    NameOID.LOCALITY_NAME: "L",
    NameOID.STATE_OR_PROVINCE_NAME: "ST",
}


def _add_cluster_target(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--kubeconfig", type=Path, metavar="FILE", help="cluster to write to")
    parser.add_argument("--in-cluster", action="store_true", help="use the pod's service account")
    parser.add_argument(
        "--webhook-configuration",
        default="draquota",
        metavar="NAME",
        help="name of the Mutating/ValidatingWebhookConfiguration (default draquota)",
    )
    parser.add_argument(
        "--crd", action="append", default=[], metavar="NAME", help="CRD with a conversion webhook"
    )


def configure(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="action", required=True, metavar="ACTION")

    gen = sub.add_parser("generate", help="a new CA and serving certificate in DIR")
    gen.add_argument("--out", type=Path, required=True, metavar="DIR")
    gen.add_argument("--service", default="draquota", metavar="NAME")
    gen.add_argument("--namespace", default="draquota-system", metavar="NS")
    gen.add_argument("--dns", action="append", default=[], metavar="NAME", help="extra DNS SAN")
    gen.add_argument("--ip", action="append", default=[], metavar="ADDR", help="extra IP SAN")
    gen.add_argument("--days", type=int, default=365, help="serving certificate validity")
    gen.add_argument("--ca-days", type=int, default=3650, help="CA validity")
    gen.add_argument("--force", action="store_true", help="replace existing certificates")

    rot = sub.add_parser("rotate", help="renew the serving certificate (--ca: and the CA) in DIR")
    rot.add_argument("--dir", type=Path, required=True, metavar="DIR")
    rot.add_argument("--ca", action="store_true", help="rotate the CA too (bundle keeps the old)")
    rot.add_argument("--days", type=int, help="serving validity (default: as before)")
    _add_cluster_target(rot)

    inj = sub.add_parser("inject", help="set caBundle in the webhook configurations")
    inj.add_argument("--ca-file", type=Path, required=True, metavar="FILE")
    inj.add_argument("--manifests", type=Path, metavar="DIR", help="rewrite files instead")
    _add_cluster_target(inj)

    sec = sub.add_parser("secret", help="print the kubernetes.io/tls Secret manifest")
    sec.add_argument("--dir", type=Path, required=True, metavar="DIR")
    sec.add_argument("--name", default=SECRET_NAME)
    sec.add_argument("--namespace", default="draquota-system", metavar="NS")

    show = sub.add_parser("show", help="names, issuer and expiry of the certificates in DIR")
    show.add_argument("--dir", type=Path, required=True, metavar="DIR")


def _now() -> datetime:
    return datetime.now(UTC)


def _load(directory: Path) -> TlsMaterial:
    material = DirectoryStore(directory).load()
    if material is None:
        raise ValueError(f"{directory}: no certificates (run `draquota certs generate` first)")
    return material


def _targets(args: argparse.Namespace) -> list[tuple[str, str]]:
    name = args.webhook_configuration
    return [(MUTATING, name), (VALIDATING, name)] + [(CRD, crd) for crd in args.crd]


def _publish(args: argparse.Namespace, bundle_pem: bytes) -> int:
    from certs.kube import ClusterAccessError, api_client, describe_api_error

    api = api_client(args.kubeconfig, args.in_cluster)
    client = KubeAdmissionClient(api)
    try:
        result = inject(client, bundle_pem, _targets(args))
    except Exception as exc:
        problem = describe_api_error(exc, api.configuration.host)
        if problem is None:
            raise
        raise ClusterAccessError(problem) from None
    for ref in result.changed:
        print(f"caBundle updated: {ref}")
    for ref in result.unchanged:
        print(f"caBundle already current: {ref}")
    for ref in result.missing:
        print(f"not found: {ref}", file=sys.stderr)
    return EXIT_BAD_INPUT if result.missing else EXIT_OK


def _describe(material: TlsMaterial) -> None:
    serving = material.serving.cert
    dns, ips = subject_alt_names(serving)
    print(f"serving certificate: expires {serving.not_valid_after_utc.isoformat()}")
    print(f"  names: {', '.join(sorted(dns) + sorted(str(ip) for ip in ips))}")
    print(f"  issuer: {readable_name(serving.issuer)}")
    for ca in material.bundle:
        expires = ca.not_valid_after_utc.isoformat()
        print(f"trusted CA: {readable_name(ca.subject)} expires {expires}")


def readable_name(name: x509.Name) -> str:
    """A distinguished name as people write it: `CN=draquota-ca, serialNumber=...`."""
    parts = []
    for attribute in name:
        label = _NAMES.get(attribute.oid, attribute.oid.dotted_string)
        value = attribute.value
        text = value.decode(errors="replace") if isinstance(value, bytes) else value
        parts.append(f"{label}={text}")
    return ", ".join(parts)


def _generate(args: argparse.Namespace) -> int:
    if read_files(args.out) and not args.force:
        raise ValueError(
            f"{args.out}: certificates exist; use `draquota certs rotate` (or --force to replace)"
        )
    spec = ServingSpec(
        service=args.service,
        namespace=args.namespace,
        dns_names=tuple(args.dns),
        ips=tuple(args.ip),
        days=args.days,
        ca_days=args.ca_days,
    )
    material = issue(spec, _now())
    write_material(args.out, material)
    print(f"wrote {args.out}/tls.crt, tls.key, ca.crt, ca.key")
    _describe(material)
    return EXIT_OK


def _rotate(args: argparse.Namespace) -> int:
    material = _load(args.dir)
    spec = spec_from_cert(material.serving.cert)
    if args.days is not None:
        spec = ServingSpec(spec.service, spec.namespace, spec.dns_names, spec.ips, args.days)
    step = plan(material, spec, _now(), force_serving=True, force_ca=args.ca)
    if step is None:  # a forced plan always renews
        raise ValueError(f"{args.dir}: nothing to rotate")
    new, reason = step
    status = EXIT_OK
    if args.kubeconfig or args.in_cluster:
        # The clients must trust the new CA before any server presents a certificate from it.
        status = _publish(args, new.bundle_pem())
    write_material(args.dir, new)
    if args.ca:
        print(f"rotated the CA and renewed the serving certificate in {args.dir}")
    else:
        print(f"renewed the serving certificate in {args.dir}")
    if not reason.endswith("requested"):
        print(f"  also due: {reason}")
    _describe(new)
    return status


def _inject(args: argparse.Namespace) -> int:
    bundle_pem = args.ca_file.read_bytes()
    certs_from_pem(bundle_pem)  # refuse to publish something that is not a CA bundle
    if args.manifests:
        for path in inject_manifests(args.manifests, bundle_pem):
            print(f"caBundle updated: {path}")
        return EXIT_OK
    if not (args.kubeconfig or args.in_cluster):
        raise ValueError("inject: give --kubeconfig FILE, --in-cluster or --manifests DIR")
    return _publish(args, bundle_pem)


def _secret(args: argparse.Namespace) -> int:
    manifest = tls_secret(_load(args.dir), args.name, args.namespace)
    sys.stdout.write(yaml.safe_dump(manifest, sort_keys=False))
    return EXIT_OK


def _show(args: argparse.Namespace) -> int:
    _describe(_load(args.dir))
    return EXIT_OK


ACTIONS = {
    "generate": _generate,
    "rotate": _rotate,
    "inject": _inject,
    "secret": _secret,
    "show": _show,
}


def run(args: argparse.Namespace) -> int:
    from certs.kube import ClusterAccessError

    try:
        return ACTIONS[args.action](args)
    except (ValueError, ClusterAccessError) as exc:
        print(f"draquota certs {args.action}: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
