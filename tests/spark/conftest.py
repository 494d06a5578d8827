"""One SparkSession (local[2]) for the whole test run: starting one costs seconds; one Spark
standalone cluster (a master and 2 workers) for the cluster tests, whose drivers run in their own
processes (a process has one SparkContext)."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    from operators.spark.session import build_session

    session = build_session("hdfs-region-tests", conf={"spark.default.parallelism": "2"})
    yield session
    session.stop()


@pytest.fixture(scope="session")
def spark_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """A Spark standalone cluster for the session: a master and 2 workers of 1 core, whose
    executors lack this project unless a job ships it (operators.spark.standalone)."""
    from operators.spark.standalone import StandaloneCluster
    from tests.conftest import require_java_and_maven

    require_java_and_maven()
    cluster = StandaloneCluster.start(tmp_path_factory.mktemp("spark-cluster"), workers=2)
    try:
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture(scope="session")
def project_zip(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """This project's wheel (``pip wheel --no-deps .``) under a ``.zip`` name, which is how
    ``spark.submit.pyFiles`` puts a package on the executors' path (it ignores ``.whl``)."""
    return build_zip(ROOT, tmp_path_factory.mktemp("wheel"))


def build_zip(source: Path, out: Path) -> Path:
    command = [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(out), str(source)]
    run = subprocess.run(command, capture_output=True, text=True, check=False)
    assert run.returncode == 0, run.stderr[-3000:]
    (wheel,) = out.glob("*.whl")
    return wheel.rename(wheel.with_suffix(".zip"))
