"""CSV landing to Parquet partitioned by one column of 10 values: ``hdfs-region run`` (local
engine) against a plain pyarrow loop (``csv.open_csv`` -> one ``ParquetWriter`` per partition,
no guarantees) and Spark's built-in ``readStream.schema(s).csv(...)`` ->
``writeStream.partitionBy(...).parquet(...)``, whole processes, alternately. Each run's output
is checked (every row once); beside its time, the peak RSS of each process and of its process
tree (sampled every 0.1 s: Spark's JVM, a child of its driver, counts there).

    python -m bench.bench_curated --mb 200 --repeat 3 [--no-spark] [--spark-engine]
    python -m bench.bench_curated --mb 200 --hdfs      # all three on a sandbox's hdfs://

With ``--hdfs`` (a sandbox started for the run, or ``--hdfs-uri`` with ``--conf-dir``) the input,
the outputs and the checkpoints are on ``hdfs://``: ours through hdfs-native, the pyarrow loop
through the same client (each file read whole, each partition's Parquet file written through
it), Spark through its bundled Hadoop client.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import posixpath
import random
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import (
    Comparison,
    add_common_args,
    machine,
    run_measured,
    scratch,
    upload,
    write_json,
)

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
    """Run a whole process: its seconds, its own peak RSS and its process tree's (MB)."""
    return run_measured(command, cwd, env)


OURS = """\
engine = "{engine}"
{filesystem}[region]
period = "1s"
checkpoint_dir = "{work}/ckpt-{engine}-{tag}"
[scan]
directory = "{landing}"
[source]
format = "csv"
schema = {schema}
[sink]
file = "{work}/{key}-{tag}/part-%FILENUM.parquet"
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

#: The pyarrow loop through hdfs-native: each file read whole, each partition's Parquet file
#: written through the client (``plain <hdfs base URI> <landing> <output>``).
PYARROW_HDFS = """\
import io, sys
import pyarrow as pa, pyarrow.csv as csv, pyarrow.parquet as pq, pyarrow.compute as pc
from operators.fs import open_path
fs, _ = open_path(sys.argv[1])
landing, out = sys.argv[2], sys.argv[3]
types = {"id": pa.int64(), "country": pa.string(), "day": pa.date32(), "amount": pa.float64(),
         "note": pa.string()}

class Out(io.RawIOBase):
    def __init__(self, path):
        self.writer, self.size = fs.create(path, overwrite=True), 0
    def writable(self):
        return True
    def write(self, data):
        data = bytes(data)
        self.writer.write(data)
        self.size += len(data)
        return len(data)
    def tell(self):
        return self.size

writers, files = {}, []
for status in sorted(fs.list_dir(landing), key=lambda s: s.name):
    reader = csv.open_csv(pa.BufferReader(fs.read(status.path)),
                          convert_options=csv.ConvertOptions(column_types=types))
    for batch in reader:
        table = pa.Table.from_batches([batch])
        for value in pc.unique(table["country"]).to_pylist():
            part = table.filter(pc.equal(table["country"], value)).drop_columns(["country"])
            if value not in writers:
                files.append(Out(f"{out}/country={value}/part-0.parquet"))
                writers[value] = pq.ParquetWriter(pa.PythonFile(files[-1], mode="w"),
                                                  part.schema, compression="snappy")
            writers[value].write_table(part)
for w in writers.values():
    w.close()
for f in files:
    f.writer.close()
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


@dataclass
class Place:
    """Where the input, the outputs and the checkpoints are: a local directory, or ``hdfs://``
    (``fs`` the client, ``base`` a path on it, ``uri`` the cluster's, ``conf_dir`` its
    configuration)."""

    base: str
    fs: Any = None
    uri: str | None = None
    conf_dir: str | None = None

    def at(self, name: str) -> str:
        """A location as the runs are given it: a path, or an ``hdfs://`` URI."""
        path = posixpath.join(self.base, name)
        return path if self.fs is None else self.fs.display(path)

    def env(self) -> dict[str, str] | None:
        if self.conf_dir is None:
            return None
        return {**os.environ, "HADOOP_CONF_DIR": self.conf_dir}

    def filesystem(self) -> str:
        """The settings file's ``[filesystem]`` table."""
        if self.fs is None:
            return ""
        conf = f'config_dir = "{self.conf_dir}"\n' if self.conf_dir else ""
        return f'[filesystem]\nuri = "{self.uri}"\n{conf}'

    def ids(self, directory: str) -> list[int]:
        """The ``id`` column of every Parquet file a plain reader sees below ``directory``."""
        import pyarrow as pa
        import pyarrow.dataset as ds
        import pyarrow.parquet as pq

        if self.fs is None:
            table = ds.dataset(
                directory,
                format="parquet",
                partitioning="hive",
                exclude_invalid_files=False,
                ignore_prefixes=[".", "_"],
            ).to_table(columns=["id"])
            return list(table.column("id").to_pylist())
        out: list[int] = []
        for status in self.fs.list_dir(directory):
            if status.name.startswith((".", "_")):
                continue
            if status.is_dir:
                out += self.ids(status.path)
            else:
                data = pa.BufferReader(self.fs.read(status.path))
                out += pq.read_table(data, columns=["id"]).column("id").to_pylist()
        return out


