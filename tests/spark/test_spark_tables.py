"""``hdfs_sink`` writing records with columns on Spark: a typed DataFrame as Parquet, ORC, CSV or
JSON lines, compressed and partitioned by the in-process sink's rules (tests/sink/test_formats.py
and tests/sink/test_partitions.py hold the local engine's tests of the same rules)."""

from __future__ import annotations

import contextlib
import datetime
import decimal
import gzip
import json
import os
import sys
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.parquet as pq
import pytest

from operators.spark.commit import IN_PROGRESS_PREFIX
from region.errors import ConfigError
from tests.spark.helpers import kill_at, start_worker, write_inputs

pytestmark = pytest.mark.spark

T0 = 1_700_000_000_000_000_000
COUNTRIES = ("DE", "FR", "US")


def rows_text(first: int, count: int) -> bytes:
    """``id,name,country,amount,day`` lines."""
    return "".join(
        f"{i},name {i},{COUNTRIES[i % 3]},{i}.25,2026-11-{1 + i % 2:02d}\n"
        for i in range(first, first + count)
    ).encode()


INPUTS = {"a.csv": rows_text(0, 120), "b.csv": rows_text(120, 90), "c.csv": rows_text(210, 60)}
N = 270

#: Lines to typed columns (the Spark engine reads lines; a DataFrame gives them columns).
TYPED = [
    "CAST(split(value, ',')[0] AS BIGINT) AS id",
    "split(value, ',')[1] AS name",
    "split(value, ',')[2] AS country",
    "CAST(split(value, ',')[3] AS DECIMAL(10,2)) AS amount",
    "CAST(split(value, ',')[4] AS DATE) AS day",
]


def expected_row(i: int) -> dict[str, Any]:
    return {
        "id": i,
        "name": f"name {i}",
        "country": COUNTRIES[i % 3],
        "amount": decimal.Decimal(f"{i}.25"),
        "day": datetime.date(2026, 11, 1 + i % 2),
    }


def run_query(
    spark: Any, root: Path, select: list[str] | None = None, **options: str
) -> tuple[Any, Path]:
    src, out, ck = root / "in", root / "out", root / "ck"
    query = (
        spark.readStream.format("hdfs_scan")
        .option("directory", str(src))
        .option("plan_dir", str(ck / "plans"))
        .option("maxFilesPerTrigger", "1")
        .load()
        .selectExpr(*(select or TYPED))
        .writeStream.format("hdfs_sink")
        .option("file", str(out / ("part-%FILENUM" + options.pop("suffix", ".parquet"))))
        .options(**options)
        .option("checkpointLocation", str(ck / "spark"))
        .trigger(availableNow=True)
        .start()
    )
    with contextlib.suppress(Exception):  # a failed query: query.exception() tells it
        query.awaitTermination()
    return query, out


def published(out: Path) -> list[Path]:
    """Every file a plain reader sees (hidden names and the sink's folder left out)."""
    found = []
    for folder, dirs, names in os.walk(out):
        dirs[:] = [d for d in dirs if not d.startswith(("_", "."))]
        found += [Path(folder, n) for n in names if not n.startswith((".", "_"))]
    return sorted(found)


def hidden(out: Path) -> list[str]:
    return [n for _, _, names in os.walk(out) for n in names if n.startswith(IN_PROGRESS_PREFIX)]


def test_a_typed_frame_is_written_as_parquet_partitioned_and_read_back_by_pyarrow_and_spark(
    spark: Any, tmp_path: Path
) -> None:
    write_inputs(tmp_path / "in", INPUTS, T0)
    query, out = run_query(
        spark,
        tmp_path,
        format="parquet",
        compression="zstd",
        partition_by="country",
        tuplesPerFile="25",
        manifest="true",
    )
    assert query.exception() is None
    # Hive-style directories, one per value, each file a whole Parquet file of its columns.
    files = published(out)
    assert {f.parent.name for f in files} == {f"country={c}" for c in COUNTRIES}
    for f in files:
        meta = pq.ParquetFile(f)
        assert meta.schema_arrow.names == ["id", "name", "amount", "day"]  # not the partition
        assert meta.metadata.num_rows <= 25  # the roll policy sizes the files
        assert meta.metadata.row_group(0).column(0).compression == "ZSTD"
    assert hidden(out) == []
    # pyarrow, as a reader polling the directory would: every row once, with its types.
    table = ds.dataset(out, format="parquet", partitioning="hive").to_table()
    assert table.schema.field("id").type == pa.int64()
    assert table.schema.field("amount").type == pa.decimal128(10, 2)
    assert table.schema.field("day").type == pa.date32()
    rows = sorted(table.to_pylist(), key=lambda r: r["id"])
    assert rows == [expected_row(i) for i in range(N)]
    # Spark's own reader.
    back = spark.read.parquet(str(out))
    assert back.count() == N
    assert back.select("id").distinct().count() == N
    assert dict(back.dtypes)["amount"] == "decimal(10,2)"
    # The manifest lists each file with its partition.
    listed = [
        entry
        for name in sorted(os.listdir(out / "_hdfs_sink" / "published"))
        for entry in json.loads((out / "_hdfs_sink" / "published" / name).read_text())
    ]
    assert sorted(e["path"] for e in listed) == sorted(str(f) for f in files)
    assert all(e["partition"] == {"country": Path(e["path"]).parent.name[8:]} for e in listed)


