"""odradek as a PySpark data source: ``format("odradek")`` for batch and streaming reads and writes.

``register(spark)`` makes the format known to a session. Importing this package does not import
PySpark; the modules that need it do (``source``, ``schema``, ``connector``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

FORMAT_NAME = "odradek"


def register(spark: SparkSession) -> None:
    """Register ``format("odradek")`` with a Spark session (once per session is enough)."""
    from odradek.spark.source import OdradekDataSource

    spark.dataSource.register(OdradekDataSource)
