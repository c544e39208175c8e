"""The exactly-once streaming sink (``exactlyOnce=true``): one Kafka transaction per task.

Spark runs micro-batch ``b`` of query ``q`` as tasks numbered ``0..n-1``; a batch whose
commit log entry is missing after a crash is run again from the checkpoint, with the same
input and the same task numbering. Each task writes its rows as one transaction:

* its transactional id is ``<transactionalIdPrefix>-<q>-<task partition>``, the same for
  every batch and every attempt, so ``init_transactions()`` fences an older attempt (a
  zombie task, the run before a crash) and aborts what it left open;
* the transaction also commits, through ``send_offsets_to_transaction``, the offset
  ``b + 1`` of the consumer group named like the transactional id, on partition 0 of the
  output topic: the marker that batch ``b`` of this task is in the topic. The marker and
  the rows commit or abort together;
* before writing, the task reads that marker (OffsetFetch with ``require_stable``): if it
  is already past ``b``, the batch was committed before the crash, and Spark re-runs it only
  because its commit log missed it; the task then writes nothing.

So every row is in the topic exactly once for ``read_committed`` readers, provided the
query's input is replayable and its partitioning deterministic (true of odradek's and
Spark's file sources), as Spark's own exactly-once file sink assumes.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass

from kio.schema.errors import ErrorCode

from odradek.client.errors import KafkaError
from odradek.client.group_admin import GroupAdmin, OffsetAndMetadata
from odradek.client.producer import Producer
from odradek.spark.options import OptionError, SinkOptions

log = logging.getLogger(__name__)

__all__ = ["TaskTransaction", "batch_already_written", "commit_batch"]

TopicPartition = tuple[str, int]

# Local properties Spark's MicroBatchExecution sets for the tasks of a micro-batch.
BATCH_ID_PROPERTY = "streaming.sql.batchId"
QUERY_ID_PROPERTY = "sql.streaming.queryId"
_STABLE_ATTEMPTS = 50


@dataclass(frozen=True)
class TaskTransaction:
    """Who one write task is: its transactional id, marker group, batch and marker partition."""

    transactional_id: str
    batch_id: int
    marker: TopicPartition

    @property
    def group_id(self) -> str:
        return self.transactional_id

    @classmethod
    def for_current_task(cls, options: SinkOptions) -> TaskTransaction:
        """From the running Spark task's context (executor side)."""
        from pyspark import TaskContext

        context = TaskContext.get()
        batch = context.getLocalProperty(BATCH_ID_PROPERTY) if context else None
        query = context.getLocalProperty(QUERY_ID_PROPERTY) if context else None
        if context is None or batch is None or query is None:
            raise OptionError(
                "Option 'exactlyOnce' applies to streaming writes (writeStream) only"
            )
        assert options.topic is not None  # parse_sink_options requires it
        return cls(
            f"{options.transactional_id_prefix}-{query}-{context.partitionId()}",
            int(batch),
            (options.topic, 0),
        )


async def batch_already_written(producer: Producer, task: TaskTransaction) -> bool:
    """Whether this task's transaction of ``task.batch_id`` committed before (call after
    ``init_transactions()``, which completes any transaction a predecessor left open)."""
    admin = GroupAdmin(producer.client)
    for _ in range(_STABLE_ATTEMPTS):
        try:
            found = await admin.fetch_offsets(task.group_id, [task.marker], require_stable=True)
        except KafkaError as exc:
            codes = {exc.code, *(e.code for e in exc.errors.values())}
            if ErrorCode.unstable_offset_commit not in codes:
                raise
            await asyncio.sleep(0.1)
            continue
        entry = found.get(task.marker)
        return entry is not None and entry.offset > task.batch_id
    raise KafkaError(ErrorCode.unstable_offset_commit, f"group {task.group_id!r} stays unstable")


async def commit_batch(producer: Producer, task: TaskTransaction) -> None:
    """Put the batch-done marker in the transaction and commit it."""
    marker = OffsetAndMetadata(task.batch_id + 1, f"batch {task.batch_id}")
    await producer.send_offsets_to_transaction({task.marker: marker}, task.group_id)
    await producer.commit_transaction()
