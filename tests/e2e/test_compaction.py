"""etcd compaction while draquota's informers watch: their resumed watches end in 410 Gone,
they list again, and the replicas keep deciding on a current view without a restart."""

from __future__ import annotations

import pytest
import yaml

from tests.e2e.cluster import Draquota, eventually
from tests.e2e.objects import Flavor, gpu_pod, scenario

pytestmark = pytest.mark.e2e


def _relists(installed: Draquota) -> list[float]:
    return [
        r.metric("draquota_cache_relists_total", source="nodes") or 0.0 for r in installed.replicas
    ]


def test_informers_recover_from_410_after_etcd_compaction_without_a_restart(
    draquota_cluster: Draquota,
) -> None:
    s = scenario(draquota_cluster, "e2e-compact", Flavor("main", 4, {}))
    pids = [r.process.pid for r in draquota_cluster.replicas if r.process]
    before = _relists(draquota_cluster)
    # writes after the informers' last seen revision, then compact them all away
    s.cluster.fake_node("e2e-compact-other")
    for verb in ("create", "delete"):  # two revisions: the watch resumes past the first
        s.cluster.kubectl(verb, "configmap", "after-the-node", "-n", s.namespace)
    draquota_cluster.cluster.compact_etcd()
    # the watches break (a network blip); resuming from a compacted revision is 410 Gone
    draquota_cluster.api_proxy.drop_connections()
    eventually(
        lambda: all(a > b for a, b in zip(_relists(draquota_cluster), before, strict=True)),
        timeout=60,
    )
    eventually(lambda: all(r.ready() for r in draquota_cluster.replicas), timeout=60)
    # the only node of the flavor appears after the compaction: every replica sees it
    s.cluster.fake_node("e2e-compact-1", 4, {"e2e.draquota.io/pool": "e2e-compact-main"})
    for i in range(len(draquota_cluster.replicas)):  # round robin: each replica decides once
        created = s.cluster.kubectl(
            "create", "-n", s.namespace, "-f", "-", stdin=yaml.safe_dump(gpu_pod(f"after-{i}")),
            check=False,
        )  # fmt: skip
        assert created.returncode == 0, created.stderr
    assert [r.process.pid for r in draquota_cluster.replicas if r.process] == pids
