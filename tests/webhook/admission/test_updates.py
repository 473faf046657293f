"""What an UPDATE changes that draquota checks, read from UPDATE requests recorded on the real
control plane (tests/manifests/fixtures/admission): a resize, a Job resumed or given more pods
at once, draquota's gate removed. Every other recorded update — the traffic of kubectl and of
the controllers — changes none of them, so none of it is judged again."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import orjson
import pytest

from webhook.admission.updates import grown, resources_of, resumed, ungated
from webhook.edge.review import AdmissionRequest, parse_review

RECORDED = Path(__file__).parents[2] / "manifests" / "fixtures" / "admission"

# fixture: (resources changed, grown, resumed, ungated)
CHANGES = {
    "pod-resize": (True, False, False, False),
    "job-update-resume": (False, False, True, False),
    "job-update-suspend": (False, False, False, False),
    "pod-update-scheduling-gate-removed": (False, False, False, True),
}


def _raw(fixture: str) -> dict[str, Any]:
    return dict(json.loads((RECORDED / f"{fixture}.json").read_text(encoding="utf-8")))


def _request(raw: dict[str, Any]) -> AdmissionRequest:
    review = {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": raw}
    return parse_review(orjson.dumps(review))


def _changes(req: AdmissionRequest) -> tuple[bool, bool, bool, bool]:
    resized = resources_of(req.object) != resources_of(req.old_object)
    return resized, grown(req), resumed(req), ungated(req)


def _other_updates() -> list[str]:
    names = sorted(p.stem for p in RECORDED.glob("*.json") if p.name != "index.json")
    return [n for n in names if _raw(n).get("operation") == "UPDATE" and n not in CHANGES]


@pytest.mark.parametrize("fixture", sorted(CHANGES))
def test_a_recorded_update_is_read_for_what_it_changes(fixture: str) -> None:
    assert _changes(_request(_raw(fixture))) == CHANGES[fixture]


@pytest.mark.parametrize("fixture", _other_updates())
def test_ordinary_recorded_traffic_changes_nothing_draquota_judges(fixture: str) -> None:
    assert _changes(_request(_raw(fixture))) == (False, False, False, False)


def test_a_job_given_more_pods_at_once_has_grown_and_fewer_has_not() -> None:
    raw = _raw("job-update-annotation-only")
    parallelism = raw["oldObject"]["spec"].get("parallelism", 1)
    more, fewer = copy.deepcopy(raw), copy.deepcopy(raw)
    more["object"]["spec"]["parallelism"] = parallelism + 2
    fewer["object"]["spec"]["parallelism"] = parallelism
    fewer["oldObject"]["spec"]["parallelism"] = parallelism + 2
    assert grown(_request(more))
    assert not grown(_request(fewer))


def test_an_update_of_an_object_that_is_no_workload_has_not_grown() -> None:
    raw = _raw("job-update-annotation-only")
    raw["object"]["spec"]["parallelism"] = "many"  # not a number: not a workload draquota reads
    assert not grown(_request(raw))
