"""The hand-written Fetch encoder must match kio's encoding byte for byte, for every version."""

from __future__ import annotations

import dataclasses
import datetime
import io
import uuid
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kio.index import load_response_schema
from kio.schema.errors import ErrorCode
from kio.serial import entity_writer

from odradek.protocol.codec import RequestHeader, decode_response
from odradek.protocol.fetch_encoder import (
    MAX_FETCH_VERSION,
    MIN_FETCH_VERSION,
    FetchPartitionData,
    FetchTopicData,
    encode_fetch_response,
    response_size,
)
from odradek.protocol.headers import encode_response_header
from odradek.protocol.versions import FETCH, SUPPORTED

ALL_VERSIONS = range(MIN_FETCH_VERSION, MAX_FETCH_VERSION + 1)


@dataclasses.dataclass
class FakeRegion:
    """A region backed by bytes, standing in for a file region."""

    data: bytes

    @property
    def length(self) -> int:
        return len(self.data)


def flatten(chunks: list[Any]) -> bytes:
    return b"".join(c.data if isinstance(c, FakeRegion) else bytes(c) for c in chunks)


def inline(records: Any) -> bytes | None:
    if records is None:
        return None
    if isinstance(records, FakeRegion):
        return records.data
    if isinstance(records, list):
        return b"".join(inline(part) or b"" for part in records)
    return bytes(records)


def kio_encoding(
    version: int,
    correlation_id: int,
    throttle: int,
    error: int,
    session: int,
    topics: list[FetchTopicData],
) -> bytes:
    """The same response built as kio entities and written by kio, framed."""
    cls = load_response_schema(FETCH, version)
    module = __import__(cls.__module__, fromlist=["x"])
    kio_topics = []
    for topic in topics:
        parts = []
        for p in topic.partitions:
            values: dict[str, Any] = {
                "partition_index": p.partition_index,
                "error_code": ErrorCode(p.error_code),
                "high_watermark": p.high_watermark,
                "last_stable_offset": p.last_stable_offset,
                "aborted_transactions": None
                if p.aborted_transactions is None
                else tuple(
                    module.AbortedTransaction(producer_id=a, first_offset=b)
                    for a, b in p.aborted_transactions
                ),
                "records": inline(p.records),
            }
            names = {f.name for f in dataclasses.fields(module.PartitionData)}
            if "log_start_offset" in names:
                values["log_start_offset"] = p.log_start_offset
            if "preferred_read_replica" in names:
                values["preferred_read_replica"] = p.preferred_read_replica
            if "diverging_epoch" in names and p.diverging_epoch is not None:
                values["diverging_epoch"] = module.EpochEndOffset(
                    epoch=p.diverging_epoch[0], end_offset=p.diverging_epoch[1]
                )
            if "current_leader" in names and p.current_leader is not None:
                values["current_leader"] = module.LeaderIdAndEpoch(
                    leader_id=p.current_leader[0], leader_epoch=p.current_leader[1]
                )
            if "snapshot_id" in names and p.snapshot_id is not None:
                values["snapshot_id"] = module.SnapshotId(
                    end_offset=p.snapshot_id[0], epoch=p.snapshot_id[1]
                )
            parts.append(module.PartitionData(**values))
        topic_fields = {f.name for f in dataclasses.fields(module.FetchableTopicResponse)}
        key = {"topic_id": topic.topic_id} if "topic_id" in topic_fields else {"topic": topic.name}
        kio_topics.append(module.FetchableTopicResponse(**key, partitions=tuple(parts)))
    top: dict[str, Any] = {
        "throttle_time": datetime.timedelta(milliseconds=throttle),
        "responses": tuple(kio_topics),
    }
    if version >= 7:
        top["error_code"] = ErrorCode(error)
        top["session_id"] = session
    entity = cls(**top)
    buffer = io.BytesIO()
    entity_writer(cls)(buffer, entity)
    body = encode_response_header(FETCH, version, correlation_id) + buffer.getvalue()
    return len(body).to_bytes(4, "big") + body


records_strategy = st.one_of(
    st.none(),
    st.binary(max_size=40),
    st.binary(min_size=1, max_size=40).map(FakeRegion),
    st.lists(st.one_of(st.binary(max_size=10), st.binary(max_size=10).map(FakeRegion)), max_size=3),
)
int32 = st.integers(-1, 2**31 - 1)
int64 = st.integers(-1, 2**62)
epoch_end_offset = st.one_of(st.none(), st.tuples(int32, int64))
leader_and_epoch = st.one_of(st.none(), st.tuples(int32, int32))
snapshot = st.one_of(st.none(), st.tuples(int64, int32))
partition_strategy = st.builds(
    FetchPartitionData,
    partition_index=st.integers(0, 2**31 - 1),
    error_code=st.sampled_from([0, 1, 3, 6, 74]),
    high_watermark=st.integers(-1, 2**62),
    last_stable_offset=st.integers(-1, 2**62),
    log_start_offset=st.integers(-1, 2**62),
    aborted_transactions=st.one_of(
        st.none(), st.lists(st.tuples(st.integers(0, 2**62), st.integers(0, 2**62)), max_size=3)
    ),
    preferred_read_replica=st.integers(-1, 5),
    records=records_strategy,
    diverging_epoch=epoch_end_offset,
    current_leader=leader_and_epoch,
    snapshot_id=snapshot,
)
topic_strategy = st.builds(
    FetchTopicData,
    name=st.text(min_size=1, max_size=12),
    partitions=st.lists(partition_strategy, max_size=3),
    topic_id=st.uuids(),
)


