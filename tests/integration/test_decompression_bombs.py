"""Decompression bombs over the wire: refused quickly, broker memory bounded, others served.

Each bomb is a small batch with a valid CRC whose one record inflates far past the
broker's bound (64 x max.message.bytes, here the default 1 MiB: 64 MiB). Before the
bound, such a batch was stored as it was, and a compacted or recompressing topic
inflated it whole in the broker.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import pytest
from kio.schema.errors import ErrorCode

from odradek.records.batch import Record, build_batch
from odradek.records.compression import Compression
from tests.helpers.bombs import bomb_batch, lying_snappy_batch
from tests.helpers.broker import BrokerProcess
from tests.helpers.raw import LIST_OFFSETS, METADATA, PRODUCE, RawClient

pytestmark = pytest.mark.integration

TOPICS = ("plain", "compacted", "recompressed")
RSS_BOUND = 200 << 20


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    broker = BrokerProcess(tmp_path_factory.mktemp("bombs") / "data").start()
    raw = RawClient(broker.port)
    raw.call(
        METADATA, 9, {"topics": [{"name": t} for t in TOPICS], "allow_auto_topic_creation": True}
    )
    for topic, name, value in (
        ("compacted", "cleanup.policy", "compact"),
        ("recompressed", "compression.type", "gzip"),
    ):
        raw.call(
            44,
            0,
            {
                "resources": [
                    {
                        "resource_type": 2,
                        "resource_name": topic,
                        "configs": [{"name": name, "config_operation": 0, "value": value}],
                    }
                ],
                "validate_only": False,
            },
        )
    raw.sock.close()
    try:
        yield broker
    finally:
        broker.stop()


def produce(client: RawClient, records: bytes, topic: str) -> object:
    response = client.call(
        PRODUCE,
        9,
        {
            "acks": 1,
            "timeout": 5000,
            "topic_data": [{"name": topic, "partition_data": [{"index": 0, "records": records}]}],
        },
    )
    return response.responses[0].partition_responses[0]  # type: ignore[attr-defined]


def end_offset(client: RawClient, topic: str) -> int:
    response = client.call(
        LIST_OFFSETS,
        1,
        {
            "replica_id": -1,
            "topics": [{"name": topic, "partitions": [{"partition_index": 0, "timestamp": -1}]}],
        },
    )
    return int(response.topics[0].partitions[0].offset)  # type: ignore[attr-defined]


def memory_kib(pid: int, field: str) -> int:
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise AssertionError(f"no {field} for {pid}")


BOMBS = {
    "zstd": (Compression.ZSTD, 1 << 30),  # 32 KiB on the wire
    "gzip": (Compression.GZIP, 320 << 20),  # about 320 KiB
    "lz4": (Compression.LZ4, 192 << 20),  # about 770 KiB
}


@pytest.fixture(scope="module")
def bombs() -> dict[str, bytes]:
    return {name: bytes(bomb_batch(codec, size)) for name, (codec, size) in BOMBS.items()}


def test_bombs_are_refused_quickly_in_bounded_memory_while_others_are_served(
    broker: BrokerProcess, bombs: dict[str, bytes]
) -> None:
    assert broker.proc is not None
    pid = broker.proc.pid
    attacker = RawClient(broker.port)
    bystander = RawClient(broker.port)
    good = bytes(build_batch([Record(value=b"fine", key=b"k")]))
    produce(bystander, good, "plain")  # warm up both paths before measuring
    baseline_kib = memory_kib(pid, "VmRSS")
    before = {topic: end_offset(bystander, topic) for topic in TOPICS}

    latencies: list[float] = []
    failures: list[object] = []
    stop = threading.Event()

    def serve_bystander() -> None:
        while not stop.is_set():
            started = time.monotonic()
            answer = produce(bystander, good, "plain")
            latencies.append(time.monotonic() - started)
            if answer.error_code != ErrorCode.none:  # type: ignore[attr-defined]
                failures.append(answer)
            time.sleep(0.01)

    thread = threading.Thread(target=serve_bystander)
    thread.start()
    try:
        for topic in TOPICS:
            for name, records in bombs.items():
                started = time.monotonic()
                answer = produce(attacker, records, topic)
                elapsed = time.monotonic() - started
                assert answer.error_code == ErrorCode.message_too_large, (topic, name)  # type: ignore[attr-defined]
                assert elapsed < 5, f"{name} bomb on {topic} took {elapsed:.1f}s"
            lying = produce(attacker, bytes(lying_snappy_batch()), topic)
            assert lying.error_code == ErrorCode.corrupt_message  # type: ignore[attr-defined]
    finally:
        stop.set()
        thread.join(30)
    peak_kib = memory_kib(pid, "VmHWM")
    assert (peak_kib - baseline_kib) * 1024 < RSS_BOUND, (
        f"broker RSS peaked {(peak_kib - baseline_kib) >> 10} MiB above its baseline"
    )
    assert not failures
    assert latencies and max(latencies) < 5, f"bystander waited up to {max(latencies):.1f}s"
    # Nothing of the bombs was stored: only the bystander's batches moved "plain".
    assert end_offset(bystander, "compacted") == before["compacted"]
    assert end_offset(bystander, "recompressed") == before["recompressed"]
    assert end_offset(bystander, "plain") == before["plain"] + len(latencies)
    attacker.sock.close()
    bystander.sock.close()


@pytest.mark.parametrize("topic", TOPICS)
@pytest.mark.parametrize("codec", list(Compression)[1:])
def test_a_large_but_legitimate_batch_is_accepted(
    broker: BrokerProcess, topic: str, codec: Compression
) -> None:
    # 8 MiB of compressible records: well past max.message.bytes uncompressed, as a
    # Java producer with a large batch.size can send, and far below the bound.
    records = [Record(value=bytes(64 * 1024), key=b"k%d" % i) for i in range(128)]
    client = RawClient(broker.port)
    answer = produce(client, bytes(build_batch(records, compression=codec)), topic)
    assert answer.error_code == ErrorCode.none  # type: ignore[attr-defined]
    client.sock.close()
