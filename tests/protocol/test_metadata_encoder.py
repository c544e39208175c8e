"""The hand-written Metadata encoder writes exactly kio's bytes, for every version."""

from __future__ import annotations

import uuid

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from odradek.protocol.build import build_response
from odradek.protocol.codec import decode_response, encode_response_body
from odradek.protocol.metadata_encoder import (
    MAX_VERSION,
    encode_metadata_body,
    encode_topic,
    topic_layout,
    with_authorized_operations,
)

METADATA = 3
VERSIONS = range(0, MAX_VERSION + 1)

int32s = st.integers(-(2**31), 2**31 - 1)
node_ids = st.integers(-1, 2**31 - 1)
nodes = st.lists(node_ids, max_size=5)
# Names and hosts beyond ASCII and past 127 bytes (two-byte compact lengths).
texts = st.text(min_size=1, max_size=140)
error_codes = st.sampled_from([0, 3, 5, 9, 29, 37, 87])

# Often the same leader, epoch and replica lists as the partition before (lists or
# tuples), as real topics have: the encoder reuses those partitions' tails.
few_nodes = st.lists(st.sampled_from([-1, 1, 2]), max_size=3)
replica_lists = st.one_of(nodes, few_nodes, few_nodes.map(tuple))
partitions = st.lists(
    st.tuples(
        error_codes,
        st.integers(0, 2**31 - 1),
        st.one_of(st.sampled_from([-1, 1]), node_ids),
        st.one_of(st.sampled_from([0, 5]), int32s),
        replica_lists,
        replica_lists,
        replica_lists,
    ),
    max_size=12,
)
topics = st.lists(
    st.tuples(
        error_codes,
        texts,
        st.one_of(st.none(), st.uuids()),
        st.booleans(),
        partitions,
        int32s,
    ),
    max_size=5,
)
brokers = st.lists(
    st.tuples(node_ids, texts, st.integers(0, 65535), st.one_of(st.none(), texts)), max_size=4
)


def kio_body(version: int, values: dict) -> bytes:
    return encode_response_body(build_response(METADATA, version, values))


def values_of(brokers_, cluster_id, controller, topics_, cluster_ops, error) -> dict:
    return {
        "throttle_time": 0,
        "brokers": [{"node_id": n, "host": h, "port": p, "rack": r} for n, h, p, r in brokers_],
        "cluster_id": cluster_id,
        "controller_id": controller,
        "topics": [
            {
                "error_code": code,
                "name": name,
                "topic_id": topic_id if topic_id is not None else uuid.UUID(int=0),
                "is_internal": internal,
                "partitions": [
                    {
                        "error_code": e,
                        "partition_index": i,
                        "leader_id": leader,
                        "leader_epoch": epoch,
                        "replica_nodes": replicas,
                        "isr_nodes": isr,
                        "offline_replicas": offline,
                    }
                    for e, i, leader, epoch, replicas, isr, offline in parts
                ],
                "topic_authorized_operations": ops,
            }
            for code, name, topic_id, internal, parts, ops in topics_
        ],
        "cluster_authorized_operations": cluster_ops,
        "error_code": error,
    }


@settings(max_examples=60, deadline=None)
@given(
    version=st.sampled_from(VERSIONS),
    brokers_=brokers,
    cluster_id=st.one_of(st.none(), texts),
    controller=node_ids,
    topics_=topics,
    cluster_ops=int32s,
    error=error_codes,
)
def test_same_bytes_as_kio(version, brokers_, cluster_id, controller, topics_, cluster_ops, error):
    expected = kio_body(
        version, values_of(brokers_, cluster_id, controller, topics_, cluster_ops, error)
    )
    entries = [
        encode_topic(version, code, name, topic_id, internal, parts, ops)
        for code, name, topic_id, internal, parts, ops in topics_
    ]
    ours = encode_metadata_body(
        version,
        brokers=brokers_,
        cluster_id=cluster_id,
        controller_id=controller,
        topics=entries,
        cluster_authorized_operations=cluster_ops,
        error_code=error,
    )
    assert ours == expected


