"""aiokafka 0.14 against a real odradek broker subprocess.

aiokafka speaks only non-flexible protocol versions (Metadata 5, Produce 7, Fetch 11 in
practice), so these tests prove odradek's advertised ranges still include them. Consumers
use assign() without a group.
"""

from __future__ import annotations

import asyncio
import uuid

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.structs import ConsumerRecord

from tests.helpers.broker import BrokerProcess

pytestmark = pytest.mark.timeout(120)

WAIT_S = 20.0


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


@pytest.fixture(scope="module")
def bootstrap(shared_broker: BrokerProcess) -> str:
    return shared_broker.bootstrap


async def consume(
    bootstrap: str, partitions: list[TopicPartition], count: int
) -> list[ConsumerRecord]:
    consumer = AIOKafkaConsumer(
        bootstrap_servers=bootstrap,
        group_id=None,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        fetch_max_wait_ms=100,
    )
    await asyncio.wait_for(consumer.start(), WAIT_S)
    try:
        consumer.assign(partitions)
        await consumer.seek_to_beginning(*partitions)
        received: list[ConsumerRecord] = []
        loop = asyncio.get_running_loop()
        deadline = loop.time() + WAIT_S
        while len(received) < count and loop.time() < deadline:
            batches = await consumer.getmany(timeout_ms=500)
            for tp in sorted(batches, key=lambda tp: tp.partition):
                received.extend(batches[tp])
        return received
    finally:
        await consumer.stop()


@pytest.mark.parametrize("codec", [None, "gzip", "snappy", "lz4", "zstd"])
def test_produce_and_consume_with_codec(bootstrap: str, codec: str | None) -> None:
    async def scenario() -> None:
        topic = unique(f"aio-{codec or 'none'}")
        producer = AIOKafkaProducer(
            bootstrap_servers=bootstrap, compression_type=codec, linger_ms=5, acks="all"
        )
        await asyncio.wait_for(producer.start(), WAIT_S)
        try:
            futures = [
                await producer.send(
                    topic,
                    value=f"value-{i}".encode(),
                    key=f"key-{i}".encode() if i % 2 else None,
                    headers=[("h", str(i).encode())] if i % 3 == 0 else None,
                    partition=0,
                )
                for i in range(300)
            ]
            metadata = await asyncio.wait_for(asyncio.gather(*futures), WAIT_S)
        finally:
            await producer.stop()
        assert [m.offset for m in metadata] == list(range(300))

        records = await consume(bootstrap, [TopicPartition(topic, 0)], 300)
        assert [r.offset for r in records] == list(range(300))
        for i, record in enumerate(records):
            assert record.value == f"value-{i}".encode()
            assert record.key == (f"key-{i}".encode() if i % 2 else None)
            assert list(record.headers) == ([("h", str(i).encode())] if i % 3 == 0 else [])

    asyncio.run(scenario())


def test_idempotent_producer_and_seek(bootstrap: str) -> None:
    async def scenario() -> None:
        topic = unique("aio-idem")
        producer = AIOKafkaProducer(bootstrap_servers=bootstrap, enable_idempotence=True)
        await asyncio.wait_for(producer.start(), WAIT_S)
        try:
            for i in range(100):
                await producer.send_and_wait(topic, value=str(i).encode(), partition=0)
            batch = producer.create_batch()
            for i in range(100, 150):
                assert batch.append(key=None, value=str(i).encode(), timestamp=None) is not None
            batch.close()
            batch_meta = await asyncio.wait_for(
                await producer.send_batch(batch, topic, partition=0), WAIT_S
            )
            assert batch_meta.offset == 100
        finally:
            await producer.stop()

        consumer = AIOKafkaConsumer(
            bootstrap_servers=bootstrap, group_id=None, enable_auto_commit=False
        )
        await asyncio.wait_for(consumer.start(), WAIT_S)
        try:
            tp = TopicPartition(topic, 0)
            consumer.assign([tp])
            assert (await consumer.end_offsets([tp]))[tp] == 150
            consumer.seek(tp, 120)
            received: list[ConsumerRecord] = []
            loop = asyncio.get_running_loop()
            deadline = loop.time() + WAIT_S
            while len(received) < 30 and loop.time() < deadline:
                received.extend((await consumer.getmany(tp, timeout_ms=500)).get(tp, []))
            assert [int(r.value) for r in received] == list(range(120, 150))
            offsets = await consumer.offsets_for_times({tp: 0})
            assert offsets[tp] is not None and offsets[tp].offset == 0
        finally:
            await consumer.stop()

    asyncio.run(scenario())
