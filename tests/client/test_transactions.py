"""odradek's transactional producer against a real broker subprocess.

Commit and abort as seen by read_committed consumers (odradek's own and librdkafka's), offsets
committed in the transaction (KIP-447, with the GroupConsumer's group metadata), a zombie
fenced with the typed exception, abortable errors recovered by abort_transaction(), the
state checks, and the blocking wrapper.
"""

from __future__ import annotations

import asyncio
import random
import subprocess
import sys
import time
import uuid
from pathlib import Path

import confluent_kafka as ck
import pytest

from odradek.client import (
    Admin,
    Consumer,
    GroupConsumer,
    NewTopic,
    Producer,
    ProducerFencedError,
    SyncProducer,
    TransactionAbortableError,
    TransactionFatalError,
    TransactionStateError,
)
from odradek.client.assignors import GroupMetadata
from odradek.client.transactions import State
from tests.helpers.broker import BrokerProcess

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


async def create(bootstrap: str, topic: str, partitions: int = 2) -> None:
    async with Admin(bootstrap) as admin:
        await admin.create_topics([NewTopic(topic, partitions, 1)])


async def read_values(bootstrap: str, topic: str, partitions: int, *, isolation: str) -> list:
    """Every value of ``topic`` up to its end (the LSO with read_committed)."""
    async with Consumer(bootstrap, isolation_level=isolation) as consumer:
        tps = [(topic, p) for p in range(partitions)]
        consumer.assign(tps)
        await consumer.seek_to_beginning(*tps)
        ends = await consumer.list_offsets(
            dict.fromkeys(tps, -1), isolation_level=1 if isolation == "read_committed" else 0
        )
        values = []
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if all(consumer.position(*tp) >= ends[tp][0] for tp in tps):
                break
            values += [r.value for r in await consumer.poll(timeout_ms=300)]
        return values


def ck_committed_values(bootstrap: str, topic: str) -> list[bytes]:
    consumer = ck.Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": unique("ck"),
            "auto.offset.reset": "earliest",
            "isolation.level": "read_committed",
            "enable.partition.eof": True,
        }
    )
    consumer.subscribe([topic])
    values, eofs = [], set()
    deadline = time.monotonic() + 30
    try:
        while time.monotonic() < deadline and len(eofs) < 2:
            message = consumer.poll(0.5)
            if message is None:
                continue
            if message.error():
                if message.error().code() == ck.KafkaError._PARTITION_EOF:
                    eofs.add(message.partition())
                continue
            values.append(message.value())
    finally:
        consumer.close()
    return values


async def test_commit_and_abort_seen_by_read_committed_readers(shared_broker) -> None:
    bootstrap, topic = shared_broker.bootstrap, unique("txn")
    await create(bootstrap, topic)
    async with Producer(bootstrap, transactional_id=unique("tid"), linger_ms=1) as producer:
        await producer.init_transactions()
        assert producer.producer_id >= 0 and producer.producer_epoch >= 0
        producer.begin_transaction()
        for i in range(20):
            await producer.send(topic, b"committed-%d" % i, partition=i % 2)
        await producer.commit_transaction()
        producer.begin_transaction()
        futures = [
            await producer.send(topic, b"aborted-%d" % i, partition=i % 2) for i in range(10)
        ]
        await producer.flush()  # on the log already, but never committed
        assert all(f.done() and not f.exception() for f in futures)
        await producer.abort_transaction()
        producer.begin_transaction()
        await producer.send(topic, b"last", partition=1)
        # An open transaction stops read_committed readers at its first offset...
        await producer.flush()
        assert b"last" not in await read_values(bootstrap, topic, 2, isolation="read_committed")
        await producer.commit_transaction()
    expected = sorted([b"committed-%d" % i for i in range(20)] + [b"last"])
    assert sorted(await read_values(bootstrap, topic, 2, isolation="read_committed")) == expected
    assert sorted(ck_committed_values(bootstrap, topic)) == expected
    everything = await read_values(bootstrap, topic, 2, isolation="read_uncommitted")
    assert len([v for v in everything if v.startswith(b"aborted")]) == 10


