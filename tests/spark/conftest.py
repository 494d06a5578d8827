"""One SparkSession (local[2]) for the whole test run: starting one costs seconds. (The Spark
standalone cluster, ``spark_cluster``, is in tests/conftest.py: the benchmarks' tests use it
too.)"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    from operators.spark.session import build_session

    session = build_session("hdfs-region-tests", conf={"spark.default.parallelism": "2"})
    yield session
    session.stop()
