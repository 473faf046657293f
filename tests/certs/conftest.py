"""Shared certificate material: generated once per session at a fixed instant (EC P-256)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from certs.material import TlsMaterial
from certs.rotation import issue
from certs.serving import ServingSpec

NOW = datetime(2026, 1, 1, tzinfo=UTC)
SPEC = ServingSpec(dns_names=("localhost",), ips=("127.0.0.1",), days=90, ca_days=365)


@pytest.fixture(scope="session")
def material() -> TlsMaterial:
    return issue(SPEC, NOW)
