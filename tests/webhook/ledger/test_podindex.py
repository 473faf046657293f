"""`PodIndex`, the cached pods and which of them read what (webhook/ledger/podindex.py).

What a user notices through it: a changed claim, template, LocalQueue or Namespace
recharges exactly the pods reading it (`PodUsage` asks this index which), a relist's copy
of an unchanged pod recharges nothing, and a pod replaced under its name by one with the
same UID is not reported as gone.
"""

from __future__ import annotations

import copy
from typing import Any

from tests.webhook.builders import NAMESPACE, TEMPLATE, pod
from webhook.ledger.podindex import PodIndex

OTHER_TEMPLATE = "two-gpus"


def _pod(name: str, *templates: str, namespace: str = NAMESPACE, version: str = "1") -> Any:
    obj = pod(name, templates=templates or (TEMPLATE,), namespace=namespace)
    obj["metadata"].update(uid=f"uid-{name}", resourceVersion=version)
    return obj


def _index(*pods: dict[str, Any]) -> PodIndex:
    index = PodIndex()
    for obj in pods:
        index.add(f"{obj['metadata']['namespace']}/{obj['metadata']['name']}", obj)
    return index


def test_a_template_is_read_by_the_pods_naming_it_and_by_none_once_they_left() -> None:
    index = _index(_pod("b"), _pod("a", TEMPLATE, OTHER_TEMPLATE), _pod("c", OTHER_TEMPLATE))
    ref = ("ResourceClaimTemplate", NAMESPACE, TEMPLATE)
    assert index.readers(ref) == [f"{NAMESPACE}/a", f"{NAMESPACE}/b"]
    assert sorted(index.refs("ResourceClaimTemplate")) == [
        ("ResourceClaimTemplate", NAMESPACE, TEMPLATE),
        ("ResourceClaimTemplate", NAMESPACE, OTHER_TEMPLATE),
    ]
    index.remove(f"{NAMESPACE}/a")
    index.remove(f"{NAMESPACE}/b")
    assert index.readers(ref) == []
    assert index.refs("ResourceClaimTemplate") == [
        ("ResourceClaimTemplate", NAMESPACE, OTHER_TEMPLATE)
    ]


def test_a_generated_claim_is_read_by_the_pod_it_was_made_for() -> None:
    running = _pod("a")
    running["status"] = {"resourceClaimStatuses": [{"name": "c0", "resourceClaimName": "a-c0"}]}
    index = _index(running)
    assert index.readers(("ResourceClaim", NAMESPACE, "a-c0")) == [f"{NAMESPACE}/a"]


def test_pods_are_found_by_namespace_and_by_uid() -> None:
    index = _index(_pod("a"), _pod("b", namespace="team-b"), _pod("c", namespace="team-b"))
    assert index.in_namespace("team-b") == ["team-b/b", "team-b/c"]
    assert (index.count_in("team-b"), index.count_in(NAMESPACE), index.count_in("x")) == (2, 1, 0)
    assert index.key_of("uid-c") == "team-b/c" and index.key_of("uid-none") is None
    index.remove("team-b/b")
    index.remove("team-b/c")
    assert index.in_namespace("team-b") == [] and index.count_in("team-b") == 0


def test_a_relists_copy_of_the_same_version_is_kept_and_a_new_version_is_not() -> None:
    index = _index(_pod("a"))
    copy_of_a = copy.deepcopy(_pod("a"))
    assert index.refresh(f"{NAMESPACE}/a", copy_of_a)
    assert index.get(f"{NAMESPACE}/a") is copy_of_a
    assert not index.refresh(f"{NAMESPACE}/a", _pod("a", version="2"))
    assert not index.refresh(f"{NAMESPACE}/new", _pod("new"))
    assert index.get(f"{NAMESPACE}/new") is None


def test_a_pod_leaving_reports_its_uid_unless_its_replacement_has_it() -> None:
    index = _index(_pod("a"), _pod("b"))
    old, left = index.remove(f"{NAMESPACE}/a", still="uid-a")  # replaced at once, same UID
    assert old is not None and left == ""
    old, left = index.remove(f"{NAMESPACE}/b")
    assert old is not None and left == "uid-b"
    assert index.key_of("uid-b") is None
    assert index.remove(f"{NAMESPACE}/b") == (None, "")


def test_a_relist_names_the_uids_no_longer_listed_under_their_key() -> None:
    index = _index(_pod("a"), _pod("b"), _pod("c"))
    replaced = _pod("b")
    replaced["metadata"]["uid"] = "uid-b2"
    current = {f"{NAMESPACE}/b": replaced, f"{NAMESPACE}/c": _pod("c")}
    assert sorted(index.departed_from(current)) == ["uid-a", "uid-b"]
