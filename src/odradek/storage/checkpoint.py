"""Log-directory checkpoint files and the atomic write they rely on.

Files ``recovery-point-offset-checkpoint``, ``log-start-offset-checkpoint``, the replica
manager's ``replication-offset-checkpoint`` (high watermarks) and the cleaner's
``cleaner-offset-checkpoint`` use Kafka's text format, ASCII, one item a line::

    0                    <- format version
    2                    <- number of entries
    orders 0 1500        <- "<topic> <partition> <offset>"
    orders 1 1210

Topic names cannot contain spaces (Kafka allows only ``[a-zA-Z0-9._-]``), so splitting on
whitespace is unambiguous.

The clean-shutdown marker ``.kafka_cleanshutdown`` records, per partition, the base
offset and size of every segment file (``orders 0 0:1048576 3311:20517``) in the same
version/count framing (:func:`encode_segment_sizes`); an empty marker (older odradek)
records none. Since 2026-11-26 a partition's line may carry its topic id (32 hex digits,
the only field without a colon) before the segments, so a clean restart need not read
10,000 ``partition.metadata`` files again (``orders 0 3f5c...e1 0:1048576``).

Writes are atomic: the new content goes to ``<name>.tmp``, is fsynced, renamed over the
old file and the directory is fsynced, so after a crash the file holds either the old or
the new content, never a torn mix. A stray ``.tmp`` left by a crash is ignored on read
and overwritten by the next write.
"""

from __future__ import annotations

import os
import threading
import uuid
from collections.abc import Mapping, Sequence
from pathlib import Path

from odradek.storage.errors import CorruptCheckpointError

CHECKPOINT_VERSION = 0

RECOVERY_POINT_CHECKPOINT = "recovery-point-offset-checkpoint"
LOG_START_OFFSET_CHECKPOINT = "log-start-offset-checkpoint"
CLEANER_OFFSET_CHECKPOINT = "cleaner-offset-checkpoint"
REPLICATION_OFFSET_CHECKPOINT = "replication-offset-checkpoint"

TopicPartition = tuple[str, int]


def fsync_dir(directory: Path) -> None:
    """fsync a directory so that renames and creations inside it survive a power loss."""
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def atomic_write(path: Path, data: bytes, *, sync: bool = True) -> None:
    """Replace ``path`` by ``data``: write ``.tmp``, fsync, rename over, fsync the directory.
    ``sync=False`` skips both fsyncs: still old-or-new if the process dies, not if the
    machine does."""
    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        if sync:
            os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    if sync:
        fsync_dir(path.parent)


class OffsetCheckpointFile:
    """A ``topic partition offset`` checkpoint in Kafka's format."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        # Writers share one temporary file name: a periodic checkpoint still running on
        # a thread when the shutdown writes its own would rename the other's file away
        # (and the failed rename takes the log directory offline: an unclean stop).
        self._write_lock = threading.Lock()

    def write(self, offsets: Mapping[TopicPartition, int]) -> None:
        lines = [str(CHECKPOINT_VERSION), str(len(offsets))]
        for (topic, partition), offset in sorted(offsets.items()):
            if not topic or any(c.isspace() for c in topic):
                raise ValueError(f"topic name {topic!r} cannot be written to a checkpoint")
            lines.append(f"{topic} {partition} {offset}")
        with self._write_lock:
            atomic_write(self.path, ("\n".join(lines) + "\n").encode("ascii"))

    def read(self) -> dict[TopicPartition, int]:
        """The entries; an absent file is empty; a malformed one raises CorruptCheckpointError."""
        try:
            text = self.path.read_bytes().decode("ascii")
        except FileNotFoundError:
            return {}
        except UnicodeDecodeError:
            raise CorruptCheckpointError(f"{self.path}: not an ASCII checkpoint file") from None
        lines = text.splitlines()
        if len(lines) < 2:
            raise CorruptCheckpointError(f"{self.path}: missing version or entry count")
        if lines[0].strip() != str(CHECKPOINT_VERSION):
            raise CorruptCheckpointError(f"{self.path}: unsupported version {lines[0].strip()!r}")
        try:
            count = int(lines[1])
        except ValueError:
            raise CorruptCheckpointError(f"{self.path}: bad entry count {lines[1]!r}") from None
        body = [line for line in lines[2:] if line.strip()]
        if count < 0 or len(body) != count:
            raise CorruptCheckpointError(
                f"{self.path}: header says {count} entries, file has {len(body)}"
            )
        entries: dict[TopicPartition, int] = {}
        for number, line in enumerate(body, start=3):
            fields = line.split()
            try:
                topic, partition, offset = fields[0], int(fields[1]), int(fields[2])
                if len(fields) != 3:
                    raise ValueError
            except (ValueError, IndexError):
                raise CorruptCheckpointError(
                    f"{self.path}:{number}: malformed line {line!r}"
                ) from None
            entries[(topic, partition)] = offset
        return entries


SegmentSizes = dict[TopicPartition, list[tuple[int, int]]]


def encode_segment_sizes(
    sizes: Mapping[TopicPartition, Sequence[tuple[int, int]]],
    topic_ids: Mapping[TopicPartition, uuid.UUID] | None = None,
) -> bytes:
    """The clean-shutdown marker's content: ``<topic> <partition> [<topic id>]
    <base>:<size> ...``."""
    lines = [str(CHECKPOINT_VERSION), str(len(sizes))]
    ids = topic_ids or {}
    for (topic, partition), segments in sorted(sizes.items()):
        if not topic or any(c.isspace() for c in topic):
            raise ValueError(f"topic name {topic!r} cannot be written to a checkpoint")
        fields = " ".join(f"{base}:{size}" for base, size in segments)
        topic_id = ids.get((topic, partition))
        if topic_id is not None:
            fields = f"{topic_id.hex} {fields}"
        lines.append(f"{topic} {partition} {fields}".rstrip())
    return ("\n".join(lines) + "\n").encode("ascii")


def decode_segment_sizes(
    data: bytes, path: Path, topic_ids: dict[TopicPartition, uuid.UUID] | None = None
) -> SegmentSizes | None:
    """Parse :func:`encode_segment_sizes` output; None for an empty (older) marker,
    CorruptCheckpointError for anything malformed. Topic ids found go to ``topic_ids``."""
    if not data.strip():
        return None
    try:
        lines = data.decode("ascii").splitlines()
        if lines[0].strip() != str(CHECKPOINT_VERSION):
            raise ValueError(f"unsupported version {lines[0].strip()!r}")
        body = [line for line in lines[2:] if line.strip()]
        if int(lines[1]) != len(body):
            raise ValueError(f"header says {lines[1]} entries, file has {len(body)}")
        sizes: SegmentSizes = {}
        for line in body:
            topic, partition, *segments = line.split()
            tp = (topic, int(partition))
            if segments and ":" not in segments[0]:
                topic_id = uuid.UUID(hex=segments.pop(0))
                if topic_ids is not None:
                    topic_ids[tp] = topic_id
            sizes[tp] = [
                (int(base), int(size))
                for base, size in (segment.split(":") for segment in segments)
            ]
    except (UnicodeDecodeError, ValueError, IndexError) as exc:
        raise CorruptCheckpointError(f"{path}: malformed clean-shutdown marker: {exc}") from None
    return sizes
