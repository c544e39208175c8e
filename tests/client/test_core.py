"""KafkaClient: bootstrap, connections per node, metadata cache and its refreshes."""

from __future__ import annotations

import asyncio
import socket

import pytest

from odradek.client.core import KafkaClient, parse_bootstrap_servers
from odradek.client.entities import build_request
from odradek.client.errors import KafkaError, NoBrokersAvailableError
from odradek.client.versions import METADATA
from tests.client.fake_broker import FakeCluster

pytestmark = pytest.mark.timeout(30)


def dead_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_parse_bootstrap_servers() -> None:
    assert parse_bootstrap_servers("a:1, b ,[::1]:3") == [("a", 1), ("b", 9092), ("::1", 3)]
    assert parse_bootstrap_servers(["PLAINTEXT://h:7"]) == [("h", 7)]
    for bad in ("", "a:x", "a:0", ":5", " , "):
        with pytest.raises(ValueError):
            parse_bootstrap_servers(bad)


async def test_start_learns_brokers_and_controller() -> None:
    async with FakeCluster(brokers=3) as cluster:
        cluster.controller_id = 2
        async with KafkaClient(cluster.bootstrap) as client:
            cluster_md = client.cluster
            assert sorted(cluster_md.brokers) == [0, 1, 2]
            assert cluster_md.controller_id == 2
            assert cluster_md.cluster_id == "fake-cluster"
            assert cluster_md.brokers[1].port == cluster.brokers[1].port


async def test_metadata_cache_is_used_until_stale_or_old() -> None:
    async with FakeCluster() as cluster:
        cluster.create_topic("t", 3)
        async with KafkaClient(cluster.bootstrap, metadata_max_age_ms=200) as client:
            before = len(cluster.requests(METADATA))
            md = await client.metadata(["t"], refresh=False)
            assert sorted(md.topics["t"].partitions) == [0, 1, 2]
            await client.metadata(["t"], refresh=False)
            await client.leader_for("t", 1)
            assert len(cluster.requests(METADATA)) == before + 1
            client.mark_stale("t")
            await client.metadata(["t"], refresh=False)
            assert len(cluster.requests(METADATA)) == before + 2
            await asyncio.sleep(0.25)  # older than metadata_max_age_ms
            await client.metadata(["t"], refresh=False)
            assert len(cluster.requests(METADATA)) == before + 3
            await client.metadata(["t"], refresh=True)
            assert len(cluster.requests(METADATA)) == before + 4


async def test_leader_for_follows_a_leader_change_after_mark_stale() -> None:
    async with FakeCluster(brokers=2) as cluster:
        parts = cluster.create_topic("t", 2, leaders=[0, 0])
        async with KafkaClient(cluster.bootstrap) as client:
            assert await client.leader_for("t", 1) == 0
            parts[1].leader = 1
            assert await client.leader_for("t", 1) == 0  # cached
            client.mark_stale("t")  # what a NOT_LEADER_OR_FOLLOWER answer triggers
            assert await client.leader_for("t", 1) == 1


async def test_leader_for_unknown_topic_and_partition() -> None:
    async with FakeCluster(auto_create=False) as cluster:
        cluster.create_topic("t", 2)
        async with KafkaClient(cluster.bootstrap) as client:
            with pytest.raises(KafkaError) as info:
                await client.leader_for("missing", 0)
            assert info.value.name == "UNKNOWN_TOPIC_OR_PARTITION"
            with pytest.raises(KafkaError, match="no partition 5"):
                await client.leader_for("t", 5)
            cluster.topics["t"][0].leader = -1
            client.mark_stale("t")
            with pytest.raises(KafkaError) as info:
                await client.leader_for("t", 0)
            assert info.value.name == "LEADER_NOT_AVAILABLE" and info.value.retriable


async def test_request_builds_for_the_negotiated_version() -> None:
    ranges = {**FakeCluster().api_versions, METADATA: (1, 6)}
    asked: list[int] = []

    def build(version: int) -> object:
        asked.append(version)
        return build_request(
            METADATA,
            version,
            topics=[],
            allow_auto_topic_creation=False,
            include_topic_authorized_operations=False,
        )

    async with FakeCluster(api_versions=ranges) as cluster, KafkaClient(cluster.bootstrap) as c:
        response = await c.request(0, METADATA, build)
        assert asked == [6]
        assert response.controller_id == 0
        assert await c.api_version(0, METADATA) == 6


async def test_bootstrap_skips_unreachable_servers() -> None:
    async with FakeCluster() as cluster:
        servers = [f"127.0.0.1:{dead_port()}", cluster.bootstrap]
        async with KafkaClient(servers) as client:
            assert list(client.cluster.brokers) == [0]


async def test_no_reachable_broker_is_a_clear_error() -> None:
    client = KafkaClient([f"127.0.0.1:{dead_port()}", f"127.0.0.1:{dead_port()}"])
    with pytest.raises(NoBrokersAvailableError, match="no broker reachable: cannot connect"):
        await client.start()
    await client.close()


async def test_concurrent_users_share_one_connection_per_node() -> None:
    async with FakeCluster(brokers=2) as cluster, KafkaClient(cluster.bootstrap) as client:
        connections = await asyncio.gather(*(client.connection(1) for _ in range(10)))
        assert len({id(c) for c in connections}) == 1
        assert cluster.brokers[1].connections == 1


async def test_a_lost_connection_is_reopened_and_metadata_marked_stale() -> None:
    async with FakeCluster() as cluster:
        cluster.create_topic("t")
        async with KafkaClient(cluster.bootstrap) as client:
            await client.leader_for("t", 0)
            first = await client.connection(0)
            await first.close("test")
            second = await client.connection(0)
            assert second is not first and second.connected
            assert cluster.brokers[0].connections == 3  # bootstrap, node 0, node 0 again
