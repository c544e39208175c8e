"""The fixed row shape of the source and the column checks of the sink, as Spark's Kafka has them.

Source rows (``headers`` only with ``includeHeaders=true``)::

    key            binary        nullable
    value          binary        nullable (tombstones)
    topic          string
    partition      int
    offset         long
    timestamp      timestamp     record timestamp (ms) as a Spark timestamp
    timestampType  int           0 = CreateTime, 1 = LogAppendTime
    headers        array<struct<key:string,value:binary>>

Executors hand Spark ``pyarrow.RecordBatch`` objects whose schema must equal, field for field,
the Arrow schema Spark derives from the Spark schema (``timestamp('us', tz='UTC')``, ``int32``
for int, every field nullable), so both are built here from one list.

Sink columns: ``value`` (string or binary, required), ``key`` (string or binary), ``topic``
(string; required unless the ``topic`` option is set), ``partition`` (int), ``headers`` (same
type as above). Other columns are ignored, as Spark's Kafka sink ignores them.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import pyarrow as pa
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    DataType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from odradek.spark.options import OptionError

HEADER_STRUCT = StructType(
    [StructField("key", StringType(), True), StructField("value", BinaryType(), True)]
)
HEADERS_TYPE = ArrayType(HEADER_STRUCT, True)

ARROW_HEADER_STRUCT = pa.struct([pa.field("key", pa.string()), pa.field("value", pa.binary())])
ARROW_HEADERS_TYPE = pa.list_(pa.field("element", ARROW_HEADER_STRUCT))
ARROW_TIMESTAMP = pa.timestamp("us", tz="UTC")


def source_schema(include_headers: bool) -> StructType:
    """The Spark schema of rows read from odradek."""
    fields = [
        StructField("key", BinaryType(), True),
        StructField("value", BinaryType(), True),
        StructField("topic", StringType(), True),
        StructField("partition", IntegerType(), True),
        StructField("offset", LongType(), True),
        StructField("timestamp", TimestampType(), True),
        StructField("timestampType", IntegerType(), True),
    ]
    if include_headers:
        fields.append(StructField("headers", HEADERS_TYPE, True))
    return StructType(fields)


@functools.cache
def arrow_source_schema(include_headers: bool) -> pa.Schema:
    """The Arrow schema Spark expects for :func:`source_schema` (checked with ``equals``)."""
    fields = [
        pa.field("key", pa.binary()),
        pa.field("value", pa.binary()),
        pa.field("topic", pa.string()),
        pa.field("partition", pa.int32()),
        pa.field("offset", pa.int64()),
        pa.field("timestamp", ARROW_TIMESTAMP),
        pa.field("timestampType", pa.int32()),
    ]
    if include_headers:
        fields.append(pa.field("headers", ARROW_HEADERS_TYPE))
    return pa.schema(fields)


@dataclass(frozen=True)
class SinkColumns:
    """Where the sink finds each Kafka field in the incoming rows (None = not present)."""

    value: str
    key: str | None
    topic: str | None
    partition: str | None
    headers: str | None


def _same_headers_type(data_type: DataType) -> bool:
    if not isinstance(data_type, ArrayType) or not isinstance(data_type.elementType, StructType):
        return False
    fields = data_type.elementType.fields
    return (
        len(fields) == 2
        and fields[0].name == "key"
        and isinstance(fields[0].dataType, StringType)
        and fields[1].name == "value"
        and isinstance(fields[1].dataType, BinaryType)
    )


def sink_columns(schema: StructType, *, topic_option: str | None) -> SinkColumns:
    """Check the columns of a DataFrame written to odradek, as Spark's KafkaWriter does."""
    by_name = {f.name.lower(): f for f in schema.fields}

    def column(name: str, allowed: tuple[type[DataType], ...], what: str) -> str | None:
        found = by_name.get(name)
        if found is None:
            return None
        if not isinstance(found.dataType, allowed):
            raise OptionError(
                f"Column '{found.name}' must be {what}, got {found.dataType.simpleString()}"
            )
        return found.name

    value = column("value", (StringType, BinaryType), "string or binary")
    if value is None:
        raise OptionError(
            "Required column 'value' not found; the rows written to odradek need a 'value' "
            "column of type string or binary"
        )
    key = column("key", (StringType, BinaryType), "string or binary")
    topic = column("topic", (StringType,), "string")
    if topic is None and topic_option is None:
        raise OptionError(
            "No topic to write to: set the 'topic' option or add a string column 'topic'"
        )
    partition = column("partition", (IntegerType,), "int")
    headers = None
    found = by_name.get("headers")
    if found is not None:
        if not _same_headers_type(found.dataType):
            raise OptionError(
                "Column 'headers' must be array<struct<key:string,value:binary>>, "
                f"got {found.dataType.simpleString()}"
            )
        headers = found.name
    return SinkColumns(value=value, key=key, topic=topic, partition=partition, headers=headers)
