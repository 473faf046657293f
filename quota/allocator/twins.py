"""Devices alike but for their name, which the search may skip after one of them failed.

What makes devices interchangeable for the search: the same slice and everything but
the name (attributes, counters, taints...: what selectors, constraints and counters
see). Shareable devices have no twin (their capacity use tells them apart).

Why skipping twins keeps the answer: after a device fails at a point of the search,
picking its twin there searches (with the two names swapped) a subset of what the first
pick searched, because the first pick could still choose the twin later and the twin's
pick cannot choose the first. Nothing solvable is skipped, so the first solution found,
and the devices in it, are the ones found without skipping.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from quota.allocator.requests import Candidate

__all__ = ["Twins"]

_NONE = (-1, "")


class Twins:
    """The likeness key of each candidate of one search, computed once per candidate."""

    def __init__(self, candidates: Sequence[Candidate]) -> None:
        self._candidates = candidates
        self._keys: dict[int, tuple[int, str]] = {}

    def of(self, index: int) -> tuple[int, str] | None:
        """Equal for the candidates at two indices when they are twins; None: no twin."""
        known = self._keys.get(index)
        if known is None:
            candidate = self._candidates[index]
            device = candidate.device
            if device.allow_multiple_allocations:
                known = self._keys[index] = _NONE
            else:
                shape = repr(dataclasses.replace(device, name=""))
                known = self._keys[index] = (id(candidate.slice), shape)
        return None if known[0] == -1 else known
