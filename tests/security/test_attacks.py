"""The attacks of a hostile namespace user, one test each, written as the attack.

The user may create pods, Jobs, ResourceClaims and ResourceClaimTemplates in their
own namespace (team-a), and nothing cluster-scoped. Each test sends what that user
would send, in order, through a stand-in for the API server (tests/security/cluster.py)
and asserts that the attack fails: a denial with a message, or usage that stays
correct. Attacks whose outcome depends on the real API server also run against it in
tests/e2e/test_security.py; the ones on the shared QuotaLedger run against replicas
over tests/fakeapi in test_ledger_attacks.py.
"""

from __future__ import annotations

import base64
import copy
from typing import Any

import jsonpatch
import orjson
import pytest

from quota.charge import CHARGE_ANNOTATION, QUEUE_LABEL, Charge
from tests.security.cluster import Cluster
from tests.webhook.builders import (
    FLAVOR,
    FLAVOR_LABELS,
    GPU_CLASS,
    NAMESPACE,
    QUEUE,
    cluster_objects,
    pod,
    review,
)

GPU = "gpu"


def template(name: str, count: int = 1, mode: str = "ExactCount") -> dict[str, Any]:
    exactly: dict[str, Any] = {"deviceClassName": GPU_CLASS, "allocationMode": mode}
    if mode == "ExactCount":
        exactly["count"] = count
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": {"spec": {"devices": {"requests": [{"name": "gpu", "exactly": exactly}]}}},
    }


def claim(name: str, count: int = 1, mode: str = "ExactCount") -> dict[str, Any]:
    spec = template(name, count, mode)["spec"]["spec"]
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": spec,
    }


def named_claim_pod(name: str, claim_name: str) -> dict[str, Any]:
    obj = pod(name, templates=())
    obj["spec"]["resourceClaims"] = [{"name": "c0", "resourceClaimName": claim_name}]
    obj["spec"]["containers"][0]["resources"] = {"claims": [{"name": "c0"}]}
    return obj


