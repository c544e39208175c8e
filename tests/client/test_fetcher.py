"""Consumer (assign-based fetcher): positions, resets, decoding, read_committed filtering."""

from __future__ import annotations

import asyncio
import dataclasses
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kio.schema.errors import ErrorCode

from odradek.client.errors import ClientError, KafkaError
from odradek.client.fetcher import (
    READ_COMMITTED,
    READ_UNCOMMITTED,
    AbortedTransaction,
    Consumer,
    ConsumerRecord,
    filter_batches,
)
from odradek.client.versions import FETCH
from odradek.records.batch import Record, build_batch, decode_batch
from odradek.records.compression import Compression
from odradek.records.control import ControlType, build_end_txn_marker
from odradek.records.header import iter_headers
from tests.client.fake_broker import FakeCluster, FakePartition, wait_until

pytestmark = pytest.mark.timeout(60)


def txn_batch(pid: int, values: list[bytes]) -> bytearray:
    return build_batch(
        [Record(value=v) for v in values], producer_id=pid, producer_epoch=0, transactional=True
    )


def marker(pid: int, kind: ControlType) -> bytearray:
    return build_end_txn_marker(kind, producer_id=pid, producer_epoch=0, coordinator_epoch=0)


async def test_poll_from_earliest_returns_every_record_in_order() -> None:
    async with FakeCluster() as cluster:
        cluster.create_topic("t", 2)
        cluster.append_records("t", 0, [b"a", b"b"])
        cluster.append_records("t", 0, [b"c"], compression=Compression.LZ4)
        cluster.append_records("t", 1, [b"x"])
        async with Consumer(cluster.bootstrap, auto_offset_reset="earliest") as consumer:
            consumer.assign([("t", 0), ("t", 1)])
            records = await consumer.poll(timeout_ms=2000)
            by_partition = {
                p: [(r.offset, r.value) for r in records if r.partition == p] for p in (0, 1)
            }
            assert by_partition == {0: [(0, b"a"), (1, b"b"), (2, b"c")], 1: [(0, b"x")]}
            assert consumer.position("t", 0) == 3 and consumer.position("t", 1) == 1
            assert consumer.highwater("t", 0) == 3
            assert records[0].timestamp_type == 0 and records[0].topic == "t"
            # Built through the slot descriptors (the fast path): the same frozen objects.
            first = records[0]
            assert first == ConsumerRecord(
                "t", 0, 0, first.timestamp_ms, 0, None, b"a", [], first.leader_epoch
            )
            with pytest.raises(dataclasses.FrozenInstanceError):
                first.offset = 7  # type: ignore[misc]
            assert await consumer.poll(timeout_ms=50) == []


async def test_latest_reset_skips_existing_records() -> None:
    async with FakeCluster() as cluster:
        cluster.create_topic("t")
        cluster.append_records("t", 0, [b"old"])
        async with Consumer(cluster.bootstrap, fetch_max_wait_ms=20) as consumer:
            consumer.assign([("t", 0)])
            assert await consumer.poll(timeout_ms=50) == []
            assert consumer.position("t", 0) == 1
            cluster.append_records("t", 0, [b"new"])
            assert [r.value for r in await consumer.poll(timeout_ms=1000)] == [b"new"]


async def test_seek_into_a_compressed_batch_drops_the_records_before_it() -> None:
    async with FakeCluster() as cluster:
        cluster.create_topic("t")
        cluster.append_records("t", 0, [b"%d" % i for i in range(10)], compression=Compression.GZIP)
        async with Consumer(cluster.bootstrap) as consumer:
            consumer.assign([("t", 0)])
            consumer.seek("t", 0, 7)
            records = await consumer.poll(timeout_ms=1000)
            assert [(r.offset, r.value) for r in records] == [(7, b"7"), (8, b"8"), (9, b"9")]
            with pytest.raises(ValueError):
                consumer.seek("t", 0, -1)
            with pytest.raises(ValueError, match="not assigned"):
                consumer.seek("t", 5, 0)


