"""What the local engine publishes in Parquet and ORC, partitioned, Spark's own readers read as
the same table: every row, with the declared types, and the partition column from the
directory names."""

from __future__ import annotations

import datetime
import decimal
from pathlib import Path
from typing import Any

import pytest

from operators.app.cli import main

CONFIG = """\
engine = "local"
[region]
period = "100ms"
checkpoint_dir = "{root}/checkpoints-{fmt}"
[scan]
directory = "{root}/landing"
[source]
format = "csv"
[source.schema]
id = "int64"
name = "string"
at = "timestamp"
amount = "decimal(12,2)"
ok = "bool"
[sink]
file = "{root}/out-{fmt}/part-%FILENUM.{fmt}"
format = "{fmt}"
tuples_per_file = 7
partition_by = ["day"]
[sink.derived]
day = {{ column = "at", strftime = "%Y-%m-%d" }}
[sink.schema]
id = "int64"
name = "string"
at = "timestamp"
amount = "decimal(12,2)"
ok = "bool"
"""


@pytest.mark.parametrize("fmt", ["parquet", "orc"])
def test_spark_reads_the_published_partitioned_table_as_written(
    spark: Any, tmp_path: Path, fmt: str, capsys: pytest.CaptureFixture[str]
) -> None:
    rows = [
        (
            i,
            None if i % 7 == 0 else f"name, {i} é",
            datetime.datetime(2026, 11, 27 + i % 3, i % 24, 30, 0, 123456),
            decimal.Decimal(f"{i * 3}.{i % 100:02d}"),
            i % 2 == 0,
        )
        for i in range(40)
    ]
    landing = tmp_path / "landing"
    landing.mkdir()
    lines = ["id,name,at,amount,ok"] + [
        f'{i},"{n or ""}",{at.isoformat()},{amount},{str(ok).lower()}'
        for i, n, at, amount, ok in rows
    ]
    (landing / "in.csv").write_text("\n".join(lines) + "\n", encoding="utf-8")
    config = tmp_path / f"{fmt}.toml"
    config.write_text(CONFIG.format(root=tmp_path, fmt=fmt), encoding="utf-8")
    assert main(["run", str(config), "--available-now"]) == 0, capsys.readouterr().err

    frame = getattr(spark.read, fmt)(str(tmp_path / f"out-{fmt}"))
    types = dict(frame.dtypes)
    assert types["id"] == "bigint" and types["amount"] == "decimal(12,2)"
    assert types["ok"] == "boolean" and types["name"] == "string"
    assert types["at"] in ("timestamp", "timestamp_ntz")
    got = sorted(
        (r["id"], r["name"], r["at"], r["amount"], r["ok"], str(r["day"])) for r in frame.collect()
    )
    expected = sorted((*row, row[2].strftime("%Y-%m-%d")) for row in rows)
    assert got == expected
