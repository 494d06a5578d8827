"""Whole process: ``hdfs-region run --engine spark --available-now`` against a PySpark script
doing Spark's built-in ``readStream.text`` -> ``writeStream.text`` (available-now).

Each run is a fresh process from start to exit (the JVM start included), over the same input,
alternating the contenders. Rows: fused execution (the default without a SQL transform), the
streaming query (``[spark] execution = "streaming"``), the in-process engine (``--engine
local``) and the built-in script. Every output is checked to hold the input's bytes. Prints a
table and writes ``bench/results/spark_engine.json``.

With ``--hdfs`` input, output and checkpoints are on ``hdfs://``: a sandbox is started for the
run (``hdfs-region sandbox``, blocks of ``--block-size``, 128 MiB by default, a production
cluster's), the input uploaded once, ours given the cluster in ``[filesystem]`` and the
built-in script the same ``hdfs://`` URIs (Spark's bundled Hadoop client, ``HADOOP_CONF_DIR``
the sandbox's); by default the fused run against the built-in, after a warm-up run of each on a
small input. Writes ``bench/results/spark_engine_hdfs.json``.

    python bench/bench_spark_engine.py               # 1 GB in 8 files, 3 runs of each
    python bench/bench_spark_engine.py --mb 200      # a quicker run
    python bench/bench_spark_engine.py --hdfs --mb 200 --files 10    # on hdfs://
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import math
import os
import posixpath
import shutil
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.bench_spark_hdfs import visible_bytes
from bench.common import (
    REPO,
    RESULTS_DIR,
    Comparison,
    add_common_args,
    make_text_files,
    output_bytes,
    run_measured,
    scratch,
    upload,
    write_json,
)
from operators.fs import FileSystemSettings, open_path
from operators.sandbox import Sandbox
from operators.spark.session import DEFAULT_CONF
from region.fs import FileSystem

SETTINGS = """\
engine = "spark"
{filesystem}[region]
checkpoint_dir = "{work}/ck-{tag}"
[scan]
directory = "{src}"
[sink]
file = "{work}/out-{tag}/part-%FILENUM.txt"
[spark]
execution = "{execution}"
{transform}"""

#: The SQL of the ``-sql`` contenders (ASCII input: the output has the input's bytes).
SQL = "SELECT upper(value) AS value FROM input"

#: The baseline: what a user of plain PySpark writes, with the session settings ours uses.
BUILTIN = """\
import sys
from pyspark.sql import SparkSession
builder = SparkSession.builder.appName("builtin").master("local[2]")
for key, value in {conf!r}.items():
    builder = builder.config(key, value)
spark = builder.getOrCreate()
spark.sparkContext.setLogLevel("WARN")
src, out, ck = sys.argv[1:4]
frame = spark.readStream.format("text").load(src)
if len(sys.argv) > 4:
    frame = frame.selectExpr("upper(value) AS value")
query = (
    frame
    .writeStream.format("text").option("path", out).option("checkpointLocation", ck)
    .trigger(availableNow=True).start()
)
query.awaitTermination()
spark.stop()
"""


def timed(command: list[str], log: Path, env: dict[str, str] | None = None) -> dict[str, float]:
    """A whole process's seconds and peak RSS (its own, its tree's), its output in ``log``."""
    return run_measured(command, REPO, env, log=log)


@dataclass(frozen=True)
class Place:
    """Where a run reads and writes: a local directory, or a cluster's ``hdfs://`` root."""

    src: str  # the input directory (a path, or an hdfs:// URI)
    root: str  # outputs and checkpoints go under it (a path, or an hdfs:// URI)
    filesystem: str = ""  # the [filesystem] section of ours
    env: dict[str, str] | None = None  # the processes' environment (None: this one's)
    fs: FileSystem | None = None  # the cluster's, to check and remove outputs
    fs_root: str = ""  # ``root`` as a path of ``fs``

    def output_bytes(self, tag: str) -> int:
        if self.fs is None:
            return output_bytes(Path(self.root) / f"out-{tag}")
        return visible_bytes(self.fs, posixpath.join(self.fs_root, f"out-{tag}"))

    def clean(self, tag: str) -> None:
        """A run's output and checkpoints removed (a large input would fill the disk)."""
        if self.fs is None:
            return
        for name in (f"out-{tag}", f"ck-{tag}"):
            with contextlib.suppress(OSError):
                self.fs.delete(posixpath.join(self.fs_root, name), recursive=True)


