"""Attacks on the prepared-decision cache: pods that look like another team's pods.

draquota keeps one preparation per pod content (`webhook.admission.preparedcache`), leaving the
pod's name, uid and owners out of the key. A user who copies another team's pod, or
sends many pods, must still be routed, counted and charged as their own pod says.
"""

from __future__ import annotations

import copy
from typing import Any

from quota.charge import QUEUE_LABEL, Charge
from quota.settings import Settings
from tests.security.cluster import Cluster
from tests.webhook.builders import NAMESPACE, QUEUE, TEMPLATE, cluster_objects, pod

OTHER = "team-b"


def _team_b(gpus: int) -> list[dict[str, Any]]:
    """Namespace team-b with its own ClusterQueue of `gpus` GPUs and the same template name."""
    objects = []
    for obj in cluster_objects(gpus=gpus):
        if obj["kind"] in ("DeviceClass", "ResourceFlavor"):
            continue
        obj = copy.deepcopy(obj)
        metadata = obj["metadata"]
        if obj["kind"] == "Namespace":
            metadata["name"] = OTHER
        elif obj["kind"] == "ClusterQueue":
            metadata["name"] = OTHER
            obj["spec"]["namespaceSelector"] = {
                "matchLabels": {"kubernetes.io/metadata.name": OTHER}
            }
        else:
            metadata["namespace"] = OTHER
            if obj["kind"] == "LocalQueue":
                obj["spec"]["clusterQueue"] = OTHER
        objects.append(obj)
    return objects


def _charge(answer: dict[str, Any]) -> Charge:
    annotations = answer["object"]["metadata"]["annotations"]
    return Charge.from_annotation(annotations["draquota.io/charge"], "test")


def test_a_copy_of_another_teams_pod_is_charged_to_its_own_namespaces_queue() -> None:
    a_only = copy.deepcopy(cluster_objects(gpus=8))
    for obj in a_only:  # team-a's queue takes team-a only, so the two queues are apart
        if obj["kind"] == "ClusterQueue":
            obj["spec"]["namespaceSelector"] = {
                "matchLabels": {"kubernetes.io/metadata.name": NAMESPACE}
            }
    cluster = Cluster([*a_only, *_team_b(gpus=1)], Settings(placement="Off"))
    theirs = cluster.create(pod("train-0"))
    assert theirs["allowed"], theirs
    assert _charge(theirs).cluster_queue == QUEUE
    mine = cluster.create(pod("train-0", namespace=OTHER))
    assert mine["allowed"], mine
    assert _charge(mine).cluster_queue == OTHER
    again = cluster.create(pod("train-1", namespace=OTHER))  # team-b holds 1 GPU only
    assert not again["allowed"] and again["status"]["reason"] == "QuotaExceeded", again
    assert f'ClusterQueue "{OTHER}"' in again["status"]["message"]


def test_a_copy_with_another_queue_label_is_charged_to_that_local_queue() -> None:
    cluster = Cluster(cluster_objects(gpus=8), Settings(placement="Off"))
    first = cluster.create(pod("train-0"))
    assert _charge(first).local_queue == f"{NAMESPACE}/default"
    labelled = cluster.create(pod("train-1", labels={QUEUE_LABEL: "user-queue"}))
    assert _charge(labelled).local_queue == f"{NAMESPACE}/user-queue"


def test_a_copy_that_asks_for_more_is_charged_for_more() -> None:
    cluster = Cluster(cluster_objects(gpus=8), Settings(placement="Off"))
    cluster.create(pod("train-0"))
    greedy = cluster.create(pod("train-1", templates=(TEMPLATE, TEMPLATE)))
    assert _charge(greedy).per_pod == {"gpu": 2}
    single = cluster.create(pod("train-2"))
    assert _charge(single).per_pod == {"gpu": 1}


def test_identical_pods_share_a_preparation_but_each_is_counted() -> None:
    cluster = Cluster(cluster_objects(gpus=4), Settings(placement="Off"))
    answers = [cluster.create(pod(f"replica-{i}")) for i in range(6)]
    assert [a["allowed"] for a in answers] == [True] * 4 + [False] * 2
    assert "replica-4" in answers[4]["status"]["message"]
    assert cluster.client.app.state.admission.prepared.kept.hits >= 5
