"""Case generators for bench/fuzz_broker.py: mutated requests and mutated record batches.

A *class* of cases is one (API, version) pair, or one record-batch mutation kind with one
codec. Every case is one request frame (without size prefix). Request cases start from a
specimen request (tests/helpers/specimens.py: every field present and non-null, encoded
byte-for-byte as kio does) and change one thing:

* ``valid`` - the specimen itself, sometimes with several array elements;
* ``int`` - one integer field set to a boundary value of its type;
* ``length`` - one array/string/bytes length set to -1, -2, INT_MIN, 0x7fffffff, or off
  by one from its real length (the data stays);
* ``string`` - one string/bytes field replaced by random bytes (often invalid UTF-8);
* ``tags`` - unknown tagged fields added to one flexible entity, or a tagged-field section
  whose count or sizes lie;
* ``truncate`` / ``extend`` - the body cut short, or random bytes appended;
* ``flip`` - a few random bytes of the body overwritten;
* ``header`` - the request header's client id null, huge or lying about its length.

Batch cases are Produce requests (acks=1) to topic ``fuzz-batches`` whose record set is a
v2 record batch with one mutation, compressed with the class's codec; the CRC is
recomputed unless the mutation is the CRC itself, so that the bytes reach the deeper
checks.
"""

from __future__ import annotations

import dataclasses
import io
import random
import struct
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

from crc32c import crc32c
from kio.serial._serialize import get_writer

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from tests.helpers.specimens import (  # noqa: E402
    Site,
    encode,
    entity_paths,
    length_encoding,
    request_frame,
    request_specimen,
    sites,
    value_at,
)

from odradek.protocol.build import build_request  # noqa: E402
from odradek.protocol.versions import PRODUCE, SUPPORTED  # noqa: E402
from odradek.records import Compression, compress  # noqa: E402
from odradek.records.varint import encode_varint, encode_varlong  # noqa: E402

BATCH_TOPIC = "fuzz-batches"

INT_RANGES = {
    "int8": (-(1 << 7), (1 << 7) - 1, ">b"),
    "int16": (-(1 << 15), (1 << 15) - 1, ">h"),
    "int32": (-(1 << 31), (1 << 31) - 1, ">i"),
    "int64": (-(1 << 63), (1 << 63) - 1, ">q"),
    "uint8": (0, (1 << 8) - 1, ">B"),
    "uint16": (0, (1 << 16) - 1, ">H"),
    "uint32": (0, (1 << 32) - 1, ">I"),
    "uint64": (0, (1 << 64) - 1, ">Q"),
    "timedelta_i32": (-(1 << 31), (1 << 31) - 1, ">i"),
    "timedelta_i64": (-(1 << 63), (1 << 63) - 1, ">q"),
    "datetime_i64": (-(1 << 63), (1 << 63) - 1, ">q"),
    "error_code": (-(1 << 15), (1 << 15) - 1, ">h"),
}
LENGTH_TYPES = ("string", "bytes", "records")
# Waits a request may ask for: the fuzzer keeps them short so one case cannot hold the
# connection for days (a client may legitimately ask that; it is not what is under test).
WAIT_FIELDS = ("max_wait", "timeout", "rebalance_timeout", "session_timeout")
WAIT_CAP = 200


def _boundaries(kafka_type: str) -> list[int]:
    low, high, _ = INT_RANGES[kafka_type]
    values = {low, high, 0, low + 1, high - 1}
    if low < 0:
        values |= {-1, -2}
    return sorted(values)


def _pack_int(kafka_type: str, value: int) -> bytes:
    return struct.pack(INT_RANGES[kafka_type][2], value)


def random_string(rng: random.Random) -> bytes:
    """Random bytes that are never a legal topic or group name (no litter of topics)."""
    size = rng.randrange(1, 40)
    if rng.random() < 0.5:
        data = bytearray(rng.randbytes(size))
        data[rng.randrange(size)] = rng.randrange(0x80, 0x100)  # invalid UTF-8 somewhere
        return bytes(data)
    text = "".join(rng.choice("aZ9._-/ é€😀\x00\n") for _ in range(size)) + "€"
    return text.encode()


def _waits_capped(site: Site, value: int) -> int:
    if any(site.path[-1] == name or str(site.path[-1]).startswith(name) for name in WAIT_FIELDS):
        return max(min(value, WAIT_CAP), -1) if value >= -1 else value
    return value