async def test_offsets_commit_only_with_the_transaction(shared_broker) -> None:
    bootstrap, source, sink = shared_broker.bootstrap, unique("in"), unique("out")
    await create(bootstrap, source, 1)
    await create(bootstrap, sink, 1)
    group = unique("group")
    async with Producer(bootstrap, linger_ms=0) as plain:
        for i in range(5):
            await plain.send_and_wait(source, b"%d" % i, partition=0)
    async with (
        GroupConsumer(
            bootstrap,
            group_id=group,
            enable_auto_commit=False,
            auto_offset_reset="earliest",
            isolation_level="read_committed",
        ) as consumer,
        Producer(bootstrap, transactional_id=unique("tid")) as producer,
    ):
        consumer.subscribe([source])
        records = []
        deadline = time.monotonic() + 30
        while len(records) < 5 and time.monotonic() < deadline:
            records += await consumer.poll(timeout_ms=500)
        metadata = consumer.group_metadata()
        assert metadata is not None and metadata.generation_id >= 0 and metadata.member_id
        await producer.init_transactions()
        # Aborted: the offset does not move.
        producer.begin_transaction()
        await producer.send(sink, b"x", partition=0)
        await producer.send_offsets_to_transaction({(source, 0): 3}, metadata)
        await producer.abort_transaction()
        assert (await consumer.committed([(source, 0)]))[(source, 0)] is None
        # Committed: it does.
        producer.begin_transaction()
        await producer.send(sink, b"y", partition=0)
        await producer.send_offsets_to_transaction({(source, 0): 5}, metadata)
        await producer.commit_transaction()
        committed = (await consumer.committed([(source, 0)]))[(source, 0)]
        assert committed is not None and committed.offset == 5
        # A stale generation is refused by the group coordinator (KIP-447): abortable.
        producer.begin_transaction()
        stale = GroupMetadata(group, metadata.generation_id + 7, metadata.member_id, None)
        with pytest.raises(TransactionAbortableError) as info:
            await producer.send_offsets_to_transaction({(source, 0): 1}, stale)
        assert info.value.name == "ILLEGAL_GENERATION"
        with pytest.raises(TransactionAbortableError):
            await producer.commit_transaction()  # the transaction is doomed
        await producer.abort_transaction()
        producer.begin_transaction()  # and the producer goes on
        await producer.send(sink, b"z", partition=0)
        await producer.commit_transaction()
    assert sorted(await read_values(bootstrap, sink, 1, isolation="read_committed")) == [
        b"y",
        b"z",
    ]


async def test_a_zombie_is_fenced(shared_broker) -> None:
    bootstrap, topic, tid = shared_broker.bootstrap, unique("zombie"), unique("tid")
    await create(bootstrap, topic, 1)
    async with (
        Producer(bootstrap, transactional_id=tid) as zombie,
        Producer(bootstrap, transactional_id=tid) as successor,
    ):
        await zombie.init_transactions()
        zombie.begin_transaction()
        await (await zombie.send(topic, b"zombie-1", partition=0))
        # The successor takes over: the zombie's open transaction is aborted, its epoch fenced.
        await successor.init_transactions()
        assert successor.producer_id == zombie.producer_id
        assert successor.producer_epoch > zombie.producer_epoch
        with pytest.raises(ProducerFencedError) as info:
            await zombie.commit_transaction()
        assert info.value.name in ("PRODUCER_FENCED", "INVALID_PRODUCER_EPOCH")
        # Fatal: every later call raises it again.
        with pytest.raises(ProducerFencedError):
            zombie.begin_transaction()
        with pytest.raises(ProducerFencedError):
            await zombie.send(topic, b"zombie-2", partition=0)
        successor.begin_transaction()
        await successor.send(topic, b"successor", partition=0)
        await successor.commit_transaction()
    assert await read_values(bootstrap, topic, 1, isolation="read_committed") == [b"successor"]


async def test_a_zombie_writing_after_the_fence_fails_its_records(shared_broker) -> None:
    bootstrap, topic, tid = shared_broker.bootstrap, unique("zombie2"), unique("tid")
    await create(bootstrap, topic, 1)
    async with (
        Producer(bootstrap, transactional_id=tid) as zombie,
        Producer(bootstrap, transactional_id=tid) as successor,
    ):
        await zombie.init_transactions()
        await successor.init_transactions()
        zombie.begin_transaction()
        future = await zombie.send(topic, b"late", partition=0)
        with pytest.raises(ProducerFencedError):
            await future  # AddPartitionsToTxn is refused with PRODUCER_FENCED
        with pytest.raises(TransactionFatalError):
            await zombie.abort_transaction()
    assert await read_values(bootstrap, topic, 1, isolation="read_committed") == []


