"""The ``hdfs_sink`` task writer of records with columns, without a SparkSession: tasks' Arrow
batches to in-progress files (:mod:`operators.spark.tables`), published by the commit into the
partition directories. ``tests/spark/test_spark_tables.py`` runs the same through Spark."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.parquet as pq
import pytest
from pyspark.sql.types import DateType, LongType, StringType, StructField, StructType

from operators.spark.commit import IN_PROGRESS_PREFIX
from operators.spark.options import sink_config
from operators.spark.sink import HdfsSinkStreamWriter, TaskIds

SCHEMA = StructType(
    [
        StructField("id", LongType()),
        StructField("country", StringType()),
        StructField("day", DateType()),
    ]
)
COUNTRIES = ("DE", "FR", "US", "IT")


def writer_for(out: Path, **options: str) -> HdfsSinkStreamWriter:
    return HdfsSinkStreamWriter(
        sink_config({"file": str(out / "part-%FILENUM.parquet"), **options}), SCHEMA
    )


def batches(first: int, count: int, size: int = 10) -> Iterator[pa.RecordBatch]:
    import datetime

    for start in range(first, first + count, size):
        ids = list(range(start, min(start + size, first + count)))
        yield pa.RecordBatch.from_pydict(
            {
                "id": pa.array(ids, pa.int64()),
                "country": [COUNTRIES[i % 4] for i in ids],
                "day": [datetime.date(2026, 11, 1 + i % 2) for i in ids],
            }
        )


def every_file(out: Path) -> list[str]:
    return sorted(
        os.path.relpath(os.path.join(d, n), out)
        for d, _, names in os.walk(out)
        for n in names
        if "_hdfs_sink" not in d
    )


def test_each_partition_gets_files_rolled_by_the_policy_and_published_into_its_directory(
    tmp_path: Path,
) -> None:
    out = tmp_path / "out"
    writer = writer_for(
        out, format="parquet", partition_by="country", tuples_per_file="12", manifest="true"
    )
    messages = [
        writer.write_task(batches(p * 100, 100), TaskIds(p, 0, 10 + p, 0)) for p in range(2)
    ]
    # The tasks leave whole Parquet files under hidden names, and no Arrow stream.
    files = [f for m in messages for f in m.files]
    assert all(os.path.basename(f.path).startswith(IN_PROGRESS_PREFIX) for f in files)
    assert [p for p in every_file(out) if "-arrow-" in p] == []
    assert all(pq.ParquetFile(f.path).metadata.num_rows == f.rows for f in files)
    # A reader polling the directory skips hidden names: nothing before the commit.
    assert ds.dataset(out, format="parquet", partitioning="hive").to_table().num_rows == 0
    writer.commit(messages, 0)
    published = every_file(out)
    assert all(not os.path.basename(p).startswith(".") for p in published)
    # 25 records per country and task: files of 12, 12 and 1.
    assert sorted({os.path.dirname(p) for p in published}) == sorted(
        f"country={c}" for c in COUNTRIES
    )
    assert sorted(pq.ParquetFile(out / p).metadata.num_rows for p in published) == (
        [1] * 8 + [12] * 16
    )
    table = ds.dataset(out, format="parquet", partitioning="hive").to_table()
    assert sorted(table.column("id").to_pylist()) == list(range(200))
    numbers = sorted(int(os.path.basename(p)[5:-8]) for p in published)
    assert numbers == list(range(24))  # %FILENUM at the commit, no gap
    manifest = json.loads((out / "_hdfs_sink" / "published" / f"{0:020d}.json").read_text())
    assert {tuple(e["partition"].items()) for e in manifest} == {
        (("country", c),) for c in COUNTRIES
    }


def test_max_open_files_closes_the_least_recently_written_partition(tmp_path: Path) -> None:
    out = tmp_path / "out"
    writer = writer_for(out, format="jsonl", partition_by="country", max_open_files="2")
    # Each batch of 4 records holds the 4 countries: with 2 open at once, every batch closes
    # files, and each file holds what came while it was open.
    message = writer.write_task(batches(0, 12, size=4), TaskIds(0, 0, 1, 0))
    assert len(message.files) > 4
    writer.commit([message], 0)
    rows = [
        json.loads(line)["id"]
        for p in every_file(out)
        for line in (out / p).read_text().splitlines()
    ]
    assert sorted(rows) == list(range(12))


def test_a_failed_task_leaves_nothing_and_a_bad_value_is_named(tmp_path: Path) -> None:
    out = tmp_path / "out"
    writer = writer_for(
        out,
        format="csv",
        compression="gzip",
        partition_by="country",
        schema=json.dumps({"id": "int32", "country": "string", "day": "date"}),
    )
    big = pa.RecordBatch.from_pydict(
        {"id": pa.array([1, 2**40], pa.int64()), "country": ["DE", "DE"], "day": [None, None]}
    )
    with pytest.raises(ValueError, match=r"column 'id': 1099511627776 is not a int32"):
        writer.write_task(iter([*batches(0, 8), big]), TaskIds(0, 0, 1, 0))
    assert every_file(out) == []  # the files of the failed attempt are gone


def test_the_writer_of_a_stop_publishes_without_the_input_columns(tmp_path: Path) -> None:
    from operators.spark.sink import close_open_files

    out = tmp_path / "out"
    options = {"file": str(out / "part-%FILENUM.orc"), "format": "orc", "partition_by": "day"}
    writer = HdfsSinkStreamWriter(sink_config(options), SCHEMA)
    writer.commit([writer.write_task(batches(0, 30), TaskIds(0, 0, 1, 0))], 0)
    assert close_open_files(options) == []  # files of records with columns end with the batch
    assert sorted({os.path.dirname(p) for p in every_file(out)}) == [
        "day=2026-11-01",
        "day=2026-11-02",
    ]
    table = ds.dataset(out, format="orc", partitioning="hive").to_table()
    assert sorted(table.column("id").to_pylist()) == list(range(30))


def test_gzipd_lines_span_batches_one_member_per_write_and_survive_a_failed_append(
    tmp_path: Path,
) -> None:
    import gzip

    from operators.spark.sink import close_open_files

    out = tmp_path / "out"
    options = {
        "file": str(out / "part-%FILENUM.txt.gz"),
        "compression": "gzip",
        "tuples_per_file": "5",
        "span_batches": "true",
    }
    lines = StructType([StructField("value", StringType())])
    writer = HdfsSinkStreamWriter(sink_config(options), lines)

    def task(records: list[str], batch: int, attempt: int = 0) -> object:
        data = iter([pa.RecordBatch.from_pydict({"value": records})])
        return writer.write_task(data, TaskIds(0, attempt, 100 + batch, batch))

    writer.commit([task([f"r{i}" for i in range(7)], 0)], 0)  # a file of 5, 2 left open
    # An attempt of batch 1 appends to the open file, then fails: its bytes are cut away.
    failing = iter([pa.RecordBatch.from_pydict({"value": ["lost"]}), None])
    with pytest.raises(AttributeError):
        writer.write_task(failing, TaskIds(0, 0, 201, 1))  # type: ignore[arg-type]
    writer.commit([task([f"r{i}" for i in range(7, 11)], 1, attempt=1)], 1)
    close_open_files(options)
    names = sorted(
        (n for n in os.listdir(out) if n.startswith("part-")), key=lambda n: int(n[5:-7])
    )
    texts = [gzip.decompress((out / n).read_bytes()).decode().splitlines() for n in names]
    assert texts == [[f"r{i}" for i in range(5)], [f"r{i}" for i in range(5, 10)], ["r10"]]
