"""Producer: batching, partitioning, acks, retries, idempotent sequencing, timeouts."""

from __future__ import annotations

import asyncio
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kio.schema.errors import ErrorCode

from odradek.client.errors import ClientError, KafkaError, KafkaTimeoutError
from odradek.client.partitioner import partition_for_key
from odradek.client.producer import Producer, RecordMetadata
from odradek.client.versions import INIT_PRODUCER_ID, PRODUCE
from odradek.records.batch import EncodedRecords, Record, build_batch, decode_batches
from odradek.records.compression import Compression
from odradek.records.header import iter_headers
from tests.client.fake_broker import DROP, FakeCluster, wait_until

pytestmark = pytest.mark.timeout(60)


def stored_headers(cluster: FakeCluster, topic: str, partition: int = 0):
    return [
        h for _, data in cluster.topics[topic][partition].batches for _, h in iter_headers(data)
    ]


async def test_send_and_wait_returns_offsets_in_order() -> None:
    async with FakeCluster() as cluster, Producer(cluster.bootstrap, linger_ms=0) as producer:
        cluster.create_topic("t")
        results = [
            await producer.send_and_wait("t", b"v%d" % i, headers=[("h", b"x")]) for i in range(3)
        ]
        assert [r.offset for r in results] == [0, 1, 2]
        assert all(isinstance(r, RecordMetadata) and r.topic == "t" for r in results)
        assert results[0].timestamp_ms > 1_600_000_000_000
        assert cluster.all_values("t", 0) == [b"v0", b"v1", b"v2"]


async def test_linger_collects_records_into_one_batch() -> None:
    async with FakeCluster() as cluster, Producer(cluster.bootstrap, linger_ms=100) as producer:
        cluster.create_topic("t")
        futures = [await producer.send("t", b"%d" % i, partition=0) for i in range(20)]
        metadata = await asyncio.gather(*futures)
        assert [m.offset for m in metadata] == list(range(20))
        produce = cluster.requests(PRODUCE)
        assert len(produce) == 1
        (header,) = stored_headers(cluster, "t")
        assert header.records_count == 20


async def test_batch_size_closes_batches_early() -> None:
    async with FakeCluster() as cluster:
        cluster.create_topic("t")
        async with Producer(cluster.bootstrap, linger_ms=10_000, batch_size=600) as producer:
            futures = [await producer.send("t", b"x" * 100, partition=0) for i in range(12)]
            # Full batches go out without waiting for linger; only the last, open one waits.
            await wait_until(lambda: sum(1 for f in futures if f.done()) >= 8)
            assert not futures[-1].done()
            await producer.flush()
            assert all(f.done() for f in futures)
        sizes = [h.records_count for h in stored_headers(cluster, "t")]
        assert sum(sizes) == 12 and len(sizes) >= 3
        assert all(h.size <= 600 for h in stored_headers(cluster, "t"))


async def test_tight_send_loop_ships_full_batches_before_flush() -> None:
    """A caller that sends in a loop without awaiting anything else must not hold every batch
    back until flush(): send() yields when it closes a batch, so the sender ships it."""
    async with FakeCluster() as cluster:
        cluster.create_topic("t")
        async with Producer(
            cluster.bootstrap, linger_ms=60_000, batch_size=1000, enable_idempotence=False
        ) as producer:
            futures = [await producer.send("t", b"x" * 100, partition=0) for _ in range(400)]
            # No flush, no sleep: only the yields inside send() ran the sender.
            assert cluster.requests(PRODUCE)
            assert futures[0].done()
            await producer.flush()
        assert len(cluster.all_values("t", 0)) == 400


async def test_keys_explicit_partitions_and_sticky_null_keys() -> None:
    async with FakeCluster() as cluster, Producer(cluster.bootstrap, linger_ms=0) as producer:
        cluster.create_topic("t", 5)
        for key in (b"21", b"foobar", b"abc"):
            md = await producer.send_and_wait("t", b"v", key=key)
            assert md.partition == partition_for_key(key, 5)
        md = await producer.send_and_wait("t", b"v", partition=3)
        assert md.partition == 3
        with pytest.raises(ValueError, match="partition 9"):
            await producer.send("t", b"v", partition=9)
        # Null keys stick to one partition while its batch fills (long linger: one batch).
        producer.linger_ms = 10_000
        futures = [await producer.send("t", b"n") for _ in range(10)]
        await producer.flush()
        assert len({(await f).partition for f in futures}) == 1


