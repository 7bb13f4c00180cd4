"""Spark reaches eventlog streams through the Python data source ``eventlog`` (``pyspark.sql.datasource``).

::

    from connectors.spark import register
    register(spark)                                    # once per SparkSession
    df = spark.read.format("eventlog").option("workers", 3).load("file:///tmp/cap/numbers")
    df.write.format("eventlog").save("file:///tmp/cap/copy")    # at the records' _time; _part, _seq dropped
    other.write.format("eventlog").option("time", "epoch").save("file:///tmp/cap/other")  # times from a column

The path is a stream URI: the log URI with the stream name as last segment (``connectors.spark.uri``).
Options are listed in ``connectors.spark.options``. Spark runs the data source in its Python workers:
they must import this package (install it, or put the project on ``PYTHONPATH`` before the session starts)
and use ``PYSPARK_PYTHON`` = the project's interpreter.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from eventlog._extras import require

require("pyspark", "spark", "the Spark data source")  # one clear error naming the extra, before any submodule

from .source import NAME, EventlogDataSource
from .staging import StreamExistsError
from .uri import StreamURI, parse_stream_uri

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


def register(spark: "SparkSession") -> None:
    """Register the ``eventlog`` format with ``spark`` (idempotent)."""
    spark.dataSource.register(EventlogDataSource)


__all__ = ["NAME", "EventlogDataSource", "StreamExistsError", "StreamURI", "parse_stream_uri", "register"]
