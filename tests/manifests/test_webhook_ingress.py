"""The opt-in NetworkPolicy that admits only the API server and draquota's own replicas to
the webhook port."""

from __future__ import annotations

import yaml

from tests.manifests.loader import ROOT, only

COMPONENT = ROOT / "manifests" / "components" / "webhook-ingress"


def test_network_policy_admits_only_the_webhook_port_from_the_api_server_and_replicas() -> None:
    kustomization = yaml.safe_load((COMPONENT / "kustomization.yaml").read_text())
    assert kustomization["kind"] == "Component"
    [policy] = [
        yaml.safe_load((COMPONENT / name).read_text()) for name in kustomization["resources"]
    ]
    deployment = only("Deployment", "draquota")
    pod_labels = deployment["spec"]["template"]["metadata"]["labels"]
    selected = policy["spec"]["podSelector"]["matchLabels"]
    assert selected.items() <= pod_labels.items()
    assert policy["metadata"]["namespace"] == deployment["metadata"]["namespace"]
    assert policy["spec"]["policyTypes"] == ["Ingress"]
    [api_server, replicas] = policy["spec"]["ingress"]
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    port = next(p["containerPort"] for p in container["ports"] if p["name"] == "https")
    assert api_server["ports"] == replicas["ports"] == [{"port": port, "protocol": "TCP"}]
    # the API server by address block; no namespace selector lets other workloads in
    assert [list(peer) for peer in api_server["from"]] == [["ipBlock"]]
    # draquota's own pods (a replica forwards /validate to the elected one), and only them
    [peer] = replicas["from"]
    assert list(peer) == ["podSelector"]
    assert peer["podSelector"]["matchLabels"].items() <= pod_labels.items()