class RequestCases:
    """Cases for one (API, version); ``case(rng)`` returns ``(kind, frame)``."""

    def __init__(self, api_key: int, version: int) -> None:
        self.api_key = api_key
        self.version = version
        self.specimens = [request_specimen(api_key, version, n) for n in (1, 2)]
        self.encoded = [encode(s) for s in self.specimens]
        self.sites = sites(self.specimens[0])
        self.int_sites = [s for s in self.sites if s.shape == "leaf" and s.kafka_type in INT_RANGES]
        self.length_sites = [
            s for s in self.sites if s.shape == "array" or s.kafka_type in LENGTH_TYPES
        ]
        self.string_sites = [s for s in self.sites if s.kafka_type in ("string", "bytes")]
        self.flexible = self.specimens[0].__flexible__
        self.entity_paths = entity_paths(self.specimens[0]) if self.flexible else []
        kinds: list[tuple[str, Callable[[random.Random], bytes]]] = [
            ("valid", self._valid),
            ("truncate", self._truncate),
            ("extend", self._extend),
            ("flip", self._flip),
        ]
        if self.int_sites:
            kinds.append(("int", self._int))
        if self.length_sites:
            kinds.append(("length", self._length))
        if self.string_sites:
            kinds.append(("string", self._string))
        if self.flexible:
            kinds.append(("tags", self._tags))
        self.kinds = kinds

    def frame(self, body: bytes, client_id: str | None = "fuzz") -> bytes:
        return request_frame(self.api_key, self.version, body, 1, client_id)

    def case(self, rng: random.Random) -> tuple[str, bytes]:
        if rng.random() < 0.03:
            return "header", self._header(rng)
        kind, make = rng.choice(self.kinds)
        return kind, self.frame(make(rng))

    def _valid(self, rng: random.Random) -> bytes:
        return rng.choice(self.encoded)

    def _truncate(self, rng: random.Random) -> bytes:
        body = rng.choice(self.encoded)
        return body[: rng.randrange(len(body))] if body else b""

    def _extend(self, rng: random.Random) -> bytes:
        return rng.choice(self.encoded) + rng.randbytes(rng.randrange(1, 64))

    def _flip(self, rng: random.Random) -> bytes:
        body = bytearray(rng.choice(self.encoded))
        for _ in range(rng.randrange(1, 4)):
            if body:
                body[rng.randrange(len(body))] = rng.randrange(256)
        return bytes(body)

    def _int(self, rng: random.Random) -> bytes:
        site = rng.choice(self.int_sites)
        value = _waits_capped(site, rng.choice(_boundaries(site.kafka_type)))
        return encode(self.specimens[0], {site.path: _pack_int(site.kafka_type, value)})

    def _length(self, rng: random.Random) -> bytes:
        site = rng.choice(self.length_sites)
        specimen = self.specimens[0]
        choice = rng.randrange(6)
        if choice < 4:  # a length with nothing after it, or lying about what follows
            length = [-1, -2, -(1 << 31), (1 << 31) - 1][choice]
            if site.kafka_type == "string" and site.shape == "leaf" and not site.flexible:
                length = max(-(1 << 15), min(length, (1 << 15) - 1))
            raw = length_encoding(site, length)
            if rng.random() < 0.5:
                raw += rng.randbytes(rng.randrange(1, 16))
            return encode(specimen, {site.path: raw})
        # Off by one: the real content with a length one more or one less than it.
        content = _content(specimen, site)
        count = 1 if site.shape == "array" else len(content)
        length = count + (1 if choice == 4 else -1)
        return encode(specimen, {site.path: length_encoding(site, length) + content})

    def _string(self, rng: random.Random) -> bytes:
        site = rng.choice(self.string_sites)
        data = random_string(rng)
        return encode(self.specimens[0], {site.path: length_encoding(site, len(data)) + data})

    def _tags(self, rng: random.Random) -> bytes:
        path = rng.choice(self.entity_paths)
        if rng.random() < 0.7:
            tags = [
                (
                    rng.choice([rng.randrange(100), 10_000, (1 << 31) - 1]),
                    rng.randbytes(rng.randrange(20)),
                )
                for _ in range(rng.randrange(1, 4))
            ]
            return encode(self.specimens[0], extra_tags={path: sorted(tags)})
        # A tagged-field section that lies: a tag whose size runs past the end.
        body = self.encoded[0]
        return body[:-1] + encode_uvarint(1) + encode_uvarint(99) + encode_uvarint(1 << 30)

    def _header(self, rng: random.Random) -> bytes:
        body = rng.choice(self.encoded)
        choice = rng.randrange(4)
        if choice == 0:
            return self.frame(body, None)
        if choice == 1:
            return self.frame(body, "c" * rng.choice([300, 32767]))
        frame = bytearray(self.frame(body, "fuzz"))
        if choice == 2 or not self.flexible:
            frame[8:10] = struct.pack(">h", rng.choice([-2, 32767, 5000]))  # client id length
            return bytes(frame)
        # Request header v2: unknown tagged fields, or a tag section that lies.
        head = 14  # api key, version, correlation id, client id "fuzz"
        tags = [(rng.randrange(1 << 20), rng.randbytes(rng.randrange(12))) for _ in range(2)]
        section = encode_uvarint(len(tags)) + b"".join(
            encode_uvarint(tag) + encode_uvarint(len(data)) + data for tag, data in sorted(tags)
        )
        if rng.random() < 0.3:
            section = encode_uvarint(rng.choice([1 << 31, 3])) + section[1:]
        return bytes(frame[:head]) + section + bytes(frame[head + 1 :])