@contextlib.contextmanager
def place(args: argparse.Namespace, work: Path) -> Iterator[Place]:
    if not args.hdfs and not args.hdfs_uri:
        yield Place(str(work))
        return
    from operators.fs import FileSystemSettings, open_path

    with contextlib.ExitStack() as stack:
        if args.hdfs_uri:
            uri, conf_dir = args.hdfs_uri.rstrip("/"), args.conf_dir
        else:
            from operators.sandbox import Sandbox

            sandbox = stack.enter_context(Sandbox.start(work / "sandbox", datanodes=1))
            uri, conf_dir = sandbox.info.hdfs + "/bench", sandbox.info.conf_dir
        settings: dict[str, Any] = {"uri": uri}
        if conf_dir is not None:
            settings["config_dir"] = conf_dir
        fs, root = open_path(uri, FileSystemSettings.model_validate(settings))
        base = posixpath.join(root, f"curated-{os.getpid()}-{time.time_ns()}")
        fs.mkdirs(base)
        try:
            yield Place(base, fs, fs.display("/"), conf_dir)
        finally:
            with contextlib.suppress(OSError):
                fs.delete(base, recursive=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mb", type=float, default=200)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--no-spark", action="store_true", help="leave Spark's built-in job out")
    parser.add_argument(
        "--spark-engine", action="store_true", help="run the Spark engine's job too"
    )
    parser.add_argument("--hdfs", action="store_true", help="on hdfs://, a sandbox started here")
    parser.add_argument("--hdfs-uri", default=None, help="on hdfs://nn:port/base, a running one")
    parser.add_argument("--conf-dir", default=None, help="its Hadoop configuration directory")
    add_common_args(parser, "bench_curated")
    args = parser.parse_args(argv)
    on_hdfs = bool(args.hdfs or args.hdfs_uri)
    if on_hdfs and args.json.name == "bench_curated.json":
        args.json = args.json.with_name("bench_curated_hdfs.json")
    with scratch(args.work, "curated") as work, place(args, work) as where:
        local_landing = work / "landing"
        rows = make_input(local_landing, args.mb)
        if where.fs is not None:
            upload(local_landing, where.fs, posixpath.join(where.base, "landing"))
        landing = where.at("landing")
        schema = "{ " + ", ".join(f'{k} = "{v}"' for k, v in SCHEMA.items()) + " }"
        (work / "pyarrow_loop.py").write_text(PYARROW if where.fs is None else PYARROW_HDFS)
        (work / "spark_job.py").write_text(SPARK.format(schema=SPARK_SCHEMA))

        def ours(key: str, engine: str) -> Callable[[str], dict[str, float]]:
            def run(tag: str) -> dict[str, float]:
                config = work / f"{key}-{tag}.toml"
                text = OURS.format(
                    engine=engine,
                    key=key,
                    filesystem=where.filesystem(),
                    work=where.base,
                    tag=tag,
                    landing=landing if where.fs is None else posixpath.join(where.base, "landing"),
                    schema=schema,
                )
                config.write_text(text)
                command = [sys.executable, "-m", "operators.app", "run", str(config)]
                command += ["--available-now", "--no-progress", "--log-level", "WARNING"]
                return timed(command, Path.cwd(), where.env())

            return run

        def script(path: Path, key: str) -> Callable[[str], dict[str, float]]:
            """A script run as ``script [<hdfs URI>] <landing> <output> <checkpoint>``."""

            def run(tag: str) -> dict[str, float]:
                out, ckpt = where.at(f"{key}-{tag}"), where.at(f"{key}-ckpt-{tag}")
                command = [sys.executable, str(path)]
                if where.fs is not None and key == "plain":
                    out = posixpath.join(where.base, f"{key}-{tag}")
                    command += [str(where.uri), posixpath.join(where.base, "landing")]
                else:
                    command.append(landing)
                return timed([*command, out, ckpt], Path.cwd(), where.env())

            return run

        def check(key: str, tag: str) -> None:
            got = where.ids(posixpath.join(where.base, f"{key}-{tag}"))
            if len(got) != rows or len(set(got)) != rows:
                raise AssertionError(f"{key} run {tag}: {len(got)} rows, expected {rows} once")

        race = Comparison(args.mb)
        race.add("ours", "hdfs-region run (local engine)", ours("ours", "local"))
        if args.spark_engine:
            race.add("ours_spark", "hdfs-region run (Spark engine)", ours("ours_spark", "spark"))
        race.add("plain", "plain pyarrow loop", script(work / "pyarrow_loop.py", "plain"))
        if not args.no_spark:
            race.add(
                "spark", "Spark's built-in csv -> parquet", script(work / "spark_job.py", "spark")
            )
        race.race(args.repeat, check=check)
    race.print(
        f"CSV -> Parquet partitioned by country, {args.mb:g} MB, {rows} rows"
        + (" on hdfs://" if on_hdfs else ""),
        baseline="plain",
        columns={"peak RSS MB": "peak_rss_mb", "tree RSS MB": "peak_tree_rss_mb"},
    )
    result: dict[str, Any] = {
        "benchmark": "curated",
        "on": "hdfs" if on_hdfs else "local",
        "mb": args.mb,
        "rows": rows,
        "repeat": args.repeat,
        "figures": race.figures(),
        "ratio_to_plain_pyarrow": race.ratio("plain", "ours"),
        "machine": machine(),
    }
    if not args.no_spark:
        result["ratio_to_spark"] = race.ratio("spark", "ours")
    if args.spark_engine:
        result["spark_engine_ratio_to_plain_pyarrow"] = race.ratio("plain", "ours_spark")
        if not args.no_spark:
            result["spark_engine_ratio_to_spark"] = race.ratio("spark", "ours_spark")
    write_json(args.json, result)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
