"""High watermarks of partitions led elsewhere, for the consumer lag the coordinator exports.

A group's lag is exported once, by the broker that coordinates the group (the one holding
its committed offsets), for every partition the group has committed, wherever that
partition's leader is. The lag of a partition led here uses the local high watermark; for
the others the coordinator asks their leaders just before a scrape is collected: one
ListOffsets (latest, read_uncommitted: the high watermark, as ``kafka-consumer-groups
--describe`` asks) per leader broker, all at once, each bounded by a timeout. A leader that
does not answer in time leaves its partitions' lag out of that scrape rather than showing
a stale or made-up number. Nothing polls between scrapes.

The connection is opened per scrape and closed after: scrapes come every 10-60 s, so
keeping a socket per broker open for them would cost more than it saves. Versions are
fixed (ListOffsets v2) as for the other inter-broker requests, without ApiVersions.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
from collections.abc import Callable, Iterable

from kio.schema.errors import ErrorCode
from kio.schema.list_offsets.v2 import request as list_offsets_v2

from odradek import timeouts
from odradek.cluster.controller.channel import exchange

log = logging.getLogger(__name__)

LIST_OFFSETS, LIST_OFFSETS_VERSION = 2, 2
LATEST_TIMESTAMP = -1
CONSUMER_REPLICA_ID = -1  # a consumer's view: the high watermark, not the log end
READ_UNCOMMITTED = 0
DEFAULT_TIMEOUT_S = 3.0

TopicPartition = tuple[str, int]


class RemoteHighWatermarks:
    """Asks leader brokers for the high watermarks of given partitions."""

    def __init__(
        self,
        leader_of: Callable[[str, int], int | None],
        address_of: Callable[[int], tuple[str, int] | None],
        *,
        client_id: str = "odradek-metrics",
        timeout_s: float = DEFAULT_TIMEOUT_S,
    ) -> None:
        self._leader_of = leader_of
        self._address_of = address_of
        self._client_id = client_id
        self._timeout_s = timeout_s
        self._correlation = itertools.count(1)

    async def fetch(self, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        """The high watermark of each partition whose leader answered in time."""
        by_leader: dict[int, list[TopicPartition]] = {}
        for topic, partition in partitions:
            leader = self._leader_of(topic, partition)
            if leader is not None and leader >= 0:
                by_leader.setdefault(leader, []).append((topic, partition))
        if not by_leader:
            return {}
        answers = await asyncio.gather(
            *(self._ask(leader, tps) for leader, tps in by_leader.items()),
            return_exceptions=True,
        )
        found: dict[TopicPartition, int] = {}
        for leader, answer in zip(by_leader, answers, strict=True):
            if isinstance(answer, BaseException):
                log.debug("high watermarks from broker %d for lag: %r", leader, answer)
                continue
            found.update(answer)
        return found

    async def _ask(self, leader: int, tps: list[TopicPartition]) -> dict[TopicPartition, int]:
        address = self._address_of(leader)
        if address is None:
            return {}
        return await timeouts.wait_for(self._exchange(address, tps), self._timeout_s)

    async def _exchange(
        self, address: tuple[str, int], tps: list[TopicPartition]
    ) -> dict[TopicPartition, int]:
        topics: dict[str, list[int]] = {}
        for topic, partition in tps:
            topics.setdefault(topic, []).append(partition)
        request = list_offsets_v2.ListOffsetsRequest(
            replica_id=CONSUMER_REPLICA_ID,
            isolation_level=READ_UNCOMMITTED,
            topics=tuple(
                list_offsets_v2.ListOffsetsTopic(
                    name=name,
                    partitions=tuple(
                        list_offsets_v2.ListOffsetsPartition(
                            partition_index=p, timestamp=LATEST_TIMESTAMP
                        )
                        for p in sorted(parts)
                    ),
                )
                for name, parts in topics.items()
            ),
        )
        reader, writer = await asyncio.open_connection(*address)
        try:
            response = await exchange(
                reader, writer, LIST_OFFSETS, LIST_OFFSETS_VERSION, request,
                next(self._correlation), self._client_id,
            )  # fmt: skip
        finally:
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()
        found: dict[TopicPartition, int] = {}
        for topic in response.topics:
            for p in topic.partitions:
                # NOT_LEADER_OR_FOLLOWER (leadership moved meanwhile) and the like: left
                # out, the next scrape asks the new leader.
                if p.error_code == ErrorCode.none and int(p.offset) >= 0:
                    found[(topic.name, int(p.partition_index))] = int(p.offset)
        return found
