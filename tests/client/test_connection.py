"""BrokerConnection: negotiation, pipelining, correlation, timeouts, failures."""

from __future__ import annotations

import asyncio
import io
import ssl
import struct

import pytest
from kio.index import load_request_schema, load_response_schema
from kio.schema.errors import ErrorCode
from kio.serial import entity_reader, entity_writer

from odradek.client.connection import BrokerConnection
from odradek.client.entities import build_request
from odradek.client.errors import (
    ClientError,
    ConnectionSetupError,
    KafkaError,
    KafkaTimeoutError,
)
from odradek.client.security import ClientSecurity
from odradek.client.versions import FETCH, METADATA, PRODUCE, pick_version
from odradek.protocol.build import build_response
from odradek.protocol.versions import SUPPORTED
from tests.client.fake_broker import DROP, FakeCluster

pytestmark = pytest.mark.timeout(30)


def metadata_request(version: int, topics: list[str] | None = None) -> object:
    return build_request(
        METADATA,
        version,
        topics=None if topics is None else [{"name": t} for t in topics],
        allow_auto_topic_creation=False,
        include_topic_authorized_operations=False,
    )


async def test_negotiation_picks_the_highest_common_version() -> None:
    ranges = dict(SUPPORTED)
    ranges[METADATA] = (1, 5)
    ranges[PRODUCE] = (3, 7)
    ranges[FETCH] = (4, 16)  # above what the client implements (12)
    async with FakeCluster(api_versions=ranges) as cluster:
        conn = BrokerConnection("127.0.0.1", cluster.brokers[0].port)
        await conn.connect()
        try:
            assert conn.version_for(METADATA) == 5
            assert conn.version_for(PRODUCE) == 7
            assert conn.version_for(FETCH) == 12
            response = await conn.send(metadata_request(5, []))
            assert response.cluster_id == "fake-cluster"
        finally:
            await conn.close()


def test_pick_version_without_overlap_names_both_ranges() -> None:
    with pytest.raises(KafkaError) as info:
        pick_version(PRODUCE, {PRODUCE: (0, 2)})
    assert info.value.name == "UNSUPPORTED_VERSION"
    assert "v0-2" in str(info.value) and "v3-" in str(info.value)
    with pytest.raises(KafkaError, match="does not support Fetch"):
        pick_version(FETCH, {})


async def test_api_versions_falls_back_when_the_broker_knows_only_older_versions() -> None:
    ranges = dict(SUPPORTED)
    ranges[18] = (0, 1)
    async with FakeCluster(api_versions=ranges) as cluster:
        conn = BrokerConnection("127.0.0.1", cluster.brokers[0].port)
        await conn.connect()
        try:
            versions = [v for k, v, _ in cluster.brokers[0].requests if k == 18]
            assert versions == [1]  # v3 was refused (v0 error body), then the broker's max
            assert conn.api_versions[METADATA] == SUPPORTED[METADATA]
        finally:
            await conn.close()


async def test_sending_a_version_the_broker_lacks_is_refused_locally() -> None:
    async with FakeCluster() as cluster:
        conn = BrokerConnection("127.0.0.1", cluster.brokers[0].port)
        await conn.connect()
        try:
            with pytest.raises(KafkaError, match="UNSUPPORTED_VERSION"):
                await conn.send(metadata_request(12, []))  # fake advertises Metadata <= 9
        finally:
            await conn.close()


async def _reverse_order_server(count: int) -> tuple[asyncio.Server, list[int]]:
    """A raw server that reads ``count`` Metadata v5 requests, then answers in reverse order."""
    seen: list[int] = []

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        frames = []
        while len(frames) < count + 1:
            (size,) = struct.unpack(">i", await reader.readexactly(4))
            payload = await reader.readexactly(size)
            api_key, version, correlation_id = struct.unpack_from(">hhi", payload)
            if api_key == 18:  # answer negotiation at once
                body = build_response(
                    18,
                    version,
                    {
                        "api_keys": [
                            {"api_key": k, "min_version": a, "max_version": b}
                            for k, (a, b) in SUPPORTED.items()
                        ]
                    },
                )
                writer.write(_frame(correlation_id, 18, version, body))
                frames.append(None)
                continue
            cls = load_request_schema(api_key, version)
            _, used = entity_reader(cls.__header_schema__)(payload, 0)
            request, _ = entity_reader(cls)(payload, used)
            seen.append(correlation_id)
            frames.append((correlation_id, request.topics[0].name))
        for item in reversed(frames):
            if item is None:
                continue
            correlation_id, name = item
            body = build_response(
                METADATA, 5, {"cluster_id": name, "controller_id": 0, "brokers": [], "topics": []}
            )
            writer.write(_frame(correlation_id, METADATA, 5, body))
        await writer.drain()
        await reader.read()  # until the client closes
        writer.close()

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    return server, seen


