"""Record batch v2: the bytes every layer of odradek stores, sends and reads.

* :mod:`~odradek.records.header` - the 61-byte header fast path (parse, CRC32C,
  in-place base offset / leader epoch / LogAppendTime rewrites)
* :mod:`~odradek.records.batch` - building batches and decoding their records
* :mod:`~odradek.records.compression` - gzip, snappy, lz4 and zstd as Kafka frames them
* :mod:`~odradek.records.control` - transaction COMMIT / ABORT markers
* :mod:`~odradek.records.validation` - the per-record walk a leader runs before storing a
  batch (Kafka's LogValidator checks), and the decompression bound
* :mod:`~odradek.records.varint` - zigzag varints

Decoding untrusted bytes raises only :class:`CorruptRecordError`.
"""

from odradek.records.batch import (
    DecodedBatch,
    DecodedRecord,
    Record,
    build_batch,
    decode_batch,
    decode_batches,
    rebuild_batch,
)
from odradek.records.compression import Compression, compress, decompress
from odradek.records.control import ControlType, build_end_txn_marker, parse_control_record
from odradek.records.errors import CorruptRecordError
from odradek.records.header import BatchHeader, check_crc, iter_headers, parse_header

__all__ = [
    "BatchHeader",
    "Compression",
    "ControlType",
    "CorruptRecordError",
    "DecodedBatch",
    "DecodedRecord",
    "Record",
    "build_batch",
    "build_end_txn_marker",
    "check_crc",
    "compress",
    "decode_batch",
    "decode_batches",
    "decompress",
    "iter_headers",
    "parse_control_record",
    "parse_header",
    "rebuild_batch",
]
