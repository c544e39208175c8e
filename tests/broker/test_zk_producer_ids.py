"""Producer ids claimed in blocks from a real ZooKeeper (Kafka's ZkProducerIdManager):
two brokers allocating at the same time never hand out the same id."""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Callable, Iterator

import pytest

from odradek.broker.producer_ids import BLOCK_SIZE, ZkProducerIdManager, init_producer
from odradek.cluster.zk.client import ZkClient
from odradek.cluster.zk.codecs import ProducerIdBlock, ZNodeDecodeError
from tests.helpers.zookeeper import zk_connect, zookeeper_server

__all__ = ["zk_connect", "zookeeper_server"]

pytestmark = [pytest.mark.integration, pytest.mark.zookeeper, pytest.mark.timeout(120)]


@pytest.fixture
def connect(zk_connect: str) -> Iterator[Callable[[], ZkClient]]:
    clients: list[ZkClient] = []

    def make() -> ZkClient:
        client = ZkClient.connect(zk_connect, session_timeout_ms=6000)
        client.create_top_level_paths()
        clients.append(client)
        return client

    yield make
    for client in clients:
        client.close()


def test_block_znode_is_kafkas_json() -> None:
    block = ProducerIdBlock(broker_id=2, first=1000, last=1999)
    assert json.loads(block.encode()) == {
        "version": 1,
        "broker": 2,
        "block_start": "1000",
        "block_end": "1999",
    }
    # What a Kafka 3.x broker writes reads back the same.
    kafka = b'{"version":1,"broker":1,"block_start":"5000","block_end":"5999"}'
    assert ProducerIdBlock.decode(kafka) == ProducerIdBlock(1, 5000, 5999)
    for bad in (b'{"version":1,"broker":1,"block_start":5,"block_end":"9"}', b"[]", b"x"):
        with pytest.raises(ZNodeDecodeError):
            ProducerIdBlock.decode(bad)


def test_blocks_of_1000_follow_each_other(connect: Callable[[], ZkClient]) -> None:
    zk = connect()
    first = ZkProducerIdManager(zk, broker_id=1)
    second = ZkProducerIdManager(zk, broker_id=2)

    async def run() -> tuple[list[int], list[int]]:
        return [await first.generate() for _ in range(3)], [await second.generate()]

    ids_first, ids_second = asyncio.run(run())
    assert ids_first == [0, 1, 2]
    assert ids_second == [BLOCK_SIZE]  # the next block, claimed by broker 2
    latest, _version = zk.get_producer_id_block()
    assert latest == ProducerIdBlock(2, BLOCK_SIZE, 2 * BLOCK_SIZE - 1)


def test_continues_after_a_block_kafka_wrote(connect: Callable[[], ZkClient]) -> None:
    zk = connect()
    _latest, version = zk.get_producer_id_block()
    zk.set_producer_id_block(ProducerIdBlock(7, 41_000, 41_999), version)
    manager = ZkProducerIdManager(zk, broker_id=1)
    assert asyncio.run(init_producer(manager, -1, -1)) == (42_000, 0)
    # A producer that names its id gets an epoch bump, not a new id.
    assert asyncio.run(init_producer(manager, 42_000, 0)) == (42_000, 1)


def test_two_brokers_allocating_concurrently_never_overlap(
    connect: Callable[[], ZkClient],
) -> None:
    # Small blocks so the two managers contend for the znode many times.
    managers = [ZkProducerIdManager(connect(), broker_id=b, block_size=50) for b in (1, 2, 3)]
    handed_out: list[list[int]] = [[] for _ in managers]
    start = threading.Barrier(len(managers))

    def allocate(index: int) -> None:
        async def run() -> None:
            for _ in range(1500):
                handed_out[index].append(await managers[index].generate())

        start.wait()
        asyncio.run(run())

    threads = [threading.Thread(target=allocate, args=(i,)) for i in range(len(managers))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(90)
    assert all(len(ids) == 1500 for ids in handed_out)
    everything = [pid for ids in handed_out for pid in ids]
    assert len(set(everything)) == len(everything), "two brokers handed out the same id"
    # Each manager's ids come in whole blocks of 50 that nobody else touched.
    for ids in handed_out:
        assert len({pid // 50 for pid in ids}) == 1500 // 50
    latest, _ = managers[0]._zk.get_producer_id_block()
    assert latest is not None and latest.last == len(everything) - 1
