"""``partition.metadata``: the topic id a partition directory belongs to (KIP-516).

A topic deleted and re-created under the same name gets a new id; comparing the id in
this file with the cluster's tells a stale directory from the live one. Kafka's text
format, ASCII::

    version: 0
    topic_id: 3r5vXwGzQ5uW0nbpg9k1Lw      <- the 16-byte UUID, URL-safe base64, unpadded

Rewritten atomically (temp file, fsync, rename, directory fsync). A brand-new partition's
file is written directly instead (:meth:`PartitionMetadataFile.write_new`): there is no old
content to protect. Kafka records a new log's topic id in memory and writes the file on
its scheduler thread ("flush-metadata-file"), not while creating the log; odradek does the
same (Log.create_new leaves it to the flush job, the log's first flush or its close), and
its fsync is left to the log's first flush (a file lost or emptied by a crash or power cut
reads as "no id yet" and is written again when the broker hosts the partition).

A broker restarting with 10,000 partitions reads 10,000 of these files, so :meth:`read`
is a bare open and read of a string path.
"""

from __future__ import annotations

import base64
import os
import uuid
from pathlib import Path

from odradek.storage.checkpoint import atomic_write
from odradek.storage.errors import CorruptCheckpointError

FILE_NAME = "partition.metadata"
VERSION = 0


def encode_topic_id(topic_id: uuid.UUID) -> str:
    """Kafka's ``Uuid.toString()``: URL-safe base64 of the 16 bytes, no padding."""
    return base64.urlsafe_b64encode(topic_id.bytes).decode("ascii").rstrip("=")


def decode_topic_id(text: str) -> uuid.UUID:
    raw = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    if len(raw) != 16:
        raise ValueError(f"topic id {text!r} is not 16 bytes")
    return uuid.UUID(bytes=raw)


class PartitionMetadataFile:
    __slots__ = ("_path",)

    def __init__(self, directory: Path | str) -> None:
        # A string: a Path per partition costs more than reading the file.
        self._path = f"{directory}{os.sep}{FILE_NAME}"

    @property
    def path(self) -> Path:
        return Path(self._path)

    def read(self) -> uuid.UUID | None:
        """The stored topic id, None if the file is absent; CorruptCheckpointError if bad."""
        try:
            fd = os.open(self._path, os.O_RDONLY | os.O_CLOEXEC)
        except FileNotFoundError:
            return None
        try:
            chunks = []
            while chunk := os.read(fd, 4096):
                chunks.append(chunk)
        finally:
            os.close(fd)
        try:
            text = b"".join(chunks).decode("ascii")
        except UnicodeDecodeError:
            raise CorruptCheckpointError(f"{self.path}: not ASCII") from None
        if not text:
            return None  # created but never synced before a power cut (see write_new)
        fields: dict[str, str] = {}
        for line in text.splitlines():
            if line.strip():
                key, sep, value = line.partition(":")
                if not sep:
                    raise CorruptCheckpointError(f"{self.path}: malformed line {line!r}")
                fields[key.strip()] = value.strip()
        if fields.get("version") != str(VERSION):
            raise CorruptCheckpointError(
                f"{self.path}: unsupported version {fields.get('version')!r}"
            )
        try:
            return decode_topic_id(fields["topic_id"])
        except (KeyError, ValueError) as exc:
            raise CorruptCheckpointError(f"{self.path}: bad topic_id ({exc})") from None

    def write(self, topic_id: uuid.UUID) -> None:
        atomic_write(self.path, _encode(topic_id))

    def write_new(self, topic_id: uuid.UUID) -> None:
        """Create the file of a new partition: one write, no temp file, no fsync."""
        fd = os.open(self._path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644)
        try:
            os.write(fd, _encode(topic_id))
        finally:
            os.close(fd)


def _encode(topic_id: uuid.UUID) -> bytes:
    return f"version: {VERSION}\ntopic_id: {encode_topic_id(topic_id)}\n".encode("ascii")
