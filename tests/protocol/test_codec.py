"""Codec: round trips for every advertised (API, version), headers, errors, ApiVersions fallback."""

from __future__ import annotations

import datetime
import struct

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kio.schema.errors import ErrorCode
from kio.static.primitive import Records, i64Timedelta

from odradek.protocol.build import build_request, build_response
from odradek.protocol.codec import (
    DecodeError,
    RequestHeader,
    api_versions_unsupported_response,
    decode_request,
    decode_response,
    encode_request,
    encode_response,
)
from odradek.protocol.error_responses import error_response
from odradek.protocol.headers import parse_request_header
from odradek.protocol.schemas import request_type as load_request_schema
from odradek.protocol.schemas import response_type as load_response_schema
from odradek.protocol.versions import (
    API_VERSIONS,
    FETCH,
    HEARTBEAT,
    LIST_OFFSETS,
    METADATA,
    OFFSET_FETCH,
    PRODUCE,
    SUPPORTED,
    build_api_versions_response,
    is_flexible,
)

st.register_type_strategy(Records, st.binary(max_size=16))
# Python's timedelta stops near 2**63 microseconds, so int64 millisecond durations near
# their own maximum cannot be represented at all (see the refusal test below); round
# trips are checked over the durations a timedelta can hold.
st.register_type_strategy(
    i64Timedelta,
    st.integers(-(2**45), 2**45).map(lambda ms: datetime.timedelta(milliseconds=ms)),
)

PAIRS = [
    (key, version) for key, (low, high) in SUPPORTED.items() for version in range(low, high + 1)
]
QUICK = settings(
    max_examples=8, deadline=None, database=None, suppress_health_check=list(HealthCheck)
)


@pytest.mark.parametrize(("api_key", "version"), PAIRS)
def test_every_supported_request_round_trips(api_key: int, version: int) -> None:
    request_type = load_request_schema(api_key, version)

    @QUICK
    @given(
        request=st.from_type(request_type),
        correlation_id=st.integers(-(2**31), 2**31 - 1),
        client_id=st.one_of(st.none(), st.text(max_size=20)),
    )
    def check(request: object, correlation_id: int, client_id: str | None) -> None:
        framed = encode_request(version, correlation_id, client_id, request)
        assert struct.unpack_from(">i", framed)[0] == len(framed) - 4
        header, decoded = decode_request(framed[4:])
        # ControlledShutdown v0's request header v0 carries no client id.
        sent_client_id = None if (api_key, version) == (7, 0) else client_id
        assert header == RequestHeader(api_key, version, correlation_id, sent_client_id)
        assert decoded == request

    check()


@pytest.mark.parametrize(("api_key", "version"), PAIRS)
def test_every_supported_response_round_trips(api_key: int, version: int) -> None:
    response_type = load_response_schema(api_key, version)

    @QUICK
    @given(response=st.from_type(response_type), correlation_id=st.integers(0, 2**31 - 1))
    def check(response: object, correlation_id: int) -> None:
        if api_key == API_VERSIONS and response.error_code == ErrorCode.unsupported_version:
            return  # by design decoded as v0 whatever the version; tested below
        header = RequestHeader(api_key, version, correlation_id, None)
        framed = encode_response(header, response)
        assert decode_response(api_key, version, framed[4:]) == (correlation_id, response)

    check()


@pytest.mark.parametrize(("api_key", "version"), PAIRS)
def test_error_response_for_every_api_encodes(api_key: int, version: int) -> None:
    request_type = load_request_schema(api_key, version)

    @settings(max_examples=3, deadline=None, database=None, suppress_health_check=list(HealthCheck))
    @given(request=st.from_type(request_type))
    def check(request: object) -> None:
        response = error_response(api_key, version, request, ErrorCode.unknown_server_error)
        header = RequestHeader(api_key, version, 3, None)
        _, decoded = decode_response(api_key, version, encode_response(header, response)[4:])
        assert decoded == response
        top = getattr(decoded, "error_code", None)
        if top is not None:
            assert top == ErrorCode.unknown_server_error

    check()


