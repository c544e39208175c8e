"""The direct Produce response encoder writes exactly what kio's writer writes."""

from __future__ import annotations

import random

import pytest

from odradek.protocol.build import build_response
from odradek.protocol.codec import decode_response, encode_response
from odradek.protocol.headers import RequestHeader
from odradek.protocol.produce_response import encode_produce_response
from odradek.protocol.versions import PRODUCE


def _responses(rng: random.Random) -> list[tuple[str, list[dict[str, object]]]]:
    topics = []
    for t in range(rng.randrange(0, 4)):
        partitions = []
        for _ in range(rng.randrange(0, 4)):
            entry: dict[str, object] = {
                "index": rng.randrange(0, 2**31),
                "error_code": rng.choice([0, 1, 6, 87]),
                "base_offset": rng.choice([-1, 0, rng.randrange(0, 2**62)]),
                "log_append_time": rng.choice([None, rng.randrange(0, 2**41)]),
                "log_start_offset": rng.choice([-1, rng.randrange(0, 2**40)]),
            }
            if rng.random() < 0.3:
                entry["error_message"] = rng.choice(["", "bad batch", "ünïcode"])
            partitions.append(entry)
        topics.append((f"topic-{t}-" + "x" * rng.randrange(0, 200), partitions))
    return topics


@pytest.mark.parametrize("version", range(3, 12))
def test_bytes_equal_kios_writer(version: int) -> None:
    rng = random.Random(version)
    for _ in range(50):
        topics = _responses(rng)
        throttle = rng.choice([0, 5, 2**31 - 1])
        correlation = rng.randrange(-(2**31), 2**31)
        header = RequestHeader(PRODUCE, version, correlation, "c")
        values = {
            "responses": [{"name": n, "partition_responses": p} for n, p in topics],
            "throttle_time": throttle,
        }
        expected = encode_response(header, build_response(PRODUCE, version, values))
        got = encode_produce_response(correlation, version, topics, throttle)
        assert got == expected
        # and a client decodes it
        decode_response(PRODUCE, version, got[4:])


def test_fields_it_does_not_write_fall_back_to_the_generic_path() -> None:
    entry = {"index": 0, "error_code": 0, "base_offset": 1, "record_errors": [{}]}
    assert encode_produce_response(1, 9, [("t", [entry])]) is None
    assert encode_produce_response(1, 2, [("t", [])]) is None
    assert encode_produce_response(1, 12, [("t", [])]) is None


@pytest.mark.parametrize("version", range(3, 12))
def test_one_partition_answers_equal_kios_writer(version: int) -> None:
    # The cached path for one topic and one partition (a linger.ms=0 producer's answer),
    # twice per topic so the second comes from the cache; a 200-byte name takes a
    # two-byte length varint.
    rng = random.Random(100 + version)
    for name in ["t", "t", "x" * 200, "x" * 200, "ünï"]:
        entry: dict[str, object] = {
            "index": rng.randrange(0, 2**31),
            "error_code": rng.choice([0, 6]),
            "base_offset": rng.randrange(0, 2**62),
            "log_append_time": rng.choice([None, rng.randrange(0, 2**41)]),
            "log_start_offset": rng.randrange(0, 2**40),
        }
        correlation = rng.randrange(-(2**31), 2**31)
        throttle = rng.choice([0, 7])
        header = RequestHeader(PRODUCE, version, correlation, "c")
        values = {
            "responses": [{"name": name, "partition_responses": [entry]}],
            "throttle_time": throttle,
        }
        expected = encode_response(header, build_response(PRODUCE, version, values))
        assert encode_produce_response(correlation, version, [(name, [entry])], throttle) == (
            expected
        )