def _frame(correlation_id: int, api_key: int, version: int, body: object) -> bytes:
    cls = load_response_schema(api_key, version)
    out = io.BytesIO()
    out.write(b"\0\0\0\0")
    entity_writer(cls.__header_schema__)(out, cls.__header_schema__(correlation_id=correlation_id))
    entity_writer(cls)(out, body)
    data = bytearray(out.getvalue())
    struct.pack_into(">i", data, 0, len(data) - 4)
    return bytes(data)


async def test_pipelined_requests_are_matched_by_correlation_id() -> None:
    server, seen = await _reverse_order_server(5)
    conn = BrokerConnection("127.0.0.1", server.sockets[0].getsockname()[1])
    try:
        await conn.connect()
        names = [f"topic-{i}" for i in range(5)]
        results = await asyncio.gather(*(conn.send(metadata_request(5, [n])) for n in names))
        # Every request was on the wire before the first answer came back, in reverse order,
        # and each caller still got the answer to its own request.
        assert len(set(seen)) == 5
        assert [r.cluster_id for r in results] == names
        assert conn.in_flight == 0
    finally:
        await conn.close()
        server.close()
        await server.wait_closed()


async def test_timeout_closes_the_connection_and_fails_the_other_requests() -> None:
    async with FakeCluster() as cluster:
        release = asyncio.Event()

        async def stall(broker, api_key, version, request):
            if api_key == METADATA:
                await release.wait()
            return None

        cluster.intercept(stall)
        conn = BrokerConnection("127.0.0.1", cluster.brokers[0].port, request_timeout_ms=200)
        await conn.connect()
        slow = asyncio.create_task(conn.send(metadata_request(5, []), timeout_ms=5000))
        await asyncio.sleep(0.05)
        with pytest.raises(KafkaTimeoutError, match=r"Metadata request to .* timed out after 200"):
            await conn.send(metadata_request(5, []))
        with pytest.raises(ClientError, match="timed out"):
            await slow
        assert conn.closed
        with pytest.raises(ClientError, match="closed"):
            await conn.send(metadata_request(5, []))
        release.set()


async def test_cancellation_in_the_iteration_the_response_arrives_is_not_swallowed() -> None:
    # asyncio.wait_for on Python 3.11 returns the result and drops the cancellation when both
    # happen in one loop iteration: a GroupConsumer's heartbeat task then survived close()'s
    # cancel, close() hung and the group's next rebalance waited for the rebalance timeout.
    async with FakeCluster() as cluster:
        release = asyncio.Event()

        async def stall(broker, api_key, version, request):
            if api_key == METADATA:
                await release.wait()
            return None

        cluster.intercept(stall)
        conn = BrokerConnection("127.0.0.1", cluster.brokers[0].port)
        await conn.connect()
        try:
            task = asyncio.create_task(conn.send(metadata_request(5, [])))
            for _ in range(100):
                await asyncio.sleep(0.01)
                if conn._pending:
                    break
            (pending,) = conn._pending.values()
            pending.future.set_result("the response")  # arrives...
            task.cancel()  # ...as the caller is cancelled
            await asyncio.wait((task,), timeout=5)
            assert task.cancelled()
        finally:
            release.set()
            await conn.close()