def _content(specimen: object, site: Site) -> bytes:
    """The bytes of a field after its length prefix (specimen arrays hold one element)."""
    value = value_at(specimen, site.path)
    if site.shape == "leaf":
        return value.encode() if isinstance(value, str) else bytes(value)
    (item,) = value
    if dataclasses.is_dataclass(item):
        return encode(item)
    buffer = io.BytesIO()
    get_writer(site.kafka_type, site.flexible, False)(buffer, item)
    return buffer.getvalue()


def encode_uvarint(value: int) -> bytes:
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def request_classes() -> Iterator[tuple[str, RequestCases]]:
    for api_key, (low, high) in sorted(SUPPORTED.items()):
        for version in range(low, high + 1):
            yield f"api {api_key} v{version}", RequestCases(api_key, version)


# ---------------------------------------------------------------- record batches

CODECS = list(Compression)
BATCH_KINDS = (
    "valid",
    "header-int",
    "crc",
    "batch-length",
    "record-count",
    "attributes",
    "record-field",
    "record-truncate",
    "compressed-garbage",
    "compressed-truncate",
    "two-batches",
)
# Header fields: (name, offset, struct format).
HEADER_FIELDS = [
    ("base_offset", 0, ">q"),
    ("partition_leader_epoch", 12, ">i"),
    ("magic", 16, ">b"),
    ("last_offset_delta", 23, ">i"),
    ("base_timestamp", 27, ">q"),
    ("max_timestamp", 35, ">q"),
    ("producer_id", 43, ">q"),
    ("producer_epoch", 51, ">h"),
    ("base_sequence", 53, ">i"),
]
FORMAT_TYPE = {">q": "int64", ">i": "int32", ">h": "int16", ">b": "int8"}


def _record_parts(rng: random.Random, index: int) -> list[bytes]:
    key = rng.randbytes(rng.randrange(8)) if rng.random() < 0.8 else None
    value = rng.randbytes(rng.randrange(64))
    headers = [(b"h", rng.randbytes(3))] if rng.random() < 0.3 else []
    parts = [
        b"\x00",  # attributes
        encode_varlong(rng.randrange(0, 1000)),  # timestamp delta
        encode_varint(index),  # offset delta
        encode_varint(-1) if key is None else encode_varint(len(key)),
        key or b"",
        encode_varint(len(value)),
        value,
        encode_varint(len(headers)),
    ]
    for hkey, hvalue in headers:
        parts += [encode_varint(len(hkey)), hkey, encode_varint(len(hvalue)), hvalue]
    return parts


def _record(parts: list[bytes], length_delta: int = 0) -> bytes:
    body = b"".join(parts)
    return encode_varint(len(body) + length_delta) + body


def assemble(section: bytes, count: int, attributes: int, now_ms: int) -> bytearray:
    """A v2 batch around ``section`` (already compressed), CRC stamped."""
    out = bytearray(61)
    struct.pack_into(
        ">qiibIhiqqqhii",
        out,
        0,
        0,
        49 + len(section),
        -1,
        2,
        0,
        attributes,
        count - 1,
        now_ms,
        now_ms,
        -1,
        -1,
        -1,
        count,
    )
    out += section
    struct.pack_into(">I", out, 17, crc32c(bytes(out[21:])))
    return out


