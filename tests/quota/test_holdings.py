"""What each queue's holders hold (quota.holdings) agrees with Usage, the ClusterQueue side."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from quota.charge import Charge
from quota.holdings import holdings
from quota.usage import Usage

# LocalQueue -> its ClusterQueue; "q2" has a single LocalQueue.
LOCAL_QUEUES = {"a/default": "q1", "b/default": "q1", "c/default": "q2"}

_charges = st.builds(
    lambda local, gpus, cpu, claim, shared: Charge(
        LOCAL_QUEUES[local],
        local,
        flavors={"gpus": "f1", "cpu": "f2"},
        per_pod={"gpus": gpus, "cpu": cpu},
        shared_claims={f"{local.split('/')[0]}/{claim}": {"gpus": shared}} if shared else {},
    ),
    st.sampled_from(sorted(LOCAL_QUEUES)),
    st.integers(0, 4),
    st.integers(0, 3000),
    st.sampled_from(["c1", "c2"]),
    st.integers(0, 3),
)


@given(st.dictionaries(st.text("pq0123456789", min_size=1, max_size=4), _charges, max_size=12))
def test_holdings_agree_with_usage(charges: dict[str, Charge]) -> None:
    usage = Usage(charges)
    held = holdings(usage)
    for queue in ("q1", "q2"):
        locals_ = [local for local, target in LOCAL_QUEUES.items() if target == queue]
        counted = sum(held.local_queues.get(local, 0) for local in locals_)
        assert counted == held.cluster_queues.get(queue, 0)
        assert counted == sum(1 for c in charges.values() if c.cluster_queue == queue)
    # a ClusterQueue with one LocalQueue: the LocalQueue holds exactly the queue's usage
    assert held.local_usage.get("c/default", {}) == usage.of("q2")
    # claims are namespaced, so q1's two LocalQueues never share one: their sum is q1's usage
    total: dict[object, int] = {}
    for local in ("a/default", "b/default"):
        for key, value in held.local_usage.get(local, {}).items():
            total[key] = total.get(key, 0) + value
    assert total == usage.of("q1")