def test_a_partition_value_that_would_leave_its_directory_fails_the_query_naming_it(
    spark: Any, tmp_path: Path
) -> None:
    write_inputs(tmp_path / "in", {"a.csv": b"1,x,../etc\n2,y,DE\n"}, T0)
    select = ["CAST(split(value, ',')[0] AS BIGINT) AS id", "split(value, ',')[2] AS country"]
    query, out = run_query(spark, tmp_path, select, format="parquet", partition_by="country")
    error = str(query.exception())
    assert "partition 'country'" in error
    assert "'../etc'" in error
    assert "would leave its directory" in error
    assert published(out) == []
    assert hidden(out) == []


@pytest.mark.integration
@pytest.mark.parametrize(
    ("fmt", "codec", "suffix"),
    [("orc", "snappy", ".orc"), ("csv", "gzip", ".csv.gz"), ("jsonl", "gzip", ".jsonl.gz")],
)
def test_orc_and_gzipped_csv_and_json_lines_hold_every_row_once_with_its_types(
    spark: Any, tmp_path: Path, fmt: str, codec: str, suffix: str
) -> None:
    write_inputs(tmp_path / "in", INPUTS, T0)
    query, out = run_query(
        spark, tmp_path, format=fmt, compression=codec, suffix=suffix, partition_by="day"
    )
    assert query.exception() is None
    files = published(out)
    assert {f.parent.name for f in files} == {"day=2026-11-01", "day=2026-11-02"}
    assert hidden(out) == []
    if fmt == "orc":
        table = ds.dataset(out, format="orc", partitioning="hive").to_table()
        rows = sorted(table.to_pylist(), key=lambda r: r["id"])
        assert [r["id"] for r in rows] == list(range(N))
        assert table.schema.field("amount").type == pa.decimal128(10, 2)
        assert spark.read.orc(str(out)).count() == N
        return
    # A gzip file of one member per write: a whole gzip stream.
    text = [gzip.decompress(f.read_bytes()).decode() for f in files]
    if fmt == "csv":
        assert all(t.startswith('"id","name","country","amount"\n') for t in text)
        back = spark.read.option("header", "true").csv(str(out))
        assert back.count() == N
        ids = sorted(int(r.id) for r in back.select("id").collect())
    else:
        records = [json.loads(line) for t in text for line in t.splitlines()]
        assert set(records[0]) == {"id", "name", "country", "amount"}
        ids = sorted(r["id"] for r in records)
        assert spark.read.json(str(out)).count() == N
    assert ids == list(range(N))


def test_options_of_records_with_columns_are_checked_on_the_driver(tmp_path: Path) -> None:
    from pyspark.sql.types import LongType, StringType, StructField, StructType

    from operators.spark.options import sink_config
    from operators.spark.sink import HdfsSinkStreamWriter

    file = str(tmp_path / "out" / "part-%FILENUM.parquet")
    schema = StructType([StructField("id", LongType()), StructField("k", StringType())])
    with pytest.raises(ConfigError, match=r"partition_by: the input has no column 'day'"):
        HdfsSinkStreamWriter(
            sink_config({"file": file, "format": "parquet", "partition_by": "day"}), schema
        )
    with pytest.raises(ConfigError, match=r"compression='snappy' cannot be used with format='csv'"):
        sink_config({"file": file, "format": "csv", "compression": "snappy"})
    with pytest.raises(ConfigError, match=r"option schema='\{id' is not JSON"):
        sink_config({"file": file, "format": "csv", "schema": "{id"})
    config = sink_config(
        {
            "file": file,
            "format": "csv",
            "schema": '{"id": "int64", "k": "string"}',
            "partition_by": '["k"]',
        }
    )
    assert config.table is not None and config.table.partition_by == ("k",)
    HdfsSinkStreamWriter(config, schema)
    wider = StructType([*schema.fields, StructField("extra", StringType())])
    with pytest.raises(ConfigError, match=r"the input's column 'extra' is not in the schema"):
        HdfsSinkStreamWriter(config, wider)