def test_error_response_mirrors_produce_partitions() -> None:
    request = build_request(
        PRODUCE,
        9,
        {
            "acks": -1,
            "timeout": 100,
            "topic_data": [
                {"name": "a", "partition_data": [{"index": 0}, {"index": 4}]},
                {"name": "b", "partition_data": [{"index": 1}]},
            ],
        },
    )
    response = error_response(PRODUCE, 9, request, ErrorCode.not_leader_or_follower)
    got = [
        (t.name, p.index, p.error_code, p.base_offset)
        for t in response.responses
        for p in t.partition_responses
    ]
    code = ErrorCode.not_leader_or_follower
    assert got == [("a", 0, code, -1), ("a", 4, code, -1), ("b", 1, code, -1)]


@pytest.mark.parametrize("version", [4, 12])
def test_error_response_mirrors_fetch_and_ignores_forgotten_topics(version: int) -> None:
    request = build_request(
        FETCH,
        version,
        {
            "topics": [{"topic": "t", "partitions": [{"partition": 2, "fetch_offset": 5}]}],
            "forgotten_topics_data": [{"topic": "gone", "partitions": [9]}],
        },
    )
    response = error_response(FETCH, version, request, ErrorCode.unknown_server_error)
    (topic,) = response.responses
    (partition,) = topic.partitions
    assert (topic.topic, partition.partition_index) == ("t", 2)
    assert partition.high_watermark == -1 and partition.records is None


def test_error_response_mirrors_plain_value_arrays() -> None:
    request = build_request(
        OFFSET_FETCH, 7, {"group_id": "g", "topics": [{"name": "t", "partition_indexes": [3, 5]}]}
    )
    response = error_response(OFFSET_FETCH, 7, request, ErrorCode.coordinator_not_available)
    assert [p.partition_index for p in response.topics[0].partitions] == [3, 5]
    assert response.error_code == ErrorCode.coordinator_not_available
    listed = error_response(
        LIST_OFFSETS,
        7,
        build_request(
            LIST_OFFSETS,
            7,
            {"topics": [{"name": "x", "partitions": [{"partition_index": 1, "timestamp": -1}]}]},
        ),
        ErrorCode.unknown_server_error,
    )
    assert listed.topics[0].partitions[0].offset == -1


# Headers ----------------------------------------------------------------------------------


def test_request_header_v1_layout() -> None:
    request = build_request(METADATA, 5, {"topics": None})
    framed = encode_request(5, 0x01020304, "ab", request)
    assert framed[4:14] == b"\x00\x03\x00\x05\x01\x02\x03\x04\x00\x02"
    assert framed[14:16] == b"ab"
    assert not is_flexible(METADATA, 5)


def test_request_header_v2_has_tagged_fields_and_legacy_client_id() -> None:
    request = build_request(METADATA, 9, {"topics": None})
    framed = encode_request(9, 1, "ab", request)
    # client_id keeps its int16 length in header v2, then an empty tagged-field section.
    assert framed[4:17] == b"\x00\x03\x00\x09\x00\x00\x00\x01\x00\x02ab\x00"
    assert is_flexible(METADATA, 9)


def test_request_header_v2_skips_unknown_header_tags() -> None:
    body = b"\x00\x00\x00\x00\x00"  # Metadata v9: null topics, three false, no tags
    header = struct.pack(">hhih", METADATA, 9, 7, -1) + b"\x02" + b"\x00\x01\xaa" + b"\x05\x00"
    decoded_header, request = decode_request(header + body)
    assert decoded_header == RequestHeader(METADATA, 9, 7, None)
    assert request.topics is None


def test_unknown_tagged_fields_in_a_body_are_skipped() -> None:
    # librdkafka 2.16's Metadata v9 "all topics" request carries a tag kio does not know.
    payload = (
        struct.pack(">hhih", METADATA, 9, 3, 7) + b"rdkafka\x00" + bytes.fromhex("0000000001000000")
    )
    _, request = decode_request(payload)
    assert request.topics is None and request.allow_auto_topic_creation is False


