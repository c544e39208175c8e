"""A Kafka 3.x ``server.properties`` starts an odradek broker.

The fixtures hold the keys and values of the two files Kafka ships in ``config/`` (the
ZooKeeper-mode one and ``config/kraft/server.properties``). Only the address and data
directory are overridden, as anyone running a second broker on one machine would.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from tests.helpers.broker import BrokerProcess
from tests.helpers.zookeeper import zk_connect, zookeeper_server

__all__ = ["zk_connect", "zookeeper_server"]  # fixtures

pytestmark = pytest.mark.integration

FIXTURES = Path(__file__).parent / "fixtures"


class FileBroker(BrokerProcess):
    """A broker started as ``odradek server FILE --override ...``."""

    def __init__(self, config_file: Path, data_dir: Path) -> None:
        super().__init__(data_dir)
        self.config_file = config_file
        address = f"PLAINTEXT://127.0.0.1:{self.port}"
        # log.dirs, not log.dir: the file sets log.dirs, which wins over log.dir as in Kafka.
        self.overrides = {"listeners": address, "advertised.listeners": address,
                          "log.dirs": str(data_dir)}  # fmt: skip

    def command(self) -> list[str]:
        cmd = super().command()
        index = cmd.index("server") + 1
        return [*cmd[:index], str(self.config_file), *cmd[index:]]


def _round_trip(bootstrap: str, topic: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, num_partitions=1)])[topic].result(timeout=15)
    producer = Producer({"bootstrap.servers": bootstrap})
    producer.produce(topic, b"hello")
    assert producer.flush(15) == 0
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "stock",
                         "auto.offset.reset": "earliest"})  # fmt: skip
    try:
        consumer.subscribe([topic])
        for _ in range(60):
            message = consumer.poll(0.5)
            if message is not None and message.error() is None:
                assert message.value() == b"hello"
                return
        pytest.fail("no record consumed")
    finally:
        consumer.close()


def _warnings(log: str) -> list[str]:
    return [line for line in log.splitlines() if " WARNING " in line]


@pytest.mark.parametrize(
    ("fixture", "unused"),
    [
        (
            "kafka-server.properties",
            ["socket.receive.buffer.bytes", "socket.send.buffer.bytes"],
        ),
        (
            "kafka-kraft-server.properties",
            ["controller.listener.names", "controller.quorum.voters", "process.roles",
             "socket.receive.buffer.bytes", "socket.send.buffer.bytes"],
        ),
    ],
)  # fmt: skip
def test_kafkas_stock_file_starts_the_broker(
    tmp_path: Path, fixture: str, unused: list[str], request: pytest.FixtureRequest
) -> None:
    broker = FileBroker(FIXTURES / fixture, tmp_path / "data")
    if "zookeeper.connect=" in (FIXTURES / fixture).read_text():
        # Kafka's ZooKeeper-mode file joins the ZooKeeper it names, as Kafka's broker
        # does: point it at a real one (a one-broker cluster), like its address.
        broker.overrides["zookeeper.connect"] = request.getfixturevalue("zk_connect")
    broker.start()
    try:
        _round_trip(broker.bootstrap, "stock")
    finally:
        assert broker.stop() == 0
    listed = [w for w in _warnings(broker.log_text()) if "were supplied but are not used" in w]
    assert len(listed) == 1, broker.log_text()
    names = listed[0].split("'")[1].split(", ")
    # Every key the file sets that odradek does not act on, each once, nothing else.
    assert sorted(names) == sorted(unused)
