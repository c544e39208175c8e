"""What the console's pages show, gathered from the cluster with odradek's client.

One :class:`Gateway` holds one :class:`~odradek.client.core.KafkaClient` shared by an
:class:`~odradek.client.admin.Admin` and a :class:`~odradek.client.group_admin.GroupAdmin`;
the message browser borrows it for a short-lived :class:`~odradek.client.fetcher.Consumer`.
The client is started lazily and again after a failure, so a console started before its broker
(or outliving a broker restart) recovers by itself.

Mistakes a user can make (unknown topic, bad offset) raise :class:`ConsoleError` with the HTTP
status the page should get; the cluster's own refusals stay :class:`KafkaError`, an unreachable
cluster :class:`ClientError`; :mod:`odradek.console.app` turns all three into error pages.
"""

from __future__ import annotations

import asyncio
import datetime
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

from odradek.client.admin import Admin, ConfigEntry, ConfigResource, NewTopic
from odradek.client.core import KafkaClient
from odradek.client.errors import ErrorCode, KafkaError
from odradek.client.fetcher import Consumer
from odradek.client.group_admin import (
    GroupAdmin,
    GroupDescription,
    GroupListing,
    PartitionOffsets,
    ResetSpec,
)
from odradek.client.metadata import BrokerInfo, PartitionInfo
from odradek.client.security import ClientSecurity
from odradek.console.decode import Formats, Shown, show

TopicPartition = tuple[str, int]

MAX_BROWSE = 500  # records one page may ask for
BROWSE_WAIT_S = 5.0  # give up on the records still missing after this long
TEXT = Formats()  # every part of a record as text
REQUEST_TIMEOUT_MS = 10000  # a page should fail, not hang, when the cluster stops answering


