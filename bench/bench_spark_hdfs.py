"""Spark on a real HDFS: hdfs_scan -> hdfs_sink against Spark's built-in text -> text, all on
``hdfs://`` (input, output, checkpoints).

The queries are those of ``bench/bench_spark.py`` (same warm-up, alternating runs, median of
``--repeat``), given ``hdfs://`` URIs instead of local paths: our data sources go through
hdfs-native in Spark's Python workers, Spark's text source and sink through its bundled Hadoop
client. Without ``--hdfs`` a sandbox (``hdfs-region sandbox``) is started for the run. Prints a
table and writes ``bench/results/spark_hdfs.json``::

    python bench/bench_spark_hdfs.py                    # 50 MB on a sandbox started here
    python bench/bench_spark_hdfs.py --hdfs hdfs://nn:8020/tmp/bench --conf-dir /etc/hadoop/conf
    python bench/bench_spark_hdfs.py --connect          # the same queries through Spark Connect

With ``--connect`` the queries run on a Spark Connect server (``local[2]``, started here with
pyspark's ``start-connect-server.sh``, see ``operators.spark.connect``) from an ``sc://`` client,
and the JSON goes to ``bench/results/spark_hdfs_connect.json``.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import posixpath
import sys
import time
from collections.abc import Iterator
from functools import partial
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.bench_spark import run_builtin, run_ours
from bench.common import (
    RESULTS_DIR,
    Comparison,
    add_common_args,
    make_text_files,
    scratch,
    upload,
    write_json,
)
from operators.fs import FileSystemSettings, open_path
from operators.sandbox import Sandbox
from operators.spark.connect import ConnectServer, connect_session
from operators.spark.session import build_session
from region.fs import FileSystem


class Uri(str):
    """An ``hdfs://`` URI that joins like a Path (``uri / "name"``), so that the query
    functions of bench_spark, written for local Paths, run unchanged on HDFS."""

    __slots__ = ()

    def __truediv__(self, name: str) -> Uri:
        return Uri(self.rstrip("/") + "/" + name)


@contextlib.contextmanager
def cluster(args: argparse.Namespace, work: Path) -> Iterator[tuple[str, str | None]]:
    """``(hdfs:// base URI, Hadoop configuration directory)``: the one named, or a sandbox."""
    if args.hdfs:
        yield args.hdfs.rstrip("/"), args.conf_dir
        return
    with Sandbox.start(work / "sandbox", datanodes=args.datanodes) as sandbox:
        yield sandbox.info.hdfs + "/bench", sandbox.info.conf_dir


def visible_bytes(fs: FileSystem, directory: str) -> int:
    """Bytes a plain directory reader sees (hidden ``.``/``_`` names skipped, as Spark does)."""
    total = 0
    for status in fs.list_dir(directory):
        if status.name.startswith((".", "_")):
            continue
        total += visible_bytes(fs, status.path) if status.is_dir else status.size
    return total


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=float, default=50.0, help="input size in MB (default 50)")
    parser.add_argument("--files", type=int, default=8, help="number of input files (default 8)")
    parser.add_argument("--repeat", type=int, default=3, help="timed runs of each (default 3)")
    parser.add_argument("--hdfs", default=None, help="hdfs://nn:port/base (default: a sandbox)")
    parser.add_argument("--conf-dir", default=None, help="Hadoop client configuration directory")
    parser.add_argument("--datanodes", type=int, default=1, help="sandbox DataNodes (default 1)")
    parser.add_argument(
        "--connect", action="store_true", help="run through a Spark Connect server started here"
    )
    add_common_args(parser, "spark_hdfs")
    args = parser.parse_args(argv)
    if args.connect and args.json == RESULTS_DIR / "spark_hdfs.json":
        args.json = RESULTS_DIR / "spark_hdfs_connect.json"

    with scratch(args.work, "bench-spark-hdfs-") as work, cluster(args, work) as (base, conf):
        if conf is not None:
            os.environ.setdefault("HADOOP_CONF_DIR", conf)  # for Spark's JVM, started below
        settings: dict[str, Any] = {"uri": base}
        if conf is not None:
            settings["config_dir"] = conf
        fs, root = open_path(base, FileSystemSettings.model_validate(settings))
        root = posixpath.join(root, f"run-{os.getpid()}-{time.time_ns()}")
        total_bytes, total_lines = make_text_files(work / "input", args.mb, args.files)
        warm_mb = max(4.0, min(20.0, args.mb / 10))
        make_text_files(work / "warm", warm_mb, 2, seed=1)  # as bench_spark: two tasks
        upload(work / "input", fs, posixpath.join(root, "input"))
        upload(work / "warm", fs, posixpath.join(root, "warm"))
        # Passed where bench_spark's query functions take a Path: it joins the same way.
        remote: Any = Uri(fs.display(root))
        server = None
        if args.connect:
            env = {"HADOOP_CONF_DIR": conf} if conf is not None else {}
            server = ConnectServer.start(work / "connect", env=env)
            spark = connect_session(server.url)
        else:
            spark = build_session("bench-spark-hdfs")
        try:
            race = Comparison(total_bytes / 1e6)
            race.add(
                "spark", "Spark text -> text", partial(run_builtin, spark, remote / "input", remote)
            )
            race.add(
                "ours", "hdfs_scan -> hdfs_sink", partial(run_ours, spark, remote / "input", remote)
            )

            def check(tag: str, i: str) -> None:
                written = visible_bytes(fs, posixpath.join(root, f"{tag}-{i}"))
                if written != total_bytes:
                    raise RuntimeError(f"{tag} run {i} wrote {written} bytes, read {total_bytes}")

            run_ours(spark, remote / "warm", remote, "warm")
            run_builtin(spark, remote / "warm", remote, "warm")
            race.race(args.repeat, check=check, warm=False)
        finally:
            spark.stop()
            if server is not None:
                server.stop()
            with contextlib.suppress(OSError):
                fs.delete(root, recursive=True)
    mb = race.mb
    result = {
        "cluster": "sandbox" if not args.hdfs else "given",
        "session": "spark connect (local[2] server)" if args.connect else "local[2]",
        "datanodes": args.datanodes if not args.hdfs else None,
        "input_mb": round(mb, 1),
        "input_lines": total_lines,
        "input_files": args.files,
        "repeat": args.repeat,
        **race.figures({"ours": "hdfs_scan_to_hdfs_sink", "spark": "spark_text_to_text"}),
        "ratio": race.ratio("spark", "ours"),
    }
    race.print(
        f"Spark{' through Connect' if args.connect else ''} on hdfs:// ({mb:.0f} MB in "
        f"{args.files} files, median of {args.repeat})"
    )
    print(f"ratio (ours / built-in): {result['ratio']:.2f}")
    write_json(args.json, result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
