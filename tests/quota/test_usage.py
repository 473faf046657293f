"""Usage per ClusterQueue: holders, shared claims once per queue, rebuilt from live pods."""

from __future__ import annotations

from quota.charge import Charge, FlavorResource
from quota.livepods import is_live_pod, live_pod_charge, usage_from_pods
from quota.settings import Settings
from quota.usage import Usage
from tests.quota.queue_builders import scenario_objects, submission_object
from webhook.store.clusterstate import ClusterState

GPUS = FlavorResource("default", "gpus")


def _charge(
    queue: str, gpus: int, shared: dict[str, int] | None = None, flavor: str = "default"
) -> Charge:
    return Charge(
        queue,
        "team-a/default",
        {"gpus": flavor},
        {"gpus": gpus},
        shared_claims={claim: {"gpus": n} for claim, n in (shared or {}).items()},
    )


def test_shared_claim_counted_once_per_queue_and_flavor() -> None:
    usage = Usage()
    usage.add("team-a/p0", _charge("a", 1, {"team-a/c": 2}))
    usage.add("team-a/p1", _charge("a", 1, {"team-a/c": 2}))
    usage.add("team-a/p2", _charge("b", 0, {"team-a/c": 2}))
    usage.add("team-a/p3", _charge("a", 0, {"team-a/c": 2}, flavor="spot"))
    assert usage.of("a") == {GPUS: 4, FlavorResource("spot", "gpus"): 2}
    assert usage.of("b") == {GPUS: 2}
    assert usage.shared_claims("b") == {("team-a/c", GPUS)}


def test_add_replaces_remove_forgets_copy_is_independent() -> None:
    usage = Usage()
    usage.add("h", _charge("a", 1))
    usage.add("h", _charge("a", 3))
    assert usage.of("a") == {GPUS: 3} and usage.holders() == {"h"}
    copy = usage.copy()
    copy.remove("h")
    copy.remove("never-there")
    assert copy.of("a") == {} and usage.of("a") == {GPUS: 3}


NOW = 1_800_000_000.0  # 2027-01-15T08:00:00Z
DELETED = "2027-01-15T07:59:00Z"  # a minute before NOW


def test_live_pods_follow_resource_quota() -> None:
    assert is_live_pod({"metadata": {}, "status": {"phase": "Running"}}, NOW)
    assert is_live_pod({"metadata": {}}, NOW)
    assert not is_live_pod({"metadata": {}, "status": {"phase": "Succeeded"}}, NOW)
    assert not is_live_pod({"metadata": {}, "status": {"phase": "Failed"}}, NOW)
    # deleted, grace unknown: held until gone
    assert is_live_pod({"metadata": {"deletionTimestamp": DELETED}}, NOW)
    # deleted, still inside deletionTimestamp + grace: a terminating pod holds its devices
    terminating = {"deletionTimestamp": DELETED, "deletionGracePeriodSeconds": 86400}
    assert is_live_pod({"metadata": terminating}, NOW)
    # past deletionTimestamp + grace: stuck terminating pods stop counting
    stuck = {"deletionTimestamp": DELETED, "deletionGracePeriodSeconds": 30}
    assert not is_live_pod({"metadata": stuck}, NOW)


SCENARIO = {
    "namespaces": {"team-a": {}, "sandbox": {}},
    "queues": [
        {
            "name": "a",
            "classes": {"gpus": ["gpu.example.com"]},
            "groups": [{"default": {"gpus": 8}}],
        }
    ],
    "localQueues": {"team-a/default": "a"},
    "running": [
        {"name": "r0", "devices": {"gpu.example.com": 2}},
        {"name": "done", "devices": {"gpu.example.com": 2}, "phase": "Failed"},
        {"name": "elsewhere", "ns": "sandbox", "devices": {"gpu.example.com": 2}},
        {
            "name": "forged",
            "ns": "sandbox",
            "devices": {"gpu.example.com": 1},
            "charge": {"clusterQueue": "a", "localQueue": "team-a/default", "usage": {"gpus": 1}},
        },
    ],
}


def test_usage_from_pods_recomputes_and_skips_unmanaged() -> None:
    state = ClusterState(scenario_objects(SCENARIO))
    usage = usage_from_pods(state, Settings(), NOW)
    assert usage.holders() == {"team-a/r0"}
    assert usage.of("a") == {GPUS: 2}


def test_pod_whose_template_is_gone_keeps_its_admission_record() -> None:
    state = ClusterState(scenario_objects({**SCENARIO, "running": []}))
    recorded = _charge("a", 2)
    pod, _ = submission_object({"name": "orphan", "template": "deleted-tmpl"})
    assert live_pod_charge(pod, state, Settings(), NOW, recorded) == recorded
    assert live_pod_charge(pod, state, Settings(), NOW) is None


def test_a_charge_annotation_is_never_a_source_of_usage() -> None:
    state = ClusterState(scenario_objects({**SCENARIO, "running": []}))
    forged = _charge("a", 2)
    pod, _ = submission_object(
        {"name": "orphan", "template": "deleted-tmpl", "charge": forged.to_dict()}
    )
    assert live_pod_charge(pod, state, Settings(), NOW) is None