async def test_idempotent_batches_carry_producer_id_and_consecutive_sequences() -> None:
    async with FakeCluster() as cluster:
        cluster.create_topic("t")
        async with Producer(cluster.bootstrap, linger_ms=0, batch_size=200) as producer:
            futures = [await producer.send("t", b"x" * 50, partition=0) for _ in range(30)]
            await asyncio.gather(*futures)
            assert producer.producer_id == 1000
        headers = stored_headers(cluster, "t")
        assert {h.producer_id for h in headers} == {1000}
        expected = 0
        for h in headers:
            assert h.base_sequence == expected
            expected += h.records_count
        assert expected == 30
        assert len(cluster.requests(INIT_PRODUCER_ID)) == 1


async def test_lost_response_is_retried_without_duplicates() -> None:
    async with FakeCluster() as cluster:
        cluster.create_topic("t")
        dropped = []

        def drop_after_append(broker, api_key, version, request):
            if api_key == PRODUCE and not dropped:
                dropped.append(True)
                cluster.handle(broker, api_key, version, request)  # written...
                return DROP  # ...but the answer is lost
            return None

        cluster.intercept(drop_after_append)
        async with Producer(cluster.bootstrap, linger_ms=0, retry_backoff_ms=10) as producer:
            md = await producer.send_and_wait("t", b"once")
            assert md.offset == 0  # the broker recognised the retry as a duplicate
            md2 = await producer.send_and_wait("t", b"twice")
            assert md2.offset == 1
        assert cluster.all_values("t", 0) == [b"once", b"twice"]


async def test_retriable_error_keeps_order_of_the_batches_in_flight_behind_it() -> None:
    async with FakeCluster() as cluster:
        cluster.create_topic("t")
        release = asyncio.Event()
        state = {"armed": False, "failed": False}

        async def fail_first(broker, api_key, version, request):
            if api_key != PRODUCE or not state["armed"]:
                return None
            if not state["failed"]:
                state["failed"] = True
                # Hold the first answer until more batches are in flight behind it.
                await asyncio.wait_for(release.wait(), 5)
                topic = request.topic_data[0]
                return {
                    "responses": [
                        {
                            "name": topic.name,
                            "partition_responses": [
                                {"index": 0, "error_code": ErrorCode.not_enough_replicas}
                            ],
                        }
                    ]
                }
            return None

        cluster.intercept(fail_first)
        async with Producer(
            cluster.bootstrap, linger_ms=0, batch_size=100, retry_backoff_ms=10
        ) as producer:
            # The partition knows the producer (brokers accept any first sequence otherwise).
            await producer.send_and_wait("t", b"000" + b"." * 60, partition=0)
            state["armed"] = True
            futures = [
                await producer.send("t", b"%03d" % i + b"." * 60, partition=0) for i in range(1, 8)
            ]
            await asyncio.sleep(0.2)
            release.set()
            metadata = await asyncio.gather(*futures)
        values = cluster.all_values("t", 0)
        assert [v[:3] for v in values] == [b"%03d" % i for i in range(8)]
        assert [m.offset for m in metadata] == list(range(1, 8))
        # The fake answered OUT_OF_ORDER_SEQUENCE_NUMBER to batches behind the failed one; they
        # were retried after it, so there is neither a gap nor a duplicate.
        sequences = [h.base_sequence for h in stored_headers(cluster, "t")]
        assert sequences == sorted(sequences) and sequences[0] == 0
        assert cluster.produce_errors[ErrorCode.out_of_order_sequence_number] >= 1


async def test_unknown_producer_id_after_log_head_deletion_bumps_the_epoch() -> None:
    async with FakeCluster() as cluster:
        cluster.unknown_producer_error = True  # a broker before KIP-360 (Kafka 2.5)
        part = cluster.create_topic("t")[0]
        async with Producer(cluster.bootstrap, linger_ms=0, retry_backoff_ms=10) as producer:
            await producer.send_and_wait("t", b"a")
            await producer.send_and_wait("t", b"b")
            # Retention removed the head of the log and with it the producer's state.
            part.log_start_offset = part.next_offset
            part.producers.clear()
            md = await producer.send_and_wait("t", b"c")
            assert md.offset == 2
            assert cluster.produce_errors[ErrorCode.unknown_producer_id] == 1
            await producer.send_and_wait("t", b"d")
            assert producer.producer_epoch == 1
        headers = stored_headers(cluster, "t")
        assert [(h.producer_epoch, h.base_sequence) for h in headers] == [
            (0, 0),
            (0, 1),
            (1, 0),
            (1, 1),
        ]
        assert cluster.all_values("t", 0) == [b"a", b"b", b"c", b"d"]


