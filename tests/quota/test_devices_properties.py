"""Properties of device counting: never negative, never wrapping, order-independent."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from quota.claims import claim_spec_of
from quota.devices import claim_devices
from quota.quantity import INT64_MAX
from tests.quota.builders import claim

CLASSES = st.sampled_from(["gpu", "tpu", "nic", "big-gpu"])
COUNTS = st.one_of(st.integers(0, 40), st.integers(0, INT64_MAX))


@st.composite
def exact(draw: Any) -> dict[str, Any]:
    out: dict[str, Any] = {"deviceClassName": draw(CLASSES)}
    mode = draw(st.sampled_from([None, "ExactCount", "All"]))
    if mode:
        out["allocationMode"] = mode
    if mode != "All" and draw(st.booleans()):
        out["count"] = draw(COUNTS)
    if draw(st.integers(0, 4)) == 0:
        out["adminAccess"] = True
    return out


@st.composite
def request(draw: Any) -> dict[str, Any]:
    if draw(st.booleans()):
        return {"exactly": draw(exact())}
    subs = draw(st.lists(exact(), min_size=1, max_size=8))
    for sub in subs:
        sub.pop("adminAccess", None)
    return {"firstAvailable": [{"name": f"s{i}", **sub} for i, sub in enumerate(subs)]}


REQUESTS = st.lists(request(), max_size=16).map(
    lambda rs: [{"name": f"r{i}", **r} for i, r in enumerate(rs)]
)


def _count(requests: list[dict[str, Any]], version: str = "v1") -> dict[str, int]:
    return claim_devices(claim_spec_of(claim("c", {"requests": requests}, version=version)))


@settings(max_examples=100, deadline=None)
@given(REQUESTS)
def test_counts_are_never_negative_and_never_wrap(requests: list[dict[str, Any]]) -> None:
    for devices in _count(requests).values():
        assert 0 < devices <= INT64_MAX


@settings(max_examples=100, deadline=None)
@given(REQUESTS, st.randoms(use_true_random=False))
def test_counts_do_not_depend_on_request_order(requests: list[dict[str, Any]], rnd: Any) -> None:
    shuffled = list(requests)
    rnd.shuffle(shuffled)
    assert _count(shuffled) == _count(requests)


@settings(max_examples=100, deadline=None)
@given(REQUESTS)
def test_all_three_versions_count_the_same(requests: list[dict[str, Any]]) -> None:
    assert _count(requests, "v1") == _count(requests, "v1beta2") == _count(requests, "v1beta1")


@settings(max_examples=50, deadline=None)
@given(REQUESTS, REQUESTS)
def test_counts_are_additive_over_requests(
    a: list[dict[str, Any]], b: list[dict[str, Any]]
) -> None:
    both = a + [{**r, "name": f"b-{r['name']}"} for r in b]
    expected = {
        k: min(_count(a).get(k, 0) + _count(b).get(k, 0), INT64_MAX)
        for k in set(_count(a)) | set(_count(b))
    }
    assert _count(both) == expected