class ConsoleError(Exception):
    """A request the console cannot serve; ``status`` is the page's HTTP status."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


# -- what the pages show -------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ClusterOverview:
    cluster_id: str | None
    controller_id: int
    brokers: list[BrokerInfo]


@dataclass(frozen=True, slots=True)
class TopicSummary:
    name: str
    internal: bool
    partitions: int
    replication_factor: int
    records: int  # sum of (log end - log start) over partitions
    size: int | None  # bytes on disk (leaders' replicas); None when no broker reported it


@dataclass(frozen=True, slots=True)
class PartitionView:
    partition: int
    leader: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    log_start: int | None
    log_end: int | None
    size: int | None


@dataclass(frozen=True, slots=True)
class TopicDetail:
    name: str
    internal: bool
    partitions: list[PartitionView]
    configs: list[tuple[str, ConfigEntry]]

    @property
    def size(self) -> int | None:
        sizes = [p.size for p in self.partitions if p.size is not None]
        return sum(sizes) if sizes else None


@dataclass(frozen=True, slots=True)
class ShownRecord:
    partition: int
    offset: int
    timestamp: str
    key: Shown
    value: Shown
    headers: list[tuple[str, Shown]]


@dataclass(slots=True)
class BrowseResult:
    partition: int
    start: int  # the first offset asked for
    log_start: int
    log_end: int
    records: list[ShownRecord] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class GroupSummary:
    group_id: str
    state: str
    protocol_type: str
    members: int
    coordinator: int


@dataclass(frozen=True, slots=True)
class GroupDetail:
    description: GroupDescription
    offsets: list[PartitionOffsets]

    @property
    def total_lag(self) -> int:
        return sum(row.lag or 0 for row in self.offsets)


def format_timestamp(epoch_ms: int) -> str:
    if epoch_ms < 0:
        return "-"
    moment = datetime.datetime.fromtimestamp(epoch_ms / 1000, datetime.UTC)
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def parse_int(text: str | None, what: str, *, minimum: int = 0) -> int | None:
    """A form field as an int (None when empty); a bad one is a 400 that names the field."""
    if text is None or not text.strip():
        return None
    try:
        value = int(text.strip())
    except ValueError:
        raise ConsoleError(400, f"{what} must be a whole number, not {text.strip()!r}") from None
    if value < minimum:
        raise ConsoleError(400, f"{what} must be >= {minimum}, not {value}")
    return value


def parse_datetime(text: str) -> int:
    """``YYYY-MM-DDTHH:MM[:SS[.sss]]`` (UTC unless a zone is given) as epoch milliseconds."""
    try:
        moment = datetime.datetime.fromisoformat(text.strip())
    except ValueError:
        raise ConsoleError(
            400, f"timestamp must look like 2024-01-31T12:00:00 (UTC), not {text.strip()!r}"
        ) from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=datetime.UTC)
    epoch_ms = int(moment.timestamp() * 1000)
    if epoch_ms < 0:
        raise ConsoleError(400, f"timestamp {text.strip()!r} is before 1970")
    return epoch_ms


# -- the gateway ---------------------------------------------------------------------------


class Gateway:
    """The console's one connection to the cluster."""

    def __init__(self, bootstrap_servers: str, security: ClientSecurity | None = None) -> None:
        self.bootstrap_servers = bootstrap_servers
        # The operator's own credentials (--command-config): the brokers' authorizer decides
        # what the console may see and do, exactly as for the CLI.
        self.client = KafkaClient(
            bootstrap_servers,
            client_id="odradek-console",
            request_timeout_ms=REQUEST_TIMEOUT_MS,
            security=security,
        )
        self.admin = Admin(self.client, request_timeout_ms=REQUEST_TIMEOUT_MS)
        self.groups = GroupAdmin(self.client, request_timeout_ms=REQUEST_TIMEOUT_MS)

    async def _ready(self) -> None:
        await self.client.start()  # a no-op once started; retried after a failed start

    async def close(self) -> None:
        await self.client.close()

    # -- brokers -------------------------------------------------------------------------------

    async def overview(self) -> ClusterOverview:
        await self._ready()
        cluster = await self.admin.describe_cluster()
        return ClusterOverview(
            cluster.cluster_id,
            cluster.controller_id,
            [cluster.brokers[b] for b in sorted(cluster.brokers)],
        )

    # -- topics --------------------------------------------------------------------------------

    async def _sizes(self, partitions: Sequence[TopicPartition]) -> dict[TopicPartition, int]:
        """Each partition's size in bytes from DescribeLogDirs: the leader's replica if it
        reported one, else the largest replica found."""
        if not partitions:
            return {}
        sizes: dict[TopicPartition, dict[int, int]] = {}
        dirs_by_broker = await self.admin.describe_log_dirs(partitions=list(partitions))
        for broker, dirs in dirs_by_broker.items():
            for description in dirs.values():
                for tp, replica in description.replicas.items():
                    if not replica.is_future:
                        sizes.setdefault(tp, {})[broker] = replica.size
        cluster = self.client.cluster
        result: dict[TopicPartition, int] = {}
        for tp, by_broker in sizes.items():
            leader = cluster.leader(*tp)
            result[tp] = by_broker[leader] if leader in by_broker else max(by_broker.values())
        return result

    async def _offsets(
        self, partitions: Sequence[TopicPartition]
    ) -> tuple[dict[TopicPartition, int], dict[TopicPartition, int]]:
        """(log start offsets, log end offsets) of ``partitions``; leaderless ones are left out."""
        if not partitions:
            return {}, {}
        starts = await self.groups.log_offsets(partitions, -2)
        ends = await self.groups.log_offsets(partitions, -1)
        return starts, ends

    async def end_offsets(self) -> dict[TopicPartition, int]:
        """Log end offsets of every partition with a leader (for the throughput sampler)."""
        await self._ready()
        cluster = await self.admin.list_topics(include_internal=False)
        partitions = [
            (name, p)
            for name, info in cluster.topics.items()
            if not info.error_code
            for p in info.available_partitions()
        ]
        return await self.groups.log_offsets(partitions, -1) if partitions else {}

    async def topics(self) -> list[TopicSummary]:
        await self._ready()
        cluster = await self.admin.list_topics()
        partitions = [
            (name, p)
            for name, info in cluster.topics.items()
            if not info.error_code
            for p in info.available_partitions()
        ]
        (starts, ends), sizes = await asyncio.gather(
            self._offsets(partitions), self._sizes(partitions)
        )
        summaries = []
        for name in sorted(cluster.topics):
            info = cluster.topics[name]
            own = [(name, p) for p in info.partitions]
            records = sum(ends.get(tp, 0) - starts.get(tp, 0) for tp in own)
            known = [sizes[tp] for tp in own if tp in sizes]
            replication = max((len(p.replicas) for p in info.partitions.values()), default=0)
            summaries.append(
                TopicSummary(
                    name,
                    info.is_internal,
                    len(info.partitions),
                    replication,
                    records,
                    sum(known) if known else None,
                )
            )
        return summaries

    async def _topic_partitions(self, topic: str) -> dict[int, PartitionInfo]:
        await self._ready()
        cluster = await self.client.metadata([topic], refresh=True)
        info = cluster.topics.get(topic)
        if info is None or info.error_code == ErrorCode.unknown_topic_or_partition:
            raise ConsoleError(404, f"topic {topic!r} does not exist")
        if info.error_code:
            raise KafkaError(info.error_code, f"metadata of topic {topic!r}")
        return info.partitions

    async def topic(self, topic: str) -> TopicDetail:
        partitions = await self._topic_partitions(topic)
        tps = [(topic, p) for p in sorted(partitions) if partitions[p].leader >= 0]
        resource = ConfigResource("topic", topic)
        (starts, ends), sizes, configs = await asyncio.gather(
            self._offsets(tps), self._sizes(tps), self.admin.describe_configs([resource])
        )
        internal = self.client.cluster.topics[topic].is_internal
        views = [
            PartitionView(
                p,
                info.leader,
                info.replicas,
                info.isr,
                starts.get((topic, p)),
                ends.get((topic, p)),
                sizes.get((topic, p)),
            )
            for p, info in sorted(partitions.items())
        ]
        return TopicDetail(topic, internal, views, sorted(configs[resource].items()))

    # -- messages ------------------------------------------------------------------------------

    async def browse(
        self,
        topic: str,
        partition: int,
        *,
        offset: int | None = None,
        timestamp_ms: int | None = None,
        newest: bool = False,
        count: int = 20,
        formats: Formats = TEXT,
    ) -> BrowseResult:
        """Up to ``count`` records of one partition from ``offset``, from the first record at
        or after ``timestamp_ms``, the newest ``count`` (``newest``), or from the log start."""
        if not 1 <= count <= MAX_BROWSE:
            raise ConsoleError(400, f"the number of messages must be 1..{MAX_BROWSE}, not {count}")
        partitions = await self._topic_partitions(topic)
        if partition not in partitions:
            raise ConsoleError(
                404, f"topic {topic!r} has no partition {partition} ({len(partitions)} partitions)"
            )
        tp = (topic, partition)
        starts, ends = await self._offsets([tp])
        log_start, log_end = starts[tp], ends[tp]
        result = BrowseResult(partition, log_start, log_start, log_end)
        if timestamp_ms is not None:
            found = await self.groups.log_offsets([tp], timestamp_ms)
            if found[tp] < 0:
                result.start = log_end
                result.notes.append(
                    f"no message at or after {format_timestamp(timestamp_ms)} in partition "
                    f"{partition}"
                )
                return result
            result.start = found[tp]
        elif offset is not None:
            if offset > log_end:
                raise ConsoleError(
                    400,
                    f"offset {offset} is past the log end offset {log_end} of {topic}-{partition}",
                )
            if offset < log_start:
                result.notes.append(
                    f"offset {offset} is before the log start offset {log_start}: "
                    f"showing from {log_start}"
                )
                offset = log_start
            result.start = offset
        elif newest:
            result.start = max(log_start, log_end - count)
        if result.start >= log_end:
            result.notes.append(f"no messages from offset {result.start} (the log ends there)")
            return result
        await self._read(result, topic, count, formats)
        return result

    async def _read(self, result: BrowseResult, topic: str, count: int, formats: Formats) -> None:
        consumer = Consumer(
            self.client,
            auto_offset_reset="none",
            client_id="odradek-console",
            request_timeout_ms=REQUEST_TIMEOUT_MS,
        )
        await consumer.start()
        try:
            consumer.assign([(topic, result.partition)])
            consumer.seek(topic, result.partition, result.start)
            deadline = time.monotonic() + BROWSE_WAIT_S
            last = min(result.log_end, result.start + count) - 1  # the last offset wanted
            while len(result.records) < count and time.monotonic() < deadline:
                batch = await consumer.poll(timeout_ms=500, max_records=count)
                for record in batch:
                    if record.offset < result.start or len(result.records) >= count:
                        continue
                    result.records.append(
                        ShownRecord(
                            record.partition,
                            record.offset,
                            format_timestamp(record.timestamp_ms),
                            show(record.key, formats.key),
                            show(record.value, formats.value),
                            [(n, show(v, formats.headers)) for n, v in record.headers],
                        )
                    )
                # Past the last offset wanted, even when its tail held no records for us
                # (transaction markers, aborted batches).
                if consumer.position(topic, result.partition) > last:
                    break
            if len(result.records) < count and time.monotonic() >= deadline:
                result.notes.append(f"stopped waiting for more messages after {BROWSE_WAIT_S:g} s")
        finally:
            await consumer.close()

    # -- consumer groups -----------------------------------------------------------------------

    async def group_list(self) -> list[GroupSummary]:
        await self._ready()
        listings: list[GroupListing] = await self.groups.list_groups()
        described = (
            await self.groups.describe_groups([g.group_id for g in listings]) if listings else {}
        )
        return [
            GroupSummary(
                g.group_id,
                described[g.group_id].state if g.group_id in described else g.state,
                g.protocol_type,
                len(described[g.group_id].members) if g.group_id in described else 0,
                g.coordinator,
            )
            for g in listings
        ]

    async def group(self, group_id: str) -> GroupDetail:
        """Members, assignments and per-partition lag, as ``odradek groups describe``."""
        await self._ready()
        description = await self.groups.describe_group(group_id)
        if not description.exists:
            raise ConsoleError(404, f"consumer group {group_id!r} does not exist")
        offsets = await self.groups.describe_offsets(group_id, description=description)
        return GroupDetail(description, offsets)

    async def group_lags(self) -> dict[str, dict[str, int]]:
        """Group -> topic -> total lag, for the lag sampler."""
        await self._ready()
        lags: dict[str, dict[str, int]] = {}
        for listing in await self.groups.list_groups():
            rows = await self.groups.describe_offsets(listing.group_id)
            per_topic: dict[str, int] = {}
            for row in rows:
                if row.lag is not None:
                    per_topic[row.topic] = per_topic.get(row.topic, 0) + row.lag
            lags[listing.group_id] = per_topic
        return lags

    # -- writes (only reachable with --allow-writes) -------------------------------------------

    async def create_topic(self, name: str, partitions: int, replication_factor: int) -> None:
        await self._ready()
        try:
            await self.admin.create_topics([NewTopic(name, partitions, replication_factor)])
        except ValueError as exc:
            raise ConsoleError(400, str(exc)) from None

    async def delete_topic(self, name: str) -> None:
        await self._topic_partitions(name)
        await self.admin.delete_topics([name])

    async def reset_group(self, group_id: str, spec: ResetSpec) -> dict[TopicPartition, int]:
        """Move every committed offset of an empty group (as ``groups reset-offsets
        --all-topics --execute``); a group with members is refused, as Kafka does."""
        detail = await self.group(group_id)
        if not detail.description.is_empty:
            raise ConsoleError(
                409,
                f"offsets can only be reset when group {group_id!r} is inactive, but it is "
                f"{detail.description.state}",
            )
        partitions = sorted(await self.groups.fetch_offsets(group_id))
        try:
            planned = await self.groups.plan_reset(group_id, partitions, spec)
        except ValueError as exc:
            raise ConsoleError(400, str(exc)) from None
        if planned:
            await self.groups.commit_offsets(group_id, planned)
        return planned
