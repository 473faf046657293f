"""draquota: device-quota admission webhook for Kubernetes DRA, and what-if tools.

Exit status: 0 when the command ran (even when it denied), 2 for bad input (the
file, object and field path are named on stderr).
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence
from importlib.metadata import PackageNotFoundError, version

from quota.errors import DraquotaError

__all__ = ["EXIT_BAD_INPUT", "EXIT_OK", "main", "parser"]

EXIT_OK = 0
EXIT_BAD_INPUT = 2

COMMANDS = {
    "serve": "run the admission webhook over TLS",
    "check": "what-if: decide pods and workloads against the quotas",
    "count": "devices per DeviceClass of claims, templates, pods and workloads",
    "allocate": "place claims on nodes with the DRA allocator",
    "status": "quota and usage of the queues, what holds and waits; exit 2 if a queue is invalid",
    "dashboard": "a read-only page of queues, quota, lending and waiting workloads",
    "certs": "generate, rotate and inject the webhook's certificates",
    "completion": "print a shell completion script (bash or zsh)",
}


def _version() -> str:
    try:
        return version("draquota")
    except PackageNotFoundError:
        return "unknown"


def _description(doc: str | None, help_text: str) -> str:
    """A command's module docstring without a leading usage line (argparse prints usage)."""
    text = (doc or "").strip()
    if text.startswith("`draquota"):
        first, _, rest = text.partition("\n")
        summary = first.rsplit("`:", 1)[-1].strip(" .")
        text = f"{summary[:1].upper()}{summary[1:]}.\n{rest}" if summary else rest
    return text.strip() or help_text


def parser() -> argparse.ArgumentParser:
    """The whole command line (also what `draquota completion` reads)."""
    root = argparse.ArgumentParser(
        prog="draquota",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    root.add_argument("--version", action="version", version=f"draquota {_version()}")
    subparsers = root.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name, help_text in COMMANDS.items():
        module = importlib.import_module(f"webhook.commands.{name}")
        sub = subparsers.add_parser(
            name,
            help=help_text,
            description=_description(module.__doc__, help_text),
            formatter_class=argparse.RawDescriptionHelpFormatter,
        )
        module.configure(sub)
        sub.set_defaults(run=module.run)
    return root


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split()) or type(exc).__name__


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the `draquota` console script."""
    args = parser().parse_args(argv)
    try:
        return int(args.run(args))
    except (DraquotaError, OSError) as exc:
        print(f"draquota {args.command}: {_one_line(exc)}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except KeyboardInterrupt:
        print(f"draquota {args.command}: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
