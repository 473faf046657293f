"""The install of docs/operations.md on a real API server: it is accepted and draquota answers."""

from __future__ import annotations

import pytest

from tests.e2e.cluster import ControlPlane, Draquota

pytestmark = pytest.mark.e2e


def test_install_from_the_local_overlay_is_accepted_and_every_replica_is_ready(
    draquota_cluster: Draquota,
) -> None:
    assert all(replica.ready() for replica in draquota_cluster.replicas)
    crds = draquota_cluster.cluster.kubectl("get", "crd", "-o", "name").stdout.split()
    assert {
        "customresourcedefinition.apiextensions.k8s.io/clusterqueues.draquota.io",
        "customresourcedefinition.apiextensions.k8s.io/localqueues.draquota.io",
        "customresourcedefinition.apiextensions.k8s.io/resourceflavors.draquota.io",
        "customresourcedefinition.apiextensions.k8s.io/quotaledgers.draquota.io",
    } <= set(crds)


def test_a_pod_outside_any_queue_is_admitted_through_the_webhooks(cluster: ControlPlane) -> None:
    cluster.kubectl("create", "namespace", "e2e-smoke")
    created = cluster.kubectl(
        "run", "hello", "--image=registry.example.com/hello:1.0", "-n", "e2e-smoke"
    )
    assert "pod/hello created" in created.stdout