@pytest.mark.parametrize("version", ALL_VERSIONS)
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    topics=st.lists(topic_strategy, max_size=3),
    correlation_id=st.integers(-(2**31), 2**31 - 1),
    throttle=st.integers(0, 2**31 - 1),
    error=st.sampled_from([0, 71, 70]),
    session=st.integers(0, 2**31 - 1),
)
def test_byte_for_byte_against_kio(
    version: int,
    topics: list[FetchTopicData],
    correlation_id: int,
    throttle: int,
    error: int,
    session: int,
) -> None:
    header = RequestHeader(FETCH, version, correlation_id, "c")
    chunks = encode_fetch_response(header, throttle, error, session, topics)
    expected = kio_encoding(version, correlation_id, throttle, error, session, topics)
    assert flatten(chunks) == expected
    assert response_size(chunks) == len(expected)


def test_encoder_covers_every_advertised_fetch_version() -> None:
    low, high = SUPPORTED[FETCH]
    assert low >= MIN_FETCH_VERSION and high <= MAX_FETCH_VERSION


@pytest.mark.parametrize("version", [4, 11, 12])
def test_regions_stay_out_of_line_and_bytes_coalesce(version: int) -> None:
    region_a = FakeRegion(b"A" * 100)
    region_b = FakeRegion(b"B" * 50)
    topics = {
        "t": [
            {"partition_index": 0, "records": [region_a], "high_watermark": 10},
            {"partition_index": 1, "records": region_b},
            {"partition_index": 2, "records": b"inline"},
        ]
    }
    chunks = encode_fetch_response(RequestHeader(FETCH, version, 9, None), 0, 0, 0, topics)
    # bytes, region, bytes, region, bytes: the inline partition joins the last bytes chunk.
    kinds = [type(chunk).__name__ for chunk in chunks]
    assert kinds == ["bytes", "FakeRegion", "bytes", "FakeRegion", "bytes"]
    assert chunks[1] is region_a and chunks[3] is region_b
    framed = flatten(chunks)
    assert int.from_bytes(framed[:4], "big") == len(framed) - 4
    correlation_id, response = decode_response(FETCH, version, framed[4:])
    assert correlation_id == 9
    partitions = response.responses[0].partitions
    assert [p.records for p in partitions] == [region_a.data, region_b.data, b"inline"]
    assert partitions[0].high_watermark == 10


def test_mapping_form_matches_dataclass_form() -> None:
    header = RequestHeader(FETCH, 12, 1, None)
    as_dicts = {"t": [{"partition_index": 3, "error_code": 1, "aborted_transactions": [(1, 2)]}]}
    as_objects = [
        FetchTopicData("t", [FetchPartitionData(3, error_code=1, aborted_transactions=[(1, 2)])])
    ]
    assert encode_fetch_response(header, 5, 0, 7, as_dicts) == encode_fetch_response(
        header, 5, 0, 7, as_objects
    )


def test_bad_inputs_raise_clear_errors() -> None:
    with pytest.raises(ValueError, match="outside"):
        encode_fetch_response(RequestHeader(FETCH, 3, 1, None), 0, 0, 0, {})
    with pytest.raises(ValueError, match="not a Fetch"):
        encode_fetch_response(RequestHeader(0, 9, 1, None), 0, 0, 0, {})
    with pytest.raises(ValueError, match="topic id"):
        encode_fetch_response(RequestHeader(FETCH, 13, 1, None), 0, 0, 0, {"t": []})
    with pytest.raises(ValueError, match="unknown Fetch partition fields"):
        encode_fetch_response(
            RequestHeader(FETCH, 12, 1, None), 0, 0, 0, {"t": [{"partition_index": 0, "x": 1}]}
        )
    with pytest.raises(TypeError, match="records"):
        encode_fetch_response(
            RequestHeader(FETCH, 12, 1, None),
            0,
            0,
            0,
            {"t": [{"partition_index": 0, "records": 5}]},
        )


def test_topic_id_keys_from_v13() -> None:
    topic_id = uuid.UUID(int=42)
    chunks = encode_fetch_response(
        RequestHeader(FETCH, 13, 1, None), 0, 0, 0, {topic_id: [{"partition_index": 0}]}
    )
    _, response = decode_response(FETCH, 13, flatten(chunks)[4:])
    assert response.responses[0].topic_id == topic_id