async def test_not_leader_refreshes_metadata_and_follows_the_new_leader() -> None:
    async with FakeCluster(brokers=2) as cluster:
        parts = cluster.create_topic("t", 1, leaders=[0])
        async with Producer(cluster.bootstrap, linger_ms=0, retry_backoff_ms=10) as producer:
            await producer.send_and_wait("t", b"a")
            parts[0].leader = 1  # leadership moves; node 0 now answers NOT_LEADER_OR_FOLLOWER
            md = await producer.send_and_wait("t", b"b")
            assert md.offset == 1
        assert [b.node_id for b in cluster.brokers if any(k == PRODUCE for k, _, _ in b.requests)]
        assert any(k == PRODUCE for k, _, _ in cluster.brokers[1].requests)
        assert cluster.all_values("t", 0) == [b"a", b"b"]


async def test_acks_zero_does_not_wait_for_answers() -> None:
    async with FakeCluster() as cluster:
        cluster.create_topic("t")
        async with Producer(cluster.bootstrap, acks=0, linger_ms=0) as producer:
            assert not producer.idempotent
            md = await producer.send_and_wait("t", b"fire")
            assert md.offset == -1
            md = await producer.send_and_wait("t", b"forget")
        await wait_until(lambda: len(cluster.all_values("t", 0)) == 2)
        assert {r.acks for r in cluster.requests(PRODUCE)} == {0}
        assert {h.producer_id for h in stored_headers(cluster, "t")} == {-1}


async def test_non_retriable_error_fails_the_future_with_the_kafka_name() -> None:
    async with FakeCluster() as cluster:
        cluster.create_topic("t")

        def reject(broker, api_key, version, request):
            if api_key == PRODUCE:
                return {
                    "responses": [
                        {
                            "name": "t",
                            "partition_responses": [
                                {
                                    "index": 0,
                                    "error_code": ErrorCode.invalid_record,
                                    "error_message": "bad record",
                                    "record_errors": [
                                        {"batch_index": 0, "batch_index_error_message": "null key"}
                                    ],
                                }
                            ],
                        }
                    ]
                }
            return None

        cluster.intercept(reject)
        async with Producer(cluster.bootstrap, linger_ms=0) as producer:
            with pytest.raises(KafkaError) as info:
                await producer.send_and_wait("t", b"v")
            assert info.value.name == "INVALID_RECORD"
            assert "null key" in str(info.value) and "t-0" in str(info.value)
        assert len(cluster.requests(PRODUCE)) == 1


async def test_delivery_timeout_expires_records_without_a_leader() -> None:
    async with FakeCluster() as cluster:
        cluster.create_topic("t")[0].leader = -1
        async with Producer(
            cluster.bootstrap,
            linger_ms=0,
            request_timeout_ms=100,
            delivery_timeout_ms=300,
            retry_backoff_ms=20,
        ) as producer:
            with pytest.raises(KafkaTimeoutError, match=r"expiring 1 record\(s\) for t-0"):
                await asyncio.wait_for(producer.send_and_wait("t", b"v", partition=0), 5)


async def test_oversized_records_and_bad_arguments_are_rejected_up_front() -> None:
    async with FakeCluster() as cluster:
        cluster.create_topic("t")
        async with Producer(cluster.bootstrap, max_request_size=1000) as producer:
            with pytest.raises(KafkaError) as info:
                await producer.send("t", b"x" * 2000)
            assert info.value.name == "MESSAGE_TOO_LARGE"
            with pytest.raises(TypeError):
                await producer.send("t", "text")  # type: ignore[arg-type]
            with pytest.raises(TypeError):
                await producer.send("t", b"v", headers=[("k", "v")])  # type: ignore[list-item]
            with pytest.raises(ValueError):
                await producer.send("", b"v")
        with pytest.raises(ClientError, match="closed"):
            await producer.send("t", b"v")
    with pytest.raises(ValueError):
        Producer("h:1", acks=2)
    with pytest.raises(ValueError):
        Producer("h:1", compression_type="brotli")
    with pytest.raises(ValueError):
        Producer("h:1", delivery_timeout_ms=1000)


async def test_send_batch_sends_one_compressed_batch() -> None:
    async with FakeCluster() as cluster:
        cluster.create_topic("t", 2)
        async with Producer(cluster.bootstrap, compression_type="gzip") as producer:
            records = [Record(value=b"r%d" % i, key=b"k") for i in range(50)]
            md = await producer.send_batch("t", 1, records)
            assert (md.partition, md.offset) == (1, 0)
            md = await producer.send_batch("t", 1, records[:5])
            assert md.offset == 50
        (first, second) = stored_headers(cluster, "t", 1)
        assert second.records_count == 5
        assert first.compression == Compression.GZIP and first.records_count == 50
        data = cluster.topics["t"][1].batches[0][1]
        assert [r.value for b in decode_batches(data) for r in b.records][:3] == [
            b"r0",
            b"r1",
            b"r2",
        ]


