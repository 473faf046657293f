"""The install of docs/operations.md on a real API server: it is accepted and draquota answers."""

from __future__ import annotations

import pytest
import yaml

from tests.e2e.cluster import REPO, ControlPlane, Draquota, run_draquota
from tests.e2e.objects import remove_pods_later

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
    remove_pods_later("e2e-smoke")
    created = cluster.kubectl(
        "run", "hello", "--image=registry.example.com/hello:1.0", "-n", "e2e-smoke"
    )
    assert "pod/hello created" in created.stdout


def test_the_in_cluster_base_is_accepted_by_the_api_server(cluster: ControlPlane) -> None:
    # `kubectl apply -k manifests/` of docs/operations.md, checked by the API server itself
    applied = cluster.kubectl("apply", "--dry-run=server", "-k", str(REPO / "manifests"))
    assert "deployment.apps/draquota created (server dry run)" in applied.stdout


def test_the_deployment_pod_passes_its_namespace_pod_security_and_priority(
    cluster: ControlPlane,
) -> None:
    base = cluster.kubectl("kustomize", str(REPO / "manifests")).stdout
    docs = [d for d in yaml.safe_load_all(base) if d]
    priority = next(d for d in docs if d["kind"] == "PriorityClass")
    cluster.apply(yaml.safe_dump(priority))
    template = next(d for d in docs if d["kind"] == "Deployment")["spec"]["template"]
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "draquota-0", **template["metadata"]},
    }
    pod["spec"] = template["spec"]
    created = cluster.kubectl(
        "create", "--dry-run=server", "-n", "draquota-system", "-f", "-", stdin=yaml.safe_dump(pod),
        check=False,
    )  # fmt: skip
    assert created.returncode == 0 and created.stderr == "", created.stderr


def test_the_tls_secret_of_the_install_steps_is_created(draquota_cluster: Draquota) -> None:
    secret = run_draquota("certs", "secret", "--dir", str(draquota_cluster.certs)).stdout
    draquota_cluster.cluster.kubectl("create", "-f", "-", stdin=secret)
    kind = draquota_cluster.cluster.kubectl(
        "get", "secret", "draquota-tls", "-n", "draquota-system", "-o", "jsonpath={.type}"
    )
    assert kind.stdout == "kubernetes.io/tls"