def claim_review(obj: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
    return review(
        obj,
        kind="ResourceClaim",
        resource="resourceclaims",
        group="resource.k8s.io",
        **kwargs,
    )


@pytest.fixture
def cluster() -> Cluster:
    """team-a's queue holds 4 GPUs; template `big` asks 4, `one-gpu` asks 1."""
    return Cluster([*cluster_objects(gpus=4), template("big", 4)])


def test_01_a_terminating_pod_keeps_its_devices_until_its_grace_period_ends(
    cluster: Cluster,
) -> None:
    assert cluster.create(pod("holder", templates=("big",)))["allowed"]
    cluster.delete("holder", grace=86400)  # terminationGracePeriodSeconds: 86400
    second = cluster.create(pod("next", templates=("big",)))
    assert not second["allowed"]
    assert "in use 4 of nominal 4" in second["status"]["message"]
    cluster.clock.now += 2 * 86400 + 1  # past deletionTimestamp + grace, like ResourceQuota
    assert cluster.create(pod("later", templates=("big",)))["allowed"]


def test_02_swapping_the_template_after_admission_does_not_lower_the_charge(
    cluster: Cluster,
) -> None:
    first = cluster.create(pod("train-0", templates=("big",)))
    assert first["allowed"]
    # the control plane generates the pod's claim from `big`, and records it in pod status
    generated = {**claim("train-0-c0-x7k2p", 4), "kind": "ResourceClaim"}
    cluster.state.upsert(generated)
    running = cluster.pod("train-0")
    running["status"]["resourceClaimStatuses"] = [
        {"name": "c0", "resourceClaimName": "train-0-c0-x7k2p"}
    ]
    cluster.state.upsert(running)
    # the user deletes `big` and re-creates it with count 1, then with an unmapped class
    cluster.state.upsert(template("big", 1))
    assert cluster.usage(QUEUE, FLAVOR, GPU) == 4
    assert not cluster.create(pod("train-1", templates=("big",)))["allowed"]
    unmapped = template("big", 4)
    unmapped["spec"]["spec"]["devices"]["requests"][0]["exactly"]["deviceClassName"] = "cpu.x"
    cluster.state.upsert(unmapped)
    assert cluster.usage(QUEUE, FLAVOR, GPU) == 4
    # even before the claim is generated, the admission record holds the charge
    cluster.state.remove("ResourceClaim", NAMESPACE, "train-0-c0-x7k2p")
    assert cluster.usage(QUEUE, FLAVOR, GPU) == 4


def test_03_a_named_claim_recreated_with_allocation_mode_all_is_denied(cluster: Cluster) -> None:
    cluster.state.upsert(claim("shared", 1))
    assert cluster.create(named_claim_pod("user", "shared"))["allowed"]
    cluster.state.remove("ResourceClaim", NAMESPACE, "shared")
    bigger = claim("shared", mode="All")
    answer = cluster.call("validate", claim_review(bigger))
    assert not answer["allowed"]
    assert answer["status"]["reason"] == "QuotaExceeded"
    assert 'exceeds quota of ClusterQueue "team-a"' in answer["status"]["message"]
    # a claim of the same size is fine, and so is any claim nobody references
    assert cluster.call("validate", claim_review(claim("shared", 1)))["allowed"]
    assert cluster.call("validate", claim_review(claim("unused", mode="All")))["allowed"]


def test_04_status_or_deletion_fields_in_a_create_do_not_skip_mutation() -> None:
    two_flavors = Cluster(_two_flavor_queue())
    sent = []
    for i in range(11):
        obj = pod(f"p{i}")
        obj["status"] = {"phase": "Failed"}
        if i % 2:
            obj["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
        answer = two_flavors.create(obj)
        sent.append(answer["allowed"])
        if answer["allowed"]:
            stored = answer["object"]
            assert stored["metadata"]["labels"][QUEUE_LABEL] == "default"
            assert CHARGE_ANNOTATION in stored["metadata"]["annotations"]
            assert stored["spec"]["nodeSelector"] in ({"pool": "a"}, {"pool": "b"})
    assert sent.count(True) == 2
    # a pod that reaches /validate without /mutate's stamp is denied, whatever its status
    bare = pod("bare")
    bare["metadata"]["uid"] = "uid-bare"
    bare["status"] = {"phase": "Succeeded"}
    denied = Cluster(cluster_objects(gpus=4)).call("validate", review(bare))
    assert not denied["allowed"] and denied["status"]["reason"] == "ChargeMismatch"


def _two_flavor_queue() -> list[dict[str, Any]]:
    objects = [o for o in cluster_objects(gpus=1) if o["kind"] != "ClusterQueue"]
    flavors = []
    for name in ("a", "b"):
        objects.append(
            {
                "apiVersion": "draquota.io/v1beta1",
                "kind": "ResourceFlavor",
                "metadata": {"name": name},
                "spec": {"nodeLabels": {"pool": name}},
            }
        )
        resource = {
            "name": GPU,
            "kind": "DeviceClass",
            "deviceClassNames": [GPU_CLASS],
            "nominalQuota": 1,
        }
        flavors.append({"name": name, "resources": [resource]})
    objects.append(
        {
            "apiVersion": "draquota.io/v1beta1",
            "kind": "ClusterQueue",
            "metadata": {"name": QUEUE},
            "spec": {
                "namespaceSelector": {},
                "resourceGroups": [{"coveredResources": [GPU], "flavors": flavors}],
            },
        }
    )
    return objects


def test_05_a_forged_charge_annotation_cannot_fill_another_teams_queue() -> None:
    objects = cluster_objects(gpus=2)
    sandbox = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "sandbox"}}
    cluster = Cluster([*objects, sandbox])
    forged = Charge(QUEUE, f"{NAMESPACE}/default", {GPU: FLAVOR}, {GPU: 2}, {GPU_CLASS: 2})
    for i in range(3):
        obj = pod(f"thief-{i}", namespace="sandbox", templates=())
        obj["metadata"]["annotations"] = {CHARGE_ANNOTATION: forged.to_annotation()}
        answer = cluster.create(obj)
        assert answer["allowed"]  # not managed: sandbox has no LocalQueue
        assert CHARGE_ANNOTATION not in answer["object"]["metadata"].get("annotations", {})
        # the same pod stored by some other path, annotation intact, still counts for nothing
        cluster.state.upsert({**obj, "metadata": {**obj["metadata"], "uid": f"forged-{i}"}})
    assert cluster.usage(QUEUE, FLAVOR, GPU) == 0
    assert cluster.create(pod("team-a-job", templates=("one-gpu", "one-gpu")))["allowed"]


