"""Helpers for the storage tests: record batches built by hand and logs to put them in.

The batch encoder here is deliberately independent of odradek.records (struct + crc32c),
so that storage tests check storage against the Kafka format itself.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import pytest
from crc32c import crc32c

from odradek.storage.config import LogConfig
from odradek.storage.log import Log

ATTR_LOG_APPEND_TIME = 0x08
ATTR_TRANSACTIONAL = 0x10
ATTR_CONTROL = 0x20


def _zigzag_varint(value: int) -> bytes:
    n = (value << 1) ^ (value >> 63)
    out = bytearray()
    while True:
        byte = n & 0x7F
        n >>= 7
        if n:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def _record(
    offset_delta: int, timestamp_delta: int, key: bytes | None, value: bytes | None
) -> bytes:
    body = bytearray(b"\x00")  # attributes
    body += _zigzag_varint(timestamp_delta)
    body += _zigzag_varint(offset_delta)
    for field in (key, value):
        if field is None:
            body += _zigzag_varint(-1)
        else:
            body += _zigzag_varint(len(field)) + field
    body += _zigzag_varint(0)  # no headers
    return _zigzag_varint(len(body)) + bytes(body)


def make_batch(
    values: Sequence[bytes | None] = (b"v",),
    *,
    base_offset: int = 0,
    timestamp: int = 1_700_000_000_000,
    timestamps: Sequence[int] | None = None,
    keys: Sequence[bytes | None] | None = None,
    producer_id: int = -1,
    producer_epoch: int = -1,
    base_sequence: int = -1,
    attributes: int = 0,
    leader_epoch: int = -1,
    records: bytes | None = None,
    records_count: int | None = None,
    last_offset_delta: int | None = None,
) -> bytearray:
    """An uncompressed record batch v2 with one record per value."""
    stamps = list(timestamps) if timestamps is not None else [timestamp] * len(values)
    key_list = list(keys) if keys is not None else [None] * len(values)
    if records is None:
        records = b"".join(
            _record(i, stamps[i] - stamps[0], key_list[i], v) for i, v in enumerate(values)
        )
    count = len(values) if records_count is None else records_count
    body = (
        struct.pack(
            ">hiqqqhii",
            attributes,
            max(count - 1, 0) if last_offset_delta is None else last_offset_delta,
            stamps[0] if stamps else timestamp,
            max(stamps) if stamps else timestamp,
            producer_id,
            producer_epoch,
            base_sequence,
            count,
        )
        + records
    )
    crc = crc32c(body)
    head = struct.pack(">qiibI", base_offset, len(body) + 9, leader_epoch, 2, crc)
    return bytearray(head + body)


def make_control_batch(
    *,
    commit: bool,
    producer_id: int,
    producer_epoch: int = 0,
    coordinator_epoch: int = 0,
    timestamp: int = 1_700_000_000_000,
) -> bytearray:
    """A COMMIT or ABORT transaction marker batch."""
    key = struct.pack(">hh", 0, 1 if commit else 0)
    value = struct.pack(">hi", 0, coordinator_epoch)
    return make_batch(
        [value],
        keys=[key],
        timestamp=timestamp,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        attributes=ATTR_CONTROL | ATTR_TRANSACTIONAL,
    )


class FakeClock:
    """A settable clock (seconds, like time.time)."""

    def __init__(self, now_ms: int = 1_700_000_000_000) -> None:
        self.now_ms = now_ms

    def __call__(self) -> float:
        return self.now_ms / 1000

    def advance(self, ms: int) -> None:
        self.now_ms += ms


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def log_dir(tmp_path: Path) -> Path:
    return tmp_path / "topic-0"


@pytest.fixture
def open_log(log_dir: Path, clock: FakeClock) -> Iterator[Callable[..., Log]]:
    """``open_log(config=..., **open_kwargs)``; every log opened is closed afterwards."""
    logs: list[Log] = []

    def opener(config: LogConfig | None = None, **kwargs: object) -> Log:
        kwargs.setdefault("clock", clock)
        log = Log.open(log_dir, config or LogConfig(), **kwargs)  # type: ignore[arg-type]
        logs.append(log)
        return log

    yield opener
    for log in logs:
        log.close()
