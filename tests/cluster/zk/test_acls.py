"""ZkAclStore against a real ZooKeeper: Kafka's znode layout, conditional updates and
change notifications that make a second store (another broker) reload."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator

import pytest

from odradek.cluster.zk.acls import ZkAclStore, decode_change, encode_change
from odradek.cluster.zk.client import ZkClient

pytestmark = [pytest.mark.integration, pytest.mark.zookeeper, pytest.mark.timeout(120)]

ALICE_READ = ("User:alice", "*", "Read", "Allow")
BOB_DENY = ("User:bob", "10.0.0.1", "Write", "Deny")


@pytest.fixture
def clients(zk_connect: str) -> Iterator[Callable[[], ZkClient]]:
    made: list[ZkClient] = []

    def make() -> ZkClient:
        client = ZkClient.connect(zk_connect, session_timeout_ms=6000, connection_timeout_ms=6000)
        made.append(client)
        return client

    yield make
    for client in made:
        client.close()


def test_layout_is_kafkas(clients: Callable[[], ZkClient]) -> None:
    zk = clients()
    store = ZkAclStore(zk)
    store.update(("Topic", "LITERAL", "orders"), lambda now: now | {ALICE_READ})
    store.update(("Group", "PREFIXED", "team-"), lambda now: now | {BOB_DENY})
    raw = zk._zk
    doc = json.loads(raw.get("/kafka-acl/Topic/orders")[0])
    assert doc == {
        "version": 1,
        "acls": [
            {"principal": "User:alice", "permissionType": "Allow", "operation": "Read", "host": "*"}
        ],
    }
    assert raw.exists("/kafka-acl-extended/prefixed/Group/team-")
    literal = raw.get_children("/kafka-acl-changes")
    extended = raw.get_children("/kafka-acl-extended-changes")
    assert [c[:12] for c in literal] == ["acl_changes_"]
    assert raw.get(f"/kafka-acl-changes/{literal[0]}")[0] == b"TOPIC:orders"
    body = json.loads(raw.get(f"/kafka-acl-extended-changes/{extended[0]}")[0])
    assert body == {
        "version": 1,
        "resourceType": "GROUP",
        "name": "team-",
        "patternType": "PREFIXED",
    }
    assert store.load_all() == {
        ("Topic", "LITERAL", "orders"): frozenset({ALICE_READ}),
        ("Group", "PREFIXED", "team-"): frozenset({BOB_DENY}),
    }
    # The last entry removed takes the znode with it.
    store.update(("Topic", "LITERAL", "orders"), lambda now: frozenset())
    assert not raw.exists("/kafka-acl/Topic/orders")


def test_change_codecs_round_trip() -> None:
    for key in [("TransactionalId", "LITERAL", "tx-1"), ("Topic", "PREFIXED", "a:b")]:
        root, body = encode_change(key)
        assert decode_change(root, body) == key


def test_concurrent_updates_are_not_lost(clients: Callable[[], ZkClient]) -> None:
    stores = [ZkAclStore(clients()) for _ in range(4)]
    key = ("Topic", "LITERAL", "busy")

    def add(store: ZkAclStore, n: int) -> None:
        for i in range(10):
            entry = (f"User:u{n}-{i}", "*", "Read", "Allow")
            store.update(key, lambda now, entry=entry: now | {entry})

    threads = [threading.Thread(target=add, args=(s, n)) for n, s in enumerate(stores)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert len(stores[0].load(key)) == 40


def test_another_store_is_told_of_changes(clients: Callable[[], ZkClient]) -> None:
    writer, reader = ZkAclStore(clients()), ZkAclStore(clients())
    writer.update(("Topic", "LITERAL", "before"), lambda now: now | {ALICE_READ})
    seen: list[tuple[str, str, str]] = []
    reader.watch(seen.append)
    writer.update(("Topic", "LITERAL", "after"), lambda now: now | {ALICE_READ})
    writer.update(("Topic", "PREFIXED", "p-"), lambda now: now | {BOB_DENY})
    deadline = time.monotonic() + 20
    while len(seen) < 2 and time.monotonic() < deadline:
        time.sleep(0.05)
    # Notifications older than the watch were already covered by the reader's load.
    assert sorted(seen) == [("Topic", "LITERAL", "after"), ("Topic", "PREFIXED", "p-")]
    reader.close()


def test_expired_notifications_are_purged(clients: Callable[[], ZkClient]) -> None:
    writer = ZkAclStore(clients())
    writer.update(("Topic", "LITERAL", "old"), lambda now: now | {ALICE_READ})
    reader_zk = clients()
    reader = ZkAclStore(reader_zk, change_expiration_ms=0)
    seen: list[tuple[str, str, str]] = []
    reader.watch(seen.append)
    writer.update(("Topic", "LITERAL", "new"), lambda now: now | {ALICE_READ})
    deadline = time.monotonic() + 20
    while reader_zk._zk.get_children("/kafka-acl-changes") and time.monotonic() < deadline:
        time.sleep(0.1)
    assert seen == [("Topic", "LITERAL", "new")]
    assert reader_zk._zk.get_children("/kafka-acl-changes") == []
    reader.close()
