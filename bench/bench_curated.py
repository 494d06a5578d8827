"""CSV landing to Parquet partitioned by one column of 10 values: ``hdfs-region run`` (local
engine) against a plain pyarrow loop (``csv.open_csv`` -> one ``ParquetWriter`` per partition,
no guarantees) and Spark's built-in ``readStream.schema(s).csv(...)`` ->
``writeStream.partitionBy(...).parquet(...)``, whole processes, alternately. Each run's output
is checked (every row once); the peak RSS of each process is reported beside its time (the
process's own: Spark's JVM, a child of its driver, is not counted).

    python -m bench.bench_curated --mb 200 --repeat 3 [--no-spark]
"""

from __future__ import annotations

import argparse
import os
import random
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import Comparison, add_common_args, machine, scratch, write_json

COUNTRIES = ["DE", "FR", "IT", "ES", "PT", "NL", "BE", "AT", "PL", "SE"]
SCHEMA = {"id": "int64", "country": "string", "day": "date", "amount": "double", "note": "string"}
SPARK_SCHEMA = "id BIGINT, country STRING, day DATE, amount DOUBLE, note STRING"


def make_input(directory: Path, mb: float, files: int = 8) -> int:
    """``files`` CSV files of ``mb`` MB in all; the number of rows."""
    directory.mkdir(parents=True, exist_ok=True)
    rng = random.Random(1)
    per_file = int(mb * 1e6 / files)
    rows = 0
    for n in range(files):
        lines = ["id,country,day,amount,note\n"]
        size = 0
        while size < per_file:
            line = (
                f"{rows},{COUNTRIES[rows % 10]},2026-11-{1 + rows % 28:02d},"
                f"{rng.random() * 1000:.2f},note {rng.randrange(1 << 30)} of row {rows}\n"
            )
            lines.append(line)
            size += len(line)
            rows += 1
        (directory / f"part-{n:03d}.csv").write_text("".join(lines))
    return rows


def timed(command: list[str], cwd: Path, env: dict[str, str] | None = None) -> dict[str, float]:
    """Run a whole process; its seconds and its own peak RSS (MB)."""
    start = time.perf_counter()
    process = subprocess.Popen(
        command, cwd=cwd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )
    _, status, usage = os.wait4(process.pid, 0)
    seconds = time.perf_counter() - start
    process.returncode = os.waitstatus_to_exitcode(status)
    if process.returncode != 0:
        assert process.stderr is not None
        raise RuntimeError(f"{command[:3]} failed: {process.stderr.read().decode()[-3000:]}")
    return {"seconds": seconds, "peak_rss_mb": usage.ru_maxrss / 1024}


OURS = """\
engine = "local"
[region]
period = "1s"
checkpoint_dir = "{work}/ckpt-{tag}"
[scan]
directory = "{landing}"
[source]
format = "csv"
schema = {schema}
[sink]
file = "{work}/ours-{tag}/part-%FILENUM.parquet"
format = "parquet"
schema = {schema}
partition_by = ["country"]
tuples_per_file = 10000000
close_idle_after = "never"
"""

PYARROW = """\
import os, sys
import pyarrow as pa, pyarrow.csv as csv, pyarrow.parquet as pq, pyarrow.compute as pc
landing, out = sys.argv[1], sys.argv[2]
types = {"id": pa.int64(), "country": pa.string(), "day": pa.date32(), "amount": pa.float64(),
         "note": pa.string()}
writers = {}
for name in sorted(os.listdir(landing)):
    reader = csv.open_csv(os.path.join(landing, name),
                          convert_options=csv.ConvertOptions(column_types=types))
    for batch in reader:
        table = pa.Table.from_batches([batch])
        for value in pc.unique(table["country"]).to_pylist():
            part = table.filter(pc.equal(table["country"], value)).drop_columns(["country"])
            if value not in writers:
                os.makedirs(f"{out}/country={value}", exist_ok=True)
                writers[value] = pq.ParquetWriter(f"{out}/country={value}/part-0.parquet",
                                                  part.schema, compression="snappy")
            writers[value].write_table(part)
for w in writers.values():
    w.close()
"""

SPARK = """\
import sys
from pyspark.sql import SparkSession
landing, out, ckpt = sys.argv[1], sys.argv[2], sys.argv[3]
spark = SparkSession.builder.master("local[2]").getOrCreate()
frame = spark.readStream.schema("{schema}").option("header", True).csv(landing)
query = (frame.writeStream.partitionBy("country").format("parquet")
         .option("checkpointLocation", ckpt).trigger(availableNow=True).start(out))
query.awaitTermination()
spark.stop()
"""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mb", type=float, default=200)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--no-spark", action="store_true", help="leave Spark's built-in job out")
    add_common_args(parser, "bench_curated")
    args = parser.parse_args(argv)
    with scratch(args.work, "curated") as work:
        landing = work / "landing"
        rows = make_input(landing, args.mb)
        schema = "{ " + ", ".join(f'{k} = "{v}"' for k, v in SCHEMA.items()) + " }"
        (work / "pyarrow_loop.py").write_text(PYARROW)
        (work / "spark_job.py").write_text(SPARK.format(schema=SPARK_SCHEMA))

        def ours(tag: str) -> dict[str, float]:
            config = work / f"ours-{tag}.toml"
            config.write_text(OURS.format(work=work, tag=tag, landing=landing, schema=schema))
            return timed(
                [
                    sys.executable,
                    "-m",
                    "operators.app",
                    "run",
                    str(config),
                    "--available-now",
                    "--no-progress",
                    "--log-level",
                    "WARNING",
                ],
                Path.cwd(),
            )

        def script(path: Path, key: str) -> Callable[[str], dict[str, float]]:
            """A script run as ``script <landing> <output> <checkpoint>``."""

            def run(tag: str) -> dict[str, float]:
                out, ckpt = work / f"{key}-{tag}", work / f"{key}-ckpt-{tag}"
                return timed([sys.executable, str(path), str(landing), str(out), str(ckpt)], work)

            return run

        def check(key: str, tag: str) -> None:
            import pyarrow.dataset as ds

            out = work / f"{key}-{tag}"
            table = ds.dataset(
                out,
                format="parquet",
                partitioning="hive",
                exclude_invalid_files=False,
                ignore_prefixes=[".", "_"],
            ).to_table(columns=["id"])
            got = table.column("id")
            if len(got) != rows or len(set(got.to_pylist())) != rows:
                raise AssertionError(f"{key} run {tag}: {len(got)} rows, expected {rows} once")

        race = Comparison(args.mb)
        race.add("ours", "hdfs-region run (local engine)", ours)
        race.add("plain", "plain pyarrow loop", script(work / "pyarrow_loop.py", "plain"))
        if not args.no_spark:
            race.add(
                "spark", "Spark's built-in csv -> parquet", script(work / "spark_job.py", "spark")
            )
        race.race(args.repeat, check=check)
    race.print(
        f"CSV -> Parquet partitioned by country, {args.mb:g} MB, {rows} rows",
        baseline="plain",
        columns={"peak RSS MB": "peak_rss_mb"},
    )
    result: dict[str, Any] = {
        "benchmark": "curated",
        "mb": args.mb,
        "rows": rows,
        "repeat": args.repeat,
        "figures": race.figures(),
        "ratio_to_plain_pyarrow": race.ratio("plain", "ours"),
        "machine": machine(),
    }
    if not args.no_spark:
        result["ratio_to_spark"] = race.ratio("spark", "ours")
    write_json(args.json, result)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
