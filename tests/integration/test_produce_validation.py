"""Every Produce validation rule answers with Kafka's error code, over a raw connection.

Real clients never send most of these mistakes, so the requests are built by hand with
odradek's protocol layer and kio, and the broker runs as a subprocess.
"""

from __future__ import annotations

import struct
import time
from collections.abc import Iterator

import pytest
from kio.schema.errors import ErrorCode

from odradek.protocol.build import build_request
from odradek.protocol.codec import encode_request
from odradek.records.batch import Record, build_batch
from odradek.records.header import set_base_offset
from tests.helpers.broker import BrokerProcess
from tests.helpers.raw import METADATA, PRODUCE, RawClient

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def client(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RawClient]:
    broker = BrokerProcess(
        tmp_path_factory.mktemp("validation") / "data",
        overrides={"message.max.bytes": "5000", "num.partitions": "2"},
    ).start()
    raw = RawClient(broker.port)
    # Auto-create the topics the tests produce to.
    raw.call(
        METADATA, 9, {"topics": [{"name": "v"}, {"name": "lat"}], "allow_auto_topic_creation": True}
    )
    try:
        yield raw
    finally:
        raw.sock.close()
        broker.stop()


def produce(
    client: RawClient,
    records: bytes | None,
    *,
    topic: str = "v",
    partition: int = 0,
    acks: int = 1,
    version: int = 9,
) -> object:
    response = client.call(
        PRODUCE,
        version,
        {
            "acks": acks,
            "timeout": 5000,
            "topic_data": [
                {"name": topic, "partition_data": [{"index": partition, "records": records}]}
            ],
        },
    )
    return response.responses[0].partition_responses[0]  # type: ignore[attr-defined]


def batch(n: int = 3, **kwargs: object) -> bytearray:
    return build_batch([Record(value=b"v%d" % i, key=b"k") for i in range(n)], **kwargs)


def test_a_good_batch_gets_offsets(client: RawClient) -> None:
    first = produce(client, bytes(batch(3)))
    second = produce(client, bytes(batch(2)))
    assert first.error_code == ErrorCode.none
    assert second.error_code == ErrorCode.none
    assert second.base_offset == first.base_offset + 3


def test_bad_crc_is_corrupt_message(client: RawClient) -> None:
    data = batch()
    data[-1] ^= 0xFF
    assert produce(client, bytes(data)).error_code == ErrorCode.corrupt_message


def test_wrong_magic_is_refused(client: RawClient) -> None:
    data = batch()
    data[16] = 1
    assert produce(client, bytes(data)).error_code in (
        ErrorCode.corrupt_message,
        ErrorCode.invalid_record,
        ErrorCode.unsupported_for_message_format,
    )


def test_batch_over_message_max_bytes(client: RawClient) -> None:
    big = build_batch([Record(value=b"x" * 6000)])
    assert produce(client, bytes(big)).error_code == ErrorCode.message_too_large


def test_record_count_must_match_offsets(client: RawClient) -> None:
    data = batch(3)
    struct.pack_into(">i", data, 57, 5)  # recordsCount says 5, lastOffsetDelta says 2
    from odradek.records.header import compute_crc

    struct.pack_into(">I", data, 17, compute_crc(data, 0, len(data)))
    assert produce(client, bytes(data)).error_code in (
        ErrorCode.invalid_record,
        ErrorCode.corrupt_message,
    )


def test_unknown_topic_and_partition(client: RawClient) -> None:
    assert (
        produce(client, bytes(batch()), topic="never-created").error_code
        == ErrorCode.unknown_topic_or_partition
    )
    assert (
        produce(client, bytes(batch()), partition=7).error_code
        == ErrorCode.unknown_topic_or_partition
    )


def test_invalid_acks(client: RawClient) -> None:
    assert produce(client, bytes(batch()), acks=2).error_code == ErrorCode.invalid_required_acks


def test_truncated_batch_is_corrupt(client: RawClient) -> None:
    data = bytes(batch())[:-5]
    assert produce(client, data).error_code in (ErrorCode.corrupt_message, ErrorCode.invalid_record)


def test_client_base_offset_is_rewritten(client: RawClient) -> None:
    data = batch(1)
    set_base_offset(data, 0, 123456)  # not covered by the CRC; the broker assigns offsets
    before = produce(client, bytes(batch(1)))
    after = produce(client, bytes(data))
    assert after.error_code == ErrorCode.none
    assert after.base_offset == before.base_offset + 1


def test_timestamp_too_far_in_the_future(client: RawClient) -> None:
    # A day is what this topic allows either side (message.timestamp.*.max.ms).
    client.call(
        44,
        0,
        {
            "resources": [
                {
                    "resource_type": 2,
                    "resource_name": "v",
                    "configs": [
                        {
                            "name": "message.timestamp.after.max.ms",
                            "config_operation": 0,
                            "value": "86400000",
                        }
                    ],
                }
            ],
            "validate_only": False,
        },
    )
    future = int(time.time() * 1000) + 10 * 86_400_000
    data = build_batch([Record(value=b"x", timestamp_ms=future)])
    assert produce(client, bytes(data)).error_code == ErrorCode.invalid_timestamp


def test_log_append_time_topic_stamps_the_broker_time(client: RawClient) -> None:
    client.call(
        44,
        0,
        {
            "resources": [
                {
                    "resource_type": 2,
                    "resource_name": "lat",
                    "configs": [
                        {
                            "name": "message.timestamp.type",
                            "config_operation": 0,
                            "value": "LogAppendTime",
                        }
                    ],
                }
            ],
            "validate_only": False,
        },
    )
    before = int(time.time() * 1000)
    response = produce(
        client, bytes(build_batch([Record(value=b"x", timestamp_ms=5)])), topic="lat"
    )
    assert response.error_code == ErrorCode.none
    stamped = response.log_append_time
    assert stamped is not None
    assert int(stamped.timestamp() * 1000) >= before - 1000


def test_acks_zero_gets_no_response_but_is_written(client: RawClient) -> None:
    before = produce(client, bytes(batch(1)), partition=1)
    client.correlation += 1
    request = build_request(
        PRODUCE,
        9,
        {
            "acks": 0,
            "timeout": 1000,
            "topic_data": [
                {"name": "v", "partition_data": [{"index": 1, "records": bytes(batch(4))}]}
            ],
        },
    )
    client.sock.sendall(encode_request(9, client.correlation, "raw", request))
    after = produce(client, bytes(batch(1)), partition=1)  # answered: so acks=0 sent nothing
    assert after.base_offset == before.base_offset + 1 + 4


def test_illegal_topic_name_is_invalid_topic(client: RawClient) -> None:
    for name in ("", "bad name", "a" * 250):
        assert (
            produce(client, bytes(batch()), topic=name).error_code
            == ErrorCode.invalid_topic_exception
        )


def test_acks_all_needs_min_insync_replicas(client: RawClient) -> None:
    client.call(METADATA, 9, {"topics": [{"name": "isr"}], "allow_auto_topic_creation": True})
    client.call(
        44,
        0,
        {
            "resources": [
                {
                    "resource_type": 2,
                    "resource_name": "isr",
                    "configs": [
                        {"name": "min.insync.replicas", "config_operation": 0, "value": "2"}
                    ],
                }
            ],
            "validate_only": False,
        },
    )
    # One broker: the ISR is the leader alone, fewer than the two acks=all now needs.
    assert (
        produce(client, bytes(batch()), topic="isr", acks=-1).error_code
        == ErrorCode.not_enough_replicas
    )
    assert produce(client, bytes(batch()), topic="isr", acks=1).error_code == ErrorCode.none
