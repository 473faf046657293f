"""`draquota dashboard [--kubeconfig FILE] [-n NS] [--host H] [--port P]`: a page of the queues.

Serves a read-only page on http://127.0.0.1:PORT/ (printed on start; `--port 0`, the
default, takes any free port): every ClusterQueue with its usage against quota per flavor
and resource, what it borrows from and lends to its cohort, and the pods and Jobs waiting
in it with their position and reason, refreshed every 2 s. Without cluster-wide read
access (a namespace user), it shows the LocalQueues of one namespace (-n, else the
kubeconfig context's, else default) from their status, and says why. The kubeconfig is
--kubeconfig, else $KUBECONFIG, else ~/.kube/config; its credentials stay in this process.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from webhook.commands._cluster import ClusterUnavailable
from webhook.commands._common import load_settings
from webhook.commands._kubeconfig import (
    KubeConfig,
    add_kubeconfig_arguments,
    command_namespace,
    find_kubeconfig,
    load_kubeconfig,
)

if TYPE_CHECKING:
    from webhook.kube.client import KubeClient

__all__ = ["configure", "run"]


def configure(parser: argparse.ArgumentParser) -> None:
    add_kubeconfig_arguments(parser)
    parser.add_argument(
        "--host", default="127.0.0.1", metavar="H", help="address to listen on (default 127.0.0.1)"
    )
    parser.add_argument(
        "--port", type=int, default=0, metavar="P", help="port to listen on (default 0: any free)"
    )
    parser.add_argument(
        "--config", type=Path, metavar="FILE", help="webhook config file (deviceClassMappings, ...)"
    )


def _client(config: KubeConfig) -> KubeClient:
    from certs.kube import ClusterAccessError, api_client
    from webhook.kube.client import KubeClient

    try:
        return KubeClient(api_client(config.path))
    except ClusterAccessError as exc:
        raise ClusterUnavailable(str(exc)) from None


def run(args: argparse.Namespace) -> int:
    from webhook.dashboard.server import Dashboard, DashboardServer
    from webhook.dashboard.sources import choose

    settings = load_settings(args.config)
    found = find_kubeconfig(args.kubeconfig)
    if found is None:
        raise ClusterUnavailable(
            "no cluster: give --kubeconfig FILE (no $KUBECONFIG, no ~/.kube/config)"
        )
    config = load_kubeconfig(*found)
    source = choose(_client(config), settings, command_namespace(args, config))
    try:
        server = DashboardServer(args.host, args.port, Dashboard(source))
    except OSError as exc:
        raise OSError(f"--host {args.host} --port {args.port}: {exc.strerror}") from None
    server.dashboard.start()
    print(server.url, flush=True)
    print(f"draquota dashboard: {source.scope}", file=sys.stderr)
    if server.hosts is None:
        print(
            f"draquota dashboard: --host {args.host} is not a loopback address: whoever can "
            "reach it sees what this kubeconfig may read (the page asks for no login)",
            file=sys.stderr,
        )
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
        server.dashboard.stop()
    return 0
