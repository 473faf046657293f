"""draquota's functional core: plain data in, decisions out.

Nothing here does I/O, talks to a network, or imports FastAPI or the kubernetes
client; `webhook/` and `certs/` are the imperative shell around it.

The main path of an admission:
    state = ClusterView.of(objects)        # the cluster, frozen (the shell's store hands
                                           # out one per request: webhook.store.clusterstate)
    workload = as_workload(obj)            # a Pod, or one pod of a Job, Deployment, ...
    demand = pod_demand(workload, state)   # devices per DeviceClass, shared claims, requests
    decision = decide(obj, state, usage, settings, make_placer(state))

The core's functions keep nothing between calls: what they derive from a view (the
queue table, parsed claims) is kept with it, in `state.derived` (`quota.derived`), which
every view of one store shares, so that it is not derived again per pod; the owner of
`state` keeps the placer.
A decision reads one view: `decide` and `prepare` take `state.snapshot()` once, and
ask the placer about that view.
"""

from quota.allocator import AllocationError, allocate
from quota.charge import CHARGE_ANNOTATION, QUEUE_LABEL, Charge, FlavorResource
from quota.claims import PodClaim, claim_spec_of, expand_pod_claims
from quota.claimspec import ClaimSpec, parse_claim_spec
from quota.cluster import ClusterView
from quota.decision import decide
from quota.demand import PodDemand, pod_demand
from quota.devices import claim_devices
from quota.errors import DraquotaError, InvalidObject, InvalidQuantity, NotFound
from quota.livepods import usage_from_pods
from quota.placement import Placement, make_placer, place_claims
from quota.settings import Settings
from quota.usage import Usage
from quota.verdict import Decision, Verdict
from quota.workloads import Workload, as_workload

__all__ = [
    "CHARGE_ANNOTATION",
    "QUEUE_LABEL",
    "AllocationError",
    "Charge",
    "ClaimSpec",
    "ClusterView",
    "Decision",
    "DraquotaError",
    "FlavorResource",
    "InvalidObject",
    "InvalidQuantity",
    "NotFound",
    "Placement",
    "PodClaim",
    "PodDemand",
    "Settings",
    "Usage",
    "Verdict",
    "Workload",
    "allocate",
    "as_workload",
    "claim_devices",
    "claim_spec_of",
    "decide",
    "expand_pod_claims",
    "make_placer",
    "parse_claim_spec",
    "place_claims",
    "pod_demand",
    "usage_from_pods",
]
