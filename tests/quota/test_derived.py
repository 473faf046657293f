"""DerivedCache: what the core derives from a view, kept with it; never answers with stale data."""

from __future__ import annotations

import pytest

from quota.derived import LATEST_ENTRIES, DerivedCache
from tests.quota.builders import claim_template


def test_latest_keeps_the_newest_values_per_name_while_their_keys_are_asked_for() -> None:
    cache = DerivedCache()
    built: list[int] = []

    def build(value: int) -> int:
        built.append(value)
        return value

    assert LATEST_ENTRIES == 2
    assert cache.latest("table", (1,), lambda: build(1)) == 1
    assert cache.latest("table", (1,), lambda: build(2)) == 1
    assert cache.latest("other", (1,), lambda: build(3)) == 3
    assert cache.latest("table", (2,), lambda: build(4)) == 4
    assert cache.latest("table", (1,), lambda: build(5)) == 1  # the view before a change
    assert cache.latest("table", (3,), lambda: build(6)) == 6
    assert cache.latest("table", (1,), lambda: build(7)) == 7  # two values per name
    assert built == [1, 3, 4, 6, 7]


def test_of_object_is_kept_while_the_object_is_the_same_one() -> None:
    cache = DerivedCache()
    template = claim_template("t", {})
    first = cache.of_object("parsed", template, lambda obj: [obj["metadata"]["name"]])
    assert cache.of_object("parsed", template, lambda obj: ["again"]) is first
    equal_copy = {**template}
    assert cache.of_object("parsed", equal_copy, lambda obj: ["copy"]) == ["copy"]


def test_of_object_forgets_the_oldest_entries_first() -> None:
    cache = DerivedCache(object_entries=2)
    a, b, c = (claim_template(name, {}) for name in "abc")
    for obj in (a, b, c):
        cache.of_object("parsed", obj, lambda obj: obj["metadata"]["name"])
    assert cache.of_object("parsed", c, lambda obj: "rebuilt") == "c"
    assert cache.of_object("parsed", b, lambda obj: "rebuilt") == "b"
    assert cache.of_object("parsed", a, lambda obj: "rebuilt") == "rebuilt"


def test_each_name_has_its_own_bound() -> None:
    """Claims read by the usage ledger never push out the templates admissions read."""
    cache = DerivedCache(object_entries=1)
    template, claim = claim_template("t", {}), claim_template("c", {})
    cache.of_object("ResourceClaimTemplate", template, lambda obj: "template")
    cache.of_object("ResourceClaim", claim, lambda obj: "claim")
    assert cache.of_object("ResourceClaimTemplate", template, lambda obj: "again") == "template"


def test_a_variant_shares_values_per_object_but_not_the_latest_ones() -> None:
    cache = DerivedCache()
    template = claim_template("t", {})
    cache.of_object("parsed", template, lambda obj: "parsed")
    cache.latest("table", (1,), lambda: "store's")
    variant = cache.variant()
    assert variant.of_object("parsed", template, lambda obj: "again") == "parsed"
    assert variant.latest("table", (1,), lambda: "variant's") == "variant's"
    assert cache.latest("table", (1,), lambda: "rebuilt") == "store's"


def test_object_entries_must_allow_one_entry() -> None:
    with pytest.raises(ValueError, match="at least 1"):
        DerivedCache(object_entries=0)