def restamp_crc(batch: bytearray) -> None:
    struct.pack_into(">I", batch, 17, crc32c(bytes(batch[21:])))


def batch_case(kind: str, codec: Compression, rng: random.Random, now_ms: int) -> bytes:
    """A mutated record batch of ``kind`` compressed with ``codec`` (the record set bytes)."""
    count = rng.randrange(1, 6)
    records = [_record_parts(rng, i) for i in range(count)]
    if kind == "record-field":
        victim = rng.choice(records)
        position = rng.choice([1, 2, 3, 5, 7])
        victim[position] = rng.choice(
            [encode_varint(v) for v in (-2, -1, (1 << 31) - 1, -(1 << 31), 1 << 20)]
            + [encode_varlong(v) for v in ((1 << 63) - 1, -(1 << 63))]
            + [b"\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\x01"]  # an over-long varint
        )
    raw = [_record(parts) for parts in records]
    if kind == "record-field" and rng.random() < 0.5:
        raw[0] = _record(records[0], rng.choice([-3, -1, 1, 50, 1 << 20]))
    section = b"".join(raw)
    if kind == "record-truncate":
        section = section[: rng.randrange(len(section))]
    attributes = int(codec)
    if codec is not Compression.NONE:
        section = compress(codec, section)
        if kind == "compressed-garbage":
            section = bytearray(section)
            for _ in range(rng.randrange(1, 5)):
                section[rng.randrange(len(section))] = rng.randrange(256)
            section = bytes(section)
        elif kind == "compressed-truncate":
            section = section[: rng.randrange(len(section))]
    elif kind in ("compressed-garbage", "compressed-truncate"):
        section = rng.randbytes(rng.randrange(1, 64))
    batch = assemble(section, count, attributes, now_ms)
    if kind == "header-int":
        _name, offset, fmt = rng.choice(HEADER_FIELDS)
        value = rng.choice(_boundaries(FORMAT_TYPE[fmt]))
        struct.pack_into(fmt, batch, offset, value)
        restamp_crc(batch)
    elif kind == "crc":
        struct.pack_into(">I", batch, 17, rng.randrange(1 << 32))
    elif kind == "batch-length":
        struct.pack_into(
            ">i", batch, 8, rng.choice([-1, 0, 10, 48, len(batch), (1 << 31) - 1, len(batch) - 13])
        )
    elif kind == "record-count":
        struct.pack_into(">i", batch, 57, rng.choice([-1, 0, count + 1, (1 << 31) - 1, -(1 << 31)]))
        restamp_crc(batch)
    elif kind == "attributes":
        struct.pack_into(
            ">h", batch, 21, rng.choice([5, 6, 7, 0x10, 0x20, 0x30, 0x40, -1]) | int(codec)
        )
        restamp_crc(batch)
    if kind == "two-batches":
        return bytes(batch) + bytes(assemble(b"".join(raw), count, 0, now_ms))
    return bytes(batch)


def produce_frame(records: bytes, version: int | None = None) -> bytes:
    _low, high = SUPPORTED[PRODUCE]
    version = high if version is None else version
    request = build_request(
        PRODUCE,
        version,
        {
            "acks": 1,
            "timeout": 5000,
            "topic_data": [
                {"name": BATCH_TOPIC, "partition_data": [{"index": 0, "records": records}]}
            ],
        },
    )
    return request_frame(PRODUCE, version, encode(request), 1, "fuzz")


class BatchCases:
    def __init__(self, kind: str, codec: Compression) -> None:
        self.kind = kind
        self.codec = codec

    def case(self, rng: random.Random, now_ms: int) -> tuple[str, bytes, bytes]:
        """(kind, Produce request frame, the record set in it)."""
        low, high = SUPPORTED[PRODUCE]
        version = rng.randrange(low, high + 1)
        records = batch_case(self.kind, self.codec, rng, now_ms)
        return self.kind, produce_frame(records, version), records


def batch_classes() -> Iterator[tuple[str, BatchCases]]:
    for kind in BATCH_KINDS:
        for codec in CODECS:
            yield f"batch {kind} {codec.name.lower()}", BatchCases(kind, codec)
