"""`make bench`: the webhook load benchmark with its defaults (500 nodes, 8 connections, 10 s)."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from webhook_bench import main

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
