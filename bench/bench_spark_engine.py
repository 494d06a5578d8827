"""Whole process: ``hdfs-region run --engine spark --available-now`` against a PySpark script
doing Spark's built-in ``readStream.text`` -> ``writeStream.text`` (available-now).

Each run is a fresh process from start to exit (the JVM start included), over the same input,
alternating the contenders. Rows: fused execution (the default without a SQL transform), the
streaming query (``[spark] execution = "streaming"``), the in-process engine (``--engine
local``) and the built-in script. Every output is checked to hold the input's bytes. Prints a
table and writes ``bench/results/spark_engine.json``.

    python bench/bench_spark_engine.py               # 1 GB in 8 files, 3 runs of each
    python bench/bench_spark_engine.py --mb 200      # a quicker run
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import (
    REPO,
    add_common_args,
    machine,
    make_text_files,
    median,
    output_bytes,
    print_table,
    scratch,
    write_json,
)
from operators.spark.session import DEFAULT_CONF

SETTINGS = """\
engine = "spark"
[region]
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


def timed(command: list[str], log: Path) -> float:
    started = time.perf_counter()
    with log.open("ab") as out:
        done = subprocess.run(command, cwd=REPO, stdout=out, stderr=subprocess.STDOUT)
    elapsed = time.perf_counter() - started
    if done.returncode != 0:
        tail = log.read_text(errors="replace")[-2000:]
        raise RuntimeError(f"{' '.join(command)} exited {done.returncode}:\n{tail}")
    return elapsed


def run(kind: str, src: Path, work: Path, tag: str) -> float:
    log = work / f"{kind}.log"
    if kind.startswith("builtin"):
        script = work / "builtin.py"
        script.write_text(BUILTIN.format(conf=DEFAULT_CONF))
        out, ck = work / f"out-{tag}", work / f"ck-{tag}"
        sql = ["sql"] if kind.endswith("-sql") else []
        return timed([sys.executable, str(script), str(src), str(out), str(ck), *sql], log)
    execution = "streaming" if kind.startswith("streaming") else "auto"
    transform = f'[transform]\nsql = "{SQL}"\n' if kind.endswith("-sql") else ""
    config = work / f"{tag}.toml"
    config.write_text(
        SETTINGS.format(work=work, tag=tag, src=src, execution=execution, transform=transform)
    )
    command = [sys.executable, "-m", "operators.app", "run", str(config), "--available-now"]
    if kind == "local":
        command += ["--engine", "local"]
    return timed(command, log)


KINDS = ("fused", "builtin", "streaming", "local")
#: With ``--sql``: the same job with a SQL transform, fused (stateless SQL) and streaming.
SQL_KINDS = ("fused-sql", "builtin-sql", "streaming-sql")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=float, default=1000.0, help="input MB (default 1000)")
    parser.add_argument("--files", type=int, default=8, help="input files (default 8)")
    parser.add_argument("--repeat", type=int, default=3, help="runs of each (default 3)")
    parser.add_argument("--only", default=",".join(KINDS), help=f"of {','.join(KINDS)}")
    parser.add_argument("--sql", action="store_true", help=f"run {','.join(SQL_KINDS)}")
    add_common_args(parser, "spark_engine")
    args = parser.parse_args(argv)
    kinds = list(SQL_KINDS) if args.sql else [k for k in args.only.split(",") if k]
    before = machine()
    times: dict[str, list[float]] = {k: [] for k in kinds}
    with scratch(args.work, "bench-spark-engine-") as work:
        src = work / "input"
        total, lines = make_text_files(src, args.mb, args.files)
        for i in range(args.repeat):
            for kind in kinds:  # alternating: no contender always gets the warmer page cache
                tag = f"{kind}-{i}"
                times[kind].append(run(kind, src, work, tag))
                written = output_bytes(work / f"out-{tag}")
                if written != total:
                    raise RuntimeError(f"{tag} wrote {written} bytes of {total}")
    mb = total / 1e6
    builtin = "builtin-sql" if args.sql else "builtin"
    base = median(times[builtin]) if builtin in times else float("nan")
    rows = []
    for kind in kinds:
        seconds = median(times[kind])
        rows.append([kind, f"{seconds:.2f}", f"{mb / seconds:.1f}", f"{base / seconds:.2f}"])
    print_table(
        f"whole process, {mb:.0f} MB in {args.files} files, median of {args.repeat}",
        ["run", "seconds", "MB/s", "ratio to built-in"],
        rows,
    )
    after = machine()
    print(f"load average before {before['load_average']}, after {after['load_average']}")
    result = {
        "input_mb": round(mb, 1),
        "input_lines": lines,
        "input_files": args.files,
        "repeat": args.repeat,
        "seconds": times,
        "median_seconds": {k: round(median(v), 3) for k, v in times.items()},
        "ratio_to_builtin": {k: round(base / median(v), 2) for k, v in times.items()},
        "machine_before": before,
        "machine_after": after,
    }
    write_json(args.json, result)
    return 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
