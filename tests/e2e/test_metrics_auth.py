"""/metrics on the real control plane: only a reader the API server allows sees every team's usage.

Each replica asks the API server about the bearer token (TokenReview) and whether it may
`get /metrics` (SubjectAccessReview). The reader is a ServiceAccount bound to the shipped
ClusterRole draquota-metrics-reader, as an admin binds Prometheus's (`install()`); a
namespace user with `edit` has a valid token and no such grant.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from tests.e2e.cluster import Draquota, eventually
from tests.e2e.objects import Flavor, Scenario, scenario

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def team(draquota_cluster: Draquota) -> Scenario:
    return scenario(draquota_cluster, "e2e-mauth", Flavor("main", 2, {"e2e-mauth-1": 2}))


def _token(kubeconfig: Path) -> str:
    config = yaml.safe_load(kubeconfig.read_text(encoding="utf-8"))
    return str(config["users"][0]["user"]["token"])


def test_metrics_answer_only_the_reader_the_api_server_allows(team: Scenario) -> None:
    user = _token(team.user("alice", "edit"))
    for replica in team.installed.replicas:
        with replica.client() as http:
            anonymous = http.get("/metrics")
            forged = http.get("/metrics", headers={"Authorization": "Bearer not-a-token"})
        assert anonymous.status_code == 401, anonymous.text
        assert forged.status_code == 401, forged.text
        refused = replica.get("/metrics", token=user)
        assert refused.status_code == 403, refused.text
        assert f"system:serviceaccount:{team.namespace}:alice" in refused.json()["error"]
        for answer in (anonymous, forged, refused):
            assert "draquota_" not in answer.text
        allowed = replica.get("/metrics")  # the reader's token
        assert allowed.status_code == 200, allowed.text
        assert "draquota_cache_synced" in allowed.text
    labels = {"cluster_queue": team.name, "flavor": f"{team.name}-main", "resource": "gpus"}
    eventually(
        lambda: all(
            r.metric("draquota_cluster_queue_nominal_quota", **labels) == 2
            for r in team.installed.replicas
        )
    )
