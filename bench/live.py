"""What every benchmark on the real control plane does around its measurement."""

from __future__ import annotations

import argparse
import json
import signal
import sys
from collections.abc import Callable
from typing import Any


def run_live(
    args: argparse.Namespace,
    measure: Callable[[argparse.Namespace], dict[str, Any]],
    report: Callable[[dict[str, Any]], str],
) -> int:
    """Measure on ../shared/k8s and print the report (JSON with `--json`); 2 when the control
    plane is missing. A plain `kill` unwinds through the context managers, which stop what
    was started."""
    from tests.e2e.cluster import missing_reason

    reason = missing_reason()
    if reason is not None:
        print(f"cannot run: {reason}", file=sys.stderr)
        return 2
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    result = measure(args)
    print(json.dumps(result, indent=2) if args.json else report(result))
    return 0
