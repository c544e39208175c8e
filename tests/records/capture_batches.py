"""Capture record batches produced by librdkafka (confluent-kafka) into tests/records/data/.

Re-run with ``.venv/bin/python tests/records/capture_batches.py`` (about 10 s). It
starts a throwaway Kafka-speaking server on 127.0.0.1 (a free port) that answers just
enough of the protocol for a producer, decoded and encoded with kio:

* ApiVersions (v0-v3): advertises ApiVersions 0-3, Metadata 0-4, Produce 3-7, and
  (without serving them) Fetch 4-11 and FindCoordinator 0-2, because librdkafka
  only writes record batch v2, lz4 and zstd when those ranges are advertised;
* Metadata (v0-v4): one broker (itself) and one topic with one partition;
* Produce (v3-v7): stores the ``records`` bytes exactly as received, answers success.

For every codec (none, gzip, snappy, lz4, zstd) and every message set below, a fresh
producer sends the set, lingering long enough that it travels as one batch. The raw
batch bytes are written to ``librdkafka_<codec>_<set>.bin`` and what was produced to
``librdkafka_expected.json`` (byte strings as Latin-1 text); the tests decode the
files and compare. The bulk set is > 64 KiB so lz4 needs more than one block.
"""

from __future__ import annotations

import asyncio
import datetime
import io
import json
import struct
import sys
import threading
import time
from pathlib import Path
from typing import Any

from kio.index import load_request_schema, load_response_schema
from kio.schema.errors import ErrorCode
from kio.serial import entity_reader, entity_writer
from kio.static.primitive import i16, i32, i32Timedelta, i64

DATA_DIR = Path(__file__).parent / "data"
TOPIC = "capture"
CODECS = ("none", "gzip", "snappy", "lz4", "zstd")
BASE_TS = 1_700_000_000_000

API_VERSIONS = 18
METADATA = 3
PRODUCE = 0
FETCH = 1
FIND_COORDINATOR = 10
SUPPORTED = {API_VERSIONS: (0, 3), METADATA: (0, 4), PRODUCE: (3, 7)}
# Advertised but never served: librdkafka switches features on from the advertised
# ranges (record batch v2 needs Fetch >= 4, zstd needs Fetch >= 10, lz4 needs
# FindCoordinator); without them it falls back to magic 0 message sets.
ADVERTISED_ONLY = {FETCH: (4, 11), FIND_COORDINATOR: (0, 2)}

Message = dict[str, Any]  # key, value (bytes | None), headers [(str, bytes | None)], timestamp


def _text(n: int, seed: int) -> bytes:
    words = b"alpha beta gamma delta epsilon zeta eta theta iota kappa lambda mu ".split()
    out = bytearray()
    i = seed
    while len(out) < n:
        out += words[i % len(words)] + b" "
        i = i * 7 + 3
    return bytes(out[:n])


def message_sets() -> dict[str, list[Message]]:
    """The messages produced for each codec. Deterministic, so the files can be checked."""
    edge: list[Message] = [
        {"key": b"k0", "value": _text(60, 1), "headers": [("h1", b"v1")], "timestamp": BASE_TS},
        {"key": None, "value": _text(80, 2), "headers": [], "timestamp": BASE_TS + 1},
        {"key": b"empty", "value": b"", "headers": [], "timestamp": BASE_TS + 2},
        {
            "key": b"tombstone",
            "value": None,
            "headers": [("null-header", None)],
            "timestamp": BASE_TS + 3,
        },
        {
            "key": b"\x00\xffbinary",
            "value": bytes(range(256)),
            "headers": [("a", b""), ("b", b"2"), ("utf8-\u043a\u043b\u044e\u0447", b"x")],
            "timestamp": BASE_TS + 4,
        },
        {"key": b"earlier", "value": _text(40, 3), "headers": [], "timestamp": BASE_TS - 5000},
        {"key": b"later", "value": _text(300, 4), "headers": [], "timestamp": BASE_TS + 100_000},
        {"key": b"big", "value": _text(9_000, 5), "headers": [], "timestamp": BASE_TS + 5},
    ]
    bulk: list[Message] = [
        {
            "key": b"key-%d" % i,
            "value": _text(256, i),
            "headers": [("seq", b"%d" % i)] if i % 10 == 0 else [],
            "timestamp": BASE_TS + i,
        }
        for i in range(300)
    ]
    return {"edge": edge, "bulk": bulk}


# --------------------------------------------------------------------------- server


