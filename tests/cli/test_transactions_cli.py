"""``odradek transactions ...`` as a subprocess against a real broker subprocess: list and
describe an open transaction, then abort a hanging one by its start offset."""

from __future__ import annotations

import uuid
from pathlib import Path

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from tests.cli.helpers import odradek
from tests.helpers.broker import BrokerProcess
from tests.integration.test_txn_confluent import consume_all

WAIT_S = 30


def _open_transaction(bs: str, transactional_id: str, value: bytes) -> tuple[str, Producer]:
    """A new one-partition topic and a producer whose open transaction wrote ``value`` to it."""
    topic = f"t-{uuid.uuid4().hex[:6]}"
    admin = AdminClient({"bootstrap.servers": bs})
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(timeout=WAIT_S)
    producer = Producer({"bootstrap.servers": bs, "transactional.id": transactional_id})
    producer.init_transactions(WAIT_S)
    producer.begin_transaction()
    producer.produce(topic, value, partition=0)
    return topic, producer


def test_list_describe_and_abort(tmp_path: Path) -> None:
    broker = BrokerProcess(
        tmp_path / "data", overrides={"transaction.state.log.num.partitions": "2"}
    ).start()
    try:
        bs = broker.bootstrap
        topic, producer = _open_transaction(bs, "cli-txn", b"hanging")
        producer.flush(WAIT_S)

        listed = odradek("transactions", "list", "-b", bs).check()
        assert listed.lines[0].split() == [
            "TransactionalId", "Coordinator", "ProducerId", "TransactionState"
        ]  # fmt: skip
        row = listed.lines[1].split()
        assert row[0] == "cli-txn" and row[1] == "0" and row[3] == "Ongoing"

        described = odradek(
            "transactions", "describe", "-b", bs, "--transactional-id", "cli-txn"
        ).check()
        header = described.lines[0].split()
        values = dict(zip(header, described.lines[1].split(), strict=True))
        assert values["TransactionState"] == "Ongoing"
        assert values["TopicPartitions"] == f"{topic}-0"
        assert values["ProducerEpoch"] == "0"

        producers = odradek(
            "transactions", "describe-producers", "-b", bs, "--topic", topic, "--partition", "0"
        ).check()
        prow = dict(zip(producers.lines[0].split(), producers.lines[1].split(), strict=True))
        assert prow["CurrentTransactionStartOffset"] == "0"

        # The hanging transaction holds back read_committed readers...
        plain = Producer({"bootstrap.servers": bs})
        plain.produce(topic, b"later", partition=0)
        plain.flush(WAIT_S)
        assert consume_all(bs, topic, "read_committed", idle_s=1) == []
        # ...until an operator aborts it in that partition.
        odradek(
            "transactions", "abort", "-b", bs, "--topic", topic, "--partition", "0",
            "--start-offset", "0",
        ).check()  # fmt: skip
        seen = consume_all(bs, topic, "read_committed", expected=1)
        assert [v for _, _, v in seen] == [b"later"]
        committed = odradek(
            "consume", topic, "-b", bs, "--from-beginning", "--timeout-ms", "3000",
            "--isolation-level", "read_committed",
        ).check()  # fmt: skip
        assert committed.lines == ["later"]
        everything = odradek(
            "consume", topic, "-b", bs, "--from-beginning", "--timeout-ms", "3000",
        ).check()  # fmt: skip
        assert everything.lines == ["hanging", "later"]
        odradek(
            "transactions", "abort", "-b", bs, "--topic", topic, "--partition", "0",
            "--start-offset", "0",
        ).check_error("no open transaction starts at offset 0")  # fmt: skip
        odradek("transactions", "describe", "-b", bs, "--transactional-id", "nope").check_error(
            "TRANSACTIONAL_ID_NOT_FOUND"
        )
    finally:
        broker.stop()


def test_describe_an_id_without_an_open_transaction(tmp_path: Path) -> None:
    # Its coordinator answers transaction_start_time -1 (as Kafka does), which the
    # response decoder used to refuse as a "negative timestamp".
    broker = BrokerProcess(
        tmp_path / "data", overrides={"transaction.state.log.num.partitions": "2"}
    ).start()
    try:
        bs = broker.bootstrap
        _topic, producer = _open_transaction(bs, "done-txn", b"v")
        producer.commit_transaction(WAIT_S)

        described = odradek(
            "transactions", "describe", "-b", bs, "--transactional-id", "done-txn"
        ).check()
        header = described.lines[0].split()
        row = described.lines[1].split()
        values = dict(zip(header, row + [""] * (len(header) - len(row)), strict=True))
        assert values["TransactionState"] == "CompleteCommit"
        assert values["CurrentTransactionStartTimeMs"] == "None"
        assert values["TransactionDurationMs"] == "None"
        assert values["TopicPartitions"] == ""
        producer.flush(1)
    finally:
        broker.stop()
