"""Claims the allocator rejects are refused in upstream's words, then the parser's.

Upstream's structured allocator says `unsupported count mode <mode>` and `missing device
class name (unsupported request type?)` (/work/shared/reference/upstream-allocator.md);
`quota.allocator` builds those from the fields of the parser's error, not its text.
"""

from __future__ import annotations

from typing import Any

import pytest

from quota.allocator import AllocationError, allocate
from quota.errors import UnsupportedValue


def _claim(request: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": "c", "namespace": "team-a"},
        "spec": {"devices": {"requests": [request]}},
    }


@pytest.mark.parametrize(
    ("request_", "message"),
    [
        pytest.param(
            {"name": "a", "exactly": {"deviceClassName": "gpu", "allocationMode": "future-mode"}},
            "claim team-a/c: unsupported count mode future-mode (ResourceClaim team-a/c: "
            'spec.devices.requests[0].exactly.allocationMode: unsupported value "future-mode")',
            id="unknown-allocation-mode",
        ),
        pytest.param(
            {"name": "a", "firstAvailable": [{"name": "b", "allocationMode": "Some"}]},
            "claim team-a/c: unsupported count mode Some (ResourceClaim team-a/c: "
            "spec.devices.requests[0].firstAvailable[0].allocationMode: "
            'unsupported value "Some")',
            id="unknown-allocation-mode-of-an-alternative",
        ),
        pytest.param(
            {"name": "a", "exactly": {"deviceClassName": ""}},
            "claim team-a/c: missing device class name (unsupported request type?) "
            "(ResourceClaim team-a/c: spec.devices.requests[0].exactly.deviceClassName: "
            "required)",
            id="empty-class",
        ),
        pytest.param(
            {"name": "a", "exactly": {"deviceClassName": "gpu", "count": -1}},
            "claim team-a/c: ResourceClaim team-a/c: spec.devices.requests[0].exactly.count: "
            "must not be negative, got -1",
            id="other-errors-keep-the-parsers-words",
        ),
    ],
)
def test_a_rejected_claim_is_refused_in_upstreams_words(
    request_: dict[str, Any], message: str
) -> None:
    with pytest.raises(AllocationError) as info:
        allocate([_claim(request_)], None)
    assert str(info.value) == message


def test_an_unsupported_allocation_mode_carries_the_value_it_read() -> None:
    claim = _claim({"name": "a", "exactly": {"deviceClassName": "gpu", "allocationMode": 'a"b'}})
    with pytest.raises(AllocationError) as info:
        allocate([claim], None)
    cause = info.value.__cause__
    assert isinstance(cause, UnsupportedValue)
    assert (cause.obj, cause.path, cause.value) == (
        "ResourceClaim team-a/c",
        "spec.devices.requests[0].exactly.allocationMode",
        'a"b',
    )
    assert str(info.value).startswith('claim team-a/c: unsupported count mode a"b (')
