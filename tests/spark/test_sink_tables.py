"""The ``hdfs_sink`` task writer of records with columns, without a SparkSession: tasks' Arrow
batches to in-progress files (:mod:`operators.spark.tables`), published by the commit into the
partition directories. ``tests/spark/test_spark_tables.py`` runs the same through Spark."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import posixpath
import time
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pyspark.sql.datasource import WriterCommitMessage
from pyspark.sql.types import DateType, LongType, StringType, StructField, StructType

from operators.fs.local import LocalFileSystem
from operators.spark.commit import IN_PROGRESS_PREFIX
from operators.spark.options import sink_config
from operators.spark.sink import HdfsSinkStreamWriter, TaskIds
from region.fs import FileSystem
from tests.conftest import REAL_BACKENDS, real_fs
from tests.spark.test_commit import Crash, CrashingFS
from tests.spark.test_rolling_across_batches import KillableFS, Killed

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


SPANNING = {"format": "parquet", "partition_by": "country", "span_batches": "true"}


def spanning(out: Path, fs: FileSystem | None = None, **limits: str) -> HdfsSinkStreamWriter:
    options = {"file": str(out / "part-%FILENUM.parquet"), **SPANNING, **limits}
    writer = HdfsSinkStreamWriter(sink_config({**options, "manifest": "true"}), SCHEMA)
    writer._fs = fs or LocalFileSystem()
    return writer


def published_ids(out: Path) -> list[list[int]]:
    """The ids of each published Parquet file (each read whole by a plain reader)."""
    names = [p for p in every_file(out) if not os.path.basename(p).startswith(".")]
    return [pq.read_table(out / p).column("id").to_pylist() for p in names]


def hidden(out: Path) -> list[str]:
    return [n for n in os.listdir(out) if n.startswith(IN_PROGRESS_PREFIX)]


def test_parquet_files_span_batches_sized_by_the_limit_not_one_per_batch(tmp_path: Path) -> None:
    from operators.spark.sink import close_open_files

    out = tmp_path / "out"
    writer = spanning(out, tuples_per_file="10")
    for batch in range(10):  # 10 batches of 8 records, 2 per country: 20 per country
        message = writer.write_task(batches(batch * 8, 8), TaskIds(0, 0, batch, batch))
        writer.commit([message], batch)
        # Between batches a reader sees whole Parquet files only; the open ones are hidden.
        table = ds.dataset(out, format="parquet", partitioning="hive").to_table()
        assert table.num_rows == sum(len(f) for f in published_ids(out))
    # Each country got 20 records over 10 batches: 2 files of 10, not 10 files of 2.
    assert sorted(len(f) for f in published_ids(out)) == [10] * 8
    assert len(hidden(out)) == 0
    # Two more batches leave 2 records per country open (one Arrow stream each); the stop
    # publishes them as Parquet files.
    for batch in (10, 11):
        message = writer.write_task(batches(batch * 8, 4), TaskIds(0, 0, batch, batch))
        writer.commit([message], batch)
    assert len(hidden(out)) == 4
    options = {"file": str(out / "part-%FILENUM.parquet"), **SPANNING, "tuples_per_file": "10"}
    assert len(close_open_files(options)) == 4
    assert hidden(out) == []
    assert sorted(len(f) for f in published_ids(out)) == [2] * 4 + [10] * 8
    ids = sorted(i for f in published_ids(out) for i in f)
    assert ids == [*range(84), *range(88, 92)]
    table = ds.dataset(out, format="parquet", partitioning="hive").to_table()
    assert table.schema.field("day").type == pa.date32()


def test_a_stream_past_time_per_file_is_converted_by_the_next_commit(tmp_path: Path) -> None:
    out = tmp_path / "out"
    writer = spanning(out, time_per_file="1h")
    writer.commit([writer.write_task(batches(0, 8), TaskIds(0, 0, 1, 0))], 0)
    assert published_ids(out) == [] and len(hidden(out)) == 4
    # An hour later, a batch with no task for the slot still publishes them, as Parquet.
    log = writer._log()
    log._clock = lambda: 1e12
    log.commit(1, [])
    assert sorted(i for f in published_ids(out) for i in f) == list(range(8))
    assert hidden(out) == []


def test_a_changed_format_never_appends_to_an_open_file_and_every_name_says_what_it_holds(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    out = tmp_path / "out"
    writer = spanning(out, tuples_per_file="100")
    writer.commit([writer.write_task(batches(0, 8), TaskIds(0, 0, 1, 0))], 0)
    # The next run writes ORC (one partition gets records): its task completes the Parquet
    # stream open for that partition, and starts an ORC file; the stop completes the others.
    orc = HdfsSinkStreamWriter(
        sink_config(
            {"file": str(out / "part-%FILENUM.orc"), **SPANNING, "format": "orc",
             "tuples_per_file": "100"}
        ),
        SCHEMA,
    )  # fmt: skip
    orc._fs = LocalFileSystem()
    de_only = pa.RecordBatch.from_pydict(
        {"id": pa.array([100], pa.int64()), "country": ["DE"], "day": [None]},
        schema=next(batches(0, 1)).schema,
    )
    with caplog.at_level(logging.WARNING, logger="operators.spark.commit"):
        message = orc.write_task(iter([de_only]), TaskIds(0, 0, 2, 1))
        assert [f.subdir for f in message.files] == ["country=DE"]
        orc.commit([message], 1)
        orc.close_open()
    assert hidden(out) == []
    # The files the Parquet run left open are named by this run's template (.orc): each is an
    # ORC file with the records and columns it was written with, never Parquet under .orc.
    import pyarrow.orc as po

    ids: list[int] = []
    for p in every_file(out):
        assert p.endswith(".orc") and (out / p).read_bytes().startswith(b"ORC"), p
        ids += po.read_table(out / p).column("id").to_pylist()
    assert sorted(ids) == [*range(8), 100]
    converted = [r for r in caplog.records if "by a run of other settings" in r.getMessage()]
    assert len(converted) == 4 and all("orc/zstd" in r.getMessage() for r in converted)


_COUNTS = st.lists(st.integers(min_value=0, max_value=9), min_size=1, max_size=3)


@settings(max_examples=40, deadline=None)
@given(
    shape=st.lists(_COUNTS, min_size=1, max_size=5),
    limit=st.sampled_from([("tuples_per_file", "4"), ("bytes_per_file", "1200")]),
    task_kills=st.lists(st.integers(min_value=1, max_value=6) | st.none(), min_size=5, max_size=5),
    commit_crashes=st.lists(
        st.integers(min_value=1, max_value=16) | st.none(), min_size=5, max_size=5
    ),
    stop_crash=st.integers(min_value=1, max_value=12) | st.none(),
)
def test_every_row_lands_once_in_whole_parquet_files_through_killed_tasks_and_commits(
    tmp_path_factory: pytest.TempPathFactory,
    shape: list[list[int]],
    limit: tuple[str, str],
    task_kills: list[int | None],
    commit_crashes: list[int | None],
    stop_crash: int | None,
) -> None:
    """Partitioned Parquet spanning batches: a task attempt killed mid-write (its half-written
    Arrow stream appends stay behind), a driver dying at any step of a commit (Spark then runs
    the batch again, its records in one task) or of the stop's conversions. Every row is in one
    whole Parquet file once; files are full but for the last of each partition."""
    out = tmp_path_factory.mktemp("out")
    sent: list[int] = []
    first = 0
    for batch, counts in enumerate(shape):
        tasks = []
        for count in counts:
            tasks.append(list(batches(first, count, size=3)))
            sent.extend(range(first, first + count))
            first += count
        if task_kills[batch] is not None:
            lost = spanning(out, KillableFS(task_kills[batch]), **dict([limit]))
            with contextlib.suppress(Killed):
                lost.write_task(iter(tasks[0]), TaskIds(0, 0, 1, batch))
        writer = spanning(out, **dict([limit]))
        messages: list[WriterCommitMessage | None] = [
            writer.write_task(iter(t), TaskIds(p, 1, 10 + p, batch)) for p, t in enumerate(tasks)
        ]
        crashing = spanning(out, CrashingFS(commit_crashes[batch]), **dict([limit]))
        try:
            crashing.commit(messages, batch)
        except Crash:
            again = spanning(out, **dict([limit]))
            merged = [b for t in tasks for b in t]
            again.commit([again.write_task(iter(merged), TaskIds(0, 2, 99, batch))], batch)
        # A reader polling the output meanwhile: whole Parquet files, no row twice.
        seen = [i for f in published_ids(out) for i in f]
        assert len(seen) == len(set(seen)) and set(seen) <= set(sent)
    with contextlib.suppress(Crash):
        spanning(out, CrashingFS(stop_crash), **dict([limit])).close_open()
    spanning(out, **dict([limit])).close_open()
    files = published_ids(out)
    assert sorted(i for f in files for i in f) == sent
    assert hidden(out) == []
    name, value = limit
    if name == "tuples_per_file":
        # At most one file per slot and partition is short: the one the stop published.
        short = [f for f in files if len(f) < int(value)]
        assert len(short) <= 3 * len(COUNTRIES)
        assert all(len(f) <= int(value) for f in files)


@pytest.mark.integration
@pytest.mark.parametrize("backend", REAL_BACKENDS)
def test_parquet_spanning_batches_on_a_real_cluster_survives_a_failed_append(
    request: pytest.FixtureRequest, backend: str
) -> None:
    fs, base, _ = real_fs(request, backend)
    out = posixpath.join(base, f"spanning-{backend}-{time.monotonic_ns()}")
    fs.mkdirs(out)
    options = {
        "file": posixpath.join(out, "part-%FILENUM.parquet"),
        **SPANNING,
        "tuples_per_file": "6",
    }

    def writer() -> HdfsSinkStreamWriter:
        w = HdfsSinkStreamWriter(sink_config(options), SCHEMA)
        w._fs = fs
        return w

    w = writer()
    w.commit([w.write_task(batches(0, 8), TaskIds(0, 0, 1, 0))], 0)  # 2 per country, open
    # An attempt of batch 1 appends to the open streams, then fails: its bytes are cut away.
    failing = iter([*batches(8, 8), None])
    with pytest.raises(AttributeError):
        writer().write_task(failing, TaskIds(0, 0, 2, 1))  # type: ignore[arg-type]
    w = writer()
    w.commit([w.write_task(batches(8, 16), TaskIds(0, 1, 3, 1))], 1)  # 6 per country: full
    w.commit([w.write_task(batches(24, 4), TaskIds(0, 0, 4, 2))], 2)  # 1 per country, open
    w.close_open()
    files = [
        s.path
        for d in fs.list_dir(out)
        if d.name.startswith("country=")
        for s in fs.list_dir(d.path)
    ]
    tables = [pq.read_table(pa.BufferReader(fs.read(p))) for p in files]
    assert sorted(t.num_rows for t in tables) == [1] * 4 + [6] * 4
    assert sorted(i for t in tables for i in t.column("id").to_pylist()) == list(range(28))
    assert [s.name for s in fs.list_dir(out) if s.name.startswith(IN_PROGRESS_PREFIX)] == []