def test_06_decoy_annotations_confirm_no_one_elses_admission(cluster: Cluster) -> None:
    victim = cluster.create(pod("victim", templates=("big",)))
    assert victim["allowed"]
    annotation = victim["object"]["metadata"]["annotations"][CHARGE_ANNOTATION]
    cluster.state.remove("Pod", NAMESPACE, "victim")  # its create is still in flight
    cluster.ledger.records()  # the admission is recorded by uid, not by annotation
    decoy = pod("decoy", templates=())
    decoy["metadata"]["annotations"] = {CHARGE_ANNOTATION: annotation}
    decoy["metadata"]["uid"] = "uid-decoy"
    cluster.state.upsert(decoy)
    assert cluster.usage(QUEUE, FLAVOR, GPU) == 4
    assert not cluster.create(pod("greedy", templates=("big",)))["allowed"]


def test_07_creating_a_name_that_exists_reserves_nothing(cluster: Cluster) -> None:
    assert cluster.create(pod("train", templates=("one-gpu", "one-gpu")))["allowed"]
    again = []
    for _ in range(300):
        answer = cluster.create(pod("train", templates=("one-gpu", "one-gpu")))
        again.append((answer["allowed"], answer["status"]["reason"]))
    assert set(again) == {(False, "AlreadyExists")}
    assert cluster.usage(QUEUE, FLAVOR, GPU) == 2
    assert len(cluster.ledger.records()) == 1
    assert cluster.create(pod("other", templates=("one-gpu", "one-gpu")))["allowed"]


def test_08_a_dry_run_writes_and_deletes_nothing(cluster: Cluster) -> None:
    first = cluster.create(pod("first", templates=("big",)))
    assert first["allowed"]
    in_flight = first["object"]
    cluster.state.remove("Pod", NAMESPACE, "first")  # not stored yet: still in flight
    edited = copy.deepcopy(in_flight)
    edited["metadata"]["annotations"][CHARGE_ANNOTATION] = Charge(
        QUEUE, f"{NAMESPACE}/default", {GPU: FLAVOR}, {GPU: 1}
    ).to_annotation()
    answer = cluster.call("validate", review(edited, dry_run=True))
    assert not answer["allowed"]
    assert set(cluster.ledger.reservations()) == {in_flight["metadata"]["uid"]}
    assert cluster.usage(QUEUE, FLAVOR, GPU) == 4
    assert not cluster.create(pod("second", templates=("big",)))["allowed"]


def test_09_a_resize_past_quota_is_denied() -> None:
    objects = cluster_objects(gpus=4)
    queue = next(o for o in objects if o["kind"] == "ClusterQueue")
    group = queue["spec"]["resourceGroups"][0]
    group["coveredResources"].append("cpu")
    group["flavors"][0]["resources"].append({"name": "cpu", "nominalQuota": "4"})
    cluster = Cluster(objects)
    obj = pod("web", templates=())
    obj["spec"]["containers"][0]["resources"] = {"requests": {"cpu": "1"}}
    assert cluster.create(obj)["allowed"]
    running = cluster.pod("web")

    def resized(cpu: str) -> dict[str, Any]:
        new = copy.deepcopy(running)
        new["spec"]["containers"][0]["resources"] = {"requests": {"cpu": cpu}}
        return new

    too_big = cluster.call(
        "validate", review(resized("64"), operation="UPDATE", old=running, sub_resource="resize")
    )
    assert not too_big["allowed"]
    assert "insufficient quota for cpu" in too_big["status"]["message"]
    one_more = cluster.call(
        "validate", review(resized("4"), operation="UPDATE", old=running, sub_resource="resize")
    )
    assert one_more["allowed"]  # 4 of 4: the pod's own cpu is not counted twice
    plain_update = cluster.call("validate", review(resized("64"), operation="UPDATE", old=running))
    assert not plain_update["allowed"]
    fits = cluster.call(
        "validate", review(resized("3"), operation="UPDATE", old=running, sub_resource="resize")
    )
    assert fits["allowed"]
    cluster.state.upsert(resized("3"))
    # the larger resize is recorded: a pod's record never shrinks while it runs (the kubelet
    # may not have released what it gave), so another pod cannot take what it may hold
    other = pod("other", templates=())
    other["spec"]["containers"][0]["resources"] = {"requests": {"cpu": "1"}}
    assert cluster.usage(QUEUE, FLAVOR, "cpu") == 4000
    assert not cluster.create(other)["allowed"]


