"""caBundle injection: every webhook of draquota's configurations, idempotent, conflict-safe."""

from __future__ import annotations

import base64
import copy
import shutil
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from certs.inject import CRD, MUTATING, VALIDATING, WebhookInjector, inject, inject_manifests
from certs.material import TlsMaterial
from certs.store import StoreConflict
from tests.manifests.loader import MANIFESTS


def _configs() -> dict[tuple[str, str], dict[str, Any]]:
    docs = yaml.safe_load_all((MANIFESTS / "webhooks.yaml").read_text(encoding="utf-8"))
    objs = {(d["kind"], d["metadata"]["name"]): d for d in docs}
    for i, obj in enumerate(objs.values()):
        obj["metadata"]["resourceVersion"] = str(i + 1)
    return objs


class FakeCluster:
    """AdmissionClient over a dict, with resourceVersion checks like the API server's."""

    def __init__(self, objects: dict[tuple[str, str], dict[str, Any]]) -> None:
        self.objects = objects
        self.writes: list[tuple[str, str]] = []
        self.concurrent_writes = 0

    def read(self, kind: str, name: str) -> dict[str, Any] | None:
        obj = self.objects.get((kind, name))
        return copy.deepcopy(obj) if obj else None

    def replace(self, kind: str, name: str, body: dict[str, Any]) -> None:
        current = self.objects[(kind, name)]
        if self.concurrent_writes:
            # Someone else (kubectl apply) wrote in between: bump the version.
            self.concurrent_writes -= 1
            current["metadata"]["resourceVersion"] += "x"
        if body["metadata"]["resourceVersion"] != current["metadata"]["resourceVersion"]:
            raise StoreConflict(f"{kind}/{name}")
        body["metadata"]["resourceVersion"] += "+"
        self.objects[(kind, name)] = body
        self.writes.append((kind, name))


def _bundles(cluster: FakeCluster) -> list[str | None]:
    return [
        hook["clientConfig"].get("caBundle")
        for obj in cluster.objects.values()
        for hook in obj.get("webhooks", [])
    ]


def test_every_webhook_trusts_the_bundle(material: TlsMaterial) -> None:
    cluster = FakeCluster(_configs())
    result = inject(cluster, material.bundle_pem())
    assert result.changed == [f"{MUTATING}/draquota", f"{VALIDATING}/draquota"]
    encoded = base64.b64encode(material.bundle_pem()).decode()
    assert _bundles(cluster) == [encoded, encoded]
    for obj in cluster.objects.values():
        obj = {k: v for k, v in obj.items()}
        obj["metadata"] = {k: v for k, v in obj["metadata"].items() if k != "resourceVersion"}
        kubernetes_validate.validate(obj, "1.32", strict=True)


def test_injecting_the_same_bundle_again_writes_nothing(material: TlsMaterial) -> None:
    cluster = FakeCluster(_configs())
    injector = WebhookInjector(cluster)
    assert len(injector.publish(material.bundle_pem())) == 2
    assert injector.publish(material.bundle_pem()) == []
    assert len(cluster.writes) == 2


def test_a_concurrent_write_is_retried_on_fresh_data(material: TlsMaterial) -> None:
    cluster = FakeCluster(_configs())
    cluster.concurrent_writes = 2
    result = inject(cluster, material.bundle_pem())
    assert len(result.changed) == 2
    assert all(_bundles(cluster))


def test_endless_conflicts_surface_as_an_error(material: TlsMaterial) -> None:
    cluster = FakeCluster(_configs())
    cluster.concurrent_writes = 100
    with pytest.raises(StoreConflict):
        inject(cluster, material.bundle_pem(), retries=3)


def test_missing_configuration_is_reported_not_created(material: TlsMaterial) -> None:
    cluster = FakeCluster({})
    result = inject(cluster, material.bundle_pem())
    assert result.missing == [f"{MUTATING}/draquota", f"{VALIDATING}/draquota"]
    assert cluster.objects == {}


def test_crd_conversion_webhook_gets_the_bundle_too(material: TlsMaterial) -> None:
    crd = {
        "kind": CRD,
        "metadata": {"name": "things.example.com", "resourceVersion": "1"},
        "spec": {"conversion": {"strategy": "Webhook", "webhook": {"clientConfig": {}}}},
    }
    plain = {"kind": CRD, "metadata": {"name": "plain", "resourceVersion": "1"}, "spec": {}}
    cluster = FakeCluster({(CRD, "things.example.com"): crd, (CRD, "plain"): plain})
    result = inject(cluster, material.bundle_pem(), [(CRD, "things.example.com"), (CRD, "plain")])
    assert result.changed == [f"{CRD}/things.example.com"]
    assert result.unchanged == [f"{CRD}/plain"]
    config = cluster.objects[(CRD, "things.example.com")]["spec"]["conversion"]["webhook"]
    assert base64.b64decode(config["clientConfig"]["caBundle"]) == material.bundle_pem()


def test_manifest_rewrite_touches_only_webhook_files(tmp_path: Path, material: TlsMaterial) -> None:
    for name in ("webhooks.yaml", "service.yaml"):
        shutil.copy(MANIFESTS / name, tmp_path / name)
    service_before = (tmp_path / "service.yaml").read_bytes()
    assert inject_manifests(tmp_path, material.bundle_pem()) == [tmp_path / "webhooks.yaml"]
    assert (tmp_path / "service.yaml").read_bytes() == service_before
    docs = list(yaml.safe_load_all((tmp_path / "webhooks.yaml").read_text(encoding="utf-8")))
    for doc in docs:
        kubernetes_validate.validate(doc, "1.34", strict=True)
        for hook in doc["webhooks"]:
            assert base64.b64decode(hook["clientConfig"]["caBundle"]) == material.bundle_pem()
    assert inject_manifests(tmp_path, material.bundle_pem()) == []