class CaptureServer:
    """A minimal single-broker Kafka endpoint that keeps every produced records blob."""

    def __init__(self) -> None:
        self.port = 0
        self.produced: list[bytes] = []
        self.ready = threading.Event()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None

    def run(self) -> None:
        asyncio.run(self._main())

    def stop(self) -> None:
        if self._loop is not None and self._stop is not None:
            self._loop.call_soon_threadsafe(self._stop.set)

    async def _main(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()
        server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = server.sockets[0].getsockname()[1]
        self.ready.set()
        async with server:
            await self._stop.wait()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                (size,) = struct.unpack(">i", await reader.readexactly(4))
                frame = await reader.readexactly(size)
                response = self._handle(frame)
                if response is not None:
                    writer.write(struct.pack(">i", len(response)) + response)
                    await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    def _handle(self, frame: bytes) -> bytes | None:
        api_key, api_version, correlation_id = struct.unpack_from(">hhi", frame)
        low, high = SUPPORTED.get(api_key, (0, -1))
        if not low <= api_version <= high:
            if api_key == API_VERSIONS:
                # UNSUPPORTED_VERSION in a v0 body; the client retries with v0.
                body = struct.pack(">hi", ErrorCode.unsupported_version.value, 0)
                return struct.pack(">i", correlation_id) + body
            raise RuntimeError(f"client sent unsupported api {api_key} v{api_version}")
        request_type = load_request_schema(api_key, api_version)
        _header, header_size = entity_reader(request_type.__header_schema__)(frame, 0)
        request, _ = entity_reader(request_type)(frame, header_size)
        response_type = load_response_schema(api_key, api_version)
        if api_key == API_VERSIONS:
            response = self._api_versions(response_type)
        elif api_key == METADATA:
            response = self._metadata(response_type)
        else:
            response = self._produce(response_type, request)
            if request.acks == 0:
                return None
        out = io.BytesIO()
        entity_writer(response_type.__header_schema__)(
            out, response_type.__header_schema__(correlation_id=i32(correlation_id))
        )
        entity_writer(response_type)(out, response)
        return out.getvalue()

    def _api_versions(self, response_type: Any) -> Any:
        module = sys.modules[response_type.__module__]
        keys = tuple(
            module.ApiVersion(api_key=i16(key), min_version=i16(low), max_version=i16(high))
            for key, (low, high) in {**SUPPORTED, **ADVERTISED_ONLY}.items()
        )
        return response_type(
            error_code=ErrorCode.none,
            api_keys=keys,
            throttle_time=i32Timedelta.parse(datetime.timedelta(0)),
        )

    def _metadata(self, response_type: Any) -> Any:
        module = sys.modules[response_type.__module__]
        broker = module.MetadataResponseBroker(
            node_id=i32(0), host="127.0.0.1", port=i32(self.port)
        )
        partition = module.MetadataResponsePartition(
            error_code=ErrorCode.none,
            partition_index=i32(0),
            leader_id=i32(0),
            replica_nodes=(i32(0),),
            isr_nodes=(i32(0),),
        )
        topic = module.MetadataResponseTopic(
            error_code=ErrorCode.none, name=TOPIC, partitions=(partition,)
        )
        fields = {"brokers": (broker,), "topics": (topic,)}
        if "throttle_time" in response_type.__dataclass_fields__:
            fields["throttle_time"] = i32Timedelta.parse(datetime.timedelta(0))
        if "controller_id" in response_type.__dataclass_fields__:
            fields["controller_id"] = i32(0)
        return response_type(**fields)

    def _produce(self, response_type: Any, request: Any) -> Any:
        module = sys.modules[response_type.__module__]
        topics = []
        for topic in request.topic_data:
            partitions = []
            for data in topic.partition_data:
                if data.records:
                    self.produced.append(bytes(data.records))
                partitions.append(
                    module.PartitionProduceResponse(
                        index=data.index, error_code=ErrorCode.none, base_offset=i64(0)
                    )
                )
            topics.append(
                module.TopicProduceResponse(name=topic.name, partition_responses=tuple(partitions))
            )
        return response_type(responses=tuple(topics))


# --------------------------------------------------------------------------- capture


def _produce(port: int, codec: str, messages: list[Message]) -> None:
    from confluent_kafka import Producer

    producer = Producer(
        {
            "bootstrap.servers": f"127.0.0.1:{port}",
            "compression.type": codec,
            "linger.ms": 200,
            "batch.num.messages": 10_000,
            "acks": 1,
            "enable.idempotence": False,
            "broker.address.family": "v4",
        }
    )
    for message in messages:
        producer.produce(
            TOPIC,
            value=message["value"],
            key=message["key"],
            headers=message["headers"],
            timestamp=message["timestamp"],
            partition=0,
        )
    remaining = producer.flush(15)
    if remaining:
        raise RuntimeError(f"{remaining} messages were not delivered for codec {codec}")


def _encode(value: bytes | None) -> str | None:
    # Latin-1 maps bytes 0-255 to code points one to one: lossless, and the mostly
    # ASCII values stay readable (and small) in the JSON.
    return None if value is None else value.decode("latin-1")


def main() -> None:
    import confluent_kafka

    server = CaptureServer()
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    if not server.ready.wait(5):
        raise RuntimeError("capture server did not start")
    DATA_DIR.mkdir(exist_ok=True)
    sets = message_sets()
    files: dict[str, dict[str, str]] = {}
    try:
        for codec in CODECS:
            for set_name, messages in sets.items():
                server.produced.clear()
                started = time.monotonic()
                _produce(server.port, codec, messages)
                if len(server.produced) != 1:
                    raise RuntimeError(
                        f"{codec}/{set_name}: expected one Produce, got {len(server.produced)}"
                    )
                name = f"librdkafka_{codec}_{set_name}.bin"
                (DATA_DIR / name).write_bytes(server.produced[0])
                files[name] = {"codec": codec, "set": set_name}
                print(
                    f"{name}: {len(server.produced[0])} bytes ({time.monotonic() - started:.2f} s)"
                )
    finally:
        server.stop()
        thread.join(5)
    manifest = {
        "producer": f"confluent-kafka {confluent_kafka.version()[0]}, "
        f"librdkafka {confluent_kafka.libversion()[0]}",
        "files": files,
        "sets": {
            set_name: [
                {
                    "key": _encode(m["key"]),
                    "value": _encode(m["value"]),
                    "headers": [[k, _encode(v)] for k, v in m["headers"]],
                    "timestamp": m["timestamp"],
                }
                for m in messages
            ]
            for set_name, messages in sets.items()
        },
    }
    (DATA_DIR / "librdkafka_expected.json").write_text(json.dumps(manifest, indent=1) + "\n")


if __name__ == "__main__":
    main()
