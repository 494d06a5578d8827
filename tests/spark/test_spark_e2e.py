"""hdfs_scan -> transformation -> hdfs_sink on the shared local SparkSession."""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql.datasource import CaseInsensitiveDict
from pyspark.sql.types import StringType, StructField, StructType

from operators.spark.commit import WrittenFile, in_progress_name
from operators.spark.sink import HdfsSinkDataSource, SinkTaskMessage
from operators.spark.supervisor import failure_cause
from region.errors import ConfigError, is_permanent_name
from tests.spark.helpers import leftovers, lines_of, published_lines, write_inputs

pytestmark = pytest.mark.spark

T0 = 1_700_000_000_000_000_000

INPUTS = {
    "a.txt": "".join(f"alpha line {i}\n" for i in range(300)).encode(),
    "b.txt": "".join(f"crlf line {i}\r\n" for i in range(200)).encode(),
    "empty.txt": b"",
    "c.txt": "\n".join(f"no final newline {i}" for i in range(250)).encode(),
}


def run_query(spark: Any, src: Path, out: Path, ck: Path, **extra: str) -> Any:
    reader = spark.readStream.format("hdfs_scan").option("directory", str(src))
    for key, value in {
        "plan_dir": str(ck / "plans"),
        "maxBytesPerTrigger": "3000",  # batches end inside files
        "split_size": "1000",  # and files split into several partitions
        **extra,
    }.items():
        reader = reader.option(key, value)
    query = (
        reader.load()
        .selectExpr("upper(value) AS value")
        .writeStream.format("hdfs_sink")
        .option("file", str(out / "part-%FILENUM.txt"))
        .option("tuplesPerFile", "70")
        .option("checkpointLocation", str(ck / "spark"))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    assert query.exception() is None
    return query


@pytest.fixture(scope="module")
def first_run(spark: Any, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    base = tmp_path_factory.mktemp("e2e")
    src, out, ck = base / "in", base / "out", base / "ck"
    write_inputs(src, INPUTS, T0)
    query = run_query(spark, src, out, ck)
    return {"src": src, "out": out, "ck": ck, "query": query, "spark": spark}


def test_files_in_transformed_files_out_record_by_record(first_run: dict[str, Any]) -> None:
    out = first_run["out"]
    expected = [line.upper() for data in INPUTS.values() for line in lines_of(data)]
    assert published_lines(out) == expected
    assert leftovers(out) == []
    # The byte limit cut the input into several batches, some ending inside a file.
    batches = [p for p in first_run["query"].recentProgress if p.numInputRows > 0]
    assert len(batches) > len(INPUTS)
    assert sum(p.numInputRows for p in batches) == len(expected)


def test_a_restarted_query_reads_only_new_files_and_continues_filenum(
    first_run: dict[str, Any],
) -> None:
    src, out, ck = first_run["src"], first_run["out"], first_run["ck"]
    before = sorted(os.listdir(out))
    write_inputs(src, {"d.txt": b"late one\nlate two\n"}, T0 + 10 * 1_000_000_000)
    run_query(first_run["spark"], src, out, ck)
    new = sorted(set(os.listdir(out)) - set(before))
    last = max(int(n.split("-")[1].split(".")[0]) for n in before if n.startswith("part-"))
    assert new == [f"part-{last + 1}.txt"]
    assert lines_of((out / new[0]).read_bytes()) == ["LATE ONE", "LATE TWO"]


def test_replaying_a_committed_batch_id_leaves_the_output_unchanged(
    first_run: dict[str, Any],
) -> None:
    out = first_run["out"]
    snapshot = {n: (out / n).read_bytes() for n in os.listdir(out) if n.startswith("part-")}
    # Spark recomputed batch 0 after a crash (new task files) and commits it again.
    tmp = out / in_progress_name("p00000-t1-a0", 0)
    tmp.write_bytes(b"ALPHA LINE 0\n")
    options = CaseInsensitiveDict({"file": str(out / "part-%FILENUM.txt")})
    schema = StructType([StructField("value", StringType())])
    writer = HdfsSinkDataSource(options).streamWriter(schema, False)
    message = SinkTaskMessage(0, 0, [WrittenFile(str(tmp), 0, 0, 1, 13, 0)])
    writer.commit([message], 0)
    after = {n: (out / n).read_bytes() for n in os.listdir(out) if n.startswith("part-")}
    assert after == snapshot
    assert leftovers(out) == []


def test_binary_blocks_round_trip_with_file_info(spark: Any, tmp_path: Path) -> None:
    src, out = tmp_path / "in", tmp_path / "out"
    files = {"x.bin": bytes(range(256)) * 40, "y.bin": b"\x00\xff" * 1000 + b"tail"}
    write_inputs(src, files, T0)
    df = (
        spark.readStream.format("hdfs_scan")
        .option("directory", str(src))
        .option("plan_dir", str(tmp_path / "ck" / "plans"))
        .option("format", "binary")
        .option("blockSize", "1000")
        .option("split_size", "3000")
        .option("include_file_info", "true")
        .load()
    )
    assert df.schema.simpleString() == "struct<value:binary,file:string,offset:bigint>"
    query = (
        df.select("value")
        .writeStream.format("hdfs_sink")
        .option("file", str(out / "blob-%FILENUM.bin"))
        .option("format", "binary")
        .option("checkpointLocation", str(tmp_path / "ck"))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    names = sorted(
        (n for n in os.listdir(out) if n.startswith("blob-")), key=lambda n: int(n[5:-4])
    )
    assert b"".join((out / n).read_bytes() for n in names) == b"".join(files.values())


def test_an_unknown_option_is_named(spark: Any, tmp_path: Path) -> None:
    with pytest.raises(Exception, match=r"unknown option .maxfilespertrigerr"):
        spark.readStream.format("hdfs_scan").option("directory", str(tmp_path)).option(
            "maxFilesPerTrigerr", "1"
        ).load()
    with pytest.raises(ConfigError, match="unknown option 'maxfilespertrigerr'"):
        from operators.spark.options import scan_config

        scan_config(CaseInsensitiveDict({"directory": "/x", "maxFilesPerTrigerr": "1"}))


def test_a_second_query_into_the_same_output_directory_fails_and_takes_nothing(
    spark: Any, tmp_path: Path
) -> None:
    # It used to take the first query's sink-log entries for its own batches: exit 0, its
    # records never published.
    first_in, second_in, out = tmp_path / "in1", tmp_path / "in2", tmp_path / "out"
    write_inputs(first_in, {"a.txt": b"a1\na2\n"}, T0)
    write_inputs(second_in, {"b.txt": b"b1\nb2\n"}, T0)
    run_query(spark, first_in, out, tmp_path / "ck1")
    before = published_lines(out)
    assert before == ["A1", "A2"]
    with pytest.raises(Exception) as failed:
        run_query(spark, second_in, out, tmp_path / "ck2")
    # The query fails with "Writing job failed"; the cause names the error and both jobs.
    name, cause = failure_cause(failed.value)
    assert name == "ConfigError" and is_permanent_name(name)
    assert "is written by another job" in cause
    assert "ck1/spark" in cause and "ck2/spark" in cause
    assert published_lines(out) == before
    # The same place made afresh (the query id Spark keeps there is new): another job too.
    shutil.rmtree(tmp_path / "ck1")
    with pytest.raises(Exception) as again:
        run_query(spark, first_in, out, tmp_path / "ck1")
    assert "checkpoints were deleted to start over" in failure_cause(again.value)[1]
    assert published_lines(out) == before
