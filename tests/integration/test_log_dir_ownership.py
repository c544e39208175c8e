"""A data directory belongs to one broker: a second broker on it is refused.

Without the lock both brokers would start, hand out the same offsets, and after a restart
each partition would hold both brokers' records at duplicate offsets.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from confluent_kafka import Producer

from tests.helpers.broker import BrokerProcess
from tests.helpers.clients import read_partition

pytestmark = pytest.mark.timeout(120)


def produce(bootstrap: str, topic: str, values: list[bytes]) -> list[int]:
    offsets: list[int] = []
    errors: list[object] = []

    def done(err: object, msg: object) -> None:
        if err is not None:
            errors.append(err)
        else:
            offsets.append(msg.offset())  # type: ignore[attr-defined]

    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all"})
    for value in values:
        producer.produce(topic, value, partition=0, on_delivery=done)
    assert producer.flush(30) == 0
    assert not errors, errors
    return offsets


def test_second_broker_on_same_dir_is_refused(tmp_path: Path) -> None:
    data = tmp_path / "data"
    first = BrokerProcess(data, log_path=tmp_path / "first.log").start()
    second = BrokerProcess(data, log_path=tmp_path / "second.log")
    try:
        assert produce(first.bootstrap, "owned", [b"a0", b"a1", b"a2"]) == [0, 1, 2]
        with pytest.raises(RuntimeError, match="failed to start"):
            second.start()
        assert second.proc is not None and second.proc.returncode != 0
        log_lines = second.log_text().strip().splitlines()
        assert log_lines == [
            f"error: Failed to acquire lock on file .lock in {data}. "
            "A Kafka instance in another process or thread is using this directory."
        ]
        # The owner is unaffected and keeps its offsets alone, across a restart too.
        assert produce(first.bootstrap, "owned", [b"a3", b"a4"]) == [3, 4]
        first.stop()
        first.start()
        assert read_partition(first.bootstrap, "owned", 5) == [
            (0, b"a0"), (1, b"a1"), (2, b"a2"), (3, b"a3"), (4, b"a4"),
        ]  # fmt: skip
    finally:
        second.kill()
        first.stop()
    # Once the owner is gone the directory is free again (for the same broker id).
    second.start()
    second.stop()
