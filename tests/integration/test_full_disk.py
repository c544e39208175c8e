"""A full disk is loud, visible and recoverable.

A 2 MiB tmpfs mounted by the test holds the broker's data directory. Filling it takes
the directory offline: produce answers KAFKA_STORAGE_ERROR, the broker log says so in
exactly one ERROR line, and DescribeLogDirs reports the directory with that error.
Freeing the space brings it back (the broker probes with a test write every second):
produce works again and every record acknowledged before the failure reads back unchanged.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import KafkaError, Producer

from tests.helpers.broker import BrokerProcess
from tests.helpers.clients import read_partition
from tests.helpers.disks import fill, small_tmpfs

pytestmark = pytest.mark.timeout(180)

TOPIC = "disk"


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    with small_tmpfs(tmp_path / "disk") as mount_point:
        yield mount_point


def produce_one(bootstrap: str, value: bytes) -> tuple[int | None, int]:
    """(error code or None, offset) of one record, without client retries."""
    outcome: list[tuple[int | None, int]] = []

    def done(err: KafkaError | None, msg: object) -> None:
        outcome.append((err.code() if err else None, msg.offset()))  # type: ignore[attr-defined]

    producer = Producer(
        {"bootstrap.servers": bootstrap, "acks": "all", "retries": 0, "linger.ms": 0}
    )
    producer.produce(TOPIC, value, partition=0, on_delivery=done)
    producer.flush(30)
    assert len(outcome) == 1
    return outcome[0]


def describe(bootstrap: str) -> dict[str, object]:
    result = subprocess.run(
        [sys.executable, "-m", "odradek", "log-dirs", "describe", "-b", bootstrap],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def error_lines(broker: BrokerProcess) -> list[str]:
    return [line for line in broker.log_text().splitlines() if " ERROR " in line]


# Small segments: the appends that fail also roll segments and snapshot producer state.
@pytest.mark.parametrize("segment_bytes", [None, 16384])
def test_full_disk_goes_offline_once_and_recovers(
    small_disk: Path, segment_bytes: int | None
) -> None:
    data = small_disk / "data"
    overrides = {} if segment_bytes is None else {"log.segment.bytes": str(segment_bytes)}
    broker = BrokerProcess(
        data, log_path=small_disk.parent / "broker.log", overrides=overrides
    ).start()
    try:
        acked = []
        for i in range(10):
            value = f"before-{i}-".encode() + b"x" * 1000
            assert produce_one(broker.bootstrap, value) == (None, i)
            acked.append((i, value))
        online = describe(broker.bootstrap)["brokers"][0]["logDirs"][0]  # type: ignore[index]
        assert online["error"] is None and online["logDir"] == str(data)
        assert online["partitions"][0]["partition"] == f"{TOPIC}-0"
        assert online["partitions"][0]["size"] > 10 * 1000

        filler = small_disk / "filler"
        fill(filler)
        # Larger than a page, so it cannot hide in the slack of the segment's last page.
        for i in range(5):
            code, _ = produce_one(broker.bootstrap, f"full-{i}".encode() + b"y" * 10000)
            assert code == KafkaError.KAFKA_STORAGE_ERROR
        offline = describe(broker.bootstrap)["brokers"][0]["logDirs"][0]  # type: ignore[index]
        assert offline == {
            "logDir": str(data),
            "error": "org.apache.kafka.common.errors.KafkaStorageException",
            "partitions": [],
        }
        errors = error_lines(broker)
        assert len(errors) == 1, errors
        assert f"log directory {data} is offline" in errors[0]
        assert "No space left on device" in errors[0]

        filler.unlink()
        deadline = time.monotonic() + 30
        while True:
            code, offset = produce_one(broker.bootstrap, b"after")
            if code is None:
                break
            assert code == KafkaError.KAFKA_STORAGE_ERROR
            assert time.monotonic() < deadline, "the directory never came back online"
            time.sleep(0.5)
        assert offset == 10  # failed appends left nothing behind
        assert read_partition(broker.bootstrap, TOPIC, 11) == [*acked, (10, b"after")]
        log = broker.log_text()
        assert log.count("is back online") == 1
        assert len(error_lines(broker)) == 1
        assert "Traceback" not in log
        assert describe(broker.bootstrap)["brokers"][0]["logDirs"][0]["error"] is None  # type: ignore[index]
    finally:
        broker.stop()