async def test_max_records_returns_the_rest_from_the_buffer() -> None:
    async with FakeCluster() as cluster:
        cluster.create_topic("t")
        cluster.append_records("t", 0, [b"%d" % i for i in range(10)])
        async with Consumer(cluster.bootstrap, auto_offset_reset="earliest") as consumer:
            consumer.assign([("t", 0)])
            first = await consumer.poll(timeout_ms=1000, max_records=4)
            fetches = len(cluster.requests(FETCH))
            assert consumer.position("t", 0) == 4
            second = await consumer.poll(timeout_ms=1000, max_records=100)
            assert len(cluster.requests(FETCH)) == fetches  # served from the buffer
            assert [r.offset for r in first + second] == list(range(10))


async def test_out_of_range_position_is_reset_or_raised() -> None:
    async with FakeCluster() as cluster:
        cluster.create_topic("t")
        cluster.append_records("t", 0, [b"a", b"b"])
        async with Consumer(cluster.bootstrap, auto_offset_reset="earliest") as consumer:
            consumer.assign([("t", 0)])
            consumer.seek("t", 0, 50)
            records = await consumer.poll(timeout_ms=2000)
            assert [r.value for r in records] == [b"a", b"b"]
        async with Consumer(cluster.bootstrap, auto_offset_reset="none") as consumer:
            consumer.assign([("t", 0)])
            with pytest.raises(KafkaError, match="auto_offset_reset is 'none'") as info:
                await consumer.poll(timeout_ms=500)
            assert info.value.name == "OFFSET_OUT_OF_RANGE"
            consumer.seek("t", 0, 50)
            with pytest.raises(KafkaError, match="offset 50 is out of range"):
                await consumer.poll(timeout_ms=500)


async def test_consumer_follows_a_leader_change() -> None:
    async with FakeCluster(brokers=2) as cluster:
        parts = cluster.create_topic("t", 1, leaders=[0])
        cluster.append_records("t", 0, [b"a"])
        async with Consumer(
            cluster.bootstrap, auto_offset_reset="earliest", retry_backoff_ms=10
        ) as consumer:
            consumer.assign([("t", 0)])
            assert [r.value for r in await consumer.poll(timeout_ms=1000)] == [b"a"]
            parts[0].leader = 1
            cluster.append_records("t", 0, [b"b"])
            assert [r.value for r in await consumer.poll(timeout_ms=3000)] == [b"b"]
            assert any(k == FETCH for k, _, _ in cluster.brokers[1].requests)


async def test_pause_and_resume() -> None:
    async with FakeCluster() as cluster:
        cluster.create_topic("t", 2)
        cluster.append_records("t", 0, [b"zero"])
        cluster.append_records("t", 1, [b"one"])
        async with Consumer(
            cluster.bootstrap, auto_offset_reset="earliest", fetch_max_wait_ms=10
        ) as consumer:
            consumer.assign([("t", 0), ("t", 1)])
            consumer.pause(("t", 1))
            assert consumer.paused() == {("t", 1)}
            assert [r.value for r in await consumer.poll(timeout_ms=1000)] == [b"zero"]
            assert await consumer.poll(timeout_ms=50) == []
            consumer.resume(("t", 1))
            assert [r.value for r in await consumer.poll(timeout_ms=1000)] == [b"one"]


async def test_poll_timeout_is_honoured_when_nothing_arrives() -> None:
    async with FakeCluster() as cluster:
        cluster.create_topic("t")
        async with Consumer(cluster.bootstrap, fetch_max_wait_ms=50) as consumer:
            consumer.assign([("t", 0)])
            started = time.monotonic()
            assert await consumer.poll(timeout_ms=300) == []
            assert 0.25 <= time.monotonic() - started < 3


async def test_read_committed_skips_aborted_transactions_and_markers() -> None:
    async with FakeCluster() as cluster:
        part: FakePartition = cluster.create_topic("t")[0]
        first_aborted = part.append(txn_batch(7, [b"aborted-1"]))
        part.append(txn_batch(8, [b"committed-1"]))
        part.append(build_batch([Record(value=b"plain")]))
        part.append(txn_batch(7, [b"aborted-2"]))
        part.append(marker(7, ControlType.ABORT))
        part.append(marker(8, ControlType.COMMIT))
        second = part.append(txn_batch(7, [b"committed-2"]))  # same producer, next transaction
        part.append(marker(7, ControlType.COMMIT))
        part.aborted = [(7, first_aborted)]
        assert second > first_aborted
        async with Consumer(
            cluster.bootstrap, isolation_level="read_committed", auto_offset_reset="earliest"
        ) as consumer:
            consumer.assign([("t", 0)])
            values = [r.value for r in await consumer.poll(timeout_ms=1000)]
            assert values == [b"committed-1", b"plain", b"committed-2"]
            assert consumer.position("t", 0) == part.next_offset
        async with Consumer(cluster.bootstrap, auto_offset_reset="earliest") as consumer:
            consumer.assign([("t", 0)])
            values = [r.value for r in await consumer.poll(timeout_ms=1000)]
            assert values == [b"aborted-1", b"committed-1", b"plain", b"aborted-2", b"committed-2"]


