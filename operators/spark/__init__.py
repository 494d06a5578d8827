"""Run the operators on Spark through the PySpark Python Data Source API, or fused.

``register(spark)`` makes ``spark.readStream.format("hdfs_scan")`` (the directory scan and file
source) and ``df.writeStream.format("hdfs_sink")`` (the exactly-once file sink) available.
``start_fused(spark, transform, scan=..., sink=..., checkpoint_location=...)`` runs the same
pipeline as ``hdfs-region run`` does, each batch one Spark job, with a DataFrame transform of
the caller's (:mod:`operators.spark.query`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from operators.spark.registration import MIN_PYSPARK, check_pyspark, register

if TYPE_CHECKING:
    from operators.spark.query import FusedQuery, start_fused

__all__ = ["MIN_PYSPARK", "FusedQuery", "check_pyspark", "register", "start_fused"]


def __getattr__(name: str) -> Any:
    """``start_fused`` and ``FusedQuery``, imported when first used: the version check comes
    before anything imports pyspark's Data Source API."""
    if name in ("start_fused", "FusedQuery"):
        check_pyspark()
        from operators.spark import query

        return getattr(query, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
