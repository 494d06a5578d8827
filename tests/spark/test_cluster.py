"""On a Spark standalone cluster (a master and 2 workers of 1 core, ``spark_cluster``) with
landing, output and checkpoints on the session's real HDFS: ``hdfs-region run`` and a user's own
job with the formats, each driver in its own process. The workers' Python lacks this project:
every job ships it as a wheel through ``spark.submit.pyFiles``.
"""

from __future__ import annotations

import json
import os
import posixpath
import subprocess
import sys
import time
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from operators.app.config import PipelineConfig
from operators.app.spark_plan import plan_spark
from operators.common.faults import FAULT_DIR_ENV, FAULT_ENV
from operators.spark.executors import MASTER_ENV, versions
from operators.spark.options import scan_config
from operators.spark.standalone import children
from region.errors import ConfigError
from region.fs import FileSystem
from tests.conftest import CLUSTER_USER, ROOT, real_fs
from tests.spark.drivers import (
    GATED_TRANSFORM,
    assert_published_once,
    driver,
    held_tasks,
    kill_after_wal_while_landing,
    land,
    start_driver,
    wait_until,
)

PASSWORD = "cluster-pw-5f2e0c9d"
MASTER = "spark://127.0.0.1:7077"


# -- refused at start, without a JVM ---------------------------------------------------------


@pytest.mark.parametrize("master", [MASTER, "yarn"])
@pytest.mark.parametrize("local", ["scan", "sink", "checkpoint"])
def test_run_on_a_cluster_refuses_a_driver_local_path(
    tmp_path: Path, local: str, master: str
) -> None:
    hdfs = "hdfs://127.0.0.1:8020"
    paths = {"scan": f"{hdfs}/landing", "sink": f"{hdfs}/out", "checkpoint": f"{hdfs}/ck"}
    paths[local] = str(tmp_path / local)
    config = PipelineConfig.model_validate(
        {
            "region": {"checkpoint_dir": paths["checkpoint"]},
            "scan": {"directory": paths["scan"]},
            "sink": {"file": paths["sink"] + "/part-%FILENUM.txt"},
            "spark": {"master": master},
        }
    )
    with pytest.raises(ConfigError) as err:
        plan_spark(config)
    message = str(err.value)
    assert "\n" not in message
    assert str(tmp_path / local) in message and master in message
    assert "hdfs://" in message  # the way forward
    # The same settings in local mode are fine.
    plan_spark(
        config.model_copy(update={"spark": config.spark.model_copy(update={"master": "local[2]"})})
    )


@pytest.mark.parametrize("option", ["directory", "plan_dir"])
def test_the_scan_format_on_a_cluster_refuses_a_driver_local_path(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, option: str
) -> None:
    # In a job's Python workers the registration's environment names the master.
    monkeypatch.setenv(MASTER_ENV, MASTER)
    # A Hadoop configuration whose default filesystem is HDFS: file:// stays the local disk.
    (tmp_path / "core-site.xml").write_text(
        "<configuration><property><name>fs.defaultFS</name>"
        "<value>hdfs://127.0.0.1:8020</value></property></configuration>"
    )
    monkeypatch.setenv("HADOOP_CONF_DIR", str(tmp_path))
    options = {"directory": "hdfs://127.0.0.1:8020/landing", "plan_dir": "hdfs://127.0.0.1:8020/p"}
    options[option] = "file:///tmp/driver-only"
    with pytest.raises(ConfigError, match=r"file:///tmp/driver-only.*local disk.*spark://"):
        scan_config(options)
    monkeypatch.setenv(MASTER_ENV, "local[2]")
    scan_config(options)


# -- on the cluster --------------------------------------------------------------------------


@pytest.fixture
def hdfs(request: pytest.FixtureRequest) -> tuple[FileSystem, str, Any]:
    fs, base, sandbox = real_fs(request, "hdfs")
    if sandbox is None:
        pytest.skip("needs the sandbox (HDFS_URI is set)")
    root = posixpath.join(base, f"cluster-{time.monotonic_ns()}")
    fs.mkdirs(root)
    return fs, root, sandbox


def driver_env(cluster: Any, sandbox: Any, **extra: str) -> dict[str, str]:
    """A driver's environment: the project from this tree (the driver has it), the workers'
    Python for the executors, the cluster's Hadoop user and configuration."""
    env = {k: v for k, v in os.environ.items() if k not in (FAULT_ENV, "PYSPARK_PYTHON")}
    env.update(
        PYTHONPATH=str(ROOT),
        PYSPARK_PYTHON=cluster.python,
        HADOOP_USER_NAME=CLUSTER_USER,
        HADOOP_CONF_DIR=sandbox.info.conf_dir,
        SPARK_LOCAL_IP="127.0.0.1",
    )
    env.update(extra)
    return env