def test_a_fused_run_writes_the_columns_of_a_sql_transform_as_partitioned_parquet(
    spark: Any, tmp_path: Path
) -> None:
    from operators.fs.local import LocalFileSystem
    from operators.spark.fused import FusedRunner, sql_transform
    from region.settings import RegionSettings

    write_inputs(tmp_path / "in", INPUTS, T0)
    out = tmp_path / "out"
    sql = f"SELECT {', '.join(TYPED)} FROM input"
    runner = FusedRunner(
        spark,
        {"directory": str(tmp_path / "in"), "plan_dir": str(tmp_path / "ck" / "plans")},
        {
            "file": str(out / "part-%FILENUM.parquet"),
            "format": "parquet",
            "partition_by": "day",
            "span_batches": "true",
            "tuples_per_file": "1000",
        },
        LocalFileSystem(),
        str(tmp_path / "ck" / "spark"),
        RegionSettings(),
        frame=sql_transform(spark, sql),
        available_now=True,
    )
    runner.run()
    assert [p.num_input_rows for p in runner.progress] == [N]
    # Files not full stay open for later batches (Arrow streams, hidden from readers) until
    # the stop publishes them, as `hdfs-region run` and start_fused do.
    assert hidden(out) and published(out) == []
    from operators.spark.sink import close_open_files

    options = {"file": str(out / "part-%FILENUM.parquet"), "format": "parquet"}
    assert len(close_open_files({**options, "partition_by": "day"})) == 2
    files = published(out)
    assert {f.parent.name for f in files} == {"day=2026-11-01", "day=2026-11-02"}
    table = ds.dataset(out, format="parquet", partitioning="hive").to_table()
    assert sorted(table.column("id").to_pylist()) == list(range(N))
    assert table.schema.field("amount").type == pa.decimal128(10, 2)
    assert hidden(out) == []


# -- kill -9 -------------------------------------------------------------------------------


FUSED_SETTINGS = """\
engine = "spark"
[region]
checkpoint_dir = "ck"
[scan]
directory = "in"
[transform]
sql = '''
SELECT CAST(split(value, ',')[0] AS BIGINT) AS id,
  split(value, ',')[1] AS name, split(value, ',')[2] AS country
FROM input'''
[sink]
file = "out/part-%FILENUM.parquet"
format = "parquet"
partition_by = ["country"]
tuples_per_file = 40
[sink.schema]
id = "int64"
name = "string"
country = "string"
[spark]
max_files_per_trigger = 1
"""


def crash_command(tmp: Path, execution: str) -> list[str]:
    if execution == "streaming":
        dirs = (str(tmp / d) for d in ("in", "out", "ck"))
        return [sys.executable, "-m", "tests.spark.crash_worker", *dirs, "parquet"]
    config = tmp / "pipeline.toml"
    config.write_text(FUSED_SETTINGS)
    return [sys.executable, "-m", "operators.app", "run", str(config), "--available-now"]


@pytest.mark.integration
@pytest.mark.slow
# Fused only: a streaming query's hdfs_sink commits through the same writer and sink log, and
# tests/spark/test_spark_crash.py kills both ways of running at these points (lines); the
# streaming variant here cost 2-5 minutes of CI for no other step.
@pytest.mark.parametrize("execution", ["fused"])
def test_sigkill_while_a_task_writes_and_between_the_write_ahead_entry_and_the_renames(
    tmp_path: Path, execution: str
) -> None:
    write_inputs(tmp_path / "in", INPUTS, T0)
    (tmp_path / "faults").mkdir()
    out = tmp_path / "out"
    # 1. Killed once a task of batch 0 has converted its first Parquet file (others staged).
    kill_at(tmp_path, "task_write", crash_command(tmp_path, execution), timeout=300.0)
    # 2. Restarted: killed after batch 1's write-ahead entry, before its renames.
    kill_at(tmp_path, "after_wal:1", crash_command(tmp_path, execution), timeout=300.0)
    # What a reader polling the directory sees meanwhile: whole Parquet files only.
    seen = ds.dataset(out, format="parquet", partitioning="hive").to_table()
    assert sorted(seen.column("id").to_pylist()) == list(range(120))  # batch 0: a.csv
    # 3. Restarted without faults: batch 1 is finished from its entry, then batch 2 runs.
    proc = start_worker(tmp_path, None, crash_command(tmp_path, execution))
    code = proc.wait(timeout=400)
    assert code == 0, (tmp_path / "worker.log").read_text()[-3000:]
    # Every row once; every published file a whole Parquet file; nothing partial left.
    files = published(out)
    for f in files:
        assert pq.ParquetFile(f).metadata.num_rows <= 40
    table = ds.dataset(out, format="parquet", partitioning="hive").to_table()
    assert sorted(table.column("id").to_pylist()) == list(range(N))
    assert {f.parent.name for f in files} == {f"country={c}" for c in COUNTRIES}
    assert hidden(out) == []
