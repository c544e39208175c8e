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
from tests.helpers.raw import LIST_OFFSETS, METADATA, PRODUCE, RawClient

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


# -- records that do not match their header (the CRC is valid: only a walk sees it) ----


def end_offset(client: RawClient, topic: str = "v", partition: int = 0) -> int:
    response = client.call(
        LIST_OFFSETS,
        1,
        {
            "replica_id": -1,
            "topics": [
                {"name": topic, "partitions": [{"partition_index": partition, "timestamp": -1}]}
            ],
        },
    )
    answer = response.topics[0].partitions[0]  # type: ignore[attr-defined]
    assert answer.error_code == ErrorCode.none
    return int(answer.offset)


def restamp(data: bytearray) -> bytes:
    from odradek.records.header import compute_crc

    struct.pack_into(">I", data, 17, compute_crc(data, 0, len(data)))
    return bytes(data)


def with_count(data: bytearray, count: int) -> bytes:
    """Make recordsCount and lastOffsetDelta both say ``count``, so only the records
    themselves disagree with the header."""
    struct.pack_into(">i", data, 23, count - 1)
    struct.pack_into(">i", data, 57, count)
    return restamp(data)


def _refused_and_nothing_stored(client: RawClient, records: bytes, code: int) -> None:
    before = end_offset(client, partition=1)
    assert produce(client, records, partition=1).error_code == code
    assert end_offset(client, partition=1) == before
    # The partition still works and the next good batch follows directly.
    assert produce(client, bytes(batch(1)), partition=1).base_offset == before


def test_count_one_but_three_records_is_invalid_record(client: RawClient) -> None:
    _refused_and_nothing_stored(client, with_count(batch(3), 1), ErrorCode.invalid_record)


def test_count_a_thousand_but_one_record_is_invalid_record(client: RawClient) -> None:
    _refused_and_nothing_stored(client, with_count(batch(1), 1000), ErrorCode.invalid_record)


def test_random_bytes_behind_a_valid_crc_are_invalid_record(client: RawClient) -> None:
    import os

    data = batch(2)
    del data[61:]
    data += os.urandom(40)
    struct.pack_into(">i", data, 8, len(data) - 12)
    _refused_and_nothing_stored(client, restamp(data), ErrorCode.invalid_record)


def test_offset_deltas_out_of_order_are_invalid_record(client: RawClient) -> None:
    from odradek.records.batch import DecodedRecord, _encode_records

    now = int(time.time() * 1000)
    records = [DecodedRecord(offset=0, timestamp_ms=now, key=b"k", value=b"v")] * 3
    data = batch(3)
    del data[61:]
    data += _encode_records(records, now, now, 0)
    struct.pack_into(">i", data, 8, len(data) - 12)
    struct.pack_into(">q", data, 27, now)
    struct.pack_into(">q", data, 35, now)
    _refused_and_nothing_stored(client, restamp(data), ErrorCode.invalid_record)


def test_a_record_timestamp_outside_the_header_range_is_checked(client: RawClient) -> None:
    # The header's first and max timestamps are fine; the middle record is 10 days old.
    # Kafka checks every record against message.timestamp.before.max.ms.
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
                            "name": "message.timestamp.before.max.ms",
                            "config_operation": 0,
                            "value": "86400000",
                        }
                    ],
                }
            ],
            "validate_only": False,
        },
    )
    now = int(time.time() * 1000)
    old = now - 10 * 86_400_000
    records = [
        Record(value=b"a", timestamp_ms=now),
        Record(value=b"b", timestamp_ms=old),
        Record(value=b"c", timestamp_ms=now),
    ]
    _refused_and_nothing_stored(client, bytes(build_batch(records)), ErrorCode.invalid_timestamp)


def test_a_lying_max_timestamp_is_corrected_as_kafka_does(client: RawClient) -> None:
    now = int(time.time() * 1000)
    data = build_batch(
        [Record(value=b"a", timestamp_ms=now), Record(value=b"b", timestamp_ms=now + 5)]
    )
    struct.pack_into(">q", data, 35, now - 1000)  # maxTimestamp below the records'
    response = produce(client, restamp(data), partition=1)
    assert response.error_code == ErrorCode.none
    fetched = client.call(
        1,
        4,
        {
            "replica_id": -1,
            "max_wait": 0,
            "min_bytes": 0,
            "max_bytes": 1 << 20,
            "isolation_level": 0,
            "topics": [
                {
                    "topic": "v",
                    "partitions": [
                        {
                            "partition": 1,
                            "fetch_offset": response.base_offset,
                            "partition_max_bytes": 1 << 20,
                        }
                    ],
                }
            ],
        },
    )
    records = fetched.responses[0].partitions[0].records  # type: ignore[attr-defined]
    from odradek.records.header import parse_header

    assert parse_header(records).max_timestamp == now + 5
