"""The kubernetes-client adapters map API errors to what the rotator understands."""

from __future__ import annotations

import base64
from types import SimpleNamespace
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from certs.inject import MUTATING, VALIDATING, KubeAdmissionClient
from certs.material import TlsMaterial
from certs.secret import SecretStore, tls_secret
from certs.store import StoreConflict


class FakeCoreV1:
    def __init__(self, secret: dict[str, Any] | None) -> None:
        self.secret = secret
        self.version = "7"
        self.calls: list[tuple[str, dict[str, Any]]] = []

    def read_namespaced_secret(self, name: str, namespace: str) -> Any:
        if self.secret is None:
            raise ApiException(status=404, reason="Not Found")
        return SimpleNamespace(
            metadata=SimpleNamespace(resource_version=self.version), data=self.secret["data"]
        )

    def replace_namespaced_secret(self, name: str, namespace: str, body: dict[str, Any]) -> None:
        if body["metadata"]["resourceVersion"] != self.version:
            raise ApiException(status=409, reason="Conflict")
        self.calls.append(("replace", body))

    def create_namespaced_secret(self, namespace: str, body: dict[str, Any]) -> None:
        self.calls.append(("create", body))


def test_secret_store_replaces_with_the_version_it_read(material: TlsMaterial) -> None:
    core = FakeCoreV1(tls_secret(material))
    store = SecretStore(core, "draquota-system")
    assert store.load() == material
    store.save(material)
    assert core.calls[0][0] == "replace"
    assert core.calls[0][1]["metadata"]["resourceVersion"] == "7"
    core.version = "8"  # another replica wrote meanwhile
    with pytest.raises(StoreConflict):
        store.save(material)


def test_secret_store_without_a_secret_loads_nothing_and_creates(material: TlsMaterial) -> None:
    core = FakeCoreV1(None)
    store = SecretStore(core, "draquota-system")
    assert store.load() is None
    store.save(material)
    assert [c[0] for c in core.calls] == ["create"]


def test_admission_client_reads_plain_dicts_and_maps_conflicts(
    monkeypatch: pytest.MonkeyPatch, material: TlsMaterial
) -> None:
    adapter = KubeAdmissionClient(client.ApiClient())
    hook = client.V1ValidatingWebhook(
        name="validate.draquota.io",
        admission_review_versions=["v1"],
        side_effects="NoneOnDryRun",
        client_config=client.AdmissionregistrationV1WebhookClientConfig(
            ca_bundle=base64.b64encode(material.bundle_pem()).decode()
        ),
    )
    config = client.V1ValidatingWebhookConfiguration(
        metadata=client.V1ObjectMeta(name="draquota", resource_version="3"), webhooks=[hook]
    )
    api = adapter._admission
    monkeypatch.setattr(api, "read_validating_webhook_configuration", lambda name: config)

    def missing(name: str) -> Any:
        raise ApiException(status=404)

    def conflict(name: str, body: dict[str, Any]) -> Any:
        raise ApiException(status=409, reason="Conflict")

    monkeypatch.setattr(api, "read_mutating_webhook_configuration", missing)
    monkeypatch.setattr(api, "replace_validating_webhook_configuration", conflict)
    data = adapter.read(VALIDATING, "draquota")
    assert data["kind"] == VALIDATING
    assert data["webhooks"][0]["clientConfig"]["caBundle"] == hook.client_config.ca_bundle
    assert adapter.read(MUTATING, "draquota") is None
    with pytest.raises(StoreConflict):
        adapter.replace(VALIDATING, "draquota", data)


def test_in_cluster_rotator_targets_the_pods_namespace(monkeypatch: pytest.MonkeyPatch) -> None:
    from certs.kube import in_cluster_rotator

    monkeypatch.setenv("POD_NAMESPACE", "quota-ops")
    rotator = in_cluster_rotator(client.ApiClient())
    assert (rotator.store.namespace, rotator.store.name) == ("quota-ops", "draquota-tls")
    assert "draquota.quota-ops.svc" in rotator.spec.all_dns_names()
    assert rotator.publisher.targets == ((MUTATING, "draquota"), (VALIDATING, "draquota"))
