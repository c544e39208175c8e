"""The lenient reader agrees with kio on everything kio reads, and skips unknown tags."""

from __future__ import annotations

import datetime
import io

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kio.schema.errors import ErrorCode
from kio.serial import entity_writer
from kio.static.primitive import Records

from odradek.protocol.build import build
from odradek.protocol.lenient import read_entity
from odradek.protocol.primitives import uvarint
from odradek.protocol.schemas import request_type as load_request_schema
from odradek.protocol.schemas import response_type as load_response_schema
from odradek.protocol.versions import API_VERSIONS, FETCH, METADATA, SUPPORTED

st.register_type_strategy(Records, st.binary(max_size=16))

TYPES = [
    loader(api_key, version)
    for api_key, (low, high) in SUPPORTED.items()
    for version in range(low, high + 1)
    for loader in (load_request_schema, load_response_schema)
]


@pytest.mark.parametrize("entity_type", TYPES, ids=lambda t: f"{t.__module__}")
def test_reads_what_kio_writes(entity_type: type) -> None:
    @settings(max_examples=4, deadline=None, database=None, suppress_health_check=list(HealthCheck))
    @given(entity=st.from_type(entity_type))
    def check(entity: object) -> None:
        buffer = io.BytesIO()
        entity_writer(entity_type)(buffer, entity)
        data = b"pre" + buffer.getvalue()
        assert read_entity(entity_type, data, 3) == (entity, len(data))

    check()


def test_unknown_tags_are_skipped_and_known_ones_read() -> None:
    response_type = load_response_schema(API_VERSIONS, 3)
    module = __import__(response_type.__module__, fromlist=["x"])
    entity = response_type(
        error_code=ErrorCode.none,
        api_keys=(module.ApiVersion(api_key=18, min_version=0, max_version=3),),
        throttle_time=datetime.timedelta(0),
        finalized_features_epoch=7,
    )
    buffer = io.BytesIO()
    entity_writer(response_type)(buffer, entity)
    data = buffer.getvalue()
    # kio wrote one tagged field (tag 1 = finalized_features_epoch, 8 bytes) at the end:
    assert data[-11:-8] == b"\x01\x01\x08"
    # Add an unknown tag 9 with 3 bytes of payload in front of it.
    patched = data[:-11] + b"\x02" + b"\x01\x08" + data[-8:] + b"\x09\x03abc"
    decoded, end = read_entity(response_type, patched, 0)
    assert decoded == entity and end == len(patched)


def test_nested_unknown_tags_in_a_request() -> None:
    request_type = load_request_schema(METADATA, 9)
    # One topic "t" whose struct carries an unknown tag 5 (2 bytes), then the flags.
    topic = uvarint(2) + b"t" + b"\x01" + b"\x05\x02zz"
    data = uvarint(2) + topic + b"\x01\x00\x00" + b"\x00"
    decoded, end = read_entity(request_type, data, 0)
    assert [t.name for t in decoded.topics] == ["t"]
    assert decoded.allow_auto_topic_creation is True and end == len(data)


def test_truncated_tag_is_an_error() -> None:
    request_type = load_request_schema(FETCH, 12)
    with pytest.raises(Exception):  # noqa: B017 - kio's or our own decode error
        read_entity(request_type, b"\x00" * 20 + b"\x01\x07\x50", 0)



def test_negative_timestamp_reads_as_the_plain_number() -> None:
    # DescribeTransactions of an id with no open transaction: Kafka writes start time -1.

    response_type = load_response_schema(65, 0)
    state = {
        "error_code": ErrorCode.none,
        "transactional_id": "t",
        "transaction_state": "CompleteCommit",
        "transaction_timeout": 60000,
        "producer_id": 7,
        "producer_epoch": 0,
        "topics": [],
    }
    for start, expected in (
        (-1, -1),
        (1_700_000_000_000, datetime.datetime(2023, 11, 14, 22, 13, 20, tzinfo=datetime.UTC)),
    ):
        entity = build(
            response_type,
            {
                "throttle_time": 0,
                "transaction_states": [{**state, "transaction_start_time": start}],
            },
        )
        buffer = io.BytesIO()
        entity_writer(response_type)(buffer, entity)
        decoded, _end = read_entity(response_type, buffer.getvalue(), 0)
        assert decoded.transaction_states[0].transaction_start_time == expected
