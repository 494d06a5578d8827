"""The pyspark the data sources need, the kind of session they run in, and their registration
with it (re-exported by :mod:`operators.spark`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["MIN_PYSPARK", "check_pyspark", "is_connect", "register"]

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


def is_connect(spark: object) -> bool:
    """Whether ``spark`` is a Spark Connect session (no ``sparkContext``, no JVM here)."""
    return type(spark).__module__.startswith("pyspark.sql.connect")


def register(spark: SparkSession) -> None:
    """Register the ``hdfs_scan`` source and the ``hdfs_sink`` sink with ``spark``."""
    check_pyspark()
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
