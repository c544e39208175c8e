"""kcat (Debian's, built on librdkafka 2.0.2) against a real odradek broker subprocess.

kcat negotiates older protocol versions than current librdkafka (Metadata 4, Produce 7,
Fetch 11, ListOffsets 2), so it checks the low ends of odradek's advertised ranges. Covers
the four modes: ``-L`` metadata, ``-P`` produce, ``-C`` consume and ``-Q`` offset queries.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import time
import uuid

import pytest

from tests.helpers.broker import BrokerProcess

KCAT = shutil.which("kcat")
pytestmark = [
    pytest.mark.skipif(KCAT is None, reason="kcat is not installed"),
    pytest.mark.timeout(120),
]

WAIT_S = 30.0


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


@pytest.fixture(scope="module")
def bootstrap(shared_broker: BrokerProcess) -> str:
    return shared_broker.bootstrap


def kcat(bootstrap: str, *args: str, stdin: bytes | None = None) -> str:
    assert KCAT is not None
    result = subprocess.run(
        [KCAT, "-b", bootstrap, "-X", "socket.timeout.ms=10000", *args],
        input=stdin,
        capture_output=True,
        timeout=WAIT_S,
        check=False,
    )
    assert result.returncode == 0, (
        f"kcat {' '.join(args)} exited {result.returncode}: {result.stderr.decode()}"
    )
    return result.stdout.decode()


def produce_lines(bootstrap: str, topic: str, lines: list[str], *args: str) -> None:
    kcat(bootstrap, "-P", "-t", topic, *args, stdin="".join(f"{line}\n" for line in lines).encode())


def test_metadata_listing(bootstrap: str) -> None:
    topic = unique("kcat-meta")
    produce_lines(bootstrap, topic, ["one"], "-p", "0")  # auto-creates the topic
    listing = json.loads(kcat(bootstrap, "-L", "-J", "-t", topic))
    port = int(bootstrap.rsplit(":", 1)[1])
    assert listing["controllerid"] == 0
    assert listing["brokers"] == [{"id": 0, "name": f"127.0.0.1:{port}"}]
    (described,) = listing["topics"]
    assert described["topic"] == topic
    assert [p["partition"] for p in described["partitions"]] == [0]
    assert described["partitions"][0]["leader"] == 0

    text = kcat(bootstrap, "-L")
    assert f'topic "{topic}" with 1 partitions' in text
    assert f"broker 0 at 127.0.0.1:{port} (controller)" in text


@pytest.mark.parametrize("codec", ["none", "gzip", "snappy", "lz4", "zstd"])
def test_produce_with_keys_and_headers_then_consume(bootstrap: str, codec: str) -> None:
    topic = unique(f"kcat-{codec}")
    lines = [f"key{i % 3}:value {i}" for i in range(100)]
    produce_lines(bootstrap, topic, lines, "-K", ":", "-p", "0", "-z", codec, "-H", "src=kcat")
    out = kcat(
        bootstrap,
        "-C",
        "-t",
        topic,
        "-p",
        "0",
        "-o",
        "beginning",
        "-e",
        "-f",
        "%o|%k|%s|%h\\n",
    )
    rows = out.splitlines()
    assert rows == [f"{i}|key{i % 3}|value {i}|src=kcat" for i in range(100)]


def test_consume_from_offset_and_count(bootstrap: str) -> None:
    topic = unique("kcat-offset")
    produce_lines(bootstrap, topic, [str(i) for i in range(50)], "-p", "0")
    out = kcat(bootstrap, "-C", "-t", topic, "-p", "0", "-o", "45", "-e", "-f", "%o:%s\\n")
    assert out.splitlines() == [f"{i}:{i}" for i in range(45, 50)]
    out = kcat(bootstrap, "-C", "-t", topic, "-p", "0", "-o", "-3", "-e", "-f", "%s\\n")
    assert out.splitlines() == ["47", "48", "49"]  # relative to the end
    out = kcat(bootstrap, "-C", "-t", topic, "-o", "beginning", "-c", "7", "-f", "%s\\n")
    assert out.splitlines() == [str(i) for i in range(7)]


def test_query_offsets_by_timestamp(bootstrap: str) -> None:
    topic = unique("kcat-query")
    before_ms = int(time.time() * 1000) - 1000
    produce_lines(bootstrap, topic, [str(i) for i in range(20)], "-p", "0")
    after_ms = int(time.time() * 1000) + 60_000

    def query(timestamp: int) -> int:
        out = kcat(bootstrap, "-Q", "-t", f"{topic}:0:{timestamp}")
        match = re.search(rf"{re.escape(topic)} \[0\] offset (-?\d+)", out)
        assert match, out
        return int(match.group(1))

    assert query(before_ms) == 0  # every record is newer: the first offset
    assert query(after_ms) == -1  # no record is that new
    assert query(-1) == 20  # -1 means "latest": the high watermark
    assert query(-2) == 0  # -2 means "earliest"
