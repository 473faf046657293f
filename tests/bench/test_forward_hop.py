"""bench/forward_hop.py: every client it compares gets the elected replica's verdict over TLS
(a client that failed would be timed doing nothing), and the report names each one."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"

pytestmark = pytest.mark.integration


def _module():  # type: ignore[no-untyped-def]
    if str(BENCH) not in sys.path:
        sys.path.insert(0, str(BENCH))
    return importlib.import_module("forward_hop")


def test_each_client_is_answered_by_the_elected_replica_and_reported(
    capsys: pytest.CaptureFixture[str],
) -> None:
    hop = _module()
    assert hop.main(["--requests", "8", "--concurrency", "4", "--rounds", "1"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("8 requests of ") and lines[0].endswith(", 4 at a time")
    rows = {line.split(" | ")[0].removeprefix("| "): line for line in lines[3:]}
    assert set(rows) == {"floor", "forwarder", "httpx"}
    assert rows["floor"].endswith("| 1.00 |")


def test_the_floor_writes_a_whole_request_with_its_content_length() -> None:
    hop = _module()
    request = hop._request("127.0.0.1", 8443, b'{"a": 1}')
    head, _, body = request.partition(b"\r\n\r\n")
    assert body == b'{"a": 1}' and b"content-length: 8" in head.split(b"\r\n")
    assert head.startswith(b"POST /validate HTTP/1.1\r\n")
