"""Run the admission webhook over HTTPS (TLS only).

  draquota serve --state DIR [--cert-dir DIR]                embedded: a directory of manifests
  draquota serve --kubeconfig FILE --cert-dir DIR            a live cluster, from outside
  draquota serve --in-cluster --cert-dir DIR                 in a pod (rotates its certificate)

Serves POST /mutate and /validate (AdmissionReview v1), GET /healthz, /readyz, /metrics.
On a live cluster /metrics answers only clients the API server allows to `get /metrics`
(`--metrics-auth=kubernetes`, the default there); `--state` serves it without.
"""

from __future__ import annotations

import argparse
import atexit
import gc
import logging
import os
import shutil
import signal
import socket
import ssl
import sys
import tempfile
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from webhook.commands._common import load_settings
from webhook.store.statedir import StateDirBackend

__all__ = ["configure", "run"]

EXIT_BAD_INPUT = 2
log = logging.getLogger("draquota.serve")


def configure(parser: argparse.ArgumentParser) -> None:
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--state", type=Path, metavar="DIR", help="embedded cluster: manifests")
    source.add_argument("--kubeconfig", type=Path, metavar="FILE", help="live cluster")
    source.add_argument("--in-cluster", action="store_true", help="live cluster, in-pod config")
    parser.add_argument("--config", type=Path, metavar="FILE", help="webhook config (YAML)")
    parser.add_argument(
        "--cert-dir",
        type=Path,
        metavar="DIR",
        help="tls.crt and tls.key (optionally ca.crt); draquota serves HTTPS only. Without it, "
        "--state mode makes a throwaway CA and certificate for localhost and logs where",
    )
    parser.add_argument(
        "--client-ca",
        type=Path,
        metavar="FILE",
        help="answer admission requests only from TLS clients whose certificate this CA signed "
        "(the API server's webhook client certificate, docs/operations.md)",
    )
    parser.add_argument(
        "--metrics-auth",
        choices=("kubernetes", "none"),
        metavar="MODE",
        help="who may GET /metrics: 'kubernetes' (default with --kubeconfig and --in-cluster) "
        "asks the API server (TokenReview, SubjectAccessReview) about the bearer token; 'none' "
        "answers anyone (the default with --state; on a live cluster for tests and dev only)",
    )
    parser.add_argument(
        "--host", default="0.0.0.0", metavar="H", help="address to listen on (default 0.0.0.0)"
    )
    parser.add_argument(
        "--port", type=int, default=8443, metavar="P", help="port to listen on (default 8443)"
    )
    parser.add_argument(
        "--advertise-address",
        metavar="URL",
        help="https://HOST:PORT where the other replicas reach this one when it is elected to "
        "admit (default: https://$POD_IP:PORT when POD_IP is set, else https://HOST:PORT "
        "unless --host is a wildcard; without one, this replica cannot be forwarded to)",
    )
    parser.add_argument(
        "--watch-interval",
        type=float,
        default=2.0,
        metavar="SECONDS",
        help="how often --state DIR and the certificate files are checked for changes",
    )
    parser.add_argument(
        "--log-level",
        default="INFO",
        type=str.upper,
        choices=("DEBUG", "INFO", "WARNING", "ERROR"),
        metavar="LEVEL",
        help="DEBUG, INFO, WARNING or ERROR (default INFO); logs are JSON lines on stderr",
    )


def _local_cert_dir() -> Path:
    """A throwaway CA and serving certificate for 127.0.0.1/localhost (embedded mode only),
    removed when the process exits."""
    from certs.files import write_material
    from certs.rotation import issue
    from certs.serving import ServingSpec

    directory = Path(tempfile.mkdtemp(prefix="draquota-certs-"))
    atexit.register(shutil.rmtree, directory, ignore_errors=True)
    spec = ServingSpec(dns_names=("localhost",), ips=("127.0.0.1", "::1"), days=7, ca_days=7)
    write_material(directory, issue(spec, datetime.now(UTC)))
    log.info("generated a local certificate", extra={"ca_file": str(directory / "ca.crt")})
    return directory


def _start_rotator(args: argparse.Namespace) -> str | None:
    """In a cluster, keep the serving Secret and the webhooks' caBundle current."""
    from certs.kube import api_client, in_cluster_rotator

    try:
        in_cluster_rotator(api_client(None, in_cluster=True)).start()
    except Exception as exc:  # the rotator's first pass talks to the API server
        return f"cannot start the certificate rotator: {exc}"
    return None


