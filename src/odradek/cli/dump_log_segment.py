"""``dump-log`` of a ``.log`` segment: batch lines and, deep, record lines (Kafka's format)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

from odradek.records import CorruptRecordError, DecodedRecord, decode_batch
from odradek.records.control import ControlType, parse_control_record, peek_control_type
from odradek.records.header import (
    DELETE_HORIZON_MASK,
    HEADER_SIZE,
    BatchHeader,
    compute_crc,
    parse_header,
    peek_batch_size,
)
from odradek.storage.segment import parse_base_offset

if TYPE_CHECKING:
    from odradek.cli.dump_log import Findings, Options

_CODECS = {0: "none", 1: "gzip", 2: "snappy", 3: "lz4", 4: "zstd"}
RECORD_INDENT = "|"
INT_MAX = 2**31 - 1  # --max-bytes default: the whole file


def iter_batches(
    path: Path, max_bytes: int, *, headers_only: bool = False
) -> Iterator[tuple[int, BatchHeader, bytes]]:
    """(position, header, batch bytes) of each whole batch in the first ``max_bytes`` of
    ``path``, one batch in memory at a time (no bytes with ``headers_only``). Stops at a
    partial batch at the end; raises CorruptRecordError at a batch that cannot be one."""
    with open(path, "rb") as f:
        fd = f.fileno()
        end = min(os.fstat(fd).st_size, max_bytes)
        pos = 0
        while pos < end:
            head = os.pread(fd, min(HEADER_SIZE, end - pos), pos)
            size = peek_batch_size(head)
            if size is None or end - pos < size:
                return
            header = parse_header(head)
            yield pos, header, b"" if headers_only else os.pread(fd, size, pos)
            pos += size


def timestamp_type(header: BatchHeader) -> str:
    return "LogAppendTime" if header.is_log_append_time else "CreateTime"


def batch_line(data: bytes, pos: int, header: BatchHeader) -> str:
    """Kafka's batch line; ``data`` is the batch itself, ``pos`` its place in the file."""
    horizon = (
        f"OptionalLong[{header.base_timestamp}]"
        if header.attributes & DELETE_HORIZON_MASK
        else "OptionalLong.empty"
    )
    valid = compute_crc(data, 0, header.size) == header.crc
    codec = _CODECS.get(header.compression, f"unknown({header.compression})")
    return (
        f"baseOffset: {header.base_offset} lastOffset: {header.last_offset} "
        f"count: {header.records_count} baseSequence: {header.base_sequence} "
        f"lastSequence: {header.last_sequence} producerId: {header.producer_id} "
        f"producerEpoch: {header.producer_epoch} "
        f"partitionLeaderEpoch: {header.partition_leader_epoch} "
        f"isTransactional: {_bool(header.is_transactional)} "
        f"isControl: {_bool(header.is_control)} deleteHorizonMs: {horizon} "
        f"position: {pos} {timestamp_type(header)}: {header.max_timestamp} "
        f"size: {header.size} magic: {header.magic} compresscodec: {codec} "
        f"crc: {header.crc} isvalid: {_bool(valid)}"
    )


def _bool(value: bool) -> str:
    return "true" if value else "false"


def _text(data: bytes) -> str:
    return data.decode("utf-8", errors="replace")


def dump_segment(path: Path, opts: Options, out: TextIO, findings: Findings) -> None:
    from odradek.cli.dump_log import DumpError
    from odradek.cli.dump_log_offsets import parse_offsets_record

    base = parse_base_offset(path.name)
    if base is not None:
        out.write(f"Log starting offset: {base}\n")
    valid_bytes = 0
    last_offset = -1
    name = str(path.absolute())
    try:
        for pos, header, data in iter_batches(path, opts.max_bytes):
            out.write(batch_line(data, pos, header) + "\n")
            if opts.deep:
                decoded = decode_batch(data, 0, verify_crc=False)
                for record in decoded.records:
                    if last_offset != -1 and record.offset != last_offset + 1:
                        findings.non_consecutive[name].append((last_offset, record.offset))
                    last_offset = record.offset
                    prefix = f"{RECORD_INDENT} "
                    line = ""
                    if not opts.skip_record_metadata:
                        line += record_metadata(header, record, prefix)
                        prefix = " "
                    if opts.print_data and not header.is_control:
                        if opts.offsets_decoder:
                            key, payload = parse_offsets_record(
                                record.offset, record.key, record.value
                            )
                        else:
                            key = None if record.key is None else _text(record.key)
                            payload = None if record.value is None else _text(record.value)
                        if key is not None:
                            line += f"{prefix}key: {key}"
                            prefix = " "
                        if payload is not None:
                            line += f" payload: {payload}"
                    out.write(line + "\n")
            valid_bytes += header.size
    except CorruptRecordError as exc:
        raise DumpError(str(exc)) from None
    trailing = min(path.stat().st_size, opts.max_bytes) - valid_bytes
    if trailing > 0 and opts.max_bytes == INT_MAX:
        out.write(f"Found {trailing} invalid bytes at the end of {path.name}\n")


def record_metadata(header: BatchHeader, record: DecodedRecord, prefix: str) -> str:
    offset, key, value = record.offset, record.key, record.value
    sequence = (
        -1
        if header.base_sequence < 0
        else (header.base_sequence + offset - header.base_offset) % 2**31
    )
    header_keys = ",".join(k for k, _ in record.headers)
    text = (
        f"{prefix}offset: {offset} {timestamp_type(header)}: "
        f"{record.timestamp_ms} "
        f"keySize: {-1 if key is None else len(key)} "
        f"valueSize: {-1 if value is None else len(value)}"
        f" sequence: {sequence} headerKeys: [{header_keys}]"
    )
    if header.is_control:
        text += control_text(key, value)
    return text


def control_text(key: bytes | None, value: bytes | None) -> str:
    try:
        type_id = peek_control_type(key)
    except CorruptRecordError:
        return " controlType: UNKNOWN(-1)"
    if type_id in (ControlType.ABORT, ControlType.COMMIT):
        try:
            control_type, coordinator_epoch = parse_control_record(key, value)
        except CorruptRecordError:
            return f" controlType: {ControlType(type_id).name}({type_id})"
        return f" endTxnMarker: {control_type.name} coordinatorEpoch: {coordinator_epoch}"
    return f" controlType: UNKNOWN({type_id})"
