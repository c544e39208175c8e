"""The one-topic one-partition Produce reader gives what the generic walker gives, and
hands every other shape (and every malformed body) to the walker."""

from __future__ import annotations

import pytest

from odradek.protocol import produce_request
from odradek.protocol.build import build_request
from odradek.protocol.codec import DecodeError, decode_request, encode_request
from odradek.protocol.headers import parse_request_header
from odradek.protocol.lenient import read_entity, writable_source
from odradek.protocol.produce_request import (
    read_lone_produce,
    read_lone_request,
    read_produce_request,
)
from odradek.protocol.schemas import request_type
from odradek.protocol.versions import PRODUCE, SUPPORTED

VERSIONS = range(SUPPORTED[PRODUCE][0], SUPPORTED[PRODUCE][1] + 1)
BATCH = bytes(range(70))  # long enough to be returned as a slice of a writable frame


def _frame(version: int, topics: list[dict], *, txn: str | None = None) -> bytearray:
    values = {"transactional_id": txn, "acks": -1, "timeout": 1234, "topic_data": topics}
    request = build_request(PRODUCE, version, values)
    return bytearray(encode_request(version, 5, "client", request)[4:])


def _body_offset(version: int) -> int:
    # header: api key, version, correlation id (8), client id "client" (2 + 6), and one
    # byte of (empty) tagged fields in flexible versions.
    return 16 + (1 if request_type(PRODUCE, version).__flexible__ else 0)


def _read(reader, frame: bytearray, version: int) -> object:
    """Run ``reader`` on the body as decode_request does (records sliced from the frame)."""
    token = writable_source.set(memoryview(frame))
    try:
        payload = memoryview(frame).toreadonly()  # kio's leaf readers want read-only
        return reader(request_type(PRODUCE, version), payload, _body_offset(version))
    finally:
        writable_source.reset(token)


def _walker(frame: bytearray, version: int) -> object:
    return _read(read_entity, frame, version)[0]


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("txn", [None, "txn-1"])
@pytest.mark.parametrize("records", [BATCH, None, b"", b"\x01\x02"])
def test_single_partition_matches_the_walker(version: int, txn: str | None, records) -> None:
    frame = _frame(
        version, [{"name": "topic-a", "partition_data": [{"index": 3, "records": records}]}],
        txn=txn,
    )
    fast = _read(read_produce_request, frame, version)
    assert fast is not None  # this shape is the fast reader's
    assert fast == _walker(frame, version)
    assert type(fast.topic_data[0].partition_data[0].records) is type(
        _walker(frame, version).topic_data[0].partition_data[0].records
    )
    _header, decoded = decode_request(frame)
    assert decoded == fast


@pytest.mark.parametrize("version", VERSIONS)
def test_other_shapes_fall_back_to_the_walker(version: int) -> None:
    one = {"index": 0, "records": BATCH}
    shapes = [
        [],
        [{"name": "a", "partition_data": []}],
        [{"name": "a", "partition_data": [one, {"index": 1, "records": BATCH}]}],
        [{"name": "a", "partition_data": [one]}, {"name": "b", "partition_data": [one]}],
    ]
    for topics in shapes:
        frame = _frame(version, topics)
        assert _read(read_produce_request, frame, version) is None
        _header, decoded = decode_request(frame)
        assert decoded == _walker(frame, version)


@pytest.mark.parametrize("version", [v for v in VERSIONS if v >= 9])
def test_tagged_fields_fall_back_to_the_walker(version: int) -> None:
    """An unknown tagged field in the request is skipped by the walker (KIP-482)."""
    frame = _frame(version, [{"name": "t", "partition_data": [{"index": 0, "records": BATCH}]}])
    assert frame[-1] == 0  # the request's own (empty) tagged-field section
    frame[-1:] = b"\x01\x07\x02hi"  # one unknown tag (7) of 2 bytes
    assert _read(read_produce_request, frame, version) is None
    _header, decoded = decode_request(frame)
    assert decoded.topic_data[0].partition_data[0].records == BATCH


@pytest.mark.parametrize("version", VERSIONS)
def test_truncated_bodies_raise_the_walkers_error(version: int) -> None:
    frame = _frame(version, [{"name": "t", "partition_data": [{"index": 0, "records": BATCH}]}])
    for cut in (20, 30, len(frame) - 40, len(frame) - 1):
        with pytest.raises(DecodeError) as caught:
            decode_request(frame[:cut])
        assert "cannot decode Produce" in str(caught.value)


# -- the lone-produce lane's reader -------------------------------------------------------


def _lone(frame: bytearray) -> object:
    header, offset = parse_request_header(frame)
    return read_lone_produce(memoryview(frame), offset, header.api_version >= 9)


def _one(name: str = "topic-a", index: int = 3, records=BATCH) -> list[dict]:
    return [{"name": name, "partition_data": [{"index": index, "records": records}]}]


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("client_id", ["client", None, "ü" * 40])
@pytest.mark.parametrize("acks", [-1, 0, 1, 7])
def test_lone_reader_reads_what_the_generic_decoder_reads(version, client_id, acks) -> None:
    values = {"transactional_id": None, "acks": acks, "timeout": 1234, "topic_data": _one()}
    request = build_request(PRODUCE, version, values)
    frame = bytearray(encode_request(version, 5, client_id, request)[4:])
    lone = _lone(frame)
    _header, decoded = decode_request(frame)
    assert lone is not None
    topic = decoded.topic_data[0]
    partition = topic.partition_data[0]
    timeout_ms = round(decoded.timeout.total_seconds() * 1000)  # kio decodes a timedelta
    assert (lone.acks, lone.timeout_ms, lone.topic, lone.partition) == (
        decoded.acks, timeout_ms, topic.name, partition.index
    )
    assert bytes(lone.records) == bytes(partition.records) == BATCH
    # A writable slice of the frame itself: offsets are assigned in place, no copy.
    assert lone.records.obj is frame and not lone.records.readonly


