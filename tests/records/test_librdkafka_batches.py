"""Batches that librdkafka (confluent-kafka) really produced decode to the records it was given.

The files come from ``capture_batches.py`` in this directory; re-run it to refresh them.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from aiokafka.record.default_records import DefaultRecordBatch

from odradek.records import Compression, build_batch, decode_batch, decode_batches, rebuild_batch
from odradek.records.batch import Record
from odradek.records.compression import XERIAL_MAGIC
from odradek.records.header import check_crc, iter_headers

DATA = Path(__file__).parent / "data"
MANIFEST: dict[str, Any] = json.loads((DATA / "librdkafka_expected.json").read_text())


def _bytes(text: str | None) -> bytes | None:
    return None if text is None else text.encode("latin-1")


def _expected(set_name: str) -> list[tuple[bytes | None, bytes | None, list[Any], int]]:
    return [
        (
            _bytes(m["key"]),
            _bytes(m["value"]),
            [(k, _bytes(v)) for k, v in m["headers"]],
            m["timestamp"],
        )
        for m in MANIFEST["sets"][set_name]
    ]


def test_every_codec_was_captured() -> None:
    codecs = {entry["codec"] for entry in MANIFEST["files"].values()}
    assert codecs == {c.kafka_name for c in Compression}
    assert "librdkafka" in MANIFEST["producer"]


@pytest.mark.parametrize("name", sorted(MANIFEST["files"]))
def test_captured_batch_decodes_to_what_was_produced(name: str) -> None:
    entry = MANIFEST["files"][name]
    raw = (DATA / name).read_bytes()
    [(pos, header)] = list(iter_headers(raw))  # one whole batch, CRC valid
    check_crc(raw, pos, header)
    batch = decode_batch(raw)
    assert batch.compression is Compression.from_name(entry["codec"])
    assert batch.size == len(raw)
    expected = _expected(entry["set"])
    assert [r.offset for r in batch.records] == list(range(len(expected)))
    assert [(r.key, r.value, r.headers, r.timestamp_ms) for r in batch.records] == expected
    assert batch.max_timestamp == max(e[3] for e in expected)
    assert [b.base_offset for b in decode_batches(raw)] == [0]


@pytest.mark.parametrize("name", sorted(MANIFEST["files"]))
def test_our_reencoding_matches_librdkafkas_content(name: str) -> None:
    batch = decode_batch((DATA / name).read_bytes())
    ours = decode_batch(rebuild_batch(batch))
    assert ours.records == batch.records
    records = [Record(r.value, r.key, r.headers, r.timestamp_ms) for r in batch.records]
    fresh = build_batch(records, compression=batch.compression)
    assert decode_batch(fresh).records == batch.records
    # aiokafka agrees with our reading of librdkafka's bytes and of our own.
    for raw in ((DATA / name).read_bytes(), bytes(fresh)):
        theirs = DefaultRecordBatch(raw)
        assert [(r.key, r.value, r.headers, r.timestamp) for r in theirs] == [
            (r.key, r.value, r.headers, r.timestamp_ms) for r in batch.records
        ]


def test_librdkafka_writes_raw_snappy_and_we_write_xerial() -> None:
    theirs = (DATA / "librdkafka_snappy_edge.bin").read_bytes()
    assert not theirs[61:].startswith(XERIAL_MAGIC)
    ours = build_batch([Record(value=b"x" * 100)], compression=Compression.SNAPPY)
    assert ours[61:].startswith(XERIAL_MAGIC)


def test_librdkafka_lz4_frames_use_independent_blocks_like_ours() -> None:
    for name in ("librdkafka_lz4_edge.bin", "librdkafka_lz4_bulk.bin"):
        frame = (DATA / name).read_bytes()[61:]
        assert frame[:4] == b"\x04\x22\x4d\x18" and frame[4] & 0x20
