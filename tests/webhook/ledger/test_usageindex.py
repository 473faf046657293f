"""`IndexedUsage` and its copy-on-write overlay (webhook/ledger/usageindex.py).

tests/webhook/ledger/test_memory.py checks with random small charges that both agree with plain
`Usage`. Here: what those do not reach — saturation at int64 applied when read (so removal
never drifts), a shared claim counted at the largest amount and falling back exactly when that
holder leaves, holders per LocalQueue, and copies that stay independent of their source.
"""

from __future__ import annotations

from quota.charge import Charge, FlavorResource
from quota.quantity import INT64_MAX
from quota.usage import Usage
from webhook.ledger.usageindex import IndexedUsage

GPU = FlavorResource("a100", "gpu")
MEMORY = FlavorResource("a100", "memory")
HALF = INT64_MAX // 2 + 1


def _charge(gpus: int, queue: str = "q1", local: str = "team-a/default", **shared: int) -> Charge:
    claims = {f"team-a/{name}": {"memory": amount} for name, amount in shared.items()}
    return Charge(queue, local, {"gpu": "a100", "memory": "a100"}, {"gpu": gpus}, {},
                  claims)  # fmt: skip


def test_totals_saturate_at_int64_when_read_and_removal_gives_back_the_exact_sum() -> None:
    usage = IndexedUsage({"a": _charge(HALF), "b": _charge(HALF), "c": _charge(3)})
    assert usage.of("q1") == {GPU: INT64_MAX}
    usage.remove("a")
    assert usage.of("q1") == {GPU: HALF + 3}
    usage.remove("b")
    assert usage.of("q1") == {GPU: 3}


def test_a_shared_claim_counts_once_at_its_largest_amount_and_falls_back_when_it_leaves() -> None:
    usage = IndexedUsage()
    usage.add("a", _charge(1, cache=4))
    usage.add("b", _charge(1, cache=9))
    usage.add("c", _charge(1, cache=4))
    assert usage.of("q1") == {GPU: 3, MEMORY: 9}
    usage.remove("b")
    assert usage.of("q1") == {GPU: 2, MEMORY: 4}
    usage.remove("a")
    assert usage.of("q1") == {GPU: 1, MEMORY: 4}
    usage.remove("c")
    assert usage.of("q1") == {}
    assert usage.shared_claims("q1") == set()


def test_re_adding_a_holder_replaces_its_charge() -> None:
    usage = IndexedUsage()
    usage.add("a", _charge(2, cache=5))
    usage.add("a", _charge(1))
    assert usage.of("q1") == {GPU: 1}
    assert usage.holder_count("q1") == 1


def test_holders_are_counted_per_cluster_queue_and_per_local_queue() -> None:
    usage = IndexedUsage(
        {
            "a": _charge(1),
            "b": _charge(1, local="team-a/user-queue"),
            "c": _charge(1, queue="q2", local="team-b/default"),
        }
    )
    assert (usage.holder_count("q1"), usage.holder_count("q2")) == (2, 1)
    assert usage.local_holder_count("team-a/default") == 1
    assert usage.local_holder_count("team-a/user-queue") == 1
    usage.remove("b")
    assert usage.local_holder_count("team-a/user-queue") == 0
    assert usage.holder_count("q1") == 1


def test_an_overlay_leaves_its_base_alone_and_its_copy_is_independent_of_both() -> None:
    base = IndexedUsage({"a": _charge(2), "b": _charge(3)})
    overlay = base.copy()
    overlay.remove("a")
    overlay.add("c", _charge(5, queue="q2"))
    assert (base.of("q1"), base.of("q2")) == ({GPU: 5}, {})
    assert (overlay.of("q1"), overlay.of("q2")) == ({GPU: 3}, {GPU: 5})
    assert overlay.charge_of("a") is None and base.charge_of("a") is not None
    copied = overlay.copy()
    overlay.add("a", _charge(7))
    assert copied.of("q1") == {GPU: 3}
    assert copied.holders() == {"b", "c"}


def test_an_overlay_that_adds_then_removes_a_holder_is_its_base_again() -> None:
    base = IndexedUsage({"a": _charge(2, cache=4)})
    overlay = base.copy()
    overlay.add("n", _charge(1, cache=8))
    assert overlay.of("q1") == {GPU: 3, MEMORY: 8}
    overlay.remove("n")
    assert overlay.of("q1") == base.of("q1") == {GPU: 2, MEMORY: 4}
    assert overlay.holders() == base.holders()


def test_an_index_of_any_usage_answers_like_it_and_does_not_follow_it() -> None:
    plain = Usage()
    plain.add("a", _charge(2, cache=3))
    plain.add("b", _charge(HALF))
    plain.add("c", _charge(HALF, queue="q2"))
    indexed = IndexedUsage.of_usage(plain)
    for queue in ("q1", "q2"):
        assert indexed.of(queue) == plain.of(queue)
    plain.remove("a")
    assert indexed.of("q1") == {GPU: HALF + 2, MEMORY: 3}


def test_an_overlay_over_a_shared_claim_changes_none_of_its_base_public_parts() -> None:
    base = IndexedUsage({"a": _charge(2, cache=4), "b": _charge(1, cache=9)})
    parts = (
        dict(base.per_pod_totals("q1")),
        {k: dict(v) for k, v in base.shared_amounts("q1").items()},
    )
    assert parts == ({GPU: 3}, {("team-a/cache", MEMORY): {4: 1, 9: 1}})
    overlay = base.copy()
    overlay.remove("b")
    overlay.add("c", _charge(1, cache=6))
    assert overlay.of("q1") == {GPU: 3, MEMORY: 6}
    after = (
        dict(base.per_pod_totals("q1")),
        {k: dict(v) for k, v in base.shared_amounts("q1").items()},
    )
    assert after == parts
    assert base.of("q1") == {GPU: 3, MEMORY: 9}
