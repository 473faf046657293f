"""`PodUsage`, the incremental index of what live pods hold (webhook/ledger/podusage.py).

What tests/webhook/ledger/test_memory.py checks of it (which pods a change recharges, relists, the
charge cache, how long gone UIDs are remembered) is not repeated here. Here: the amounts the
index holds after each kind of change in the journal, terminating pods released by their
grace period, and a Job's record covering its oldest pods (`quota.jobrecords`) as pods come,
go, terminate and get records of their own. Time is an injected wall clock.
"""

from __future__ import annotations

import copy
import datetime as dt
from typing import Any

import pytest

from quota.charge import Charge, FlavorResource, times
from quota.settings import Settings
from tests.webhook.builders import FLAVOR, NAMESPACE, QUEUE, TEMPLATE, cluster_state, pod
from webhook.ledger.podusage import GONE_MEMORY_SECONDS, PodUsage, job_holder
from webhook.store.clusterstate import ClusterState

GPU = FlavorResource(FLAVOR, "gpu")
JOB_UID = "uid-job-train"
JOB_KEY = f"{NAMESPACE}/train"
GRACE = 30


class Clock:
    def __init__(self) -> None:
        self.now = 1_800_000_000.0

    def __call__(self) -> float:
        return self.now


def _stamp(at: float) -> str:
    return dt.datetime.fromtimestamp(at, dt.UTC).isoformat().replace("+00:00", "Z")


def _pod(name: str, gpus: int = 1, created: int = 0, **extra: Any) -> dict[str, Any]:
    obj = pod(name, templates=(TEMPLATE,) * gpus)
    obj["metadata"].update(uid=f"uid-{name}", creationTimestamp=_stamp(1_700_000_000 + created))
    obj["metadata"].update(extra)
    return obj


def _job_pod(name: str, created: int, gpus: int = 1) -> dict[str, Any]:
    owner = {"apiVersion": "batch/v1", "kind": "Job", "name": "train", "uid": JOB_UID,
             "controller": True}  # fmt: skip
    return _pod(name, gpus, created, ownerReferences=[owner])


def _job(**status: Any) -> dict[str, Any]:
    template = {"spec": pod("template")["spec"]}
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "train", "namespace": NAMESPACE, "uid": JOB_UID},
        "spec": {"parallelism": 2, "template": template},
        "status": status,
    }


def _deleted(obj: dict[str, Any], at: float, grace: int = GRACE) -> dict[str, Any]:
    obj = copy.deepcopy(obj)
    obj["metadata"].update(deletionTimestamp=_stamp(at), deletionGracePeriodSeconds=grace)
    return obj


def _holders(usage: PodUsage) -> set[str]:
    return usage.usage.holders()


def _one_gpu(state: ClusterState) -> Charge:
    """What one single-GPU pod is charged, as the index charges it."""
    probe = PodUsage(ClusterState([*state.list("Namespace"), *_config(state), _pod("probe")]),
                     Settings())  # fmt: skip
    charge = probe.usage.charge_of(f"{NAMESPACE}/probe")
    assert charge is not None
    return charge


def _config(state: ClusterState) -> list[Any]:
    kinds = ("DeviceClass", "ResourceFlavor", "ClusterQueue", "LocalQueue", "ResourceClaimTemplate")
    return [obj for kind in kinds for obj in state.list(kind)]


# -- recharging through the journal ------------------------------------------------------


def _template(gpus: int) -> dict[str, Any]:
    state = cluster_state()
    found = state.get("ResourceClaimTemplate", NAMESPACE, TEMPLATE)
    assert found is not None
    template = copy.deepcopy(dict(found))
    template["spec"]["spec"]["devices"]["requests"][0]["exactly"]["count"] = gpus
    return template


def _repointed(queue: str) -> dict[str, Any]:
    found = cluster_state().get("LocalQueue", NAMESPACE, "default")
    assert found is not None
    local = copy.deepcopy(dict(found))
    local["spec"]["clusterQueue"] = queue
    return local