@pytest.mark.parametrize("version", VERSIONS)
def test_lone_reader_declines_every_other_shape(version: int) -> None:
    one = {"index": 0, "records": BATCH}
    shapes = [
        [],
        [{"name": "a", "partition_data": []}],
        [{"name": "a", "partition_data": [one, {"index": 1, "records": BATCH}]}],
        [{"name": "a", "partition_data": [one]}, {"name": "b", "partition_data": [one]}],
        _one(records=None),
        _one(records=b""),
        _one(records=BATCH[:60]),  # shorter than any record batch
        _one(name=""),
    ]
    for topics in shapes:
        assert _lone(_frame(version, topics)) is None, topics
    assert _lone(_frame(version, _one(), txn="txn-1")) is None
    assert _lone(_frame(version, _one()) + b"\x00") is None  # bytes after the body


@pytest.mark.parametrize("version", [v for v in VERSIONS if v >= 9])
def test_lone_reader_declines_tagged_fields(version: int) -> None:
    frame = _frame(version, _one())
    frame[-1:] = b"\x01\x07\x02hi"
    assert _lone(frame) is None


@pytest.mark.parametrize("version", VERSIONS)
def test_lone_reader_never_raises_on_damaged_frames(version: int) -> None:
    """Every truncation declines; every single-byte change either declines or reads what
    the generic decoder reads (so no damaged frame is answered differently)."""
    frame = _frame(version, _one())
    header_end = parse_request_header(frame)[1]
    for cut in range(header_end, len(frame)):
        assert _lone(frame[:cut]) is None
    for position in range(header_end, len(frame) - len(BATCH)):
        for value in (0x00, 0x01, 0x7F, 0x80, 0xFF):
            damaged = bytearray(frame)
            damaged[position] = value
            lone = _lone(damaged)
            if lone is None:
                continue
            _header, decoded = decode_request(damaged)
            topic = decoded.topic_data[0]
            assert len(decoded.topic_data) == 1 and len(topic.partition_data) == 1
            assert decoded.transactional_id is None
            assert (lone.acks, lone.topic, lone.partition) == (
                decoded.acks, topic.name, topic.partition_data[0].index
            )
            assert bytes(lone.records) == bytes(topic.partition_data[0].records)


# -- read_lone_request: the C reader and its Python twin ----------------------------------

C_READ_LONE = produce_request._c_read_lone  # None when the extension is not built


def _both(frame: bytearray) -> tuple[object, object]:
    """read_lone_request with the C reader (when built) and with the Python readers only;
    as comparable tuples (the record set as bytes, and whether it is the frame's own)."""

    def comparable(read: object) -> object:
        if read is None:
            return None
        header, lone = read
        return header, lone._replace(records=bytes(lone.records)), lone.records.obj is frame

    with_c = comparable(read_lone_request(memoryview(frame)))
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(produce_request, "_c_read_lone", None)
        python = comparable(read_lone_request(memoryview(frame)))
    return with_c, python


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("client_id", ["client", None, "", "ü" * 40])
def test_the_c_reader_takes_the_commonest_frames(version: int, client_id: str | None) -> None:
    if C_READ_LONE is None:
        pytest.skip("the C reader is not built")
    values = {"transactional_id": None, "acks": -1, "timeout": 1234, "topic_data": _one()}
    frame = bytearray(encode_request(version, 5, client_id, build_request(PRODUCE, version,
                                                                          values))[4:])
    assert C_READ_LONE(9, memoryview(frame)) is not None  # taken in C, not declined
    with_c, python = _both(frame)
    assert with_c == python
    header, lone, own = with_c  # type: ignore[misc]
    assert (header.api_version, header.correlation_id, header.client_id) == (
        version, 5, client_id
    )
    assert (lone.acks, lone.timeout_ms, lone.topic, lone.partition, lone.records) == (
        -1, 1234, "topic-a", 3, BATCH
    )
    assert own  # a slice of the frame: offsets are assigned in place


@pytest.mark.parametrize("version", VERSIONS)
def test_the_c_reader_agrees_on_other_shapes_and_damage(version: int) -> None:
    """Whatever the C reader declines or takes, read_lone_request answers as the Python
    readers do: other shapes, a transactional id, tagged fields, trailing bytes, every
    truncation, and single-byte changes across header and body."""
    one = {"index": 0, "records": BATCH}
    frames = [
        _frame(version, topics)
        for topics in (
            [],
            [{"name": "a", "partition_data": [one, {"index": 1, "records": BATCH}]}],
            [{"name": "a", "partition_data": [one]}, {"name": "b", "partition_data": [one]}],
            _one(records=None),
            _one(records=BATCH[:60]),
            _one(name=""),
        )
    ]
    frames.append(_frame(version, _one(), txn="txn-1"))
    frames.append(_frame(version, _one()) + b"\x00")
    whole = _frame(version, _one())
    if version >= 9:
        tagged = bytearray(whole)
        tagged[-1:] = b"\x01\x07\x02hi"
        frames.append(tagged)
        header_tags = bytearray(whole)  # an unknown tag in the request header: Python reads it
        header_tags[16:17] = b"\x01\x07\x00"
        frames.append(header_tags)
    frames += [whole[:cut] for cut in range(len(whole))]
    for position in range(len(whole) - len(BATCH)):
        for value in (0x00, 0x01, 0x02, 0x7F, 0x80, 0xFF):
            damaged = bytearray(whole)
            damaged[position] = value
            frames.append(damaged)
    for frame in frames:
        with_c, python = _both(frame)
        assert with_c == python, bytes(frame)
