"""The ``odradek`` data source: PySpark's Python data source API wired to odradek topics.

Register it once per session, then use it exactly like Spark's Kafka connector::

    from odradek.spark import register
    register(spark)
    df = (spark.readStream.format("odradek")
          .option("kafka.bootstrap.servers", "127.0.0.1:9092")
          .option("subscribe", "events").load())

Where things run:

* ``schema()``, ``reader()``, ``streamReader()``, ``writer()``, ``streamWriter()`` and the
  planning methods run in Python processes on the driver. They only talk to the cluster for
  metadata and offsets (Metadata, ListOffsets).
* ``read(partition)`` and ``write(iterator)`` run in Python workers on executors; the reader and
  writer objects are pickled there, so they hold options only, never a connection: every task
  opens its own client (:mod:`odradek.spark.connector`).
* Reads yield ``pyarrow.RecordBatch`` objects decoded column-wise
  (:mod:`odradek.spark.columnar`); writes receive Arrow batches (``DataSourceArrowWriter``,
  ``DataSourceStreamArrowWriter``).

Exactly-once: a micro-batch is the offset range between two checkpointed offset JSONs; Spark
replays the same range after a failure and ``read`` returns exactly the records of that range,
so a query into an idempotent sink (the file sink) neither loses nor duplicates rows. Writes to
odradek are at-least-once, as Spark's Kafka sink is.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import (
    DataSource,
    DataSourceArrowWriter,
    DataSourceReader,
    DataSourceStreamArrowWriter,
    DataSourceStreamReader,
    InputPartition,
    WriterCommitMessage,
)
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    ReadMinRows,
    SupportsTriggerAvailableNow,
)
from pyspark.sql.types import StructType

from odradek.spark import FORMAT_NAME
from odradek.spark.offsets import from_json_dict, to_json_dict
from odradek.spark.options import (
    OptionError,
    SinkOptions,
    SourceOptions,
    parse_sink_options,
    parse_source_options,
)
from odradek.spark.planning import StreamPlanner, plan_batch
from odradek.spark.schema import SinkColumns, sink_columns, source_schema


class OffsetRangePartition(InputPartition):
    """One Spark task: offsets ``[from_offset, until_offset)`` of one odradek partition."""

    def __init__(self, topic: str, partition: int, from_offset: int, until_offset: int) -> None:
        super().__init__((topic, partition, from_offset, until_offset))
        self.topic = topic
        self.partition = partition
        self.from_offset = from_offset
        self.until_offset = until_offset


@dataclass
class WriteSummary(WriterCommitMessage):
    """What one write task produced: rows, and the last offset acknowledged per partition."""

    rows: int
    last_offsets: dict[str, int]  # "topic-partition" -> offset of the last record written


class OdradekDataSource(DataSource):
    """``format("odradek")``: read topics into DataFrames and write DataFrames to topics."""

    @classmethod
    def name(cls) -> str:
        return FORMAT_NAME

    def _include_headers(self) -> bool:
        value = str(self.options.get("includeHeaders", "false")).strip().lower()
        if value not in ("true", "false"):
            raise OptionError(f"Option 'includeHeaders' must be 'true' or 'false', got '{value}'")
        return value == "true"

    def schema(self) -> StructType:
        return source_schema(self._include_headers())

    def reader(self, schema: StructType) -> DataSourceReader:
        return OdradekBatchReader(parse_source_options(self.options, streaming=False))

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return OdradekStreamReader(parse_source_options(self.options, streaming=True))

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceArrowWriter:
        if overwrite:
            raise OptionError(
                "Save mode 'overwrite' is not allowed for odradek: a topic is append-only. "
                "Use mode('append')"
            )
        options = parse_sink_options(self.options)
        if options.exactly_once:
            raise OptionError(
                "Option 'exactlyOnce' applies to streaming writes (writeStream) only"
            )
        return OdradekBatchWriter(options, sink_columns(schema, topic_option=options.topic))

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamArrowWriter:
        # Output mode "complete" asks for overwrite; a topic can only be appended to, so the
        # rows of each trigger are written as they come (Spark's Kafka sink does the same).
        options = parse_sink_options(self.options)
        return OdradekStreamWriter(options, sink_columns(schema, topic_option=options.topic))


def _read_partition(options: SourceOptions, partition: InputPartition) -> Iterator[pa.RecordBatch]:
    if not isinstance(partition, OffsetRangePartition):
        return iter(())  # Spark's placeholder partition when a read has no ranges
    from odradek.spark.connector import read_range

    return read_range(
        options, partition.topic, partition.partition, partition.from_offset,
        partition.until_offset,
    )  # fmt: skip


class OdradekBatchReader(DataSourceReader):
    def __init__(self, options: SourceOptions) -> None:
        self.options = options

    def partitions(self) -> list[InputPartition]:
        from odradek.spark.connector import ClusterOffsets

        with ClusterOffsets(self.options) as cluster:
            ranges = plan_batch(self.options, cluster)
        return [
            OffsetRangePartition(r.topic, r.partition, r.from_offset, r.until_offset)
            for r in ranges
        ]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return _read_partition(self.options, partition)


class OdradekStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Micro-batch reads with offsets as JSON, admission control and Trigger.AvailableNow."""

    def __init__(self, options: SourceOptions) -> None:
        self.options = options
        self._cluster: Any = None
        self._planner: StreamPlanner | None = None

    # The reader is pickled to executors for read(): connections stay on the driver.
    def __getstate__(self) -> dict[str, Any]:
        return {"options": self.options, "_cluster": None, "_planner": None}

    def _plan(self) -> StreamPlanner:
        if self._planner is None:
            from odradek.spark.connector import ClusterOffsets

            self._cluster = ClusterOffsets(self.options)
            self._planner = StreamPlanner(self.options, self._cluster)
        return self._planner

    def initialOffset(self) -> dict:
        return to_json_dict(self._plan().initial_offsets())

    def getDefaultReadLimit(self) -> ReadLimit:
        if self.options.max_offsets_per_trigger is not None:
            return ReadMaxRows(self.options.max_offsets_per_trigger)
        if self.options.min_offsets_per_trigger is not None:
            return ReadMinRows(self.options.min_offsets_per_trigger)
        return ReadAllAvailable()

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        max_rows = limit.max_rows if isinstance(limit, ReadMaxRows) else None
        end = self._plan().latest_offsets(
            from_json_dict(start), max_rows=max_rows, read_all=isinstance(limit, ReadAllAvailable)
        )
        return to_json_dict(end)

    def reportLatestOffset(self) -> dict | None:
        return to_json_dict(self._plan().current_latest())

    def prepareForTriggerAvailableNow(self) -> None:
        self._plan().prepare_available_now()

    def partitions(self, start: dict, end: dict) -> list[InputPartition]:
        ranges = self._plan().ranges(from_json_dict(start), from_json_dict(end))
        return [
            OffsetRangePartition(r.topic, r.partition, r.from_offset, r.until_offset)
            for r in ranges
        ]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return _read_partition(self.options, partition)

    def commit(self, end: dict) -> None:
        # Offsets live in Spark's checkpoint, not in a consumer group (as with Spark's Kafka).
        pass

    def stop(self) -> None:
        if self._cluster is not None:
            self._cluster.close()
        self._cluster = None
        self._planner = None


class OdradekBatchWriter(DataSourceArrowWriter):
    def __init__(self, options: SinkOptions, columns: SinkColumns) -> None:
        self.options = options
        self.columns = columns

    def write(self, iterator: Iterator[pa.RecordBatch]) -> WriteSummary:
        from odradek.spark.connector import write_batches

        return write_batches(self.options, self.columns, iterator)


class OdradekStreamWriter(DataSourceStreamArrowWriter):
    def __init__(self, options: SinkOptions, columns: SinkColumns) -> None:
        self.options = options
        self.columns = columns

    def write(self, iterator: Iterator[pa.RecordBatch]) -> WriteSummary:
        from odradek.spark.connector import write_batches
        from odradek.spark.transactional import TaskTransaction

        task = TaskTransaction.for_current_task(self.options) if self.options.exactly_once else None
        return write_batches(self.options, self.columns, iterator, task)

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        # Every record is acknowledged (with exactlyOnce: every task's transaction committed)
        # before its task reports success: nothing left to do.
        pass

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        # Records already acknowledged stay (at-least-once, as with Spark's Kafka sink); the
        # micro-batch is retried by Spark. With exactlyOnce the tasks that committed have
        # their batch-done markers, so the retry skips them.
        pass
