"""Admin: requests, routing (controller, broker, leaders) and per-item error mapping."""

from __future__ import annotations

import pytest
from kio.schema.errors import ErrorCode

from odradek.client.admin import Admin, ConfigEntry, ConfigResource, NewTopic
from odradek.client.errors import KafkaError
from odradek.client.versions import CREATE_TOPICS, DESCRIBE_CONFIGS
from odradek.records.batch import Record, build_batch
from tests.client.fake_broker import FakeCluster

pytestmark = pytest.mark.timeout(60)


async def test_create_topics_and_per_topic_errors() -> None:
    async with FakeCluster(brokers=2) as cluster, Admin(cluster.bootstrap) as admin:
        await admin.create_topics(
            [NewTopic("a", 3, 1, configs={"retention.ms": "1000"}), NewTopic("b", 1)]
        )
        assert len(cluster.topics["a"]) == 3 and cluster.configs["a"] == {"retention.ms": "1000"}
        with pytest.raises(KafkaError) as info:
            await admin.create_topics([NewTopic("c", 1), NewTopic("a", 1), NewTopic("d", 0)])
        error = info.value
        assert error.name == "TOPIC_ALREADY_EXISTS"
        assert "a: Topic 'a' already exists." in str(error)
        assert {k: e.name for k, e in error.errors.items()} == {
            "a": "TOPIC_ALREADY_EXISTS",
            "d": "INVALID_PARTITIONS",
        }
        assert "c" in cluster.topics  # the others were still created
        await admin.create_topics([NewTopic("v", 2)], validate_only=True)
        assert "v" not in cluster.topics
        with pytest.raises(ValueError, match="duplicate"):
            await admin.create_topics([NewTopic("x"), NewTopic("x")])
        with pytest.raises(ValueError, match="non-empty string"):
            await admin.create_topics([NewTopic("")])
        with pytest.raises(TypeError):
            await admin.delete_topics("a")  # type: ignore[arg-type]
        with pytest.raises(ValueError, match="must be > 0"):
            await admin.create_partitions({"a": 0})


async def test_controller_moves_between_requests() -> None:
    async with FakeCluster(brokers=2) as cluster, Admin(cluster.bootstrap) as admin:
        await admin.create_topics([NewTopic("a", 1)])
        cluster.controller_id = 1  # node 0 now answers NOT_CONTROLLER
        await admin.create_topics([NewTopic("b", 1)])
        assert "b" in cluster.topics
        create_versions_seen = [
            b.node_id for b in cluster.brokers for k, _, _ in b.requests if k == CREATE_TOPICS
        ]
        assert create_versions_seen.count(1) == 1


async def test_delete_topics_and_create_partitions() -> None:
    async with FakeCluster() as cluster, Admin(cluster.bootstrap) as admin:
        cluster.create_topic("t", 1)
        await admin.create_partitions({"t": 4})
        assert len(cluster.topics["t"]) == 4
        with pytest.raises(KafkaError) as info:
            await admin.create_partitions({"t": 2})
        assert info.value.name == "INVALID_PARTITIONS"
        metadata = await admin.list_topics()
        assert sorted(metadata.topics["t"].partitions) == [0, 1, 2, 3]
        await admin.delete_topics(["t"])
        assert "t" not in cluster.topics
        with pytest.raises(KafkaError) as info:
            await admin.delete_topics(["t"])
        assert info.value.name == "UNKNOWN_TOPIC_OR_PARTITION"


async def test_delete_topics_on_a_broker_with_old_versions() -> None:
    ranges = {**FakeCluster().api_versions, 20: (1, 3)}
    async with FakeCluster(api_versions=ranges) as cluster, Admin(cluster.bootstrap) as admin:
        cluster.create_topic("t", 1)
        await admin.delete_topics(["t"])
        assert "t" not in cluster.topics


