"""ShardStore against the fake API server: shards created only through the head, deleted only
as they were seen, and a shard that came too late giving its entries back."""

from __future__ import annotations

from typing import Any

import pytest

from tests.fakeapi import FakeApiServer
from webhook.kube.client import ApiError, KubeClient
from webhook.ledger.counts import LedgerCounts
from webhook.ledger.reservations import TOP_ANNOTATION, Reservation, Shard, head_object
from webhook.ledger.shardstore import ShardStore
from webhook.store.clusterstate import ClusterState

pytestmark = pytest.mark.integration

BASE = "queue-gpus"


def entry(uid: str) -> Reservation:
    return Reservation(uid, "gpus", f"team-a/{uid}", '{"clusterQueue":"gpus"}')


def obj(api: FakeApiServer, name: str) -> dict[str, Any] | None:
    return next((o for o in api.objects("QuotaLedger") if o["metadata"]["name"] == name), None)


def top(api: FakeApiServer) -> int:
    head = obj(api, f"{BASE}-head")
    assert head is not None
    return int(head["metadata"]["annotations"][TOP_ANNOTATION])


@pytest.fixture
def store(client: KubeClient) -> ShardStore:
    return ShardStore(client, ClusterState(), LedgerCounts(), 2.0, 5)


def ids(api: FakeApiServer, name: str) -> list[str]:
    found = obj(api, name)
    assert found is not None
    return [r["id"] for r in found["spec"]["reservations"]]


def test_the_first_shard_comes_with_the_head_and_the_next_moves_it(
    api: FakeApiServer, store: ShardStore
) -> None:
    store.create(BASE, Shard(f"{BASE}-0"), [entry("a")])
    assert (top(api), ids(api, f"{BASE}-0")) == (0, ["a"])
    zero = store.read(f"{BASE}-0")
    store.write(zero, list(zero.entries), sealed=True)
    store.create(BASE, Shard(f"{BASE}-1"), [entry("b")])
    assert (top(api), ids(api, f"{BASE}-1")) == (1, ["b"])


def test_a_shard_is_not_created_by_whoever_did_not_move_the_head_to_it(
    api: FakeApiServer, store: ShardStore, client: KubeClient
) -> None:
    store.create(BASE, Shard(f"{BASE}-0"), [entry("a")])
    # a replica whose cached head is older: its move is refused, and nothing is created
    behind = ShardStore(client, ClusterState(), LedgerCounts(), 2.0, 5)
    with pytest.raises(ApiError) as refused:
        behind.create(BASE, Shard(f"{BASE}-0"), [entry("x")])
    assert refused.value.code == 409
    # its view caught up with the head, which names shard 0: that one is not the next
    behind.read_top(BASE)
    with pytest.raises(ApiError, match="not the next shard"):
        behind.create(BASE, Shard(f"{BASE}-0"), [entry("x")])
    assert ids(api, f"{BASE}-0") == ["a"]


def test_a_shard_created_after_its_index_moved_on_gives_its_entries_back(
    api: FakeApiServer, store: ShardStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Between our move of the head and our create, a shard of that name was created by
    another replica, sealed, emptied and deleted, and the head moved on: ours would be a
    second active shard below the real one."""
    api.create(head_object(BASE, 1))
    store.read_top(BASE)
    write = store.write

    def late(shard: Shard, entries: list[Reservation], sealed: bool = False) -> None:
        if shard.name == f"{BASE}-2" and not shard.resource_version:
            head = obj(api, f"{BASE}-head")
            assert head is not None
            head["metadata"]["annotations"][TOP_ANNOTATION] = "3"
            api.update(head)
        write(shard, entries, sealed)

    monkeypatch.setattr(store, "write", late)
    with pytest.raises(ApiError, match="came after its index"):
        store.create(BASE, Shard(f"{BASE}-2"), [entry("a")])
    assert ids(api, f"{BASE}-2") == []  # empty, below the head: the reconcilers delete it
    assert top(api) == 3


def test_a_delete_removes_only_the_version_it_saw(api: FakeApiServer, store: ShardStore) -> None:
    store.create(BASE, Shard(f"{BASE}-0"), [])
    seen = store.read(f"{BASE}-0")
    store.write(seen, [entry("late")])  # another replica writes to it meanwhile
    assert store.delete(seen.name, seen.resource_version) == "conflict"
    assert ids(api, f"{BASE}-0") == ["late"]
    now = store.read(f"{BASE}-0")
    store.write(now, [])
    emptied = store.read(f"{BASE}-0")
    assert store.delete(emptied.name, emptied.resource_version) == "deleted"
    assert obj(api, f"{BASE}-0") is None
    assert store.delete(emptied.name, emptied.resource_version) == "gone"
