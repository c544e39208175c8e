"""The group coordinator's writes to ``__consumer_offsets`` and what their failures mean.

:class:`OffsetsLogAccess` is the interface the broker implements (``broker/offsets_topic.py``)
so the coordinator never touches storage itself. :func:`store_group` appends a group's
metadata record, :func:`write_tombstones` removes offsets (and a group) from the log, and
:func:`append_error` turns an append failure into the error a client can act on, as Kafka's
GroupMetadataManager does. Every part of the coordinator that writes goes through here, so the
mapping is the same for a commit, a rebalance and a cleanup.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping, Sequence
from typing import Protocol

from kio.schema.errors import ErrorCode

from odradek.broker.group.group import CommittedOffset, GroupMetadata
from odradek.broker.group.partitioning import partition_for
from odradek.broker.group.persistence import group_metadata_record, tombstones

__all__ = [
    "APPEND_ERROR_MAP",
    "OffsetsLogAccess",
    "append_error",
    "store_group",
    "write_tombstones",
]

log = logging.getLogger(__name__)

TopicPartition = tuple[str, int]


class OffsetsLogAccess(Protocol):
    """How the coordinator reads and writes ``__consumer_offsets`` (the broker implements it)."""

    num_partitions: int

    def is_local_leader(self, partition: int) -> bool: ...

    async def append(self, partition: int, records: Sequence[tuple[bytes, bytes | None]]) -> int:
        """Write the records as one batch with acks=all; return the last offset. Raises on
        failure, ideally with an ``error_code`` attribute (a Kafka error code)."""
        ...

    def read(self, partition: int) -> Iterator[tuple[int, bytes, bytes | None]]: ...

    def log_end_offset(self, partition: int) -> int: ...


# Append failures -> the error a client can act on (Kafka's GroupMetadataManager mapping).
APPEND_ERROR_MAP: dict[ErrorCode, ErrorCode] = {
    ErrorCode.unknown_topic_or_partition: ErrorCode.coordinator_not_available,
    ErrorCode.not_enough_replicas: ErrorCode.coordinator_not_available,
    ErrorCode.not_enough_replicas_after_append: ErrorCode.coordinator_not_available,
    ErrorCode.request_timed_out: ErrorCode.coordinator_not_available,
    ErrorCode.not_leader_or_follower: ErrorCode.not_coordinator,
    ErrorCode.kafka_storage_error: ErrorCode.not_coordinator,
    ErrorCode.message_too_large: ErrorCode.invalid_commit_offset_size,
    ErrorCode.record_list_too_large: ErrorCode.invalid_commit_offset_size,
    ErrorCode.invalid_fetch_size: ErrorCode.invalid_commit_offset_size,
}


def append_error(exc: BaseException, *, for_offsets: bool) -> ErrorCode:
    code = getattr(exc, "error_code", None)
    if isinstance(exc, TimeoutError):
        return ErrorCode.coordinator_not_available
    try:
        error = ErrorCode(int(code)) if code is not None else ErrorCode.unknown_server_error
    except ValueError:
        error = ErrorCode.unknown_server_error
    mapped = APPEND_ERROR_MAP.get(error, error)
    if mapped is ErrorCode.invalid_commit_offset_size and not for_offsets:
        return ErrorCode.unknown_server_error
    return mapped


async def store_group(
    offsets_log: OffsetsLogAccess, group: GroupMetadata, assignment: Mapping[str, bytes]
) -> ErrorCode:
    """Append the group's metadata record with these assignments (member id -> bytes)."""
    record = group_metadata_record(group, assignment)
    try:
        await offsets_log.append(
            partition_for(group.group_id, offsets_log.num_partitions), [record]
        )
    except Exception as exc:
        log.warning("storing metadata of group %s failed: %r", group.group_id, exc)
        return append_error(exc, for_offsets=False)
    return ErrorCode.none


async def write_tombstones(
    offsets_log: OffsetsLogAccess,
    group: GroupMetadata,
    removed: Mapping[TopicPartition, CommittedOffset],
    *,
    group_tombstone: bool = False,
) -> ErrorCode:
    """Tombstones for the ``removed`` offsets, and for the group's metadata when
    ``group_tombstone``; nothing is appended when there is nothing to remove."""
    records = tombstones(group.group_id, removed, group=group_tombstone)
    if not records:
        return ErrorCode.none
    try:
        await offsets_log.append(partition_for(group.group_id, offsets_log.num_partitions), records)
    except Exception as exc:
        log.warning("tombstones for group %s failed: %r", group.group_id, exc)
        return append_error(exc, for_offsets=True)
    return ErrorCode.none
