"""An in-process fake Kafka cluster for unit tests of the client layer.

Each :class:`FakeBroker` is an asyncio TCP server on 127.0.0.1 (port 0) that decodes requests
with kio directly (independently of the client's codec path) and answers from a shared
:class:`FakeCluster` state: topics, partition logs of real record batches, idempotent producer
state (the last 5 batches per producer, duplicates answered with their first offset, gaps
rejected with OUT_OF_ORDER_SEQUENCE_NUMBER, unknown producers with UNKNOWN_PRODUCER_ID), topic
configs, the controller. Tests inject faults with :meth:`FakeCluster.intercept`: a hook sees
every request and may answer it itself, drop the connection, or delay.

This is the only place fakes are allowed (see /work/prompts/common.md); it is deliberately
small and strict, not a broker.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import inspect
import io
import itertools
import struct
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from kio.index import load_request_schema, load_response_schema
from kio.schema.errors import ErrorCode
from kio.serial import entity_reader, entity_writer

from odradek.protocol.build import build_response
from odradek.protocol.versions import SUPPORTED
from odradek.records.batch import Record, build_batch
from odradek.records.header import iter_headers, set_base_offset

E = ErrorCode
DROP = object()  # hook result: close the connection without answering
NO_RESPONSE = object()  # hook result: answer nothing, keep the connection

Hook = Callable[["FakeBroker", int, int, Any], Any]


@dataclass
class ProducerEntry:
    epoch: int
    last_sequence: int
    recent: collections.deque[tuple[int, int, int]] = field(
        default_factory=lambda: collections.deque(maxlen=5)
    )  # (first sequence, last sequence, base offset)


@dataclass
class FakePartition:
    leader: int
    replicas: list[int]
    batches: list[tuple[int, bytes]] = field(default_factory=list)  # (base offset, bytes)
    log_start_offset: int = 0
    next_offset: int = 0
    last_stable_offset: int | None = None  # None: same as the high watermark
    aborted: list[tuple[int, int]] = field(default_factory=list)  # (producer id, first offset)
    producers: dict[int, ProducerEntry] = field(default_factory=dict)
    timestamps: list[tuple[int, int]] = field(default_factory=list)  # (max ts, last offset)

    def append(self, batch: bytes | bytearray) -> int:
        data = bytearray(batch)
        base = self.next_offset
        set_base_offset(data, 0, base)
        ((_, header),) = list(iter_headers(data))
        self.batches.append((base, bytes(data)))
        self.next_offset = header.next_offset
        self.timestamps.append((header.max_timestamp, header.last_offset))
        return base

    def read(self, offset: int, max_bytes: int) -> bytes:
        out = bytearray()
        for _, data in self.batches:
            ((_, header),) = list(iter_headers(data, verify_crc=False))
            if header.last_offset < offset:
                continue
            if out and len(out) + len(data) > max_bytes:
                break
            out += data
        return bytes(out)


class FakeBroker:
    def __init__(self, cluster: FakeCluster, node_id: int) -> None:
        self.cluster = cluster
        self.node_id = node_id
        self.server: asyncio.Server | None = None
        self.port = 0
        self.requests: list[tuple[int, int, Any]] = []  # (api_key, version, request)
        self.connections = 0
        self._writers: set[asyncio.StreamWriter] = set()
        self._tasks: set[asyncio.Task[None]] = set()

    async def start(self) -> None:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", self.port)
        self.port = self.server.sockets[0].getsockname()[1]

    async def stop(self) -> None:
        if self.server is not None:
            self.server.close()
            for writer in list(self._writers):
                writer.close()
            for task in list(self._tasks):
                task.cancel()
            for task in list(self._tasks):
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await task
            await self.server.wait_closed()
            self.server = None

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        self._writers.add(writer)
        self.connections += 1
        try:
            while True:
                try:
                    (size,) = struct.unpack(">i", await reader.readexactly(4))
                    payload = await reader.readexactly(size)
                except (asyncio.IncompleteReadError, ConnectionError):
                    return
                answer = await self._handle_frame(payload)
                if answer is DROP:
                    return
                if answer is not None:
                    writer.write(answer)
                    await writer.drain()
        except (asyncio.CancelledError, ConnectionError):
            # stop() cancels handlers stuck in a hook; ending normally keeps asyncio's
            # stream callback from logging the cancellation as an error.
            return
        finally:
            self._writers.discard(writer)
            self._tasks.discard(task)
            writer.close()

    async def _handle_frame(self, payload: bytes) -> Any:
        api_key, version, correlation_id = struct.unpack_from(">hhi", payload, 0)
        ranges = self.cluster.api_versions
        if api_key == 18 and not ranges[18][0] <= version <= ranges[18][1]:
            body = build_response(
                18,
                0,
                {
                    "error_code": E.unsupported_version,
                    "api_keys": [
                        {"api_key": k, "min_version": lo, "max_version": hi}
                        for k, (lo, hi) in ranges.items()
                    ],
                },
            )
            return _frame(correlation_id, 18, 0, body)
        if api_key not in ranges or not ranges[api_key][0] <= version <= ranges[api_key][1]:
            return DROP  # what Kafka does for an unsupported version of another API
        request_cls = load_request_schema(api_key, version)
        header_cls = request_cls.__header_schema__
        _, used = entity_reader(header_cls)(payload, 0)
        request, _ = entity_reader(request_cls)(payload, used)
        self.requests.append((api_key, version, request))
        result: Any = None
        for hook in list(self.cluster.hooks):
            result = hook(self, api_key, version, request)
            if inspect.isawaitable(result):
                result = await result
            if result is not None:
                break
        if result is DROP:
            return DROP
        if result is NO_RESPONSE:
            return None
        if result is None:
            result = self.cluster.handle(self, api_key, version, request)
            if result is NO_RESPONSE:
                return None
        if isinstance(result, dict):
            result = build_response(api_key, version, result)
        return _frame(correlation_id, api_key, version, result)


def _frame(correlation_id: int, api_key: int, version: int, body: Any) -> bytes:
    response_cls = load_response_schema(api_key, version)
    header_cls = response_cls.__header_schema__
    buffer = io.BytesIO()
    buffer.write(b"\0\0\0\0")
    entity_writer(header_cls)(buffer, header_cls(correlation_id=correlation_id))
    entity_writer(type(body))(buffer, body)
    data = bytearray(buffer.getvalue())
    struct.pack_into(">i", data, 0, len(data) - 4)
    return bytes(data)


class FakeCluster:
    """Shared state of ``n`` fake brokers (node ids 0..n-1); controller is node 0."""

    def __init__(
        self,
        brokers: int = 1,
        *,
        api_versions: dict[int, tuple[int, int]] | None = None,
        auto_create: bool = True,
        default_partitions: int = 1,
    ) -> None:
        self.brokers = [FakeBroker(self, i) for i in range(brokers)]
        self.api_versions = dict(api_versions or SUPPORTED)
        self.auto_create = auto_create
        self.default_partitions = default_partitions
        self.topics: dict[str, list[FakePartition]] = {}
        self.configs: dict[str, dict[str, str]] = {}
        self.controller_id = 0
        self.cluster_id = "fake-cluster"
        self.hooks: list[Hook] = []
        self.produce_errors: collections.Counter[int] = collections.Counter()
        self.unknown_producer_error = False  # True: behave like a broker before Kafka 2.5
        self._next_producer_id = itertools.count(1000)

    async def __aenter__(self) -> FakeCluster:
        for broker in self.brokers:
            await broker.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        for broker in self.brokers:
            await broker.stop()

    @property
    def bootstrap(self) -> str:
        return ",".join(f"127.0.0.1:{b.port}" for b in self.brokers)

    def intercept(self, hook: Hook) -> Hook:
        self.hooks.append(hook)
        return hook

    def requests(self, api_key: int) -> list[Any]:
        return [r for b in self.brokers for k, _, r in b.requests if k == api_key]

    def create_topic(self, name: str, partitions: int = 1, *, leaders: list[int] | None = None):
        n = len(self.brokers)
        self.topics[name] = [
            FakePartition(leader=(leaders[p] if leaders else p % n), replicas=[p % n])
            for p in range(partitions)
        ]
        self.configs[name] = {}
        return self.topics[name]

    def append_records(
        self, topic: str, partition: int, values: list[bytes], **batch_args: Any
    ) -> int:
        batch = build_batch([Record(value=v, key=None) for v in values], **batch_args)
        return self.topics[topic][partition].append(batch)

    def all_values(self, topic: str, partition: int) -> list[bytes | None]:
        from odradek.records.batch import decode_batches

        part = self.topics[topic][partition]
        return [
            r.value
            for _, data in part.batches
            for b in decode_batches(data)
            if not b.header.is_control
            for r in b.records
        ]

    # -- dispatch ------------------------------------------------------------------------------

    def handle(self, broker: FakeBroker, api_key: int, version: int, request: Any) -> Any:
        handler = {
            0: self._produce,
            1: self._fetch,
            2: self._list_offsets,
            3: self._metadata,
            18: self._api_versions,
            19: self._create_topics,
            20: self._delete_topics,
            21: self._delete_records,
            22: self._init_producer_id,
            32: self._describe_configs,
            33: self._alter_configs,
            37: self._create_partitions,
            44: self._incremental_alter_configs,
            60: self._describe_cluster,
        }[api_key]
        return handler(broker, version, request)

    def _api_versions(self, broker: FakeBroker, version: int, request: Any) -> dict:
        return {
            "error_code": E.none,
            "api_keys": [
                {"api_key": k, "min_version": lo, "max_version": hi}
                for k, (lo, hi) in sorted(self.api_versions.items())
            ],
        }

    def _metadata(self, broker: FakeBroker, version: int, request: Any) -> dict:
        names = (
            list(self.topics)
            if request.topics is None
            else [t.name for t in request.topics if t.name is not None]
        )
        topics = []
        for name in names:
            if name not in self.topics and request.allow_auto_topic_creation and self.auto_create:
                self.create_topic(name, self.default_partitions)
            if name not in self.topics:
                topics.append({"name": name, "error_code": E.unknown_topic_or_partition})
                continue
            topics.append(
                {
                    "name": name,
                    "error_code": E.none,
                    "partitions": [
                        {
                            "partition_index": i,
                            "error_code": E.none if p.leader >= 0 else E.leader_not_available,
                            "leader_id": p.leader,
                            "replica_nodes": p.replicas,
                            "isr_nodes": p.replicas,
                        }
                        for i, p in enumerate(self.topics[name])
                    ],
                }
            )
        return {
            "brokers": [
                {"node_id": b.node_id, "host": "127.0.0.1", "port": b.port}
                for b in self.brokers
                if b.server is not None
            ],
            "cluster_id": self.cluster_id,
            "controller_id": self.controller_id,
            "topics": topics,
        }

    def _partition(
        self, broker: FakeBroker, topic: str, index: int
    ) -> tuple[FakePartition | None, ErrorCode]:
        parts = self.topics.get(topic)
        if parts is None or not 0 <= index < len(parts):
            return None, E.unknown_topic_or_partition
        if parts[index].leader != broker.node_id:
            return None, E.not_leader_or_follower
        return parts[index], E.none

    def _produce(self, broker: FakeBroker, version: int, request: Any) -> Any:
        responses = []
        for topic in request.topic_data:
            parts = []
            for pd in topic.partition_data:
                part, error = self._partition(broker, topic.name, pd.index)
                base, log_start = -1, -1
                if part is not None:
                    error, base = self._append(part, bytes(pd.records or b""))
                    log_start = part.log_start_offset
                self.produce_errors[error] += 1
                parts.append(
                    {
                        "index": pd.index,
                        "error_code": error,
                        "base_offset": base,
                        "log_start_offset": log_start,
                    }
                )
            responses.append({"name": topic.name, "partition_responses": parts})
        if request.acks == 0:
            return NO_RESPONSE
        return {"responses": responses}

    def _append(self, part: FakePartition, data: bytes) -> tuple[ErrorCode, int]:
        headers = list(iter_headers(data))
        if len(headers) != 1:
            return E.corrupt_message, -1
        ((_, header),) = headers
        pid = header.producer_id
        if pid < 0:
            return E.none, part.append(data)
        entry = part.producers.get(pid)
        first, last = header.base_sequence, header.last_sequence
        if entry is None:
            # Since KIP-360 (Kafka 2.5) a producer the partition has no state for is accepted
            # at any sequence; older brokers answered UNKNOWN_PRODUCER_ID.
            if first != 0 and self.unknown_producer_error:
                return E.unknown_producer_id, -1
        elif header.producer_epoch < entry.epoch:
            return E.invalid_producer_epoch, -1
        elif header.producer_epoch > entry.epoch:
            if first != 0:
                return E.out_of_order_sequence_number, -1
        else:
            for seen_first, seen_last, seen_base in entry.recent:
                if (seen_first, seen_last) == (first, last):
                    return E.none, seen_base  # duplicate: Kafka answers with the first offset
            if first != (entry.last_sequence + 1) % 2**31:
                return E.out_of_order_sequence_number, -1
        base = part.append(data)
        if entry is None or header.producer_epoch != entry.epoch:
            entry = part.producers[pid] = ProducerEntry(header.producer_epoch, -1)
        entry.last_sequence = last
        entry.recent.append((first, last, base))
        return E.none, base

    def _fetch(self, broker: FakeBroker, version: int, request: Any) -> dict:
        responses = []
        for topic in request.topics:
            parts = []
            for fp in topic.partitions:
                part, error = self._partition(broker, topic.topic, fp.partition)
                entry: dict[str, Any] = {"partition_index": fp.partition, "error_code": error}
                if part is not None:
                    read_committed = request.isolation_level == 1
                    lso = part.last_stable_offset
                    if lso is None:
                        lso = part.next_offset
                    if not part.log_start_offset <= fp.fetch_offset <= part.next_offset:
                        entry["error_code"] = E.offset_out_of_range
                        records = b""
                    else:
                        records = part.read(fp.fetch_offset, fp.partition_max_bytes)
                    entry.update(
                        high_watermark=part.next_offset,
                        last_stable_offset=lso,
                        log_start_offset=part.log_start_offset,
                        records=records,
                        aborted_transactions=[
                            {"producer_id": pid, "first_offset": first}
                            for pid, first in part.aborted
                        ]
                        if read_committed
                        else None,
                    )
                else:
                    entry.update(high_watermark=-1, records=b"")
                parts.append(entry)
            responses.append({"topic": topic.topic, "partitions": parts})
        return {"error_code": E.none, "session_id": 0, "responses": responses}

    def _list_offsets(self, broker: FakeBroker, version: int, request: Any) -> dict:
        topics = []
        for topic in request.topics:
            parts = []
            for lp in topic.partitions:
                part, error = self._partition(broker, topic.name, lp.partition_index)
                offset, timestamp = -1, -1
                if part is not None:
                    if lp.timestamp == -2:
                        offset = part.log_start_offset
                    elif lp.timestamp == -1:
                        committed = getattr(request, "isolation_level", 0) == 1
                        lso = part.last_stable_offset
                        offset = lso if committed and lso is not None else part.next_offset
                    elif lp.timestamp == -3:
                        if part.timestamps:
                            timestamp, offset = max(part.timestamps)
                    else:
                        for ts, last in part.timestamps:
                            if ts >= lp.timestamp:
                                offset, timestamp = last, ts
                                break
                parts.append(
                    {
                        "partition_index": lp.partition_index,
                        "error_code": error,
                        "offset": offset,
                        "timestamp": timestamp,
                    }
                )
            topics.append({"name": topic.name, "partitions": parts})
        return {"topics": topics}

    def _init_producer_id(self, broker: FakeBroker, version: int, request: Any) -> dict:
        return {
            "error_code": E.none,
            "producer_id": next(self._next_producer_id),
            "producer_epoch": 0,
        }

    def _create_topics(self, broker: FakeBroker, version: int, request: Any) -> dict:
        results = []
        for topic in request.topics:
            if broker.node_id != self.controller_id:
                error, message = E.not_controller, None
            elif topic.name in self.topics:
                error, message = E.topic_already_exists, f"Topic '{topic.name}' already exists."
            elif topic.num_partitions == 0 or topic.num_partitions < -1:
                error, message = E.invalid_partitions, "Number of partitions must be larger than 0."
            elif topic.replication_factor > len(self.brokers):
                error, message = E.invalid_replication_factor, "Replication factor too large."
            else:
                error, message = E.none, None
                if not request.validate_only:
                    count = (
                        self.default_partitions
                        if topic.num_partitions == -1
                        else topic.num_partitions
                    )
                    self.create_topic(topic.name, count)
                    self.configs[topic.name] = {c.name: c.value for c in topic.configs}
            results.append({"name": topic.name, "error_code": error, "error_message": message})
        return {"topics": results}

    def _delete_topics(self, broker: FakeBroker, version: int, request: Any) -> dict:
        names = [t.name for t in request.topics] if version >= 6 else list(request.topic_names)
        results = []
        for name in names:
            error = E.none if name in self.topics else E.unknown_topic_or_partition
            self.topics.pop(name, None)
            results.append({"name": name, "error_code": error})
        return {"responses": results}

    def _create_partitions(self, broker: FakeBroker, version: int, request: Any) -> dict:
        results = []
        for topic in request.topics:
            parts = self.topics.get(topic.name)
            if parts is None:
                error, message = E.unknown_topic_or_partition, None
            elif topic.count <= len(parts):
                error = E.invalid_partitions
                message = f"Topic currently has {len(parts)} partitions, {topic.count} requested."
            else:
                error, message = E.none, None
                if not request.validate_only:
                    n = len(self.brokers)
                    parts.extend(
                        FakePartition(leader=p % n, replicas=[p % n])
                        for p in range(len(parts), topic.count)
                    )
            results.append({"name": topic.name, "error_code": error, "error_message": message})
        return {"results": results}

    def _describe_configs(self, broker: FakeBroker, version: int, request: Any) -> dict:
        results = []
        for res in request.resources:
            if res.resource_type == 2 and res.resource_name not in self.topics:
                results.append(
                    {
                        "error_code": E.unknown_topic_or_partition,
                        "resource_type": 2,
                        "resource_name": res.resource_name,
                        "configs": [],
                    }
                )
                continue
            values = {"retention.ms": ("604800000", True), "cleanup.policy": ("delete", True)}
            if res.resource_type == 2:
                for name, value in self.configs.get(res.resource_name, {}).items():
                    values[name] = (value, False)
            else:
                values = {"broker.id": (res.resource_name, True)}
            configs = [
                {
                    "name": name,
                    "value": value,
                    "read_only": res.resource_type != 2,
                    "config_source": 5 if default else 1,
                    "is_sensitive": False,
                }
                for name, (value, default) in values.items()
                if res.configuration_keys is None
                or not res.configuration_keys
                or name in res.configuration_keys
            ]
            results.append(
                {
                    "error_code": E.none,
                    "resource_type": res.resource_type,
                    "resource_name": res.resource_name,
                    "configs": configs,
                }
            )
        return {"results": results}

    def _alter_configs(self, broker: FakeBroker, version: int, request: Any) -> dict:
        responses = []
        for res in request.resources:
            if res.resource_name not in self.topics:
                error = E.unknown_topic_or_partition
            else:
                error = E.none
                if not request.validate_only:
                    self.configs[res.resource_name] = {c.name: c.value for c in res.configs}
            responses.append(
                {
                    "error_code": error,
                    "resource_type": res.resource_type,
                    "resource_name": res.resource_name,
                }
            )
        return {"responses": responses}

    def _incremental_alter_configs(self, broker: FakeBroker, version: int, request: Any) -> dict:
        responses = []
        for res in request.resources:
            error, message = E.none, None
            if res.resource_name not in self.topics:
                error = E.unknown_topic_or_partition
            else:
                config = self.configs.setdefault(res.resource_name, {})
                for c in res.configs:
                    if c.config_operation == 0:
                        config[c.name] = c.value
                    elif c.config_operation == 1:
                        config.pop(c.name, None)
                    else:
                        error, message = E.invalid_config, f"{c.name} is not a list"
            responses.append(
                {
                    "error_code": error,
                    "error_message": message,
                    "resource_type": res.resource_type,
                    "resource_name": res.resource_name,
                }
            )
        return {"responses": responses}

    def _delete_records(self, broker: FakeBroker, version: int, request: Any) -> dict:
        topics = []
        for topic in request.topics:
            parts = []
            for dp in topic.partitions:
                part, error = self._partition(broker, topic.name, dp.partition_index)
                low = -1
                if part is not None:
                    target = part.next_offset if dp.offset == -1 else dp.offset
                    if target > part.next_offset:
                        error = E.offset_out_of_range
                    else:
                        part.log_start_offset = max(part.log_start_offset, target)
                        low = part.log_start_offset
                parts.append(
                    {
                        "partition_index": dp.partition_index,
                        "low_watermark": low,
                        "error_code": error,
                    }
                )
            topics.append({"name": topic.name, "partitions": parts})
        return {"topics": topics}

    def _describe_cluster(self, broker: FakeBroker, version: int, request: Any) -> dict:
        return {
            "error_code": E.none,
            "cluster_id": self.cluster_id,
            "controller_id": self.controller_id,
            "brokers": [
                {"broker_id": b.node_id, "host": "127.0.0.1", "port": b.port} for b in self.brokers
            ],
        }


async def wait_until(predicate: Callable[[], bool], timeout: float = 5.0) -> None:
    """Poll ``predicate`` every 10 ms; fail the test after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError("condition not met in time")
        await asyncio.sleep(0.01)
