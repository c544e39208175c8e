"""Idempotent producers at the wire level: duplicates, gaps, fencing, and restarts.

Batches carry (producer id, epoch, base sequence) as an idempotent Kafka producer sends
them; the broker must drop an exact retry (answering with the original offsets), reject
a gap and a stale epoch, and remember all of it across a restart (SIGTERM or SIGKILL).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from kio.schema.errors import ErrorCode

from odradek.records.batch import Record, build_batch
from tests.helpers.broker import BrokerProcess
from tests.helpers.raw import METADATA, RawClient

pytestmark = pytest.mark.integration

INIT_PRODUCER_ID = 22


def _batch(pid: int, epoch: int, seq: int, n: int = 2) -> bytes:
    records = [Record(value=b"s%d" % (seq + i)) for i in range(n)]
    return bytes(build_batch(records, producer_id=pid, producer_epoch=epoch, base_sequence=seq))


def _produce(client: RawClient, data: bytes) -> object:
    response = client.call(
        0,
        9,
        {
            "acks": -1,
            "timeout": 5000,
            "topic_data": [{"name": "idem", "partition_data": [{"index": 0, "records": data}]}],
        },
    )
    return response.responses[0].partition_responses[0]  # type: ignore[attr-defined]


def _init(client: RawClient, pid: int = -1, epoch: int = -1) -> tuple[int, int]:
    response = client.call(
        INIT_PRODUCER_ID,
        4,
        {"transactional_id": None, "transaction_timeout": 60000, "producer_id": pid,
         "producer_epoch": epoch},
    )  # fmt: skip
    assert response.error_code == ErrorCode.none  # type: ignore[attr-defined]
    return int(response.producer_id), int(response.producer_epoch)  # type: ignore[attr-defined]


@pytest.mark.parametrize("crash", [False, True], ids=["sigterm", "sigkill"])
def test_idempotence_survives_restart(tmp_path: Path, crash: bool) -> None:
    broker = BrokerProcess(tmp_path / "data").start()
    try:
        client = RawClient(broker.port)
        client.call(METADATA, 9, {"topics": [{"name": "idem"}], "allow_auto_topic_creation": True})
        pid, epoch = _init(client)
        first = _produce(client, _batch(pid, epoch, 0))
        second = _produce(client, _batch(pid, epoch, 2))
        assert first.error_code == second.error_code == ErrorCode.none
        assert second.base_offset == first.base_offset + 2

        # A retry of the last batch: no new data, the original offsets.
        retry = _produce(client, _batch(pid, epoch, 2))
        assert retry.error_code == ErrorCode.none
        assert retry.base_offset == second.base_offset

        # A gap in the sequence.
        gap = _produce(client, _batch(pid, epoch, 9))
        assert gap.error_code == ErrorCode.out_of_order_sequence_number

        client.sock.close()
        if crash:
            broker.kill()
        else:
            broker.stop()
        broker.start()
        client = RawClient(broker.port)

        # After the restart the broker still knows this producer's sequences.
        again = _produce(client, _batch(pid, epoch, 0))
        assert again.error_code == ErrorCode.none
        assert again.base_offset == first.base_offset
        next_batch = _produce(client, _batch(pid, epoch, 4))
        assert next_batch.error_code == ErrorCode.none
        assert next_batch.base_offset == second.base_offset + 2

        # A bumped epoch starts at sequence 0 and fences the old epoch.
        pid2, epoch2 = _init(client, pid, epoch)
        assert (pid2, epoch2) == (pid, epoch + 1)
        bumped = _produce(client, _batch(pid, epoch2, 0))
        assert bumped.error_code == ErrorCode.none
        stale = _produce(client, _batch(pid, epoch, 6))
        assert stale.error_code in (ErrorCode.invalid_producer_epoch, ErrorCode.producer_fenced)
        client.sock.close()
    finally:
        broker.stop()
