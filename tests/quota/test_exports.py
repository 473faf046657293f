"""The public surface of quota/ is curated, sorted, and complete."""

from __future__ import annotations

import quota


def test_all_is_sorted_and_resolves() -> None:
    assert quota.__all__ == sorted(quota.__all__, key=lambda n: (not n.isupper(), n))
    for name in quota.__all__:
        assert getattr(quota, name) is not None


def test_public_names_are_exactly_all() -> None:
    public = {
        name
        for name, value in vars(quota).items()
        if not name.startswith("_") and not getattr(value, "__file__", None)
    }
    assert public == set(quota.__all__)
