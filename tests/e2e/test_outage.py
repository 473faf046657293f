"""The webhook down: the API server does what docs/operations.md says, and the documented
recovery steps work (fail open, restore, remove and re-create the configurations)."""

from __future__ import annotations

import base64
import json
import time
from collections.abc import Iterator

import pytest
import yaml

from tests.e2e.cluster import ControlPlane, Draquota, eventually, run_draquota
from tests.e2e.objects import Flavor, Scenario, gpu_pod, scenario

pytestmark = pytest.mark.e2e

CONFIGURATIONS = ("validatingwebhookconfiguration", "mutatingwebhookconfiguration")
FAIL_OPEN = '[{"op":"replace","path":"/webhooks/0/failurePolicy","value":"Ignore"}]'
RESTRICTED_POD = {
    "apiVersion": "v1",
    "kind": "Pod",
    "metadata": {"name": "repair"},
    "spec": {
        "securityContext": {"runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"}},
        "containers": [
            {
                "name": "main",
                "image": "registry.example.com/x:1",
                "securityContext": {
                    "allowPrivilegeEscalation": False,
                    "capabilities": {"drop": ["ALL"]},
                },
            }
        ],
    },
}


@pytest.fixture(scope="module")
def outage(draquota_cluster: Draquota) -> Iterator[Scenario]:
    s = scenario(draquota_cluster, "e2e-outage", Flavor("main", 8, {"e2e-outage-1": 16}))
    with draquota_cluster.disrupted():
        draquota_cluster.stop_serving()
        try:
            yield s
        finally:
            _restore(draquota_cluster)


def _restore(installed: Draquota) -> None:
    installed.cluster.apply(installed.manifests)
    run_draquota(
        "certs", "inject", "--ca-file", str(installed.certs / "ca.crt"),
        "--kubeconfig", str(installed.cluster.kubeconfig),
    )  # fmt: skip
    installed.start_serving()


def _create(cluster: ControlPlane, namespace: str, pod: dict) -> tuple[bool, str]:
    out = cluster.kubectl(
        "create", "-n", namespace, "-f", "-", stdin=yaml.safe_dump(pod), check=False
    )
    return out.returncode == 0, out.stderr


def _policy(cluster: ControlPlane) -> list[str]:
    return [
        cluster.kubectl(
            "get", kind, "draquota", "-o", "jsonpath={.webhooks[0].failurePolicy}"
        ).stdout
        for kind in CONFIGURATIONS
    ]


def _ca_bundle(cluster: ControlPlane, kind: str) -> str:
    out = cluster.kubectl(
        "get", kind, "draquota", "-o", "jsonpath={.webhooks[0].clientConfig.caBundle}"
    )
    return base64.b64decode(out.stdout).decode() if out.stdout else ""


def test_while_the_webhook_is_down_pods_are_rejected_with_connection_refused(
    outage: Scenario,
) -> None:
    created, why = _create(outage.cluster, outage.namespace, gpu_pod("while-down"))
    assert not created
    assert 'failed calling webhook "mutate.draquota.io"' in why
    assert "connection refused" in why


def test_a_webhook_that_does_not_answer_rejects_pods_after_its_timeout(
    outage: Scenario, draquota_cluster: Draquota
) -> None:
    proxy = draquota_cluster.proxy
    proxy.hang = True
    proxy.listen()
    try:
        started = time.monotonic()
        created, why = _create(outage.cluster, outage.namespace, gpu_pod("stuck"))
        took = time.monotonic() - started
    finally:
        proxy.close_listener()
        proxy.hang = False
    assert not created
    assert (
        'failed calling webhook "mutate.draquota.io"' in why and "context deadline exceeded" in why
    )
    assert 3 <= took < 8  # timeoutSeconds 3 of the mutating webhook


def test_while_the_webhook_is_down_kube_system_and_draquota_system_keep_working(
    outage: Scenario,
) -> None:
    assert _create(outage.cluster, "kube-system", RESTRICTED_POD) == (True, "")
    assert _create(outage.cluster, "draquota-system", RESTRICTED_POD) == (True, "")


def test_failing_open_as_documented_lets_pods_through_without_a_charge(outage: Scenario) -> None:
    cluster = outage.cluster
    for kind in CONFIGURATIONS:
        cluster.kubectl("patch", kind, "draquota", "--type=json", "-p", FAIL_OPEN)
    created, why = _create(cluster, outage.namespace, gpu_pod("failed-open"))
    assert created, why
    pod = json.loads(
        cluster.kubectl("get", "pod", "failed-open", "-n", outage.namespace, "-o", "json").stdout
    )
    assert "draquota.io/charge" not in pod["metadata"].get("annotations", {})


def test_restoring_the_manifests_fails_closed_again_and_keeps_the_ca_bundle(
    outage: Scenario, draquota_cluster: Draquota
) -> None:
    cluster = outage.cluster
    bundles = [_ca_bundle(cluster, kind) for kind in CONFIGURATIONS]
    cluster.apply(draquota_cluster.manifests)  # `kubectl apply -k` of the overlay
    assert _policy(cluster) == ["Fail", "Fail"]
    assert [_ca_bundle(cluster, kind) for kind in CONFIGURATIONS] == bundles != ["", ""]
    assert not _create(cluster, outage.namespace, gpu_pod("still-down"))[0]


def test_removing_the_webhooks_lets_pods_through_and_reinstalling_enforces_again(
    outage: Scenario, draquota_cluster: Draquota
) -> None:
    cluster = outage.cluster
    for kind in CONFIGURATIONS:
        cluster.kubectl("delete", kind, "draquota")
    assert _create(cluster, outage.namespace, gpu_pod("no-webhooks"))[0]
    _restore(draquota_cluster)
    # both pods admitted meanwhile are charged now: 2 GPUs of the 8
    eventually(lambda: outage.usage("main") == [2.0] * len(draquota_cluster.replicas), timeout=30)
    created, why = _create(cluster, outage.namespace, gpu_pod("back", gpus=7))
    assert not created and "exceeds quota" in why, why
    assert _create(cluster, outage.namespace, gpu_pod("back", gpus=6))[0]
