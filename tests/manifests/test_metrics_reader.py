"""The monitoring manifests that let Prometheus scrape /metrics behind authentication."""

from __future__ import annotations

from typing import Any

import yaml

from tests.manifests.loader import NAMESPACE, ROOT, only

MONITORING = ROOT / "manifests" / "monitoring"


def _docs(name: str) -> list[dict[str, Any]]:
    text = (MONITORING / name).read_text(encoding="utf-8")
    return [d for d in yaml.safe_load_all(text) if d]


def test_the_reader_role_grants_get_on_metrics_and_nothing_else() -> None:
    role, binding = _docs("metrics-reader.yaml")
    assert role["kind"] == "ClusterRole" and role["metadata"]["name"] == "draquota-metrics-reader"
    assert role["rules"] == [{"nonResourceURLs": ["/metrics"], "verbs": ["get"]}]
    assert binding["roleRef"]["name"] == "draquota-metrics-reader"
    assert [s["kind"] for s in binding["subjects"]] == ["ServiceAccount"]


def test_the_service_monitor_scrapes_the_service_over_tls_with_a_bearer_token() -> None:
    (monitor,) = _docs("servicemonitor.yaml")
    service = only("Service", "draquota")
    labels = monitor["spec"]["selector"]["matchLabels"]
    assert labels.items() <= service["metadata"]["labels"].items()
    assert monitor["spec"]["namespaceSelector"]["matchNames"] == [NAMESPACE]
    (endpoint,) = monitor["spec"]["endpoints"]
    assert endpoint["port"] in [p["name"] for p in service["spec"]["ports"]]
    assert (endpoint["scheme"], endpoint["path"]) == ("https", "/metrics")
    assert endpoint.get("bearerTokenFile") or endpoint.get("authorization")
    assert endpoint["tlsConfig"]["serverName"] == f"draquota.{NAMESPACE}.svc"
    assert not endpoint["tlsConfig"].get("insecureSkipVerify")