async def test_corrupt_batch_is_reported_as_corrupt_message() -> None:
    async with FakeCluster() as cluster:
        part = cluster.create_topic("t")[0]
        cluster.append_records("t", 0, [b"payload"])
        base, data = part.batches[0]
        broken = bytearray(data)
        broken[-1] ^= 0xFF
        part.batches[0] = (base, bytes(broken))
        async with Consumer(cluster.bootstrap, auto_offset_reset="earliest") as consumer:
            consumer.assign([("t", 0)])
            with pytest.raises(KafkaError) as info:
                await consumer.poll(timeout_ms=1000)
            assert info.value.name == "CORRUPT_MESSAGE" and "CRC" in str(info.value)


async def test_fetch_raw_returns_bytes_and_watermarks() -> None:
    async with FakeCluster() as cluster:
        part = cluster.create_topic("t")[0]
        for i in range(5):
            cluster.append_records("t", 0, [b"%d" % i * 100])
        part.log_start_offset = 1
        async with Consumer(cluster.bootstrap) as consumer:
            fetched = await consumer.fetch_raw("t", 0, 2, max_bytes=250)
            assert (fetched.error_code, fetched.high_watermark, fetched.log_start_offset) == (
                0,
                5,
                1,
            )
            assert decode_batch(fetched.records).records[0].value == b"2" * 100
            assert fetched.aborted_transactions is None
            out_of_range = await consumer.fetch_raw("t", 0, 99, max_bytes=250)
            assert out_of_range.error_code == ErrorCode.offset_out_of_range
            with pytest.raises(KafkaError, match="UNKNOWN_TOPIC_OR_PARTITION"):
                await consumer.fetch_raw("t", 3, 0, max_bytes=10)


async def test_fetch_raw_fetches_again_when_the_answer_omits_the_partition() -> None:
    """Tansu 0.6 answers a Fetch with max_wait 0 with no partitions at all: fetch_raw asks
    again with a wait instead of failing; a broker that never answers still fails."""
    async with FakeCluster() as cluster:
        cluster.create_topic("t")
        cluster.append_records("t", 0, [b"a", b"b"])
        empty = {"error_code": 0, "session_id": 0, "responses": []}
        hook = cluster.intercept(
            lambda b, k, v, r: empty if k == FETCH and r.max_wait.total_seconds() == 0 else None
        )
        async with Consumer(cluster.bootstrap, retry_backoff_ms=20) as consumer:
            fetched = await consumer.fetch_raw("t", 0, 0, max_bytes=1024)
            assert fetched.error_code == 0 and fetched.high_watermark == 2
            waits = [r.max_wait.total_seconds() * 1000 for r in cluster.requests(FETCH)]
            assert waits[0] == 0 and waits[-1] == 20
            cluster.hooks.remove(hook)
            cluster.intercept(lambda b, k, v, r: empty if k == FETCH else None)
            with pytest.raises(ClientError, match="omitted t-0"):
                await consumer.fetch_raw("t", 0, 0, max_bytes=1024)


def last_fetch_offset(cluster: FakeCluster) -> int:
    return int(cluster.requests(FETCH)[-1].topics[0].partitions[0].fetch_offset)


