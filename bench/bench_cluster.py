"""Spark on a standalone cluster (a master and 2 workers of 1 core, started here with pyspark's
``spark-class``) over a real HDFS: hdfs_scan -> hdfs_sink as a streaming query, fused execution
(what ``hdfs-region run`` does) and ``start_fused`` with ``upper(value)``, against Spark's
built-in text -> text and text -> upper -> text, same cluster, same data, same session.

The driver is this process; the executors run the workers' Python, which lacks this project: the
project goes to them as a wheel through ``spark.submit.pyFiles`` (README, "Running on a Spark
cluster"). The queries are bench_spark's (a warm-up of each, then alternating runs, median of
``--repeat``), given ``hdfs://`` URIs. Without ``--hdfs`` a sandbox is started, without
``--master`` a cluster. Prints a table and writes ``bench/results/cluster.json``::

    python bench/bench_cluster.py                          # 50 MB, sandbox and cluster here
    python bench/bench_cluster.py --master spark://h:7077 --hdfs hdfs://nn:8020/tmp/bench \
        --conf-dir /etc/hadoop/conf --python /opt/venv/bin/python

Two cores show what the distributed path costs (executors in other JVMs, the project imported
from a zip, tasks scheduled over RPC), not how it scales: see the README's projection.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import getpass
import os
import posixpath
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.bench_spark import DEFAULT_RUNS, RUNS
from bench.bench_spark_hdfs import Uri, cluster, visible_bytes
from bench.common import (
    REPO,
    Comparison,
    add_common_args,
    make_text_files,
    scratch,
    upload,
    write_json,
)
from operators.fs import FileSystemSettings, open_path
from operators.spark.session import build_session
from operators.spark.standalone import StandaloneCluster

#: The queries compared, by the tag their output directories are named with: the function that
#: runs one and returns its seconds, its key in the JSON (as bench_spark.py writes it), its row.


@contextlib.contextmanager
def spark_cluster(args: argparse.Namespace, work: Path) -> Iterator[tuple[str, dict[str, str]]]:
    """``(master URL, session settings)``: the master named, or a cluster started here."""
    if args.master:
        conf = {"spark.executor.memory": "512m"}
        if args.python:
            conf["spark.pyspark.python"] = args.python
        yield args.master, conf
        return
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")  # the driver, beside the cluster
    with StandaloneCluster.start(work / "spark-cluster", workers=args.workers) as started:
        yield started.master_url, started.session_conf()


def project_zip(work: Path) -> Path:
    """``pip wheel --no-deps`` of this project, named ``.zip`` (spark.submit.pyFiles puts
    ``.zip`` files on the executors' path and ignores ``.whl``)."""
    out = work / "wheel"
    command = [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(out), str(REPO)]
    subprocess.run(command, check=True, capture_output=True)
    (wheel,) = out.glob("*.whl")
    return wheel.rename(wheel.with_suffix(".zip"))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=float, default=50.0, help="input size in MB (default 50)")
    parser.add_argument("--files", type=int, default=8, help="number of input files (default 8)")
    parser.add_argument("--repeat", type=int, default=3, help="timed runs of each (default 3)")
    parser.add_argument("--hdfs", default=None, help="hdfs://nn:port/base (default: a sandbox)")
    parser.add_argument("--conf-dir", default=None, help="Hadoop client configuration directory")
    parser.add_argument("--datanodes", type=int, default=2, help="sandbox DataNodes (default 2)")
    parser.add_argument("--master", default=None, help="spark://host:port (default: started)")
    parser.add_argument("--python", default=None, help="the executors' Python (with --master)")
    parser.add_argument("--workers", type=int, default=2, help="workers started (default 2)")
    parser.add_argument("--user", default=None, help="the HDFS user (default: this login)")
    add_common_args(parser, "cluster")
    args = parser.parse_args(argv)

    with (
        scratch(args.work, "bench-cluster-") as work,
        cluster(args, work) as (base, conf_dir),
        spark_cluster(args, work) as (master, conf),
    ):
        if conf_dir is not None:
            os.environ.setdefault("HADOOP_CONF_DIR", conf_dir)  # for Spark's JVM, started below
        # One HDFS user for this client, the driver's JVM and every Python worker, executors
        # included (the data sources' hdfs-native reads it): the one asked for, else the login
        # (a webhdfs:// path without a user acts as the login). An inherited HADOOP_USER_NAME
        # made this client's input directory another user's than Spark's first mkdirs under it.
        user = args.user or getpass.getuser()
        os.environ["HADOOP_USER_NAME"] = user
        settings: dict[str, Any] = {"uri": base, "user": user}
        if conf_dir is not None:
            settings["config_dir"] = conf_dir
        fs, root = open_path(base, FileSystemSettings.model_validate(settings))
        root = posixpath.join(root, f"cluster-{os.getpid()}-{time.time_ns()}")
        total_bytes, total_lines = make_text_files(work / "input", args.mb, args.files)
        warm_mb = max(2.0, min(20.0, args.mb / 10))
        make_text_files(work / "warm", warm_mb, 2, seed=1)
        upload(work / "input", fs, posixpath.join(root, "input"))
        upload(work / "warm", fs, posixpath.join(root, "warm"))
        remote: Any = Uri(fs.display(root))
        conf = {**conf, "spark.submit.pyFiles": str(project_zip(work))}
        started = time.perf_counter()
        spark = build_session(
            "bench-cluster", master=master, conf=conf, environment={"HADOOP_USER_NAME": user}
        )
        session_s = time.perf_counter() - started  # executors started, releases checked
        try:
            executors = spark.sparkContext._jsc.sc().getExecutorMemoryStatus().size() - 1
            race = Comparison(total_bytes / 1e6)
            # The pipelines bench_spark times by default (its split rows write nothing to check).
            runs = {tag: RUNS[tag] for tag in DEFAULT_RUNS}
            for tag, (run, _, label) in runs.items():
                race.add(tag, label, functools.partial(run, spark, remote / "input", remote))

            def check(tag: str, i: str) -> None:
                written = visible_bytes(fs, posixpath.join(root, f"{tag}-{i}"))
                if written != total_bytes:
                    raise RuntimeError(f"{tag} run {i} wrote {written} bytes, read {total_bytes}")

            for run, _, _ in runs.values():  # warm on a small input, not the timed one
                run(spark, remote / "warm", remote, "warm")
            race.race(args.repeat, check=check, warm=False)
        finally:
            spark.stop()
            with contextlib.suppress(OSError):
                fs.delete(root, recursive=True)
    mb = race.mb
    result = {
        "benchmark": "cluster",
        "master": "given" if args.master else f"started, {args.workers} workers of 1 core",
        "executors": executors,
        "input_mb": round(mb, 1),
        "input_lines": total_lines,
        "input_files": args.files,
        "repeat": args.repeat,
        "session_start_s": round(session_s, 1),
        **race.figures({tag: json_name for tag, (_, json_name, _) in runs.items()}),
        "ratio": race.ratio("spark", "ours"),
        "fused_ratio": race.ratio("spark", "fused"),
        "start_fused_ratio_same_transform": race.ratio("spark-upper", "api"),
        "output_correct": True,
    }
    race.print(
        f"Spark cluster ({executors} executors) on hdfs:// "
        f"({mb:.0f} MB in {args.files} files, median of {args.repeat})"
    )
    print(
        f"ratio to the built-in: streaming {result['ratio']:.2f}, fused "
        f"{result['fused_ratio']:.2f}, start_fused {result['start_fused_ratio_same_transform']:.2f}"
        f" (to the same upper(value)); session start {session_s:.1f} s"
    )
    write_json(args.json, result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
