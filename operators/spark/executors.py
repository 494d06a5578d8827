"""What a job on a Spark cluster checks at start: executors that import the same release of this
project and of pyspark as the driver, and paths that every executor can reach.

In local mode the executors live in the driver's process tree and share its disk and its Python;
on a cluster they are other processes, often on other hosts, with the workers' environment. Two
mistakes then go unnoticed until data is at stake: executors running another release (or none) of
the project, and a landing, output or checkpoint path on a disk only one host sees (each executor
would write its own disk). Both are refused at start with one line.
"""

from __future__ import annotations

import functools
import logging
import os
from collections.abc import Iterable
from typing import TYPE_CHECKING

from region.errors import ConfigError

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = [
    "MASTER_ENV",
    "check_executor_versions",
    "check_shared_path",
    "is_local_master",
    "versions",
]

logger = logging.getLogger(__name__)

#: The driver's master, set for the data sources' Python workers (``SparkContext.environment``
#: travels with every Python function of the session, on the driver and on executors alike).
MASTER_ENV = "HDFS_REGION_SPARK_MASTER"

_PROJECT = "hdfs-region"


def is_local_master(master: str | None) -> bool:
    """True for ``local``, ``local[N]``, ``local[*]``, ``local-cluster[…]`` is not local."""
    return master is None or master == "local" or master.startswith("local[")


@functools.cache
def versions() -> tuple[str, str]:
    """``(hdfs-region, pyspark)`` versions of this Python, as first asked (a file a job ships
    later, e.g. ``addPyFile``, comes first on the driver's path too, but does not change the
    code the driver has imported)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        project = version(_PROJECT)
    except PackageNotFoundError:
        project = "unknown"
    return project, version("pyspark")


def _probe(_: Iterable[object]) -> list[tuple[str, str, str]]:
    # Runs on an executor; imports nothing of this project by reference (cloudpickle ships this
    # function by value, see check_executor_versions), so a missing project is reported, not
    # raised as an unpickling error.
    import socket
    from importlib.metadata import PackageNotFoundError, version

    try:
        __import__("operators.spark")
        try:
            project = version(_PROJECT)
        except PackageNotFoundError:
            project = "unknown"
    except ImportError as exc:
        project = f"missing ({exc})"
    return [(socket.gethostname(), project, version("pyspark"))]


def check_executor_versions(spark: SparkSession) -> None:
    """Run one tiny job (a task per core) and compare the executors' hdfs-region and pyspark
    versions with the driver's; ConfigError in one line naming both when they differ."""
    import sys

    from pyspark import cloudpickle

    sc = spark.sparkContext
    cores = max(2, sc.defaultParallelism)
    # By value: the executors need not import this module to run the probe.
    cloudpickle.register_pickle_by_value(sys.modules[__name__])  # type: ignore[no-untyped-call]
    try:
        found = set(sc.parallelize(range(cores), cores).mapPartitions(_probe).collect())
    finally:
        cloudpickle.unregister_pickle_by_value(sys.modules[__name__])  # type: ignore[no-untyped-call]
    project, pyspark = versions()
    for host, theirs, their_spark in sorted(found):
        if (theirs, their_spark) != (project, pyspark):
            msg = (
                f"executors on {host} run hdfs-region {theirs} with pyspark {their_spark}, the "
                f"driver hdfs-region {project} with pyspark {pyspark}: ship the driver's release "
                "to the executors (spark.submit.pyFiles / --py-files with its wheel, or an "
                "environment archive; README 'Running on a Spark cluster')"
            )
            raise ConfigError(msg)
    logger.info("Executors run hdfs-region %s with pyspark %s", project, pyspark)


def check_shared_path(key: str, uri: str, master: str | None = None) -> None:
    """Refuse ``uri`` when it is on the local disk and the master is a cluster's
    (``master`` default: :data:`MASTER_ENV`): each executor would read or write its own disk."""
    if master is None:
        master = os.environ.get(MASTER_ENV)
    if is_local_master(master):
        return
    if "://" in uri and not uri.startswith("file:"):
        return
    msg = (
        f"{key}: {uri!r} is on the local disk, but the master is {master}: executors on other "
        "hosts would each use their own disk; put it on the cluster's shared filesystem "
        "(hdfs:// or webhdfs://)"
    )
    raise ConfigError(msg)
