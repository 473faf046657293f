"""One label-requirement matcher for node selectors, node affinity and namespace selectors."""

from __future__ import annotations

import pytest

from quota.selectors import requirement_matches

LABELS = {"zone": "a", "gpus": "8"}


@pytest.mark.parametrize(
    ("requirement", "matches"),
    [
        ({"key": "zone", "operator": "In", "values": ["a", "b"]}, True),
        ({"key": "zone", "operator": "In", "values": ["b"]}, False),
        ({"key": "rack", "operator": "In", "values": ["a"]}, False),
        ({"key": "zone", "operator": "NotIn", "values": ["b"]}, True),
        ({"key": "rack", "operator": "NotIn", "values": ["a"]}, True),
        ({"key": "zone", "operator": "NotIn", "values": ["a"]}, False),
        ({"key": "zone", "operator": "Exists"}, True),
        ({"key": "rack", "operator": "Exists"}, False),
        ({"key": "rack", "operator": "DoesNotExist"}, True),
        ({"key": "zone", "operator": "DoesNotExist"}, False),
        ({"key": "gpus", "operator": "Gt", "values": ["4"]}, True),
        ({"key": "gpus", "operator": "Gt", "values": ["8"]}, False),
        ({"key": "gpus", "operator": "Lt", "values": ["9"]}, True),
        ({"key": "zone", "operator": "Gt", "values": ["1"]}, False),
        ({"key": "gpus", "operator": "Gt", "values": ["1", "2"]}, False),
        ({"key": "rack", "operator": "Lt", "values": ["1"]}, False),
        ({"key": "zone", "operator": "Like", "values": ["a"]}, False),
    ],
)
def test_requirement_matches(requirement: dict, matches: bool) -> None:
    assert requirement_matches(requirement, LABELS) is matches
