"""The fields of ClusterQueue, LocalQueue and ResourceFlavor, as in manifests/base/crds:
the strict-decoding schemas `quota.queues` parses against (`quota.strict`).

Anything else in an object is an error naming its path, where a live API server would
prune it silently. tests/quota/test_strict.py checks each schema against its CRD.
"""

from __future__ import annotations

from quota.preemptionpolicy import PREEMPTION_FIELDS
from quota.strict import Schema, frozen_schema

__all__ = ["CLUSTER_QUEUE_FIELDS", "LOCAL_QUEUE_FIELDS", "RESOURCE_FLAVOR_FIELDS"]

_OBJECT: Schema = frozen_schema(
    {"apiVersion": None, "kind": None, "metadata": None, "status": None}
)
_SELECTOR: Schema = frozen_schema(
    {
        "matchLabels": None,
        "matchExpressions": [{"key": None, "operator": None, "values": None}],
    }
)
CLUSTER_QUEUE_FIELDS: Schema = frozen_schema(
    {
        **_OBJECT,
        "spec": {
            "namespaceSelector": _SELECTOR,
            "cohort": None,
            "whenFull": None,
            "queueingStrategy": None,
            "flavorFungibility": {"whenCanBorrow": None},
            "preemption": PREEMPTION_FIELDS,
            "resourceGroups": [
                {
                    "coveredResources": None,
                    "flavors": [
                        {
                            "name": None,
                            "resources": [
                                {
                                    "name": None,
                                    "kind": None,
                                    "deviceClassNames": None,
                                    "counter": None,
                                    "capacity": None,
                                    "driver": None,
                                    "deviceSelector": {"cel": {"expression": None}},
                                    "nominalQuota": None,
                                    "borrowingLimit": None,
                                    "lendingLimit": None,
                                }
                            ],
                        }
                    ],
                }
            ],
        },
    }
)
LOCAL_QUEUE_FIELDS: Schema = frozen_schema({**_OBJECT, "spec": {"clusterQueue": None}})
RESOURCE_FLAVOR_FIELDS: Schema = frozen_schema({**_OBJECT, "spec": {"nodeLabels": None}})