async def test_state_checks(shared_broker) -> None:
    bootstrap, topic = shared_broker.bootstrap, unique("state")
    await create(bootstrap, topic, 1)
    with pytest.raises(ValueError):
        Producer(bootstrap, transactional_id="x", acks=1)
    with pytest.raises(ValueError):
        Producer(bootstrap, transactional_id="x", enable_idempotence=False)
    async with Producer(bootstrap) as plain:
        with pytest.raises(TransactionStateError):
            plain.begin_transaction()
    async with Producer(bootstrap, transactional_id=unique("tid")) as producer:
        with pytest.raises(TransactionStateError, match="before init_transactions"):
            producer.begin_transaction()
        await producer.init_transactions()
        with pytest.raises(TransactionStateError, match="READY"):
            await producer.send(topic, b"outside", partition=0)
        with pytest.raises(TransactionStateError):
            await producer.commit_transaction()
        producer.begin_transaction()
        with pytest.raises(TransactionStateError):
            producer.begin_transaction()
        # An empty transaction commits without asking the coordinator anything.
        await producer.commit_transaction()
        assert producer._txn is not None and producer._txn.state is State.READY


async def test_too_long_a_timeout_is_fatal(shared_broker) -> None:
    async with Producer(
        shared_broker.bootstrap, transactional_id=unique("tid"), transaction_timeout_ms=10**9
    ) as producer:
        with pytest.raises(TransactionFatalError) as info:
            await producer.init_transactions()
        assert info.value.name == "INVALID_TRANSACTION_TIMEOUT"


def test_sync_producer_transactions(shared_broker: BrokerProcess) -> None:
    bootstrap, topic = shared_broker.bootstrap, unique("sync")
    asyncio.run(create(bootstrap, topic, 2))
    with SyncProducer(bootstrap, transactional_id=unique("tid")) as producer:
        producer.init_transactions()
        producer.begin_transaction()
        producer.send(topic, b"a", partition=0)
        producer.send(topic, b"b", partition=1)
        producer.commit_transaction()
        producer.begin_transaction()
        producer.send(topic, b"gone", partition=0)
        producer.abort_transaction()
    assert sorted(ck_committed_values(bootstrap, topic)) == [b"a", b"b"]


WORKER = Path(__file__).with_name("eos_worker.py")


def test_consume_transform_produce_is_exactly_once_across_sigkills(
    broker: BrokerProcess, tmp_path: Path
) -> None:
    """The worker (GroupConsumer + transactional producer) is SIGKILLed at random points
    three times and restarted; read_committed then sees every input exactly once."""
    bootstrap = broker.bootstrap
    source, sink, group, tid = unique("in"), unique("out"), unique("g"), unique("tid")
    asyncio.run(create(bootstrap, source, 2))
    asyncio.run(create(bootstrap, sink, 2))
    total = 3000

    async def fill() -> None:
        async with Producer(bootstrap, linger_ms=5) as producer:
            for i in range(total):
                await producer.send(source, b"%d" % i, b"k%d" % i, partition=i % 2)
            await producer.flush()

    asyncio.run(fill())
    seed = random.randrange(1 << 30)
    rng = random.Random(seed)

    def start() -> subprocess.Popen:
        log = open(tmp_path / f"worker-{time.monotonic_ns()}.log", "wb")  # noqa: SIM115
        return subprocess.Popen(
            [sys.executable, str(WORKER), bootstrap, source, sink, group, tid],
            stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
        )  # fmt: skip

    def committed_output() -> list[bytes]:
        return asyncio.run(read_values(bootstrap, sink, 2, isolation="read_committed"))

    seen = 0
    for _ in range(3):
        assert seen < total, "the input was consumed before the last kill: make it bigger"
        worker = start()
        try:
            deadline = time.monotonic() + 90
            while len(committed_output()) <= seen:
                assert worker.poll() is None, "the worker exited"
                assert time.monotonic() < deadline, f"no progress (seed {seed})"
                time.sleep(0.2)
            time.sleep(rng.uniform(0.0, 0.6))  # a random point in its stream of transactions
        finally:
            worker.kill()
            worker.wait(30)
        seen = len(committed_output())
    worker = start()
    try:
        deadline = time.monotonic() + 120
        while len(set(committed_output())) < total:
            assert worker.poll() is None, "the worker exited"
            assert time.monotonic() < deadline, f"the output stays incomplete (seed {seed})"
            time.sleep(0.5)
    finally:
        worker.kill()
        worker.wait(30)
    output = committed_output()
    assert sorted(output) == sorted(b"out-%d" % i for i in range(total)), f"seed {seed}"
    everything = asyncio.run(read_values(bootstrap, sink, 2, isolation="read_uncommitted"))
    print(f"seed {seed}: {len(everything) - total} record(s) written by aborted transactions")
