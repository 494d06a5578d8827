"""bench_cluster.py on the session's Spark standalone cluster (``spark_cluster``): a module of its
own, so that only this benchmark joins the heavy parts' unit of work (tests/conftest.py) and the
other benchmarks run on whichever worker is free."""

from __future__ import annotations

from pathlib import Path

import pytest

from operators.sandbox import Sandbox
from operators.spark.standalone import StandaloneCluster
from tests.bench.test_benchmarks import failed, load, run_script


@pytest.mark.slow
@pytest.mark.spark
def test_cluster_benchmark_runs_on_the_sessions_spark_cluster_and_hdfs(
    hdfs_sandbox: Sandbox, spark_cluster: StandaloneCluster, tmp_path: Path
) -> None:
    """bench_cluster.py against the session's cluster and HDFS (named by flags: nothing else
    started), the project shipped to the executors as a wheel."""
    info = hdfs_sandbox.info
    work = tmp_path / "work"
    done = run_script(
        "bench_cluster.py",
        *("--hdfs", info.hdfs + "/bench-cluster", "--conf-dir", info.conf_dir),
        *("--master", spark_cluster.master_url, "--python", spark_cluster.python),
        *("--mb", "1", "--files", "2", "--repeat", "1"),
        *("--json", str(tmp_path / "cluster.json"), "--work", str(work)),
        timeout=600,
    )
    assert done.returncode == 0, failed(done)
    assert "load average (1, 5, 15 min) before" in done.stdout
    data = load(tmp_path, "cluster")
    assert data["output_correct"] is True and data["master"] == "given"
    assert data["executors"] == 2  # one per worker: the runs were distributed
    for key in ("hdfs_scan_to_hdfs_sink", "fused", "start_fused", "spark_text_to_text"):
        assert data[key]["mb_per_s"] > 0, key  # each run checked to write every byte it read
