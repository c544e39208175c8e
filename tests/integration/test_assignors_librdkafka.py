"""odradek's assignors agree with librdkafka's on a live group, and read its bytes.

Three confluent-kafka consumers (librdkafka, an independent implementation of the same
assignors) form a group on a real odradek broker. Once the group is Stable, DescribeGroups
returns each member's subscription and the assignment librdkafka's leader computed. The
test decodes both with :mod:`odradek.client.assignors.wire` and runs odradek's assignor
of the same name on the decoded subscriptions: it must give the same assignment (for
``cooperative-sticky``: keep exactly what every member owns, the group being balanced).
"""

from __future__ import annotations

import time
import uuid

import pytest
from confluent_kafka import Consumer
from confluent_kafka.admin import AdminClient, NewTopic

from odradek.client.assignors import (
    Subscription,
    assignor_for,
    decode_assignment,
    decode_subscription,
)
from odradek.client.group_admin import GroupDescription, SyncGroupAdmin
from tests.helpers.broker import BrokerProcess

pytestmark = pytest.mark.timeout(120)

WAIT_S = 30.0
CLUSTER = {"orders": 5, "audit": 3}


@pytest.fixture(scope="module")
def bootstrap(shared_broker: BrokerProcess) -> str:
    return shared_broker.bootstrap


def settle(consumers: list[Consumer], admin: SyncGroupAdmin, group: str) -> GroupDescription:
    """Poll every consumer until the group is Stable with all of them and every partition
    is assigned; bounded by WAIT_S."""
    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline:
        for consumer in consumers:
            consumer.poll(0.05)
        described = admin.describe_group(group)
        if described.state == "Stable" and len(described.members) == len(consumers):
            assigned = [tp for m in described.members for tp in m.partitions]
            if len(assigned) == sum(CLUSTER.values()) and all(c.assignment() for c in consumers):
                return described
    raise AssertionError(f"group {group} did not settle within {WAIT_S}s")


@pytest.mark.parametrize("name", ["range", "roundrobin", "cooperative-sticky"])
def test_odradek_assignor_matches_librdkafka_leader(bootstrap: str, name: str) -> None:
    suffix = uuid.uuid4().hex[:8]
    topics = {f"{topic}-{suffix}": count for topic, count in CLUSTER.items()}
    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics([NewTopic(t, n, 1) for t, n in topics.items()])
    for future in futures.values():
        future.result(timeout=WAIT_S)
    group = f"assignors-{name}-{suffix}"
    consumers = []
    group_admin = SyncGroupAdmin(bootstrap)
    try:
        for i in range(3):
            consumer = Consumer(
                {
                    "bootstrap.servers": bootstrap,
                    "group.id": group,
                    "partition.assignment.strategy": name,
                    "client.rack": f"rack-{i}",
                    "session.timeout.ms": 6000,
                    "heartbeat.interval.ms": 500,
                }
            )
            # member 0 reads one topic only: subscriptions differ
            consumer.subscribe(list(topics) if i else [next(iter(topics))])
            consumers.append(consumer)
        described = settle(consumers, group_admin, group)
        assert described.protocol == name

        subscriptions: dict[str, Subscription] = {}
        leader_assignment = {}
        for member in described.members:
            sub = decode_subscription(member.metadata)
            assert sub.rack_id in {"rack-0", "rack-1", "rack-2"}  # v3 carries client.rack
            subscriptions[member.member_id] = Subscription(
                sub.topics, sub.user_data, sub.owned_partitions, sub.generation_id, sub.rack_id,
                member.group_instance_id,
            )  # fmt: skip
            leader_assignment[member.member_id] = sorted(
                decode_assignment(member.assignment).partitions
            )
            assert leader_assignment[member.member_id] == sorted(member.partitions)
        ours = assignor_for(name).assign(topics, subscriptions)
        assert {m: a.partitions for m, a in ours.items()} == leader_assignment
    finally:
        for consumer in consumers:
            consumer.close()
        group_admin.close()
