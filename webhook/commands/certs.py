"""`draquota certs`: not built yet (see the open issues)."""

from __future__ import annotations

import argparse
import sys

__all__ = ["configure", "run"]


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("rest", nargs=argparse.REMAINDER)


def run(args: argparse.Namespace) -> int:
    print("draquota certs: not implemented yet", file=sys.stderr)
    return 2
