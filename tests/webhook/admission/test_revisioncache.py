"""RevisionCache: kept per revision of some kinds, bounded, never stale."""

from __future__ import annotations

from quota.cluster import ClusterView
from tests.webhook.builders import cluster_objects, cluster_state, node_objects
from webhook.admission.revisioncache import RevisionCache


def test_values_are_dropped_when_a_followed_kind_changes_and_kept_otherwise() -> None:
    state = cluster_state()
    cache: RevisionCache[str, int] = RevisionCache(state, ("ResourceSlice",), size=8)
    _, entries = cache.lookup("a")
    cache.keep(entries, "a", 1)
    state.upsert(cluster_objects()[0])  # a Namespace: not followed
    assert cache.lookup("a")[0] == 1 and cache.hits == 1
    state.upsert(node_objects(1)[1])  # a ResourceSlice
    assert cache.lookup("a")[0] is None and "a" not in cache


def test_a_value_built_while_the_revision_moved_is_not_kept() -> None:
    state = cluster_state()
    cache: RevisionCache[str, int] = RevisionCache(state, ("ResourceSlice",), size=8)
    _, entries = cache.lookup("a")
    state.upsert(node_objects(1)[1])  # changes while "a" is being built from the older view
    cache.keep(entries, "a", 1)
    assert cache.lookup("a")[0] is None and len(cache) == 0


def test_a_full_cache_is_emptied_by_count_and_by_weight() -> None:
    state = cluster_state()
    by_count: RevisionCache[int, int] = RevisionCache(state, ("Node",), size=3)
    by_weight: RevisionCache[int, int] = RevisionCache(state, ("Node",), size=100, budget=10)
    for i in range(7):
        for cache in (by_count, by_weight):
            cache.keep(cache.lookup(i)[1], i, i, weight=4)
        assert len(by_count) <= 3 and by_weight.weight <= 10
    assert sorted(by_count.values()) == [6] and sorted(by_weight.values()) == [6]


def test_a_lookup_on_an_older_view_misses_and_keeps_what_is_kept() -> None:
    state = cluster_state()
    cache: RevisionCache[str, int] = RevisionCache(state, ("ResourceSlice",), size=8)
    older = state.snapshot()
    state.upsert(node_objects(1)[1])
    cache.keep(cache.lookup("a")[1], "a", 1)  # kept at the newer revision
    found, entries = cache.lookup("a", older)  # a decision that took its view before
    assert found is None
    cache.keep(entries, "a", 0)  # built from the older view: not kept
    assert cache.lookup("a")[0] == 1 and len(cache) == 1


def test_a_view_of_another_source_is_never_taken_for_the_stores_by_its_generation() -> None:
    state = cluster_state()
    cache: RevisionCache[str, int] = RevisionCache(state, ("ResourceSlice",), size=8)
    cache.keep(cache.lookup("a")[1], "a", 1)
    now = state.snapshot()
    newer = now.revision("ResourceSlice")[0] + 1
    other = ClusterView({}, {"ResourceSlice": newer}, object(), None, now.generation)
    assert cache.lookup("a", other)[0] is None  # its own revision read: a newer one
    assert cache.lookup("a", now)[0] is None  # and what was kept is gone with the old revision
