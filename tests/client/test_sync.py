"""Blocking wrappers, driven from plain threads against a fake cluster on its own loop."""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from collections.abc import Iterator

import pytest

from odradek.client.admin import ConfigResource, NewTopic
from odradek.client.errors import ClientError, KafkaError, KafkaTimeoutError
from odradek.client.sync import SyncAdmin, SyncConsumer, SyncProducer
from odradek.records.batch import Record
from tests.client.fake_broker import FakeCluster

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
def cluster() -> Iterator[FakeCluster]:
    """A fake cluster served by an event loop in a background thread."""
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    fake = FakeCluster(brokers=2)
    asyncio.run_coroutine_threadsafe(fake.__aenter__(), loop).result(10)
    try:
        yield fake
    finally:
        asyncio.run_coroutine_threadsafe(fake.__aexit__(None, None, None), loop).result(10)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
        loop.close()


def test_sync_admin_producer_consumer_round_trip(cluster: FakeCluster) -> None:
    with SyncAdmin(cluster.bootstrap) as admin:
        admin.create_topics([NewTopic("t", 2)])
        with pytest.raises(KafkaError) as info:
            admin.create_topics([NewTopic("t", 2)])
        assert info.value.name == "TOPIC_ALREADY_EXISTS"
        assert sorted(admin.list_topics().topics["t"].partitions) == [0, 1]
        admin.incremental_alter_configs({ConfigResource("topic", "t"): [("a.b", "set", "1")]})
        assert (
            admin.describe_configs([ConfigResource("topic", "t")])[ConfigResource("topic", "t")][
                "a.b"
            ].value
            == "1"
        )
        assert admin.describe_cluster().controller_id == 0

    with SyncProducer(cluster.bootstrap, linger_ms=1) as producer:
        futures = [producer.send("t", b"v%d" % i, partition=i % 2) for i in range(10)]
        assert all(isinstance(f, concurrent.futures.Future) for f in futures)
        producer.flush()
        offsets = [f.result(5).offset for f in futures]
        assert offsets == [i // 2 for i in range(10)]
        md = producer.send_batch("t", 0, [Record(value=b"batch")])
        assert md.offset == 5
        assert producer.send_and_wait("t", b"last", partition=1).offset == 5

    with SyncConsumer(cluster.bootstrap, auto_offset_reset="earliest") as consumer:
        consumer.assign([("t", 0), ("t", 1)])
        seen: list[bytes | None] = []
        for _ in range(20):
            seen += [r.value for r in consumer.poll(timeout_ms=500)]
            if len(seen) >= 12:
                break
        assert sorted(v for v in seen if v) == sorted(
            [b"v%d" % i for i in range(10)] + [b"batch", b"last"]
        )
        assert consumer.position("t", 0) == 6
        consumer.seek_to_beginning(("t", 0))
        assert consumer.position("t", 0) == 0
        fetched = consumer.fetch_raw("t", 1, 0, 1 << 20)
        assert fetched.high_watermark == 6

    with pytest.raises(RuntimeError, match="stopped"):
        consumer.poll(timeout_ms=10)


def test_sync_errors_surface_in_the_caller_thread(cluster: FakeCluster) -> None:
    with pytest.raises(ClientError):
        SyncProducer("127.0.0.1:1", request_timeout_ms=500, max_block_ms=500)
    with SyncConsumer(cluster.bootstrap) as consumer, pytest.raises(ValueError, match="assigned"):
        consumer.seek("nope", 0, 1)


def test_sync_send_future_reports_failures(cluster: FakeCluster) -> None:
    cluster.create_topic("t2")[0].leader = -1  # never a leader: the record expires
    with SyncProducer(
        cluster.bootstrap,
        max_request_size=100,
        linger_ms=0,
        request_timeout_ms=100,
        delivery_timeout_ms=300,
    ) as producer:
        with pytest.raises(KafkaError, match="MESSAGE_TOO_LARGE"):
            producer.send("t2", b"x" * 500)
        future = producer.send("t2", b"x", partition=0)
        with pytest.raises(KafkaTimeoutError, match="expiring 1 record"):
            future.result(5)