def _other_queue() -> dict[str, Any]:
    found = cluster_state().get("ClusterQueue", None, QUEUE)
    assert found is not None
    queue = copy.deepcopy(dict(found))
    queue["metadata"]["name"] = "other"
    return queue


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        pytest.param(lambda s: s.upsert(_template(3)), {QUEUE: {GPU: 6}}, id="template-grown"),
        pytest.param(
            lambda s: s.remove("LocalQueue", NAMESPACE, "default"), {QUEUE: {}}, id="lq-deleted"
        ),
        pytest.param(
            lambda s: (s.upsert(_other_queue()), s.upsert(_repointed("other"))),
            {QUEUE: {}, "other": {GPU: 2}},
            id="lq-repointed",
        ),
        pytest.param(lambda s: s.remove("ClusterQueue", None, QUEUE), {QUEUE: {}}, id="cq-deleted"),
        pytest.param(lambda s: s.remove("Pod", NAMESPACE, "a"), {QUEUE: {GPU: 1}}, id="pod-gone"),
        pytest.param(
            lambda s: s.upsert(_pod("a", gpus=2)), {QUEUE: {GPU: 3}}, id="pod-replaced-larger"
        ),
    ],
)
def test_usage_follows_each_kind_of_change_in_the_journal(
    change: Any, expected: dict[str, dict[FlavorResource, int]]
) -> None:
    state = cluster_state(gpus=100)
    for name in ("a", "b"):
        state.upsert(_pod(name))
    usage = PodUsage(state, Settings())
    assert usage.usage.of(QUEUE) == {GPU: 2}
    change(state)
    usage.sync()
    assert {queue: usage.usage.of(queue) for queue in expected} == expected


def test_a_generated_claim_that_grows_recharges_its_pod() -> None:
    state = cluster_state(gpus=100)
    claim = {**_template(1)["spec"], "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
             "metadata": {"name": "a-c0-x1", "namespace": NAMESPACE}}  # fmt: skip
    state.upsert(claim)
    running = _pod("a")
    running["status"] = {"resourceClaimStatuses": [{"name": "c0", "resourceClaimName": "a-c0-x1"}]}
    state.upsert(running)
    usage = PodUsage(state, Settings())
    assert usage.usage.of(QUEUE) == {GPU: 1}
    claim = copy.deepcopy(claim)  # a new object, as the informer hands in
    claim["spec"]["devices"]["requests"][0]["exactly"]["count"] = 4
    state.upsert(claim)
    usage.sync()
    assert usage.usage.of(QUEUE) == {GPU: 4}
    assert [p["metadata"]["name"] for p in usage.users("ResourceClaim", NAMESPACE, "a-c0-x1")] == [
        "a"
    ]


def test_behind_counts_the_work_of_the_next_sync_and_none_when_it_charges_everything() -> None:
    state = cluster_state(gpus=100)
    usage = PodUsage(state, Settings())
    assert usage.behind() == 0
    for name in ("a", "b", "c"):
        state.upsert(_pod(name))
    assert usage.behind() == 3
    usage.sync()
    assert usage.behind() == 0
    state.upsert(_other_queue())
    assert usage.behind() is None
    usage.sync()
    assert usage.behind() == 0


# -- terminating pods --------------------------------------------------------------------


def test_a_terminating_pod_holds_until_its_grace_ends_then_its_record_departs() -> None:
    clock = Clock()
    state = cluster_state(gpus=10)
    state.upsert(_pod("a"))
    usage = PodUsage(state, Settings(), wall=clock)
    usage.set_record("uid-a", _one_gpu(state))
    state.upsert(_deleted(_pod("a"), clock.now))
    usage.sync()
    clock.now += GRACE
    usage.sync()
    assert _holders(usage) == {f"{NAMESPACE}/a"}
    assert usage.holds("uid-a") and not usage.gone("uid-a")
    clock.now += 1
    usage.sync()
    assert _holders(usage) == set()
    assert usage.gone("uid-a") and not usage.holds("uid-a")
    assert usage.drain_departed() == ["uid-a"]
    assert usage.drain_departed() == []


def test_a_uid_is_known_while_cached_and_for_a_while_after_it_is_gone() -> None:
    clock = Clock()
    state = cluster_state(gpus=10)
    state.upsert(_pod("a"))
    usage = PodUsage(state, Settings(), wall=clock)
    assert usage.knows("uid-a") and not usage.knows("uid-never")
    state.remove("Pod", NAMESPACE, "a")
    usage.sync()
    assert usage.knows("uid-a")
    clock.now += GONE_MEMORY_SECONDS + 1
    usage.sync()
    assert not usage.knows("uid-a")


def test_a_reservation_for_a_pod_already_gone_is_not_counted() -> None:
    state = cluster_state(gpus=10)
    state.upsert(_pod("a"))
    usage = PodUsage(state, Settings())
    charge = _one_gpu(state)
    state.remove("Pod", NAMESPACE, "a")
    usage.sync()
    usage.reserve("uid-a", charge)  # a late retry of its admission
    usage.reserve("uid-new", charge)
    assert usage.reserved() == {"uid-new": charge}
    assert usage.usage.of(QUEUE) == {GPU: 1}
    usage.unreserve("uid-new")
    assert usage.usage.of(QUEUE) == {}


# -- a Job's record covering its pods ----------------------------------------------------


def _job_cluster(clock: Clock, *pods: dict[str, Any]) -> tuple[ClusterState, PodUsage, Charge]:
    """Job `train` recorded for two pods of one GPU, with `pods`; the record set."""
    state = cluster_state(gpus=10)
    state.upsert(_job())
    for obj in pods:
        state.upsert(obj)
    usage = PodUsage(state, Settings(), wall=clock)
    record = times(_one_gpu(state), 2)
    usage.set_record(JOB_UID, record)
    return state, usage, record