def test_11_a_jobs_queue_label_reaches_its_pods() -> None:
    objects = [
        o
        for o in cluster_objects(gpus=2)
        if not (o["kind"] == "LocalQueue" and o["metadata"]["name"] == "default")
    ]
    cluster = Cluster(objects)
    job = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": "train",
            "namespace": NAMESPACE,
            "labels": {QUEUE_LABEL: "user-queue"},
        },
        "spec": {"parallelism": 2, "completions": 2, "template": copy.deepcopy(pod("x"))},
    }
    del job["spec"]["template"]["metadata"]["name"]
    mutated = cluster.create(job, kind="Job", resource="jobs", group="batch")
    assert mutated["allowed"]
    labels = mutated["object"]["spec"]["template"]["metadata"]["labels"]
    assert labels[QUEUE_LABEL] == "user-queue"
    # the Job controller stamps pods from the template: each one is managed and charged
    outcomes = []
    for _ in range(4):
        from_template = copy.deepcopy(mutated["object"]["spec"]["template"])
        from_template["metadata"].update(generateName="train-", namespace=NAMESPACE)
        from_template["metadata"].pop("uid", None)
        from_template["kind"], from_template["apiVersion"] = "Pod", "v1"
        outcomes.append(cluster.create(from_template)["allowed"])
    assert outcomes == [True, True, False, False]
    assert cluster.usage(QUEUE, FLAVOR, GPU) == 2


def test_node_selector_of_the_flavor_must_be_on_the_pod(cluster: Cluster) -> None:
    """A later mutating webhook (or a bypassed one) dropping the flavor's nodeSelector."""
    obj = pod("p")
    mutated = cluster.call("mutate", review(obj))
    assert mutated["allowed"]
    stamped = jsonpatch.apply_patch(obj, orjson.loads(base64.b64decode(mutated["patch"])))
    assert stamped["spec"]["nodeSelector"] == FLAVOR_LABELS
    del stamped["spec"]["nodeSelector"]
    stamped["metadata"]["uid"] = "uid-p"
    answer = cluster.call("validate", review(stamped))
    assert not answer["allowed"] and "spec.nodeSelector" in answer["status"]["message"]


def test_a_forged_claim_status_in_a_create_is_not_what_the_pod_is_charged(
    cluster: Cluster,
) -> None:
    """The body of a create names a small claim as the one `generated` for its big entry."""
    cluster.state.upsert({**claim("tiny", 1), "kind": "ResourceClaim"})
    obj = pod("sly", templates=("big",))
    obj["status"] = {"resourceClaimStatuses": [{"name": "c0", "resourceClaimName": "tiny"}]}
    assert cluster.create(obj)["allowed"]
    assert cluster.usage(QUEUE, FLAVOR, GPU) == 4
    assert not cluster.create(pod("more", templates=("one-gpu",)))["allowed"]


def test_a_claim_name_only_finished_pods_reference_is_not_checked(cluster: Cluster) -> None:
    cluster.state.upsert(claim("shared", 1))
    assert cluster.create(named_claim_pod("done", "shared"))["allowed"]
    finished = cluster.pod("done")
    finished["status"]["phase"] = "Succeeded"
    cluster.state.upsert(finished)
    cluster.state.remove("ResourceClaim", NAMESPACE, "shared")
    # nobody live holds it: any size is a new claim like any other
    assert cluster.call("validate", claim_review(claim("shared", mode="All")))["allowed"]