@pytest.mark.parametrize("version", VERSIONS)
def test_every_version_decodes_with_kio(version: int) -> None:
    """A fixed cluster, field by field through kio's decoder (what a client reads)."""
    topic_id = uuid.uuid4()
    rows = [(0, i, 1, 7, [1, 2, 3], [1, 2], [3]) for i in range(200)]
    rows.append((5, 200, -1, 8, [2], [], [2]))
    entry = encode_topic(version, 0, "orders", topic_id, True, rows, 0x7FF)
    missing = encode_topic(version, 3, "gone", None, False, [])
    body = encode_metadata_body(
        version,
        brokers=[(1, "127.0.0.1", 9092, "r1"), (2, "localhost", 9093, None)],
        cluster_id="cid",
        controller_id=2,
        topics=[entry, missing],
        throttle_ms=250,
    )
    _, response = decode_response(METADATA, version, _with_header(version, body))
    decoded = {t.name: t for t in response.topics}
    assert [b.node_id for b in response.brokers] == [1, 2]
    orders = decoded["orders"]
    assert len(orders.partitions) == 201
    last = orders.partitions[-1]
    assert (last.error_code, last.partition_index, last.leader_id) == (5, 200, -1)
    assert tuple(last.replica_nodes) == (2,) and tuple(last.isr_nodes) == ()
    if version >= 1:
        assert orders.is_internal
        assert response.controller_id == 2
    if version >= 2:
        assert response.cluster_id == "cid"
    if version >= 3:
        assert response.throttle_time.total_seconds() == 0.25
    if version >= 5:
        assert tuple(last.offline_replicas) == (2,)
    if version >= 7:
        assert last.leader_epoch == 8
    if version >= 8:
        assert orders.topic_authorized_operations == 0x7FF
    if version >= 10:
        assert orders.topic_id == topic_id
        assert decoded["gone"].topic_id is None  # the zero UUID, as kio reads it
    assert decoded["gone"].error_code == 3 and decoded["gone"].partitions == ()


def test_versions_with_one_layout_share_topic_bytes() -> None:
    rows = [(0, 0, 1, 4, [1], [1], [])]
    for version in VERSIONS:
        same = topic_layout(version)
        assert encode_topic(version, 0, "t", None, False, rows) == encode_topic(
            same, 0, "t", None, False, rows
        )


def _with_header(version: int, body: bytes) -> bytes:
    # Response header v0 (correlation id) up to v8, v1 (plus empty tagged fields) from v9.
    head = (42).to_bytes(4, "big") + (b"\x00" if version >= 9 else b"")
    return head + body


def test_shared_partition_tails_are_per_layout_and_bounded(monkeypatch) -> None:
    """Tails are shared across topics per layout (a v9 tail never answers v8) and the
    store of them is bounded."""
    from odradek.protocol import metadata_encoder

    rows = [(0, 0, 1, 4, [1, 2], [1], [2])]
    for version in VERSIONS:  # every layout after the others filled theirs
        expected = kio_body(version, values_of([], None, 1, [(0, "t", None, False, rows, 0)], 0, 0))
        ours = encode_metadata_body(
            version, brokers=[], cluster_id=None, controller_id=1,
            topics=[encode_topic(version, 0, "t", None, False, rows, 0)],
            cluster_authorized_operations=0,
        )  # fmt: skip
        assert ours == expected
    monkeypatch.setattr(metadata_encoder, "MAX_KEPT_TAILS", 10)
    many = [(0, i, i, 0, [i], [i], []) for i in range(50)]
    encode_topic(9, 0, "wide", None, False, many)
    assert len(metadata_encoder._TAILS[9]) <= 11


@pytest.mark.parametrize("version", VERSIONS)
def test_authorized_operations_set_on_a_kept_entry(version: int) -> None:
    """A kept entry (encoded without the field asked) saying another principal's
    operations is the entry encoded with them; before v8 there is no such field."""
    rows = [(0, i, 1, 2, [1, 2], [1], []) for i in range(3)]
    args = (version, 0, "tópico", uuid.UUID(int=5), False, rows)
    kept = encode_topic(*args)
    for operations in (0, 3576, -1, 2**31 - 1):
        assert with_authorized_operations(version, kept, operations) == encode_topic(
            *args, operations
        )