async def test_connection_refused_is_a_one_line_client_error() -> None:
    server = await asyncio.start_server(lambda r, w: None, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    server.close()
    await server.wait_closed()
    conn = BrokerConnection("127.0.0.1", port)
    with pytest.raises(ClientError) as info:
        await conn.connect()
    assert f"127.0.0.1:{port}" in str(info.value)
    assert "\n" not in str(info.value)


async def test_broker_dropping_the_connection_fails_the_request() -> None:
    async with FakeCluster() as cluster:
        answered: list[int] = []

        def drop_the_second_metadata(b: object, k: int, v: int, r: object) -> object:
            if k == METADATA:
                answered.append(k)
                return DROP if len(answered) == 2 else None
            return None

        cluster.intercept(drop_the_second_metadata)
        conn = BrokerConnection("127.0.0.1", cluster.brokers[0].port)
        await conn.connect()
        await conn.send(metadata_request(5, []))
        with pytest.raises(ClientError, match="closed by the broker") as info:
            await conn.send(metadata_request(5, []))
        # The connection was in use: a lost connection, not a sign of the wrong protocol.
        assert not isinstance(info.value, ConnectionSetupError)
        assert conn.closed


async def test_a_hang_up_before_the_first_answer_is_a_setup_error() -> None:
    # What a SASL listener does to a PLAINTEXT client (ApiVersions answered, then a request
    # that is not SaslHandshake): the CLI turns this error into a --command-config hint.
    async with FakeCluster() as cluster:
        cluster.intercept(lambda b, k, v, r: DROP if k == METADATA else None)
        conn = BrokerConnection("127.0.0.1", cluster.brokers[0].port)
        await conn.connect()
        with pytest.raises(ConnectionSetupError, match="closed the connection before answering"):
            await conn.send(metadata_request(5, []))
        with pytest.raises(ConnectionSetupError, match="is closed"):
            await conn.send(metadata_request(5, []))


async def _serve(answer: bytes) -> asyncio.Server:
    """A listener that reads the client's first bytes, writes ``answer`` and, if that is not
    empty, keeps the connection open (closes it otherwise)."""

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.read(1)
        if answer:
            writer.write(answer)
            await writer.drain()
            await reader.read()
        writer.close()

    return await asyncio.start_server(serve, "127.0.0.1", 0)


async def test_a_tls_answer_to_api_versions_is_a_setup_error_at_once() -> None:
    # An SSL listener may answer a PLAINTEXT client's bytes with a TLS alert and keep the
    # socket open: read as a size prefix that is a 350 MB frame, waited for until the timeout.
    server = await _serve(b"\x15\x03\x03\x00\x02\x02\x0a")
    conn = BrokerConnection("127.0.0.1", server.sockets[0].getsockname()[1])
    started = asyncio.get_running_loop().time()
    try:
        with pytest.raises(ConnectionSetupError, match="answered with TLS records"):
            await conn.connect(timeout_ms=20000)
        assert asyncio.get_running_loop().time() - started < 10
    finally:
        server.close()
        await server.wait_closed()


async def test_a_broken_tls_handshake_is_a_setup_error() -> None:
    # A PLAINTEXT listener reads the ClientHello as a huge frame and hangs up.
    server = await _serve(b"")
    tls = ClientSecurity("SSL", ssl_context=ssl.create_default_context())
    conn = BrokerConnection("127.0.0.1", server.sockets[0].getsockname()[1], security=tls)
    try:
        with pytest.raises(ConnectionSetupError, match=r"TLS handshake with .* failed"):
            await conn.connect(timeout_ms=20000)
    finally:
        server.close()
        await server.wait_closed()


async def test_impossible_frame_size_closes_the_connection() -> None:
    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readexactly(4)
        writer.write(struct.pack(">i", -5))
        await writer.drain()
        await reader.read()

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    conn = BrokerConnection("127.0.0.1", server.sockets[0].getsockname()[1])
    try:
        with pytest.raises(ClientError, match="impossible size -5"):
            await conn.connect()
    finally:
        server.close()
        await server.wait_closed()


async def test_undecodable_response_fails_only_that_request() -> None:
    async with FakeCluster() as cluster:
        cluster.intercept(
            lambda b, k, v, r: (
                build_response(
                    # a Produce answer where a Metadata one is expected: bytes that do not decode
                    PRODUCE,
                    3,
                    {"responses": [{"name": "x" * 300, "partition_responses": []}]},
                )
                if k == METADATA and r.topics and r.topics[0].name == "bad"
                else None
            )
        )
        conn = BrokerConnection("127.0.0.1", cluster.brokers[0].port)
        await conn.connect()
        try:
            with pytest.raises(ClientError, match="bad response"):
                await conn.send(metadata_request(5, ["bad"]))
            ok = await conn.send(metadata_request(5, []))
            assert ok.cluster_id == "fake-cluster"
        finally:
            await conn.close()


def test_error_code_names_and_retriable_flags() -> None:
    error = KafkaError(ErrorCode.topic_already_exists, "topic 'a' already exists")
    assert (error.name, error.retriable, error.code) == ("TOPIC_ALREADY_EXISTS", False, 36)
    assert str(error) == "TOPIC_ALREADY_EXISTS: topic 'a' already exists"
    assert KafkaError(6).name == "NOT_LEADER_OR_FOLLOWER" and KafkaError(6).retriable
    assert KafkaError(9999).name == "UNKNOWN_ERROR_CODE_9999"
    import pickle

    copy = pickle.loads(pickle.dumps(error))
    assert (copy.code, str(copy)) == (36, str(error))