def test_response_headers_v0_and_v1_and_api_versions_always_v0() -> None:
    heartbeat = build_response(HEARTBEAT, 4, {"error_code": 0})
    framed = encode_response(RequestHeader(HEARTBEAT, 4, 9, None), heartbeat)
    assert framed[4:9] == b"\x00\x00\x00\x09\x00"  # correlation id + empty tags (v1)
    old = build_response(HEARTBEAT, 3, {"error_code": 0})
    framed = encode_response(RequestHeader(HEARTBEAT, 3, 9, None), old)
    assert framed[4:] == b"\x00\x00\x00\x09" + b"\x00\x00\x00\x00" + b"\x00\x00"
    versions = build_api_versions_response(3, {API_VERSIONS: (0, 4)})
    framed = encode_response(RequestHeader(API_VERSIONS, 3, 9, None), versions)
    assert framed[4:10] == b"\x00\x00\x00\x09\x00\x00"  # header v0, then error code 0


# ApiVersions fallback ---------------------------------------------------------------------


def test_unsupported_api_versions_answer_is_v0_with_our_ranges() -> None:
    header = RequestHeader(API_VERSIONS, 42, 1234, "client")
    framed = api_versions_unsupported_response(header)
    expected = [struct.pack(">ihi", 1234, 35, len(SUPPORTED))]
    expected += [struct.pack(">hhh", k, lo, hi) for k, (lo, hi) in sorted(SUPPORTED.items())]
    body = b"".join(expected)
    assert framed == struct.pack(">i", len(body)) + body
    correlation_id, response = decode_response(API_VERSIONS, 3, framed[4:])
    assert correlation_id == 1234 and response.error_code == ErrorCode.unsupported_version


def test_api_versions_of_unknown_version_raises_with_its_header() -> None:
    payload = struct.pack(">hhih", API_VERSIONS, 99, 5, 1) + b"x" + b"\x00" + b"junk"
    with pytest.raises(DecodeError) as info:
        decode_request(payload)
    assert info.value.error_code == ErrorCode.unsupported_version
    assert info.value.header == RequestHeader(API_VERSIONS, 99, 5, "x")


# Decode errors ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("payload", "code", "correlation_id"),
    [
        (b"", ErrorCode.invalid_request, None),
        (b"\x00\x03\x00\x05\x00\x00", ErrorCode.invalid_request, None),
        (struct.pack(">hhih", 999, 0, 8, -1), ErrorCode.unsupported_version, 8),
        (struct.pack(">hhih", METADATA, 0, 8, -1), ErrorCode.unsupported_version, 8),
        (struct.pack(">hhih", PRODUCE, 2, 8, -1), ErrorCode.unsupported_version, 8),
        (struct.pack(">hhih", METADATA, 5, 8, 10) + b"abc", ErrorCode.invalid_request, 8),
        (struct.pack(">hhih", METADATA, 5, 8, -2), ErrorCode.invalid_request, 8),
        (struct.pack(">hhih", METADATA, 5, 8, 2) + b"\xff\xfe", ErrorCode.invalid_request, 8),
        (struct.pack(">hhih", METADATA, 5, 8, -1) + b"\x00\x00", ErrorCode.invalid_request, 8),
        (struct.pack(">hhih", METADATA, 9, 8, -1) + b"\x05", ErrorCode.invalid_request, 8),
    ],
)
def test_bad_requests_raise_decode_error(
    payload: bytes, code: ErrorCode, correlation_id: int | None
) -> None:
    with pytest.raises(DecodeError) as info:
        decode_request(payload)
    assert info.value.error_code == code
    assert info.value.correlation_id == correlation_id


@settings(max_examples=300, deadline=None, database=None)
@given(st.binary(max_size=64))
def test_arbitrary_bytes_never_crash_the_decoder(payload: bytes) -> None:
    try:
        decode_request(payload)
    except DecodeError:
        pass