def _three_pods() -> tuple[dict[str, Any], ...]:
    return _job_pod("p0", 0), _job_pod("p1", 1), _job_pod("p2", 2)


def test_a_jobs_record_covers_its_oldest_pods_and_the_rest_are_charged_on_their_own() -> None:
    _, usage, record = _job_cluster(Clock(), *reversed(_three_pods()))
    assert _holders(usage) == {job_holder(JOB_KEY), f"{NAMESPACE}/p2"}
    assert usage.usage.charge_of(job_holder(JOB_KEY)) == record
    assert usage.usage.of(QUEUE) == {GPU: 3}
    assert usage.holds(JOB_UID) and usage.held_slots(JOB_UID, besides="") == 3
    assert usage.held_slots(JOB_UID, besides="uid-p0") == 2


def test_a_terminating_covered_pod_keeps_its_slot_until_its_grace_ends_then_frees_it() -> None:
    clock = Clock()
    state, usage, _ = _job_cluster(clock, *_three_pods())
    state.upsert(_deleted(_job_pod("p0", 0), clock.now))
    usage.sync()
    assert _holders(usage) == {job_holder(JOB_KEY), f"{NAMESPACE}/p2"}  # p2 still waits
    clock.now += GRACE
    usage.sync()
    assert _holders(usage) == {job_holder(JOB_KEY), f"{NAMESPACE}/p2"}
    clock.now += 1
    usage.sync()
    assert _holders(usage) == {job_holder(JOB_KEY)}  # p0's slot went to p2
    assert usage.usage.of(QUEUE) == {GPU: 2}
    assert usage.held_slots(JOB_UID, besides="") == 2


def test_a_pod_that_gets_a_record_of_its_own_leaves_its_slot_to_the_next() -> None:
    state, usage, _ = _job_cluster(Clock(), *_three_pods())
    own = _one_gpu(state)
    usage.set_record("uid-p1", own)
    assert _holders(usage) == {job_holder(JOB_KEY), f"{NAMESPACE}/p1"}
    assert usage.usage.charge_of(f"{NAMESPACE}/p1") == own
    assert f"{NAMESPACE}/p1" not in usage.unrecorded
    usage.set_record("uid-p1", None)  # its record dropped: p1 is the older, it takes the slot
    assert _holders(usage) == {job_holder(JOB_KEY), f"{NAMESPACE}/p2"}


def test_a_pod_beyond_its_share_is_charged_on_its_own_though_it_holds_a_slot() -> None:
    _, usage, _ = _job_cluster(Clock(), _job_pod("p0", 0, gpus=2), _job_pod("p1", 1))
    assert _holders(usage) == {job_holder(JOB_KEY), f"{NAMESPACE}/p0"}
    assert usage.usage.of(QUEUE) == {GPU: 4}


def test_a_gated_pod_of_the_job_holds_no_slot_and_nothing_until_admitted() -> None:
    gated = _job_pod("p0", 0)
    gated["spec"]["schedulingGates"] = [{"name": "draquota.io/admission"}]
    state, usage, _ = _job_cluster(Clock(), gated, _job_pod("p1", 1), _job_pod("p2", 2))
    assert _holders(usage) == {job_holder(JOB_KEY)}
    assert usage.held_slots(JOB_UID, besides="") == 2
    gated = copy.deepcopy(gated)  # a new object, as the informer hands in
    del gated["spec"]["schedulingGates"]
    state.upsert(gated)  # released: the oldest now, it takes a slot from p2
    usage.sync()
    assert _holders(usage) == {job_holder(JOB_KEY), f"{NAMESPACE}/p2"}


def test_a_finished_job_releases_its_record_and_its_live_pods_pay_for_themselves() -> None:
    state, usage, _ = _job_cluster(Clock(), _job_pod("p0", 0))
    assert _holders(usage) == {job_holder(JOB_KEY)}
    state.upsert(_job(conditions=[{"type": "Complete", "status": "True"}]))
    usage.sync()
    assert _holders(usage) == {f"{NAMESPACE}/p0"}
    assert usage.gone(JOB_UID) and not usage.holds(JOB_UID)
    assert JOB_UID in usage.drain_departed()


def test_a_deleted_job_is_forgotten_and_its_uid_remembered_as_gone() -> None:
    state, usage, _ = _job_cluster(Clock(), _job_pod("p0", 0))
    state.remove("Job", NAMESPACE, "train")
    usage.sync()
    assert _holders(usage) == {f"{NAMESPACE}/p0"}
    assert usage.gone(JOB_UID)
    assert JOB_UID in usage.drain_departed()
