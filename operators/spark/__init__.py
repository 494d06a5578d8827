"""Run the operators on Spark through the PySpark Python Data Source API, or fused.

``register(spark)`` makes ``spark.readStream.format("hdfs_scan")`` (the directory scan and file
source) and ``df.writeStream.format("hdfs_sink")`` (the exactly-once file sink) available.
``start_fused(spark, transform, scan=..., sink=..., checkpoint_location=...)`` runs the same
pipeline as ``hdfs-region run`` does, each batch one Spark job, with a DataFrame transform of
the caller's (:mod:`operators.spark.query`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from operators.spark.query import FusedQuery, start_fused

__all__ = ["MIN_PYSPARK", "FusedQuery", "check_pyspark", "register", "start_fused"]

#: The first pyspark whose streaming Data Source API has read limits and Trigger.AvailableNow
#: for Python sources (``ReadLimit``, ``SupportsTriggerAvailableNow``), which the scan needs.
MIN_PYSPARK = (4, 2)


def check_pyspark(version: str | None = None) -> None:
    """ImportError naming the installed pyspark and the fix, when it is older than
    :data:`MIN_PYSPARK` (``version``: the one to check, default the installed one)."""
    if version is None:
        from importlib.metadata import version as installed

        version = installed("pyspark")
    parts = tuple(int(p) for p in version.split(".")[:2] if p.isdigit())
    if parts < MIN_PYSPARK:
        wanted = ".".join(map(str, MIN_PYSPARK))
        msg = (
            f"pyspark {version} is installed, but the Spark data sources need pyspark >= "
            f"{wanted} (read limits and Trigger.AvailableNow for Python sources): "
            f"pip install 'pyspark>={wanted},<5', or run with --engine local"
        )
        raise ImportError(msg)


def register(spark: SparkSession) -> None:
    """Register the ``hdfs_scan`` source and the ``hdfs_sink`` sink with ``spark``."""
    check_pyspark()
    from operators.spark.connect import is_connect
    from operators.spark.executors import MASTER_ENV, check_executor_versions, is_local_master
    from operators.spark.sink import HdfsSinkDataSource
    from operators.spark.source import HdfsScanDataSource

    # The sources' Python workers learn the master from it (SparkContext.environment travels
    # with each registered function): on a cluster they refuse paths on the local disk. A
    # Spark Connect client has no SparkContext: the server's own start decides both (README,
    # "Through Spark Connect").
    if not is_connect(spark):
        spark.sparkContext.environment[MASTER_ENV] = spark.sparkContext.master
        if not is_local_master(spark.sparkContext.master):
            check_executor_versions(spark)

    spark.dataSource.register(HdfsScanDataSource)
    spark.dataSource.register(HdfsSinkDataSource)


def __getattr__(name: str) -> Any:
    """``start_fused`` and ``FusedQuery``, imported when first used: the version check comes
    before anything imports pyspark's Data Source API."""
    if name in ("start_fused", "FusedQuery"):
        check_pyspark()
        from operators.spark import query

        return getattr(query, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