def other_release(release: Path, out: Path, version: str) -> Path:
    """``release`` (a wheel) relabelled as another version of the project."""
    mine = versions()[0]
    target = out / release.name.replace(mine, version)
    with zipfile.ZipFile(release) as src, zipfile.ZipFile(target, "w") as dst:
        for item in src.infolist():
            name = item.filename.replace(f"hdfs_region-{mine}.", f"hdfs_region-{version}.")
            data = src.read(item)
            if name.endswith(".dist-info/METADATA"):
                data = data.replace(f"Version: {mine}\n".encode(), f"Version: {version}\n".encode())
            dst.writestr(name, data)
    return target


def no_secret_in(cluster: Any, *secrets: str) -> None:
    for path in cluster.log_files():
        data = path.read_bytes()
        for secret in secrets:
            assert secret.encode() not in data, f"{secret!r} in {path}"


@pytest.mark.spark
@pytest.mark.slow
def test_executors_without_the_project_another_release_or_a_local_path_are_refused(
    spark_cluster: Any, project_zip: Path, hdfs: tuple[FileSystem, str, Any], tmp_path: Path
) -> None:
    _, _, sandbox = hdfs
    other_zip = other_release(project_zip, tmp_path, "0.0.9")
    args = {
        "mode": "refusals",
        "master": spark_cluster.master_url,
        "conf": spark_cluster.session_conf(),
        "hdfs": sandbox.info.hdfs,
        "release": str(project_zip),
        "other": str(other_zip),
    }
    run = subprocess.run(
        [sys.executable, "-m", "tests.spark.cluster_job", json.dumps(args)],
        cwd=tmp_path,
        env=driver_env(spark_cluster, sandbox),
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    said = dict(line.split(": ", 1) for line in run.stdout.splitlines() if ": " in line)
    assert "hdfs-region missing (No module named 'operators')" in said["unshipped"], said
    assert f"driver hdfs-region {versions()[0]}" in said["unshipped"]
    assert "'file:///tmp/landing' is on the local disk" in said["local"], said
    assert spark_cluster.master_url in said["local"]
    assert "run hdfs-region 0.0.9 with pyspark" in said["mismatch"], said
    assert f"driver hdfs-region {versions()[0]}" in said["mismatch"]


ENGINE_CONFIG = """\
engine = "spark"
[filesystem]
uri = "{webhdfs}"
user = "{user}"
config_dir = "{conf_dir}"
password = "{password}"
timeout = "20s"
[region]
checkpoint_dir = "{webhdfs}{root}/ck"
[scan]
directory = "{root}/landing"
[transform]
function = "cluster_transform:upper"
[sink]
file = "{root}/out/part-%FILENUM.txt"
tuples_per_file = 25
[spark]
master = "{master}"
max_files_per_trigger = 1
[spark.conf]
{conf}
"""


def _descendants(pids: list[int]) -> Iterator[int]:
    """The processes below ``pids`` (an executor's Python workers), and ``pids``."""
    todo = list(pids)
    while todo:
        pid = todo.pop()
        yield pid
        todo.extend(children(pid))


def _wait_for_a_started_task(
    cluster: Any, gate: Path, process: subprocess.Popen[bytes], log: Path
) -> int:
    """The index of the worker whose executor runs a task held at ``gate``."""

    def workers() -> list[int]:
        held = held_tasks(gate)
        return [i for i in range(2) if held & set(_descendants(cluster.worker_pids(i)))]

    return int(wait_until(workers, process, log, timeout=400)[0])


@pytest.mark.spark
@pytest.mark.slow
def test_run_on_the_cluster_survives_kill_9_of_the_driver_then_a_worker_killed_mid_batch(
    spark_cluster: Any, project_zip: Path, hdfs: tuple[FileSystem, str, Any], tmp_path: Path
) -> None:
    """``hdfs-region run`` (fused execution: tasks import the shipped project) over webhdfs://
    with a password. 1: killed after a batch's write-ahead entry, before its renames, while
    files keep landing. 2: the run that recovers has the worker running its first task
    SIGKILLed with its executor; Spark runs the task again on the other worker. Every record is
    published once, the dead attempt's in-progress file is removed, and the password reached
    the executors only through the session's environment (no cluster file holds it)."""
    fs, root, sandbox = hdfs
    landing = posixpath.join(root, "landing")
    gate = tmp_path / "gate"
    gate.mkdir()
    (gate / "go").touch()  # 1 holds no task
    (tmp_path / "cluster_transform.py").write_text(GATED_TRANSFORM.format(gate=str(gate)))
    conf = {
        **spark_cluster.session_conf(),
        "spark.submit.pyFiles": f"{project_zip},{tmp_path / 'cluster_transform.py'}",
    }
    config = tmp_path / "pipeline.toml"
    config.write_text(
        ENGINE_CONFIG.format(
            webhdfs=sandbox.info.webhdfs,
            user=CLUSTER_USER,
            conf_dir=sandbox.info.conf_dir,
            password=PASSWORD,
            root=root,
            master=spark_cluster.master_url,
            conf="\n".join(f'"{k}" = "{v}"' for k, v in conf.items()),
        )
    )
    files = {f"f{i:02d}.txt": [f"file {i} line {j}" for j in range(40)] for i in range(6)}
    names = iter(files)
    for name in [next(names), next(names)]:
        land(fs, landing, name, files[name])
    faults = tmp_path / "faults"
    faults.mkdir()
    command = [sys.executable, "-m", "operators.app", "run", str(config), "--no-progress"]
    log = tmp_path / "driver.log"
    env = driver_env(spark_cluster, sandbox, **{FAULT_ENV: "after_wal:1"})
    env[FAULT_DIR_ENV] = str(faults)
    process = start_driver(command, env, tmp_path, log)
    kill_after_wal_while_landing(process, log, faults, fs, landing, files, names, every=3.0)
    env.pop(FAULT_ENV)
    # 2: the gate closed again; the markers of 1's tasks went with their executors.
    for marker in gate.iterdir():
        marker.unlink()
    rerun_log = tmp_path / "rerun.log"
    victim = None
    try:
        with driver([*command, "--available-now"], env, tmp_path, rerun_log) as running:
            victim = _wait_for_a_started_task(spark_cluster, gate, running, rerun_log)
            spark_cluster.kill_worker(victim)
            (gate / "go").touch()
            assert running.wait(timeout=600) == 0, rerun_log.read_text()[-3000:]
    finally:
        spark_cluster.restart_worker(victim if victim is not None else 0)
    assert_published_once(fs, posixpath.join(root, "out"), files)
    no_secret_in(spark_cluster, PASSWORD)


@pytest.mark.spark
@pytest.mark.slow
def test_own_job_survives_kill_9_of_the_driver_then_a_worker_killed_mid_batch(
    spark_cluster: Any, project_zip: Path, hdfs: tuple[FileSystem, str, Any], tmp_path: Path
) -> None:
    """A user's own job (hdfs_scan -> Python UDF -> hdfs_sink). 1: its driver is SIGKILLed
    after a batch's write-ahead entry, before the renames, while files keep landing. 2: the
    same job started again has one worker and its executor SIGKILLed while both tasks of its
    first batch run; the task is retried on the other worker. Every record is published once
    and no in-progress file is left."""
    fs, root, sandbox = hdfs
    landing = posixpath.join(root, "landing")
    files = {f"d{i:02d}.txt": [f"d {i} line {j}" for j in range(200)] for i in range(6)}
    names = iter(files)
    for name in [next(names), next(names), next(names)]:
        land(fs, landing, name, files[name])
    gate = tmp_path / "gate"
    gate.mkdir()
    (gate / "go").touch()  # 1 holds no task
    faults = tmp_path / "faults"
    faults.mkdir()
    args = {
        "mode": "pipeline",
        "master": spark_cluster.master_url,
        "conf": {
            **spark_cluster.session_conf(),
            "spark.submit.pyFiles": str(project_zip),
            "spark.default.parallelism": "2",
        },
        "hdfs": sandbox.info.hdfs,
        "root": root,
        "fs": {"user": CLUSTER_USER, "config_dir": sandbox.info.conf_dir},
        "gate": str(gate),
    }
    command = [sys.executable, "-m", "tests.spark.cluster_job", json.dumps(args)]
    env = driver_env(spark_cluster, sandbox, **{FAULT_ENV: "after_wal:1"})
    env[FAULT_DIR_ENV] = str(faults)
    log = tmp_path / "driver.log"
    process = start_driver(command, env, tmp_path, log)
    kill_after_wal_while_landing(process, log, faults, fs, landing, files, names, every=2.0)
    env.pop(FAULT_ENV)
    # 2: the gate closed again; the markers of 1's tasks went with their executors.
    for marker in gate.iterdir():
        marker.unlink()
    rerun_log = tmp_path / "rerun.log"
    victim = None
    try:
        with driver(command, env, tmp_path, rerun_log) as running:
            victim = _wait_for_a_started_task(spark_cluster, gate, running, rerun_log)
            spark_cluster.kill_worker(victim)
            (gate / "go").touch()
            assert running.wait(timeout=600) == 0, rerun_log.read_text()[-3000:]
    finally:
        spark_cluster.restart_worker(victim if victim is not None else 0)
    assert_published_once(fs, posixpath.join(root, "out"), files)