async def test_describe_and_alter_configs() -> None:
    async with FakeCluster(brokers=2) as cluster, Admin(cluster.bootstrap) as admin:
        cluster.create_topic("t")
        topic = ConfigResource("topic", "t")
        await admin.incremental_alter_configs({topic: [("retention.ms", "set", "5000")]})
        configs = await admin.describe_configs([topic])
        assert configs[topic]["retention.ms"] == ConfigEntry(
            value="5000",
            read_only=False,
            is_default=False,
            source="DYNAMIC_TOPIC_CONFIG",
            sensitive=False,
        )
        assert configs[topic]["cleanup.policy"].is_default
        await admin.incremental_alter_configs({topic: [("retention.ms", "delete", None)]})
        assert "retention.ms" not in cluster.configs["t"]
        await admin.alter_configs({topic: {"segment.bytes": "1024"}})
        assert cluster.configs["t"] == {"segment.bytes": "1024"}
        # Broker configs go to that broker.
        broker = ConfigResource("broker", "1")
        result = await admin.describe_configs([broker], keys=["broker.id"])
        assert result[broker]["broker.id"].value == "1"
        asked = [
            b.node_id
            for b in cluster.brokers
            for k, _, r in b.requests
            if k == DESCRIBE_CONFIGS and r.resources[0].resource_type == 4
        ]
        assert asked == [1]


async def test_config_errors_name_the_resource() -> None:
    async with FakeCluster() as cluster, Admin(cluster.bootstrap) as admin:
        cluster.create_topic("t")
        missing = ConfigResource("topic", "nope")
        with pytest.raises(KafkaError) as info:
            await admin.describe_configs([ConfigResource("topic", "t"), missing])
        assert info.value.name == "UNKNOWN_TOPIC_OR_PARTITION" and "'nope'" in str(info.value)
        with pytest.raises(KafkaError) as info:
            await admin.incremental_alter_configs(
                {ConfigResource("topic", "t"): [("cleanup.policy", "append", "compact")]}
            )
        assert info.value.name == "INVALID_CONFIG"
        with pytest.raises(ValueError):
            await admin.incremental_alter_configs({ConfigResource("topic", "t"): [("a", "x", "1")]})
        with pytest.raises(ValueError):
            ConfigResource("group", "g")


async def test_list_offsets_and_delete_records() -> None:
    async with FakeCluster(brokers=2) as cluster, Admin(cluster.bootstrap) as admin:
        parts = cluster.create_topic("t", 2)
        for ts in (1000, 2000, 3000):
            parts[1].append(build_batch([Record(value=b"v", timestamp_ms=ts)]))
        offsets = await admin.list_offsets({("t", 1): "earliest", ("t", 0): "latest"})
        assert offsets[("t", 1)][0] == 0 and offsets[("t", 0)][0] == 0
        offsets = await admin.list_offsets({("t", 1): "latest", ("t", 0): "earliest"})
        assert offsets[("t", 1)][0] == 3
        assert (await admin.list_offsets({("t", 1): 1500}))[("t", 1)] == (1, 2000)
        assert (await admin.list_offsets({("t", 1): "max_timestamp"}))[("t", 1)] == (2, 3000)
        low = await admin.delete_records({("t", 1): 2})
        assert low == {("t", 1): 2} and parts[1].log_start_offset == 2
        assert (await admin.list_offsets({("t", 1): "earliest"}))[("t", 1)][0] == 2
        with pytest.raises(KafkaError) as info:
            await admin.delete_records({("t", 1): 10})
        assert info.value.name == "OFFSET_OUT_OF_RANGE"
        with pytest.raises(ValueError):
            await admin.list_offsets({("t", 1): "yesterday"})
        with pytest.raises(KafkaError) as info:
            await admin.list_offsets({("t", 7): "latest"})
        assert info.value.code == ErrorCode.unknown_topic_or_partition


async def test_describe_cluster() -> None:
    async with FakeCluster(brokers=3) as cluster, Admin(cluster.bootstrap) as admin:
        cluster.controller_id = 1
        described = await admin.describe_cluster()
        assert (described.cluster_id, described.controller_id) == ("fake-cluster", 1)
        assert sorted(described.brokers) == [0, 1, 2]
    ranges = {k: v for k, v in FakeCluster().api_versions.items() if k != 60}
    async with FakeCluster(api_versions=ranges) as cluster, Admin(cluster.bootstrap) as admin:
        described = await admin.describe_cluster()  # falls back to Metadata
        assert described.cluster_id == "fake-cluster" and list(described.brokers) == [0]
