"""Label requirements, as node selectors and label selectors write them.

One matcher for the three places that need it: ResourceSlice node selectors in
the allocator, pod node affinity against a flavor's nodeLabels, and a
ClusterQueue's namespaceSelector. Label selectors know In, NotIn, Exists and
DoesNotExist; node selectors add Gt and Lt over integer label values.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["LABEL_OPERATORS", "NODE_OPERATORS", "requirement_matches"]

LABEL_OPERATORS = frozenset({"In", "NotIn", "Exists", "DoesNotExist"})
NODE_OPERATORS = LABEL_OPERATORS | {"Gt", "Lt"}


def _compare(operator: str, value: str, values: list[Any]) -> bool:
    if len(values) != 1:
        return False
    try:
        have, want = int(value), int(values[0])
    except ValueError:
        return False
    return have > want if operator == "Gt" else have < want


def requirement_matches(requirement: Mapping[str, Any], labels: Mapping[str, str]) -> bool:
    """Whether `labels` satisfy one `{key, operator, values}` requirement.

    An operator outside NODE_OPERATORS matches nothing; callers that must report
    it as an error check the operator first.
    """
    key, operator = requirement.get("key", ""), requirement.get("operator", "")
    values = list(requirement.get("values") or ())
    present = key in labels
    if operator == "In":
        return present and labels[key] in values
    if operator == "NotIn":
        return not present or labels[key] not in values
    if operator == "Exists":
        return present
    if operator == "DoesNotExist":
        return not present
    if operator in ("Gt", "Lt"):
        return present and _compare(operator, str(labels[key]), values)
    return False
