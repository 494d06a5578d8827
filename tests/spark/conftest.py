"""One SparkSession (local[2]) for the whole test run: starting one costs seconds. (The Spark
standalone cluster, ``spark_cluster``, is in tests/conftest.py: the benchmarks' tests use it
too.)"""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from typing import Any

import pytest


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    from operators.spark.session import build_session

    # Maps the class-data archive the runs before wrote; writes none (it would come at exit).
    session = build_session(
        "hdfs-region-tests", conf={"spark.default.parallelism": "2"}, write_class_data=False
    )
    yield session
    session.stop()


@pytest.fixture(scope="session")
def connect_server(hdfs_sandbox: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """The session's Spark Connect server (``local[2]``), started with pyspark's
    ``start-connect-server.sh``: it acts on the session's HDFS as the test user, and holds a
    password for its tasks by reference only (``HDFS_REGION_SECRET_PASSWORD``)."""
    from operators.app.spark_plan import SECRET_ENV
    from operators.spark.connect import ConnectServer
    from tests.conftest import CLUSTER_USER

    env = {
        "HADOOP_CONF_DIR": hdfs_sandbox.info.conf_dir,
        "HADOOP_USER_NAME": CLUSTER_USER,
        SECRET_ENV["password"]: f"pw-{secrets.token_hex(8)}",
    }
    server = ConnectServer.start(
        tmp_path_factory.mktemp("connect"), env=env, conf={"spark.default.parallelism": "2"}
    )
    try:
        yield server
    finally:
        server.stop()
