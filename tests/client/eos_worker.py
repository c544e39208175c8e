"""An exactly-once consume-transform-produce worker, for the SIGKILL test.

    python eos_worker.py BOOTSTRAP INPUT OUTPUT GROUP TRANSACTIONAL_ID

Reads INPUT (read_committed, group GROUP, static member ``worker``), and for every record
writes ``out-<value>`` with the same key to OUTPUT, committing the consumed offsets in the
same transaction (KIP-447, with the consumer's group metadata). Each poll (at most 25
records, and 30 ms of pretended work, so kills land inside transactions) is one
transaction. A transaction that fails abortably is aborted and the consumer rewinds to the
committed offsets. Runs until killed.
"""

from __future__ import annotations

import asyncio
import logging
import sys

from odradek.client import GroupConsumer, Producer, TransactionAbortableError


async def main(bootstrap: str, source: str, sink: str, group: str, tid: str) -> None:
    async with (
        Producer(bootstrap, transactional_id=tid, linger_ms=2) as producer,
        GroupConsumer(
            bootstrap,
            group_id=group,
            group_instance_id="worker",  # a restarted worker takes its place at once
            session_timeout_ms=10000,
            enable_auto_commit=False,
            auto_offset_reset="earliest",
            isolation_level="read_committed",
        ) as consumer,
    ):
        # Before the first poll: completes (aborts) what a killed predecessor left open.
        await producer.init_transactions()
        consumer.subscribe([source])
        while True:
            records = await consumer.poll(timeout_ms=500, max_records=25)
            if not records:
                continue
            producer.begin_transaction()
            try:
                for record in records:
                    await producer.send(
                        sink, b"out-" + record.value, record.key, partition=record.partition
                    )
                # The "transform" takes a while: kills land inside transactions too.
                await asyncio.sleep(0.03)
                positions = {
                    (record.topic, record.partition): record.offset + 1 for record in records
                }
                await producer.send_offsets_to_transaction(positions, consumer.group_metadata())
                await producer.commit_transaction()
            except TransactionAbortableError as exc:
                print(f"aborting: {exc}", flush=True)
                await producer.abort_transaction()
                committed = await consumer.committed(sorted(consumer.assignment()))
                for (topic, partition), entry in committed.items():
                    if entry is not None:
                        consumer.seek(topic, partition, entry.offset)
                    else:
                        await consumer.seek_to_beginning((topic, partition))


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    asyncio.run(main(*sys.argv[1:6]))
