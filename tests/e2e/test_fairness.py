"""One team cannot stall admission for all (issue 29, item 4), on the real control plane:
while a namespace admin floods draquota with pods whose claims are expensive to place
(tests/e2e/flood.py), every pod create of another team succeeds. The latency target (p99
under 1 s for the other team) is measured by bench/fairness.py, not asserted here."""

from __future__ import annotations

from collections import Counter

import pytest
from kubernetes import client as k8s
from kubernetes import config as k8s_config

from tests.e2e.cluster import Draquota
from tests.e2e.flood import Flood, create_pod, plain_pod
from tests.e2e.objects import Flavor, Scenario, scenario

pytestmark = pytest.mark.e2e

TEAM_PODS = 16
FLOOD = "e2e-fair-flood"
TEAM = "e2e-fair-team"


@pytest.fixture(scope="module")
def teams(draquota_cluster: Draquota) -> tuple[Scenario, Scenario]:
    # quota far above what either team creates: every answer is about fairness, not quota
    flood = scenario(draquota_cluster, FLOOD, Flavor("main", 100_000, {f"{FLOOD}-1": 16}))
    team = scenario(draquota_cluster, TEAM, Flavor("main", 1_000, {f"{TEAM}-1": 8}))
    return flood, team


def test_another_teams_creates_all_succeed_while_one_namespace_floods(
    teams: tuple[Scenario, Scenario],
) -> None:
    flooding, team = teams
    flood = Flood(flooding.user("flooder", "admin"), flooding.namespace, loops=6, pods=40)
    member = k8s_config.new_client_from_config(config_file=str(team.user("member", "admin")))
    api = k8s.CoreV1Api(member)
    flood.start()
    try:
        assert flood.wait_started(), "the flood never got an answer"
        outcomes = [
            create_pod(api, team.namespace, plain_pod(f"team-{i}", "gpu")) for i in range(TEAM_PODS)
        ]
        still_flooding = flood.active()
    finally:
        flood_outcomes = flood.stop()
        member.close()
    assert still_flooding, f"the flood ended before the team was done: {flood_outcomes}"
    reasons = Counter(o.reason for o in outcomes)
    assert reasons == {"Created": TEAM_PODS}, ([o for o in outcomes if o.message], flood_outcomes)
    assert sum(flood_outcomes.values()) >= flood.loops, flood_outcomes