def run(kind: str, place: Place, work: Path, tag: str) -> dict[str, float]:
    """One whole process of ``kind``, its output and checkpoints named ``{kind}-{tag}``."""
    return timed(command(kind, place, work, tag), work / f"{kind}.log", place.env)


def command(kind: str, place: Place, work: Path, tag: str) -> list[str]:
    """The command line of :func:`run` (its config or script written into ``work``)."""
    name = f"{kind}-{tag}"
    if kind.startswith("builtin"):
        script = work / "builtin.py"
        script.write_text(BUILTIN.format(conf=DEFAULT_CONF))
        out, ck = f"{place.root}/out-{name}", f"{place.root}/ck-{name}"
        sql = ["sql"] if kind.endswith("-sql") else []
        return [sys.executable, str(script), place.src, out, ck, *sql]
    execution = "streaming" if kind.startswith("streaming") else "auto"
    transform = f'[transform]\nsql = "{SQL}"\n' if kind.endswith("-sql") else ""
    config = work / f"{name}.toml"
    config.write_text(
        SETTINGS.format(
            work=place.root,
            tag=name,
            src=place.src,
            execution=execution,
            transform=transform,
            filesystem=place.filesystem,
        )
    )
    line = [sys.executable, "-m", "operators.app", "run", str(config), "--available-now"]
    return [*line, "--engine", "local"] if kind == "local" else line


FILESYSTEM = """\
[filesystem]
uri = "{uri}"
user = "{user}"
config_dir = "{conf_dir}"
"""


@contextlib.contextmanager
def places(args: argparse.Namespace, work: Path) -> Iterator[tuple[Place, Place, dict[str, Any]]]:
    """``(the timed runs' place, the warm-up's, what the cluster is)``: the local disk, or a
    sandbox started here with the input uploaded."""
    total, lines = make_text_files(work / "input", args.mb, args.files)
    info: dict[str, Any] = {"input_bytes": total, "input_lines": lines}
    if not args.hdfs:
        yield Place(str(work / "input"), str(work)), Place("", ""), info
        return
    make_text_files(work / "warm", max(4.0, min(20.0, args.mb / 10)), 2, seed=1)
    started = time.perf_counter()
    with Sandbox.start(work / "sandbox", block_size=args.block_size) as sandbox:
        info["sandbox_start_s"] = round(time.perf_counter() - started, 1)
        info["block_size"] = args.block_size
        uri, conf_dir = sandbox.info.hdfs, sandbox.info.conf_dir
        settings = FileSystemSettings.model_validate(
            {"uri": uri, "user": args.user, "config_dir": conf_dir}
        )
        fs, _ = open_path(uri + "/", settings)
        started = time.perf_counter()
        upload(work / "input", fs, "/bench/input")
        upload(work / "warm", fs, "/bench/warm")
        info["upload_s"] = round(time.perf_counter() - started, 1)
        env = {**os.environ, "HADOOP_CONF_DIR": conf_dir, "HADOOP_USER_NAME": args.user}
        section = FILESYSTEM.format(uri=uri, user=args.user, conf_dir=conf_dir)
        timed_place = Place(f"{uri}/bench/input", f"{uri}/bench", section, env, fs, "/bench")
        warm_place = Place(f"{uri}/bench/warm", f"{uri}/bench", section, env, fs, "/bench")
        yield timed_place, warm_place, info


