"""FieldReader: typed reads whose errors name the object and the whole field path."""

from __future__ import annotations

from typing import Any

import pytest

from quota.errors import InvalidObject
from quota.fields import FieldReader


@pytest.mark.parametrize(
    ("read", "value", "reason"),
    [
        ("mapping", [1], "must be an object"),
        ("items", {"a": 1}, "must be a list"),
        ("string", 3, "must be a string, got 3"),
        ("boolean", "yes", "must be a boolean, got 'yes'"),
    ],
)
@pytest.mark.parametrize(
    ("base", "whole"), [("", "spec.x"), ("spec.template", "spec.template.spec.x")]
)
def test_a_wrong_type_names_the_whole_path(
    read: str, value: Any, reason: str, base: str, whole: str
) -> None:
    reader = FieldReader("Job team-a/j", base)
    with pytest.raises(InvalidObject) as info:
        getattr(reader, read)(value, "spec.x")
    assert (info.value.obj, info.value.path, info.value.reason) == ("Job team-a/j", whole, reason)


def test_absent_fields_read_as_empty_and_required_ones_fail() -> None:
    reader = FieldReader("Pod ns/p")
    assert (reader.mapping(None, "a"), reader.items(None, "b"), reader.string(None, "c")) == (
        {},
        (),
        "",
    )
    assert reader.boolean(None, "d") is False
    with pytest.raises(InvalidObject, match=r"Pod ns/p: spec.strings\[1\]: required"):
        reader.strings(["a", ""], "spec.strings")


def test_cel_selectors_keep_unknown_selector_types_as_none() -> None:
    selectors = [{"cel": {"expression": "true"}}, {"other": {}}]
    assert FieldReader("DeviceClass gpu").cel_selectors(selectors, "spec.selectors") == (
        "true",
        None,
    )
