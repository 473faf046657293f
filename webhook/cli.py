"""`draquota` command line (SPEC §7): exit 0 when the command ran, 2 for bad input."""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

from quota.errors import DraquotaError

__all__ = ["EXIT_BAD_INPUT", "EXIT_OK", "main"]

EXIT_OK = 0
EXIT_BAD_INPUT = 2

COMMANDS = {
    "serve": "run the admission webhook over TLS",
    "check": "what-if: decide pods and workloads against the quotas",
    "count": "devices per DeviceClass of claims, templates, pods and workloads",
    "allocate": "place claims on a node with the DRA allocator",
    "certs": "generate, rotate and inject the webhook's certificates",
}


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="draquota", description=__doc__)
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name, help_text in COMMANDS.items():
        sub = subparsers.add_parser(name, help=help_text, description=help_text)
        module = importlib.import_module(f"webhook.commands.{name}")
        module.configure(sub)
        sub.set_defaults(run=module.run)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the `draquota` console script."""
    args = _parser().parse_args(argv)
    try:
        return int(args.run(args))
    except DraquotaError as exc:
        print(f"draquota {args.command}: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except OSError as exc:
        print(f"draquota {args.command}: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT


if __name__ == "__main__":
    sys.exit(main())
