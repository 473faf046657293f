"""DerivedCache: the core's caches, held by the shell; never answers with stale data."""

from __future__ import annotations

import pytest

from quota.derived import DerivedCache
from tests.quota.builders import claim_template


def test_latest_keeps_one_value_per_name_while_its_key_is_unchanged() -> None:
    cache = DerivedCache()
    built: list[int] = []

    def build(value: int) -> int:
        built.append(value)
        return value

    assert cache.latest("table", (1,), lambda: build(1)) == 1
    assert cache.latest("table", (1,), lambda: build(2)) == 1
    assert cache.latest("other", (1,), lambda: build(3)) == 3
    assert cache.latest("table", (2,), lambda: build(4)) == 4
    assert cache.latest("table", (1,), lambda: build(5)) == 5  # one value per name
    assert built == [1, 3, 4, 5]


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


def test_object_entries_must_allow_one_entry() -> None:
    with pytest.raises(ValueError, match="at least 1"):
        DerivedCache(object_entries=0)
