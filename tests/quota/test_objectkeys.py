"""How an object is named (`quota.objectkeys`): the namespace the API server would put it in,
and its `namespace/name` key, whatever shape of metadata a file or a request brings."""

from __future__ import annotations

from typing import Any

import pytest

from quota.livepods import pod_key
from quota.objectkeys import namespace_of, namespace_or_default, object_key, object_key_of


@pytest.mark.parametrize(
    ("obj", "namespace", "key"),
    [
        pytest.param({"metadata": {"namespace": "team-a", "name": "p"}}, "team-a", "team-a/p",
                     id="named-namespace"),
        pytest.param({"metadata": {"name": "p"}}, "default", "default/p", id="no-namespace"),
        pytest.param({"metadata": {"namespace": "", "name": "p"}}, "default", "default/p",
                     id="empty-namespace"),
        pytest.param({"metadata": {"namespace": None, "name": "p"}}, "default", "default/p",
                     id="null-namespace"),
        pytest.param({"metadata": ["not", "a", "mapping"]}, "default", "default/None",
                     id="malformed-metadata"),
        pytest.param({}, "default", "default/None", id="no-metadata"),
    ],
)  # fmt: skip
def test_an_object_is_named_as_the_api_server_would_place_it(
    obj: dict[str, Any], namespace: str, key: str
) -> None:
    assert namespace_of(obj) == namespace
    assert object_key(obj) == key == pod_key(obj)


@pytest.mark.parametrize(
    ("namespace", "name", "key"),
    [("team-a", "q", "team-a/q"), (None, "q", "default/q"), ("", "q", "default/q")],
)
def test_a_key_from_parts_defaults_the_namespace_the_same_way(
    namespace: str | None, name: str, key: str
) -> None:
    assert object_key_of(namespace, name) == key
    assert object_key_of(namespace, name) == object_key(
        {"metadata": {"namespace": namespace, "name": name}}
    )
    assert namespace_or_default(namespace) == key.split("/")[0]
