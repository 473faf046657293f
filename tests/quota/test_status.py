"""What a ClusterQueue reports in its status."""

from __future__ import annotations

from quota.charge import FlavorResource
from quota.queuetable import queue_table
from quota.settings import Settings
from quota.status import cluster_queue_status
from webhook.clusterstate import ClusterState


def _queue(name: str, lending: int | None = None) -> dict:
    resource = {
        "name": "gpus",
        "kind": "DeviceClass",
        "deviceClassNames": ["gpu"],
        "nominalQuota": 4,
    }
    if lending is not None:
        resource["lendingLimit"] = lending
    return {
        "apiVersion": "draquota.io/v1beta1",
        "kind": "ClusterQueue",
        "metadata": {"name": name},
        "spec": {
            "namespaceSelector": {},
            "resourceGroups": [
                {
                    "coveredResources": ["gpus", "cpu"],
                    "flavors": [
                        {
                            "name": "default",
                            "resources": [resource, {"name": "cpu", "nominalQuota": 8}],
                        }
                    ],
                }
            ],
        },
    }


FLAVOR = {
    "apiVersion": "draquota.io/v1beta1",
    "kind": "ResourceFlavor",
    "metadata": {"name": "default"},
    "spec": {},
}
USAGE = {FlavorResource("default", "gpus"): 3, FlavorResource("default", "cpu"): 1500}


def test_active_queue_reports_ready_and_usage_per_flavor() -> None:
    table = queue_table(ClusterState([FLAVOR, _queue("a")]), Settings())
    status = cluster_queue_status(table, "a", USAGE, None, "2026-11-21T00:00:00Z")
    assert status["conditions"] == [
        {
            "type": "Active",
            "status": "True",
            "reason": "Ready",
            "message": "can admit pods",
            "lastTransitionTime": "2026-11-21T00:00:00Z",
        }
    ]
    assert status["flavorsUsage"] == [
        {
            "name": "default",
            "resources": [{"name": "cpu", "total": "1500m"}, {"name": "gpus", "total": 3}],
        }
    ]


def test_invalid_queue_reports_why_it_admits_nothing_and_keeps_transition_time() -> None:
    # lendingLimit above nominalQuota without a cohort: two problems, the queue admits nothing
    table = queue_table(ClusterState([FLAVOR, _queue("a", lending=9)]), Settings())
    first = cluster_queue_status(table, "a", {}, None, "2026-11-21T00:00:00Z")
    (condition,) = first["conditions"]
    assert (condition["status"], condition["reason"]) == ("False", "InvalidSpec")
    assert "lendingLimit" in condition["message"]
    again = cluster_queue_status(table, "a", {}, first, "2026-11-21T01:00:00Z")
    assert again["conditions"][0]["lastTransitionTime"] == "2026-11-21T00:00:00Z"
    fixed = queue_table(ClusterState([FLAVOR, _queue("a")]), Settings())
    healed = cluster_queue_status(fixed, "a", {}, first, "2026-11-21T02:00:00Z")
    assert healed["conditions"][0]["lastTransitionTime"] == "2026-11-21T02:00:00Z"
