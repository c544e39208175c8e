"""When the lone-produce lane takes a request and when it steps aside (a unit test of
ProduceLane.accept over a stand-in server; tests/integration/test_produce_lane.py checks
its answers against the generic path's on real brokers)."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from types import SimpleNamespace

import pytest

from odradek.broker.client_quotas import PRODUCER_BYTE_RATE, REQUEST_PERCENTAGE
from odradek.broker.handlers.common import millis
from odradek.broker.handlers.produce_lane import ProduceLane
from odradek.broker.network import NetworkServer
from odradek.broker.replica_manager import AppendResult
from odradek.broker.requests import RequestContext
from odradek.protocol.build import build_request
from odradek.protocol.codec import decode_response, encode_request
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


def test_a_quota_set_while_the_append_waits_throttles_the_answer() -> None:
    """The lane took the request with no quota set; one set before the (offloaded) append
    finished counts its bytes and throttles the answer, as handle_produce would."""
    recorded: list[tuple[str, str, str, int]] = []
    muted: list[int] = []

    class LateQuotas(Quotas):
        def record(self, key: str, principal: str, client_id: str, size: int) -> int:
            recorded.append((key, principal, client_id, size))
            return 250

    async def scenario() -> bytes | None:
        loop = asyncio.get_running_loop()
        appended: asyncio.Future[AppendResult] = loop.create_future()
        quotas = LateQuotas()
        lane_server = SimpleNamespace(
            authorizer=None,
            client_quotas=quotas,
            stats=None,
            replica_manager=SimpleNamespace(append_or_offload=lambda *a, **k: appended),
            request_quota=SimpleNamespace(throttle_now=lambda ctx: 0),
        )
        lane = ProduceLane(lane_server)
        header, lone = lane.accept(frame(9), SUPPORTED)
        ctx = RequestContext(header, "127.0.0.1", 1, "conn", mute=muted.append)
        answering = asyncio.ensure_future(lane.answer(ctx, lone))
        await asyncio.sleep(0)
        quotas.keys.add(PRODUCER_BYTE_RATE)  # set while the append is on its thread
        appended.set_result(AppendResult(base_offset=5, last_offset=5, log_start_offset=0))
        return await answering

    answer = asyncio.run(scenario())
    assert recorded == [(PRODUCER_BYTE_RATE, "User:ANONYMOUS", "c", len(BATCH))]
    assert muted == [250]
    _correlation, response = decode_response(PRODUCE, 9, answer[4:])
    assert response.throttle_time.total_seconds() * 1000 == 250
    assert response.responses[0].partition_responses[0].base_offset == 5


def test_produce_timeouts_are_whole_milliseconds_on_both_paths() -> None:
    """kio decodes the timeout as a timedelta; the generic path reads it back exactly (it
    used to truncate 1001 ms to 1000 through floating point), as the lane reads the int."""
    for ms in [*range(0, 5000), 2**31 - 1]:
        assert millis(timedelta(milliseconds=ms)) == ms