async def test_poll_fetches_ahead_while_the_caller_works() -> None:
    """Handing records out sends the next Fetch at once, from the new position; a seek
    meanwhile wins over the early answer; close() with a Fetch in flight is quiet."""
    async with FakeCluster() as cluster:
        cluster.create_topic("t")
        cluster.append_records("t", 0, [b"a", b"b"])
        async with Consumer(cluster.bootstrap, auto_offset_reset="earliest") as consumer:
            consumer.assign([("t", 0)])
            assert [r.value for r in await consumer.poll(2000)] == [b"a", b"b"]
            cluster.append_records("t", 0, [b"c"])
            # No poll running: the Fetch from offset 2 went out when a and b were handed out.
            await wait_until(lambda: last_fetch_offset(cluster) == 2)
            sent = len(cluster.requests(FETCH))
            await asyncio.sleep(0.05)  # the early answer (holding c) is in
            assert [r.value for r in await consumer.poll(2000)] == [b"c"]
            assert len(cluster.requests(FETCH)) in (sent, sent + 1)  # c came from the early one
            consumer.seek("t", 0, 0)
            records = await consumer.poll(2000)
            assert [r.value for r in records][:1] == [b"a"]  # not the early answer for offset 3
        assert consumer._prefetch is None


async def test_seek_to_beginning_and_end_and_argument_checks() -> None:
    async with FakeCluster() as cluster:
        part = cluster.create_topic("t")[0]
        cluster.append_records("t", 0, [b"a", b"b", b"c"])
        part.log_start_offset = 1
        async with Consumer(cluster.bootstrap) as consumer:
            consumer.assign([("t", 0)])
            with pytest.raises(ClientError, match="no position yet"):
                consumer.position("t", 0)
            await consumer.seek_to_beginning()
            assert consumer.position("t", 0) == 1
            await consumer.seek_to_end(("t", 0))
            assert consumer.position("t", 0) == 3
            with pytest.raises(ValueError):
                consumer.assign([("t", -1)])
    with pytest.raises(ValueError):
        Consumer("h:1", isolation_level="dirty")
    with pytest.raises(ValueError):
        Consumer("h:1", auto_offset_reset="middle")


# -- read_committed against a model ---------------------------------------------------------

OPS = st.lists(
    st.tuples(st.sampled_from(["data", "commit", "abort", "plain"]), st.integers(1, 3)),
    max_size=30,
)


@settings(max_examples=150, deadline=None)
@given(OPS)
def test_filter_batches_matches_a_transaction_model(ops: list[tuple[str, int]]) -> None:
    """Build a log the way a broker would and check read_committed returns committed data only."""
    log = bytearray()
    offset = 0
    open_txn: dict[int, list[int]] = {}  # producer -> offsets written in its open transaction
    txn_start: dict[int, int] = {}
    aborted: list[AbortedTransaction] = []
    committed_offsets: list[int] = []
    all_data_offsets: list[int] = []
    for op, pid in ops:
        if op == "plain":
            log += build_batch([Record(value=b"p")], base_offset=offset)
            committed_offsets.append(offset)
            all_data_offsets.append(offset)
        elif op == "data":
            log += build_batch(
                [Record(value=b"t")],
                base_offset=offset,
                producer_id=pid,
                producer_epoch=0,
                transactional=True,
            )
            open_txn.setdefault(pid, []).append(offset)
            txn_start.setdefault(pid, offset)
            all_data_offsets.append(offset)
        else:
            if pid not in open_txn:
                continue  # no transaction to end: the coordinator writes no marker
            kind = ControlType.COMMIT if op == "commit" else ControlType.ABORT
            log += build_end_txn_marker(
                kind, producer_id=pid, producer_epoch=0, coordinator_epoch=0, base_offset=offset
            )
            if kind is ControlType.COMMIT:
                committed_offsets.extend(open_txn[pid])
            else:
                aborted.append(AbortedTransaction(pid, txn_start[pid]))
            del open_txn[pid], txn_start[pid]
        offset += 1
    # A read_committed fetch stops at the LSO: the first offset of a still-open transaction.
    lso = min(txn_start.values(), default=offset)
    visible = bytearray()
    for pos, header in iter_headers(log):
        if header.base_offset < lso:
            visible += log[pos : pos + header.size]
    kept, _ = filter_batches(visible, isolation_level=READ_COMMITTED, aborted_transactions=aborted)
    got = [h.base_offset for _, h in kept]
    assert got == sorted(o for o in committed_offsets if o < lso)
    everything, _ = filter_batches(log, isolation_level=READ_UNCOMMITTED)
    assert [h.base_offset for _, h in everything] == all_data_offsets