def test_restricted_table_refuses_other_apis() -> None:
    request = build_request(METADATA, 5, {"topics": None})
    framed = encode_request(5, 1, None, request)
    with pytest.raises(DecodeError) as info:
        decode_request(framed[4:], {API_VERSIONS: (0, 4)})
    assert info.value.error_code == ErrorCode.unsupported_version


def test_encode_refuses_mismatched_entities() -> None:
    response = build_response(HEARTBEAT, 4, {"error_code": 0})
    with pytest.raises(ValueError, match="does not match"):
        encode_response(RequestHeader(HEARTBEAT, 3, 1, None), response)
    with pytest.raises(ValueError, match="does not match"):
        encode_request(3, 1, None, build_request(HEARTBEAT, 4, {}))


def test_parse_request_header_returns_body_offset() -> None:
    payload = struct.pack(">hhih", HEARTBEAT, 4, 1, 3) + b"abc" + b"\x00" + b"BODY"
    header, offset = parse_request_header(payload)
    assert header.client_id == "abc" and payload[offset:] == b"BODY"


@settings(max_examples=300, deadline=None, database=None)
@given(pair=st.sampled_from(PAIRS), body=st.binary(max_size=48))
def test_random_bodies_after_valid_headers_never_crash(pair: tuple[int, int], body: bytes) -> None:
    api_key, version = pair
    header = struct.pack(">hhih", api_key, version, 1, -1)
    if is_flexible(api_key, version):
        header += b"\x00"
    try:
        decode_request(header + body)
    except DecodeError as exc:
        assert exc.correlation_id == 1


def test_a_duration_beyond_timedelta_is_refused_not_crashed() -> None:
    """OffsetCommit v4 with retention_time = int64 max ms: kio cannot build it; the
    decoder must answer with DecodeError (the connection is then closed), nothing else."""
    request_type = load_request_schema(8, 4)
    ok = request_type(
        group_id="g",
        generation_id_or_member_epoch=-1,
        member_id="",
        retention_time=datetime.timedelta(milliseconds=5),
        topics=(),
    )
    framed = bytearray(encode_request(4, 1, "c", ok))
    # The retention time follows group id, generation and member id in the body.
    marker = struct.pack(">q", 5)
    at = framed.rindex(marker)
    framed[at : at + 8] = struct.pack(">q", 2**63 - 1)
    with pytest.raises(DecodeError):
        decode_request(bytes(framed[4:]))


# FindCoordinator v5 whose coordinator_keys compact array claims ~2**35 elements: kio's
# native reader reserved memory for all of them and aborted the interpreter.
HOSTILE_ARRAY_LENGTH = bytes.fromhex(
    "000a000500000001ffff0006d3a9b7a07ec3a6432814b3faa17c5327b04b4135"
)


def test_hostile_array_length_is_a_decode_error_not_an_abort() -> None:
    # In a child process: if this regresses, the abort must not take the test run down.
    import subprocess
    import sys

    code = (
        "from odradek.protocol.codec import decode_request, DecodeError\n"
        f"payload = bytes.fromhex({HOSTILE_ARRAY_LENGTH.hex()!r})\n"
        "try:\n"
        "    decode_request(payload)\n"
        "except DecodeError:\n"
        "    print('refused')\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.strip() == "refused"


def test_produce_records_are_a_writable_slice_of_a_writable_frame() -> None:
    """The broker assigns offsets in place: records of a request decoded from a bytearray
    are a writable view into it (no copy); from read-only bytes they are plain bytes."""
    records = b"\x00" * 70
    request = build_request(
        PRODUCE,
        9,
        {
            "acks": 1,
            "timeout": 1000,
            "topic_data": [{"name": "t", "partition_data": [{"index": 0, "records": records}]}],
        },
    )
    frame = bytearray(encode_request(9, 7, "c", request)[4:])
    _header, decoded = decode_request(frame)
    data = decoded.topic_data[0].partition_data[0].records
    assert isinstance(data, memoryview) and not data.readonly
    data[0] = 0xAB  # lands in the frame itself
    assert 0xAB in frame
    _header, from_bytes = decode_request(bytes(frame))
    assert isinstance(from_bytes.topic_data[0].partition_data[0].records, bytes)
