"""Fuzzed AdmissionReviews: no 5xx, no crash; malformed bodies get a clear 400 or a denial."""

from __future__ import annotations

import json
from typing import Any

import orjson
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from quota.settings import Settings
from tests.webhook.builders import AppClient, FakeBackend, cluster_state, pod, review
from webhook.edge.app import create_app
from webhook.ledger.memory import MemoryLedger

FUZZ = settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)

_json = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**70), 2**70)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=20),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner, max_size=4)
    ),
    max_leaves=20,
)


def _dumps(value: Any) -> bytes:
    return json.dumps(value).encode()  # stdlib: integers beyond 64 bits reach the server too


def _client() -> AppClient:
    state = cluster_state(gpus=2)
    return AppClient(create_app(FakeBackend(state), MemoryLedger(state, Settings()), Settings()))


def _check(body: bytes, endpoint: str) -> dict[str, Any] | None:
    """Post; assert the answer is a 400 JSON error or a well-formed review; return the response."""
    answer = _client().post(f"/{endpoint}", content=body)
    assert answer.status_code in (200, 400, 413), answer.text
    document = answer.json()
    if answer.status_code != 200:
        assert document["error"]
        return None
    assert document["apiVersion"] == "admission.k8s.io/v1"
    assert document["kind"] == "AdmissionReview"
    response = document["response"]
    assert isinstance(response["allowed"], bool)
    assert response["uid"] == json.loads(body)["request"]["uid"]
    if not response["allowed"]:
        assert response["status"]["code"] >= 400 and response["status"]["message"]
    if endpoint == "validate":
        assert "patch" not in response
    return response


@FUZZ
@given(value=_json, endpoint=st.sampled_from(["mutate", "validate"]))
def test_arbitrary_json_is_a_400(value: Any, endpoint: str) -> None:
    assert _check(_dumps(value), endpoint) is None


@FUZZ
@given(
    data=st.binary(max_size=200)
    | st.binary(max_size=20).map(lambda b: orjson.dumps(review(pod()))[:-5] + b),
    endpoint=st.sampled_from(["mutate", "validate"]),
)
def test_arbitrary_bytes_never_crash(data: bytes, endpoint: str) -> None:
    answer = _client().post(f"/{endpoint}", content=data)
    assert answer.status_code in (200, 400)


_request_fields = st.fixed_dictionaries(
    {},
    optional={
        "operation": st.sampled_from(["CREATE", "UPDATE", "DELETE", "CONNECT", "PATCH"]) | _json,
        "uid": st.text(max_size=40) | _json,
        "dryRun": st.booleans() | _json,
        "subResource": st.sampled_from(["", "status", "ephemeralcontainers"]) | _json,
        "namespace": st.sampled_from(["team-a", "other", ""]) | _json,
        "object": _json,
        "oldObject": _json,
    },
)


@FUZZ
@given(fields=_request_fields, endpoint=st.sampled_from(["mutate", "validate"]))
def test_fuzzed_request_fields_give_400_or_a_well_formed_answer(
    fields: dict[str, Any], endpoint: str
) -> None:
    document = review(pod())
    document["request"].update(fields)
    _check(_dumps(document), endpoint)


_bad_entries = st.lists(
    _json.filter(lambda v: not isinstance(v, dict))
    | st.dictionaries(
        st.sampled_from(["name", "resourceClaimTemplateName", "resourceClaimName"]),
        _json,
        max_size=3,
    ),
    min_size=1,
    max_size=3,
)


@FUZZ
@given(entries=_bad_entries, spec_extra=st.dictionaries(st.text(max_size=8), _json, max_size=3))
def test_managed_pod_with_malformed_claims_is_never_allowed(
    entries: list[Any], spec_extra: dict[str, Any]
) -> None:
    obj = pod("fuzzed")
    obj["spec"].update(spec_extra)
    obj["spec"]["resourceClaims"] = entries
    obj["metadata"]["labels"] = {"draquota.io/queue-name": "default"}
    for endpoint in ("mutate", "validate"):
        response = _check(_dumps(review(obj)), endpoint)
        valid = all(
            isinstance(e, dict)
            and isinstance(e.get("name"), str)
            and e.get("resourceClaimTemplateName") == "one-gpu"
            and "resourceClaimName" not in e
            for e in entries
        )
        if not valid:
            assert response is not None and response["allowed"] is False