KINDS = ("fused", "builtin", "streaming", "local")
#: With ``--sql``: the same job with a SQL transform, fused (stateless SQL) and streaming.
SQL_KINDS = ("fused-sql", "builtin-sql", "streaming-sql")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=float, default=1000.0, help="input MB (default 1000)")
    parser.add_argument("--files", type=int, default=8, help="input files (default 8)")
    parser.add_argument("--repeat", type=int, default=3, help="runs of each (default 3)")
    parser.add_argument("--only", default=",".join(KINDS), help=f"of {','.join(KINDS)}")
    parser.add_argument(
        "--sql", action="store_true", help=f"run {','.join(SQL_KINDS)} (or those --only names)"
    )
    parser.add_argument(
        "--hdfs",
        action="store_true",
        help="input, output and checkpoints on hdfs:// of a sandbox started here "
        "(default --only fused,builtin)",
    )
    parser.add_argument(
        "--block-size",
        type=int,
        default=128 << 20,
        help="with --hdfs: the sandbox's block size in bytes (default 134217728)",
    )
    parser.add_argument("--user", default="bench", help="with --hdfs: the HDFS user")
    parser.add_argument(
        "--keep-logs", type=Path, default=None, help="copy each contender's log (INFO) here"
    )
    add_common_args(parser, "spark_engine")
    args = parser.parse_args(argv)
    if args.hdfs and args.json == RESULTS_DIR / "spark_engine.json":
        args.json = RESULTS_DIR / "spark_engine_hdfs.json"
    if args.sql:
        only = args.only.split(",") if args.only != ",".join(KINDS) else SQL_KINDS
        kinds = [k for k in SQL_KINDS if k in only]
    elif args.hdfs and args.only == ",".join(KINDS):
        kinds = ["fused", "builtin"]
    else:
        kinds = [k for k in args.only.split(",") if k]
    with scratch(args.work, "bench-spark-engine-") as work, places(args, work) as located:
        place, warm, info = located
        total, lines = info["input_bytes"], info["input_lines"]
        if args.hdfs:
            for kind in kinds:  # the JVM's jars and the DataNode's blocks read once
                run(kind, warm, work, "warm")
                warm.clean(f"{kind}-warm")
        race = Comparison(total / 1e6)
        for kind in kinds:
            race.add(kind, kind, functools.partial(run, kind, place, work))

        def check(kind: str, i: str) -> None:
            written = place.output_bytes(f"{kind}-{i}")
            if written != total:
                raise RuntimeError(f"{kind}-{i} wrote {written} bytes of {total}")
            place.clean(f"{kind}-{i}")

        race.race(args.repeat, check=check, warm=False)
        if args.keep_logs is not None:
            args.keep_logs.mkdir(parents=True, exist_ok=True)
            for log in work.glob("*.log"):
                shutil.copy(log, args.keep_logs / log.name)
    mb = race.mb
    builtin = "builtin-sql" if args.sql else "builtin"
    baseline = builtin if builtin in kinds else None
    where = (
        f"on hdfs:// (sandbox, {args.block_size / 2**20:g} MiB blocks)" if args.hdfs else "local"
    )
    race.print(
        f"whole process {where}, {mb:.0f} MB in {args.files} files, median of {args.repeat}",
        baseline=baseline,
    )
    result = {
        "input_mb": round(mb, 1),
        "input_lines": lines,
        "input_files": args.files,
        "repeat": args.repeat,
        "hdfs": {k: v for k, v in info.items() if k not in ("input_bytes", "input_lines")}
        if args.hdfs
        else None,
        "seconds": {kind: race.samples[kind]["seconds"] for kind in kinds},
        "median_seconds": {kind: round(race.median(kind), 3) for kind in kinds},
        "median_peak_tree_rss_mb": {
            kind: round(race.median(kind, "peak_tree_rss_mb")) for kind in kinds
        },
        "ratio_to_builtin": {
            kind: race.ratio(baseline, kind) if baseline else math.nan for kind in kinds
        },
        "load_average_before": race.load_before,
        "load_average_after": race.load_after,
    }
    write_json(args.json, result)
    return 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