def _cert_dir(args: argparse.Namespace) -> Path | str:
    if args.cert_dir is None:
        if args.state is None:
            return "--cert-dir is required with --kubeconfig and --in-cluster"
        return _local_cert_dir()
    if args.in_cluster and (problem := _start_rotator(args)):
        return problem
    cert_dir: Path = args.cert_dir
    if not (cert_dir / "tls.crt").is_file() or not (cert_dir / "tls.key").is_file():
        return f"{cert_dir}: tls.crt and tls.key are required"
    return cert_dir


def run(args: argparse.Namespace) -> int:
    from webhook.bootstrap import Wiring, embedded, live
    from webhook.edge.app import create_app
    from webhook.edge.forwarding import Forwarder, advertise_address
    from webhook.edge.logs import configure_logging
    from webhook.edge.metrics import Metrics
    from webhook.edge.serve import server_context, webhook_server

    settings = load_settings(args.config)
    if args.state is not None and not args.state.is_dir():
        why = "not a directory" if args.state.exists() else "no such file or directory"
        print(f"draquota serve: --state {args.state}: {why}", file=sys.stderr)
        return EXIT_BAD_INPUT
    if args.state is not None and args.metrics_auth == "kubernetes":
        print(
            "draquota serve: --metrics-auth=kubernetes needs a live cluster "
            "(--kubeconfig or --in-cluster): with --state there is no API server to ask",
            file=sys.stderr,
        )
        return EXIT_BAD_INPUT
    try:
        address = advertise_address(
            args.advertise_address, args.host, args.port, os.environ.get("POD_IP", "")
        )
    except ValueError as exc:
        print(f"draquota serve: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    state_backend: StateDirBackend | None = None
    if args.state is not None:  # read and check the manifests before making a certificate
        state_backend = StateDirBackend(args.state, watch_interval=args.watch_interval)
    configure_logging(args.log_level)
    if state_backend is not None and not state_backend.state.list("ResourceSlice"):
        log.warning(
            "placement not checked: the state directory has no ResourceSlices",
            extra={"state": str(args.state), "placement": settings.placement},
        )
    cert_dir = _cert_dir(args)
    if isinstance(cert_dir, str):
        print(f"draquota serve: {cert_dir}", file=sys.stderr)
        return EXIT_BAD_INPUT
    try:
        context, reloader = server_context(cert_dir, args.watch_interval, args.client_ca)
    except (OSError, ssl.SSLError) as exc:
        print(f"draquota serve: --client-ca {args.client_ca}: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    metrics = Metrics()
    if state_backend is not None:
        wiring: Wiring | str = embedded(state_backend, settings)
    else:
        authorize = args.metrics_auth != "none"
        wiring = live(
            args.kubeconfig,
            args.in_cluster,
            settings,
            metrics,
            metrics_auth=authorize,
            address=address,
        )
    if isinstance(wiring, str):
        print(f"draquota serve: {wiring}", file=sys.stderr)
        return EXIT_BAD_INPUT
    forwarder = None
    if wiring.elector is not None:  # only the elected replica decides /validate
        identity = address or socket.gethostname()
        deadline = settings.admission_deadline_seconds
        forwarder = Forwarder(wiring.elector, cert_dir, deadline, identity)
    app = create_app(
        wiring.backend,
        wiring.ledger,
        settings,
        wiring.placer,
        metrics=metrics,
        certs_ready=lambda: reloader.loaded,
        require_client_cert=args.client_ca is not None,
        metrics_auth=wiring.metrics_auth,
        evictor=wiring.evictor,
        forwarder=forwarder,
    )
    server = webhook_server(app, args.host, args.port, context, reloader)
    gc.collect()
    gc.freeze()  # the loaded cluster view is long-lived: keep it out of every GC pass
    where = {"host": args.host, "port": args.port, "advertise": address}
    log.info("serving", extra={**where, "cert_dir": str(cert_dir)})
    # uvicorn shuts down on SIGTERM, then re-raises it with the handler it found: make
    # that an ordinary exit, so that exit handlers (the throwaway certificate) run.
    signal.signal(signal.SIGTERM, _exit_on_sigterm)
    server.run()
    return 0


def _exit_on_sigterm(signum: int, frame: Any) -> None:
    raise SystemExit(0)
