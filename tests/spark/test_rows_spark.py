"""CSV rows with a schema on Spark: ``hdfs_scan`` gives a DataFrame of the declared columns with
their Spark types (gzip'd files too), and fused execution hands the typed columns to the
transform and publishes every row once, whole, whatever the split size."""

from __future__ import annotations

import datetime
import decimal
import gzip
import json
from pathlib import Path
from typing import Any

import pytest

from operators.fs.local import LocalFileSystem
from operators.spark.fused import FusedRunner, sql_transform
from region.errors import ConfigError
from region.settings import RegionSettings
from tests.spark.helpers import leftovers, published_lines, write_inputs
from tests.spark.test_spark_real_hdfs import restored_process  # noqa: F401 (a fixture)

pytestmark = pytest.mark.spark

T0 = 1_700_000_000_000_000_000
SCHEMA = {
    "id": "int64",
    "name": "string",
    "amount": "decimal(10,2)",
    "day": "date",
    "at": "timestamp",
    "ok": "bool",
    "score": "double",
}
HEADER = "id,name,amount,day,at,ok,score\n"


def csv_file(first: int, count: int, *, bad: bool = False) -> bytes:
    """Rows ``first..first+count``; every third name quoted with a line end and a comma in it
    (a split at any line end would cut that row); ``bad``: one row whose amount is no number."""
    rows = [HEADER]
    for i in range(first, first + count):
        name = f'"row {i},\nsecond line"' if i % 3 == 0 else f"row {i}"
        rows.append(f"{i},{name},{i}.25,2026-11-{1 + i % 28:02d},2026-11-01 10:{i % 60:02d}:00,")
        rows.append(f"{'true' if i % 2 else 'false'},{i / 8}\n")
        if bad and i == first + 1:
            rows.append(f"{10_000 + i},bad,not-a-number,2026-11-01,2026-11-01 10:00:00,true,1\n")
    return "".join(rows).encode()


def expected_names(first: int, count: int) -> list[str]:
    return [
        f"row {i},\nsecond line" if i % 3 == 0 else f"row {i}" for i in range(first, first + count)
    ]


def scan_frame(spark: Any, tmp_path: Path) -> Any:
    return (
        spark.readStream.format("hdfs_scan")
        .option("directory", str(tmp_path / "in"))
        .option("plan_dir", str(tmp_path / "plans"))
        .option("format", "csv")
        .option("schema", json.dumps(SCHEMA))
        .option("include_file_info", "true")
        .option("split_size", "64")  # lines would be cut every 64 bytes: a CSV file is not
        .load()
    )


def test_hdfs_scan_gives_the_declared_columns_with_their_spark_types(
    spark: Any, tmp_path: Path
) -> None:
    from pyspark.sql.types import (
        BooleanType,
        DateType,
        DecimalType,
        DoubleType,
        LongType,
        StringType,
        TimestampNTZType,
    )

    frame = scan_frame(spark, tmp_path)
    assert [(f.name, f.dataType) for f in frame.schema.fields] == [
        ("id", LongType()),
        ("name", StringType()),
        ("amount", DecimalType(10, 2)),
        ("day", DateType()),
        ("at", TimestampNTZType()),
        ("ok", BooleanType()),
        ("score", DoubleType()),
        ("file", StringType()),
        ("offset", LongType()),
    ]