async def test_send_batch_sends_pre_encoded_records_as_they_are() -> None:
    # The Spark sink's bulk-encoded sections: compressed and stamped with the idempotent
    # producer's id and sequences like any batch; the record metadata has their timestamp.
    stamp = 1_700_000_000_000
    records = [Record(value=b"r%d" % i, key=b"k", timestamp_ms=stamp) for i in range(30)]
    plain = bytes(build_batch(records))
    encoded = EncodedRecords(plain[61:], 30, stamp, stamp)
    async with FakeCluster() as cluster:
        cluster.create_topic("t", 2)
        async with Producer(cluster.bootstrap, compression_type="lz4") as producer:
            md = await producer.send_batch("t", 0, encoded)
            assert (md.partition, md.offset, md.timestamp_ms) == (0, 0, stamp)
            md = await producer.send_batch("t", 0, encoded)
            assert md.offset == 30
        first, second = stored_headers(cluster, "t", 0)
        assert first.compression == Compression.LZ4 and first.records_count == 30
        assert (first.producer_id >= 0, first.base_sequence, second.base_sequence) == (True, 0, 30)
        data = cluster.topics["t"][0].batches[1][1]
        got = [(r.offset, r.key, r.value) for b in decode_batches(data) for r in b.records]
        assert got == [(30 + i, b"k", b"r%d" % i) for i in range(30)]


async def test_close_sends_what_is_buffered() -> None:
    async with FakeCluster() as cluster:
        cluster.create_topic("t")
        producer = Producer(cluster.bootstrap, linger_ms=60_000)
        await producer.start()
        futures = [await producer.send("t", b"%d" % i) for i in range(5)]
        await producer.close()
        assert [f.result().offset for f in futures] == [0, 1, 2, 3, 4]


async def test_buffer_memory_blocks_then_times_out() -> None:
    async with FakeCluster() as cluster:
        cluster.create_topic("t")
        stall = asyncio.Event()

        async def hold(broker, api_key, version, request):
            if api_key == PRODUCE:
                await stall.wait()
            return None

        cluster.intercept(hold)
        async with Producer(
            cluster.bootstrap, linger_ms=0, buffer_memory=1000, max_block_ms=200
        ) as producer:
            await producer.send("t", b"x" * 600)
            with pytest.raises(KafkaTimeoutError, match="no buffer space"):
                await producer.send("t", b"x" * 600)
            stall.set()
            await producer.flush()
            # Space came back when the first batch was acknowledged.
            await (await producer.send("t", b"x" * 600))


@pytest.mark.parametrize("acks", ["all", 1])
async def test_flush_waits_for_batches_already_in_flight(acks: str | int) -> None:
    async with FakeCluster() as cluster:
        cluster.create_topic("t")

        async def slow(broker, api_key, version, request):
            if api_key == PRODUCE:
                await asyncio.sleep(0.2)
            return None

        cluster.intercept(slow)
        async with Producer(cluster.bootstrap, acks=acks, linger_ms=0) as producer:
            futures = [await producer.send("t", b"%d" % i) for i in range(3)]
            await wait_until(lambda: bool(cluster.requests(PRODUCE)))  # on the wire
            await producer.flush()
            assert all(f.done() for f in futures)


async def test_epoch_overflow_gets_a_new_producer_id() -> None:
    async with FakeCluster() as cluster:
        cluster.unknown_producer_error = True
        part = cluster.create_topic("t")[0]
        async with Producer(cluster.bootstrap, linger_ms=0, retry_backoff_ms=10) as producer:
            producer.producer_epoch = 32767  # as if bumped that often already
            await producer.send_and_wait("t", b"a")
            part.log_start_offset = part.next_offset
            part.producers.clear()
            await producer.send_and_wait("t", b"b")
            assert (producer.producer_id, producer.producer_epoch) == (1001, 0)
        headers = stored_headers(cluster, "t")
        assert [(h.producer_id, h.producer_epoch, h.base_sequence) for h in headers] == [
            (1000, 32767, 0),
            (1001, 0, 0),
        ]
        assert len(cluster.requests(INIT_PRODUCER_ID)) == 2


