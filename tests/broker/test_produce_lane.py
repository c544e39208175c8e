"""When the lone-produce lane takes a request and when it steps aside (a unit test of
ProduceLane.accept over a stand-in server; tests/integration/test_produce_lane.py checks
its answers against the generic path's on real brokers)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from odradek.broker.client_quotas import PRODUCER_BYTE_RATE, REQUEST_PERCENTAGE
from odradek.broker.handlers.produce_lane import ProduceLane
from odradek.broker.network import NetworkServer
from odradek.protocol.build import build_request
from odradek.protocol.codec import encode_request
from odradek.protocol.versions import PRODUCE, SUPPORTED
from odradek.records.batch import Record, build_batch

BATCH = bytes(build_batch([Record(b"v")]))


class Quotas:
    def __init__(self, *keys: str) -> None:
        self.keys = set(keys)

    def enabled(self, key: str) -> bool:
        return key in self.keys


def server(authorizer: object = None, quotas: Quotas | None = None) -> SimpleNamespace:
    return SimpleNamespace(authorizer=authorizer, client_quotas=quotas or Quotas())


def frame(
    version: int = 9, *, acks: int = 1, name: str = "t", txn: str | None = None, api_key: int = 0
) -> memoryview:
    if api_key != PRODUCE:  # a Metadata request
        request = build_request(api_key, 4, {"topics": None, "allow_auto_topic_creation": True})
        return memoryview(bytearray(encode_request(4, 7, "c", request)[4:]))
    values = {
        "transactional_id": txn,
        "acks": acks,
        "timeout": 500,
        "topic_data": [{"name": name, "partition_data": [{"index": 2, "records": BATCH}]}],
    }
    request = build_request(PRODUCE, version, values)
    return memoryview(bytearray(encode_request(version, 7, "c", request)[4:]))


@pytest.mark.parametrize("version", range(3, 12))
def test_a_lone_produce_is_taken(version: int) -> None:
    accepted = ProduceLane(server()).accept(frame(version), SUPPORTED)
    assert accepted is not None
    header, lone = accepted
    assert (header.api_version, header.correlation_id, header.client_id) == (version, 7, "c")
    assert (lone.acks, lone.timeout_ms, lone.topic, lone.partition) == (1, 500, "t", 2)
    assert bytes(lone.records) == BATCH


@pytest.mark.parametrize(
    ("lane_server", "request_frame", "versions"),
    [
        (server(authorizer=object()), frame(), SUPPORTED),
        (server(quotas=Quotas(PRODUCER_BYTE_RATE)), frame(), SUPPORTED),
        (server(quotas=Quotas(REQUEST_PERCENTAGE)), frame(), SUPPORTED),
        (server(), frame(9), {**SUPPORTED, PRODUCE: (3, 8)}),  # not advertised
        (server(), frame(9), {k: v for k, v in SUPPORTED.items() if k != PRODUCE}),
        (server(), frame(acks=2), SUPPORTED),
        (server(), frame(name="bad name!"), SUPPORTED),
        (server(), frame(txn="txn-1"), SUPPORTED),
        (server(), frame(api_key=3), SUPPORTED),
        (server(), frame()[:6], SUPPORTED),  # a header cut short
    ],
    ids=[
        "authorizer", "producer-byte-rate", "request-percentage", "version-not-advertised",
        "produce-not-advertised", "invalid-acks", "illegal-topic", "transactional", "metadata",
        "short-header",
    ],
)  # fmt: skip
def test_the_lane_steps_aside(lane_server, request_frame: memoryview, versions) -> None:
    assert ProduceLane(lane_server).accept(request_frame, versions) is None


def test_no_lane_where_a_request_observer_wants_every_request() -> None:
    lane = ProduceLane(server())
    handler = SimpleNamespace(advertised_versions=lambda: SUPPORTED)
    assert NetworkServer(handler, "127.0.0.1", 0, produce_lane=lane).produce_lane is lane
    watched = NetworkServer(handler, "127.0.0.1", 0, produce_lane=lane, request_observer=object())
    assert watched.produce_lane is None
