"""docs/operations.md "Your first quotas", step by step, as its admin and users would do it.

manifests/examples/first-quotas/ is applied as the walkthrough says; then each team's user
(their own token, the built-in `edit` role of their namespace) runs the commands the
walkthrough shows and sees what it says they will see.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.cluster import REPO, Draquota, eventually
from tests.e2e.objects import Scenario, remove_pods_later

pytestmark = pytest.mark.e2e

EXAMPLE = REPO / "manifests" / "examples" / "first-quotas"


@pytest.fixture(scope="module")
def teams(draquota_cluster: Draquota) -> dict[str, Path]:
    cluster = draquota_cluster.cluster
    cluster.apply(REPO / "manifests" / "examples" / "cluster" / "deviceclasses.yaml")
    cluster.fake_node("first-quotas-1", 8)
    cluster.apply(EXAMPLE / "quotas.yaml")
    users = {}
    for team in ("research", "ml"):
        remove_pods_later(team)
        users[team] = Scenario(draquota_cluster, team, ()).user(f"{team}-user", "edit")
    # every replica sees both queues before anyone submits
    eventually(lambda: _active(draquota_cluster, "research") and _active(draquota_cluster, "ml"))
    return users


def _active(installed: Draquota, name: str) -> bool:
    queue = json.loads(installed.cluster.kubectl("get", "cq", name, "-o", "json").stdout)
    return any(
        c["type"] == "Active" and c["status"] == "True"
        for c in queue.get("status", {}).get("conditions", [])
    )


def _submit(installed: Draquota, user: Path, team: str) -> tuple[str, str]:
    """The created pod's name ("" when refused) and what kubectl printed on stderr."""
    out = installed.cluster.kubectl(
        "create", "-n", team, "-f", str(EXAMPLE / "training.yaml"), "-o", "name",
        kubeconfig=user, check=False,
    )  # fmt: skip
    created = out.stdout.strip().removeprefix("pod/") if out.returncode == 0 else ""
    return created, out.stderr


def _pods(installed: Draquota, team: str) -> dict[str, bool]:
    """Each pod of the team: True once it was admitted (no draquota gate)."""
    out = installed.cluster.kubectl("get", "pods", "-n", team, "-o", "json").stdout
    return {
        p["metadata"]["name"]: not p["spec"].get("schedulingGates")
        for p in json.loads(out)["items"]
    }


def test_ml_borrows_what_research_lends_then_queues(
    draquota_cluster: Draquota, teams: dict[str, Path]
) -> None:
    for _ in range(4):  # 2 of its own, 2 borrowed from research
        created, _ = _submit(draquota_cluster, teams["ml"], "ml")
        assert created
    eventually(lambda: sorted(_pods(draquota_cluster, "ml").values()) == [True] * 4, timeout=60)
    eventually(lambda: _gpus(teams["ml"])["borrowed"] == "2", timeout=30)  # status pass: 10 s
    assert _gpus(teams["ml"])["borrowedFrom"] == [{"clusterQueue": "research", "amount": "2"}]
    waiting, warning = _submit(draquota_cluster, teams["ml"], "ml")
    assert waiting
    assert "Warning: waits in ClusterQueue ml, position 1" in warning

    def described() -> str:
        return draquota_cluster.cluster.kubectl(
            "describe", "pod", waiting, "-n", "ml", kubeconfig=teams["ml"]
        ).stdout

    eventually(lambda: "Pending" in described() and "waiting for quota" in described())


def test_research_is_denied_what_it_lent_and_sees_to_whom(
    draquota_cluster: Draquota, teams: dict[str, Path]
) -> None:
    for _ in range(2):  # its guaranteed 2 (nominal 4 less the lending limit 2)
        created, _ = _submit(draquota_cluster, teams["research"], "research")
        assert created
    created, why = _submit(draquota_cluster, teams["research"], "research")
    assert not created
    assert "2 lent to ClusterQueue ml" in why, why
    # the LocalQueue's status is brought up to date by the replicas' next status pass
    eventually(lambda: _gpus(teams["research"])["inUse"] == "2", timeout=30)
    gpus = _gpus(teams["research"])
    assert (gpus["inUse"], gpus["lent"], gpus["lendable"]) == ("2", "2", "0"), gpus
    assert gpus["lentTo"] == [{"clusterQueue": "ml", "amount": "2"}]


def _gpus(user: Path) -> dict[str, Any]:
    """The gpus row of the user's LocalQueue in `draquota status -o json` (their context's
    namespace, read with their own token)."""
    (gpus,) = [
        r
        for q in _status(user)["items"]
        for f in q["flavors"]
        for r in f["resources"]
        if r["name"] == "gpus"
    ]
    return dict(gpus)


def _status(user: Path) -> dict[str, Any]:
    out = subprocess.run(
        [sys.executable, "-m", "webhook.cli", "status", "-o", "json"],
        env={**os.environ, "KUBECONFIG": str(user)},
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return dict(json.loads(out.stdout))