async def test_unknown_topic_answer_refreshes_metadata_then_succeeds() -> None:
    async with FakeCluster() as cluster:
        cluster.create_topic("t")
        answered = []

        def unknown_once(broker, api_key, version, request):
            if api_key == PRODUCE and not answered:
                answered.append(True)
                return {
                    "responses": [
                        {
                            "name": "t",
                            "partition_responses": [
                                {"index": 0, "error_code": ErrorCode.unknown_topic_or_partition}
                            ],
                        }
                    ]
                }
            return None

        cluster.intercept(unknown_once)
        async with Producer(cluster.bootstrap, linger_ms=0, retry_backoff_ms=10) as producer:
            await producer.client.metadata(["t"])  # cached: the send itself needs none
            metadata_before = len(cluster.requests(3))
            md = await producer.send_and_wait("t", b"v")
            assert md.offset == 0
            assert len(cluster.requests(3)) == metadata_before + 1  # the refresh before retrying
        assert cluster.all_values("t", 0) == [b"v"]


async def test_close_with_a_timeout_fails_what_is_not_acknowledged() -> None:
    async with FakeCluster() as cluster:
        cluster.create_topic("t")
        stall = asyncio.Event()

        async def hold(broker, api_key, version, request):
            if api_key == PRODUCE:
                await stall.wait()
            return None

        cluster.intercept(hold)
        producer = Producer(cluster.bootstrap, linger_ms=0)
        await producer.start()
        future = await producer.send("t", b"stuck")
        await wait_until(lambda: bool(cluster.requests(PRODUCE)))
        await producer.close(timeout_ms=100)
        with pytest.raises(ClientError, match="closed before the record was acknowledged"):
            await future
        stall.set()


async def test_close_ends_a_sender_that_swallowed_its_cancellation() -> None:
    # asyncio.wait_for on Python 3.11 (the sender's wait for its wake-up event) drops a
    # cancellation that meets the event being set; close() must not wait on forever.
    async with FakeCluster() as cluster:
        producer = Producer(cluster.bootstrap, linger_ms=0)
        await producer.start()
        assert producer._sender._task is not None
        producer._sender._task.cancel()
        await asyncio.gather(producer._sender._task, return_exceptions=True)
        swallowed = asyncio.Event()

        async def stubborn_sender() -> None:
            try:
                await asyncio.sleep(3600)
            except asyncio.CancelledError:
                swallowed.set()  # as wait_for did when the event was set at the same time
            await asyncio.sleep(3600)

        producer._sender._task = asyncio.create_task(stubborn_sender())
        await asyncio.sleep(0)
        started = time.monotonic()
        await asyncio.wait_for(producer.close(timeout_ms=0), 10)
        assert time.monotonic() - started < 5  # not ended by wait_for's own timeout
        assert swallowed.is_set() and producer._sender._task.cancelled()


@settings(max_examples=15, deadline=None)
@given(
    faults=st.lists(st.sampled_from(["ok", "ok", "error", "lost"]), max_size=40),
    sizes=st.lists(st.integers(1, 5), min_size=1, max_size=12),
)
def test_idempotent_retries_never_reorder_or_duplicate(faults: list[str], sizes: list[int]) -> None:
    """Random retriable errors and lost responses: the log ends up exactly as sent."""

    async def main() -> None:
        async with FakeCluster() as cluster:
            cluster.create_topic("t")
            script = iter(faults)
            armed = []

            def fault(broker, api_key, version, request):
                if api_key != PRODUCE or not armed:
                    return None
                action = next(script, "ok")
                if action == "error":
                    return {
                        "responses": [
                            {
                                "name": "t",
                                "partition_responses": [
                                    {"index": 0, "error_code": ErrorCode.not_enough_replicas}
                                ],
                            }
                        ]
                    }
                if action == "lost":
                    cluster.handle(broker, api_key, version, request)
                    return DROP
                return None

            cluster.intercept(fault)
            async with Producer(
                cluster.bootstrap, linger_ms=0, batch_size=120, retry_backoff_ms=1
            ) as producer:
                await producer.send_and_wait("t", b"first")  # the partition knows the producer
                armed.append(True)
                values = [b"r%03d-%s" % (i, b"." * 40) for i in range(sum(sizes))]
                futures = []
                index = 0
                for size in sizes:
                    for _ in range(size):
                        futures.append(await producer.send("t", values[index], partition=0))
                        index += 1
                    await asyncio.sleep(0)
                metadata = await asyncio.wait_for(asyncio.gather(*futures), 30)
            assert cluster.all_values("t", 0) == [b"first", *values]
            assert [m.offset for m in metadata] == list(range(1, len(values) + 1))

    asyncio.run(main())
