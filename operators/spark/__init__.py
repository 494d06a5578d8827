"""Run the operators on Spark through the PySpark Python Data Source API.

``register(spark)`` makes ``spark.readStream.format("hdfs_scan")`` (the directory scan and file
source) and ``df.writeStream.format("hdfs_sink")`` (the exactly-once file sink) available.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["register"]


def register(spark: SparkSession) -> None:
    """Register the ``hdfs_scan`` source and the ``hdfs_sink`` sink with ``spark``."""
    from operators.spark.sink import HdfsSinkDataSource
    from operators.spark.source import HdfsScanDataSource

    spark.dataSource.register(HdfsScanDataSource)
    spark.dataSource.register(HdfsSinkDataSource)
