"""`KubeEvictor` on the fake API: a victim is marked, then evicted through the Eviction API, and
says why until it is gone; a Job is suspended again, marked preempted.

The pods are tests/webhook/kube/fixtures/pod-admitted.json (recorded from the real control
plane: admitted with `QuotaReserved` True, ungated, bound to node-1); the Job is `sweep` of
tests/webhook/fixtures/user-view/admin/jobs.yaml, recorded there too. The fake API server
answers `pods/NAME/eviction` as the real one does (tests/fakeapi/eviction.py): the pod gets
`DisruptionTarget` with reason EvictionByEvictionAPI and a deletionTimestamp, or a 429 while a
PodDisruptionBudget is in the way.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from quota.cluster import Obj
from tests.fakeapi import FakeApiServer
from tests.webhook.kube.test_podwriter import (
    ADMITTED,
    NAMESPACE,
    before_puts,
    change,
    created,
    events,
    recorded,
    set_claim_status,
    stored,
)
from webhook.kube.client import KubeClient
from webhook.kube.evictor import PREEMPTED, KubeEvictor
from webhook.queueing.admittedworkloads import PREEMPTED_ANNOTATION, is_marked

pytestmark = pytest.mark.integration

JOBS = Path(__file__).parents[1] / "fixtures" / "user-view" / "admin" / "jobs.yaml"
WHY = (
    "Preempted to accommodate a workload (UID: 0f1e, JobUID: UNKNOWN) due to reclamation "
    "within the cohort by ClusterQueue research; preemptor: pod research/eval-0"
)
PDB = "Cannot evict pod as it would violate the pod's disruption budget."


@pytest.fixture
def evictor(client: KubeClient) -> KubeEvictor:
    return KubeEvictor(client, sleep=lambda _: None)


def target(pod: Obj) -> dict[str, Any] | None:
    conditions = pod.get("status", {}).get("conditions", [])
    return next((c for c in conditions if c["type"] == "DisruptionTarget"), None)


def test_a_victim_is_marked_with_the_reason_and_an_event_naming_the_preemptor(
    api: FakeApiServer, evictor: KubeEvictor
) -> None:
    pod = created(api, ADMITTED)
    assert evictor.mark(pod, WHY)
    final = stored(api, ADMITTED)
    assert target(final) == {
        "type": "DisruptionTarget",
        "status": "True",
        "reason": "PreemptedByDraquota",
        "message": WHY,
        "lastTransitionTime": target(final)["lastTransitionTime"],  # type: ignore[index]
    }
    assert is_marked(final)
    assert events(api, ADMITTED)[PREEMPTED]["message"] == WHY
    assert "deletionTimestamp" not in final["metadata"]  # marked only: not evicted yet


def test_a_mark_lands_on_a_pod_changed_between_read_and_write(
    api: FakeApiServer, evictor: KubeEvictor, client: KubeClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    pod = created(api, ADMITTED)
    puts = before_puts(monkeypatch, client, lambda: change(api, ADMITTED, set_claim_status))
    assert evictor.mark(pod, WHY)
    final = stored(api, ADMITTED)
    assert is_marked(final)
    assert final["status"]["resourceClaimStatuses"][0]["resourceClaimName"] == "train-c0-x"
    assert len([p for p in puts if p.endswith("/status")]) == 2  # 409, read again, written


def test_a_former_leaders_mark_stands_and_is_not_announced_twice(
    api: FakeApiServer, evictor: KubeEvictor, client: KubeClient
) -> None:
    pod = created(api, ADMITTED)
    assert KubeEvictor(client, sleep=lambda _: None).mark(pod, WHY)
    assert evictor.mark(pod, "Preempted by someone else")
    assert target(stored(api, ADMITTED))["message"] == WHY  # type: ignore[index]
    assert events(api, ADMITTED)[PREEMPTED].get("count", 1) == 1


def test_a_marked_pod_is_evicted_through_the_eviction_api_and_keeps_saying_why(
    api: FakeApiServer, evictor: KubeEvictor
) -> None:
    pod = created(api, ADMITTED)
    assert evictor.mark(pod, WHY)
    assert evictor.evict(pod) == ""
    assert api.evictions == [f"{NAMESPACE}/{ADMITTED}"]
    assert ("POST", f"/api/v1/namespaces/{NAMESPACE}/pods/{ADMITTED}/eviction") in api.calls
    final = stored(api, ADMITTED)
    assert final["metadata"]["deletionTimestamp"]  # deleted gracefully by the API server
    condition = target(final)
    assert condition is not None  # the API server wrote EvictionByEvictionAPI; draquota's is back
    assert (condition["reason"], condition["message"]) == ("PreemptedByDraquota", WHY)


def test_an_eviction_a_disruption_budget_refuses_is_reported_and_the_pod_stays_marked(
    api: FakeApiServer, evictor: KubeEvictor
) -> None:
    pod = created(api, ADMITTED)
    assert evictor.mark(pod, WHY)
    api.refuse_evictions = PDB
    assert evictor.evict(pod) == PDB
    final = stored(api, ADMITTED)
    assert "deletionTimestamp" not in final["metadata"]
    assert is_marked(final)  # a later pass evicts it again, never chooses it anew
    api.refuse_evictions = ""
    assert evictor.evict(pod) == ""
    assert stored(api, ADMITTED)["metadata"]["deletionTimestamp"]


def test_a_pod_that_took_the_victims_name_is_not_evicted(
    api: FakeApiServer, evictor: KubeEvictor
) -> None:
    victim = created(api, ADMITTED)
    api.delete("Pod", NAMESPACE, ADMITTED)
    fresh = recorded(ADMITTED)
    del fresh["metadata"]["uid"]  # another pod of the same name: the API server gives a new UID
    newcomer = api.create(fresh)
    assert newcomer["metadata"]["uid"] != victim["metadata"]["uid"]
    assert evictor.mark(victim, WHY)  # gone: nothing left to evict
    assert evictor.evict(victim) == ""  # the UID precondition fails: 409, nothing done
    final = stored(api, ADMITTED)
    assert "deletionTimestamp" not in final["metadata"]
    assert not is_marked(final)
    assert PREEMPTED not in events(api, ADMITTED)


def _running_job(api: FakeApiServer) -> Obj:
    job: Obj = yaml.safe_load(JOBS.read_text(encoding="utf-8"))
    del job["metadata"]["resourceVersion"]
    job["metadata"]["namespace"] = NAMESPACE
    job["spec"]["suspend"] = False  # admitted: the controller unsuspended it
    return api.create(job)


def test_a_victim_job_is_suspended_again_marked_preempted_with_an_event(
    api: FakeApiServer, evictor: KubeEvictor, client: KubeClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    job = _running_job(api)
    name = job["metadata"]["name"]

    def scaled(obj: Obj) -> None:
        obj["spec"]["parallelism"] = 1  # another writer's update: a conflict on the first PUT
        obj["metadata"].setdefault("labels", {})["touched"] = "yes"

    before_puts(monkeypatch, client, lambda: change(api, name, scaled, "Job"))
    assert evictor.suspend(job, WHY)
    final = api.store.get(api.resource("Job"), NAMESPACE, name)
    assert final["spec"]["suspend"] is True
    assert final["metadata"]["annotations"][PREEMPTED_ANNOTATION] == WHY
    assert final["metadata"]["labels"]["touched"] == "yes"
    assert events(api, name)[PREEMPTED]["message"] == WHY
    assert evictor.suspend(job, WHY)  # again (a replica's retry): no second Event
    assert events(api, name)[PREEMPTED].get("count", 1) == 1