def test_hdfs_scan_reads_each_csv_row_once_whole_gzip_too(spark: Any, tmp_path: Path) -> None:
    files = {"a.csv": csv_file(0, 30, bad=True), "b.csv.gz": gzip.compress(csv_file(30, 30))}
    write_inputs(tmp_path / "in", files, T0)
    query = (
        scan_frame(spark, tmp_path)
        .writeStream.format("memory")
        .queryName("csv_rows")
        .option("checkpointLocation", str(tmp_path / "ck"))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    rows = spark.sql("SELECT * FROM csv_rows ORDER BY id").collect()
    assert [r.id for r in rows] == list(range(60))  # each once; the bad row left out
    assert [r.name for r in rows] == expected_names(0, 60)
    first = rows[1]
    assert first.amount == decimal.Decimal("1.25")
    assert first.day == datetime.date(2026, 11, 2)
    assert first.at == datetime.datetime(2026, 11, 1, 10, 1)
    assert (first.ok, first.score) == (True, 1 / 8)
    assert {r.file.rsplit("/", 1)[1] for r in rows} == {"a.csv", "b.csv.gz"}
    data = files["a.csv"]
    assert data[rows[1].offset :].startswith(b"1,row 1,")  # where each row starts
    assert data[rows[3].offset :].startswith(b'3,"row 3,\nsecond line"')


def runner(spark: Any, root: Path, **kwargs: Any) -> FusedRunner:
    scan = {
        "directory": str(root / "in"),
        "plan_dir": str(root / "ck" / "plans"),
        "format": "csv",
        "schema": json.dumps(SCHEMA),
        "maxFilesPerTrigger": "1",
        "split_size": "64",
        "min_partitions": "4",
    }
    return FusedRunner(
        spark,
        scan,
        {"file": str(root / "out" / "part-%FILENUM.txt")},
        LocalFileSystem(),
        str(root / "ck" / "spark"),
        RegionSettings(),
        available_now=True,
        **kwargs,
    )


def test_fused_batches_hand_typed_rows_to_the_sql_and_publish_each_row_once(
    spark: Any, tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    files = {"a.csv": csv_file(0, 40), "b.csv.gz": gzip.compress(csv_file(40, 20, bad=True))}
    write_inputs(tmp_path / "in", files, T0)
    sql = (
        "SELECT concat_ws('|', id, replace(name, '\\n', '/'), amount * 2, day + 1, ok) AS value "
        "FROM input WHERE score >= 0"
    )
    run = runner(spark, tmp_path, frame=sql_transform(spark, sql))
    run.run()
    lines = published_lines(tmp_path / "out")
    assert len(lines) == 60
    assert lines[0] == "0|row 0,/second line|0.50|2026-11-02|false"
    assert lines[41] == "41|row 41|82.50|2026-11-15|true"
    assert [p.num_input_rows for p in run.progress] == [40, 20]
    assert leftovers(tmp_path / "out") == []
    # The bad row is left out (logged by the task, on Spark's Python worker, naming file,
    # offset, column and value: tests/spark/test_rows_io.py and test_rows_crash.py read it).


def test_fused_rows_without_a_transform_are_refused_naming_the_way(
    spark: Any, tmp_path: Path
) -> None:
    with pytest.raises(ConfigError, match="give a \\[transform\\] that makes each record's line"):
        runner(spark, tmp_path)


def as_line(record: dict[str, Any]) -> str:
    """A per-record transform of a row with columns (a dict) into the line to write."""
    return f"{record['id']}|{record['name']!r}|{record['amount']}|{record['day']}|{record['ok']}"


LOCAL = """\
engine = "local"
[region]
period = "100ms"
checkpoint_dir = "{root}/ck-local"
[scan]
directory = "{root}/in"
[source]
format = "csv"
[source.schema]
{schema}
[transform]
function = "tests.spark.test_rows_spark:as_line"
[sink]
file = "{root}/out-local/part-%FILENUM.txt"
"""


@pytest.mark.usefixtures("restored_process")  # the command owns logging and the environment
def test_a_per_record_function_gets_each_row_as_a_dict_and_both_engines_write_the_same(
    spark: Any, tmp_path: Path
) -> None:
    from operators.app.cli import main

    files = {"a.csv": csv_file(0, 25, bad=True), "b.csv.gz": gzip.compress(csv_file(25, 10))}
    write_inputs(tmp_path / "in", files, T0)
    schema = "\n".join(f'{name} = "{type_}"' for name, type_ in SCHEMA.items())
    config = tmp_path / "local.toml"
    config.write_text(LOCAL.format(root=tmp_path, schema=schema))
    assert main(["run", str(config), "--available-now"]) == 0
    runner(spark, tmp_path, transform=as_line).run()
    spark_lines = published_lines(tmp_path / "out")
    assert spark_lines == published_lines(tmp_path / "out-local")
    assert len(spark_lines) == 35
    assert spark_lines[3] == "3|'row 3,\\nsecond line'|3.25|2026-11-04|True"


@pytest.mark.usefixtures("restored_process")  # the command owns logging and the environment
def test_a_streaming_run_of_csv_rows_writes_what_the_local_engine_writes(
    spark: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``[spark] execution = "streaming"``: ``hdfs_scan`` -> the function (each row a dict,
    through a UDF over the row's columns) -> ``hdfs_sink``, through the command."""
    from operators.app.cli import main

    files = {"a.csv": csv_file(0, 25, bad=True), "b.csv.gz": gzip.compress(csv_file(25, 10))}
    write_inputs(tmp_path / "in", files, T0)
    schema = "\n".join(f'{name} = "{type_}"' for name, type_ in SCHEMA.items())
    local = tmp_path / "local.toml"
    local.write_text(LOCAL.format(root=tmp_path, schema=schema))
    assert main(["run", str(local), "--available-now"]) == 0
    streaming = tmp_path / "spark.toml"
    text = LOCAL.format(root=tmp_path, schema=schema)
    text = text.replace('engine = "local"', 'engine = "spark"').replace("-local", "-spark")
    streaming.write_text(text + '[spark]\nexecution = "streaming"\n')
    code = main(["run", str(streaming), "--available-now", "--no-progress"])
    assert code == 0, capsys.readouterr().err[-3000:]
    assert published_lines(tmp_path / "out-spark") == published_lines(tmp_path / "out-local")
    assert len(published_lines(tmp_path / "out-spark")) == 35
