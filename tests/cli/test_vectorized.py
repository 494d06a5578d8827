"""A vectorized transform: a function of a pyarrow.RecordBatch called once per batch of CSV
rows, whose columns (new ones, fewer rows) are what the sink writes, exactly as a per-record
function would have them."""

from __future__ import annotations

import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.dataset as ds
import pytest

from operators.app.cli import main
from operators.common.columns import Columns, OverColumns
from tests.cli.conftest import PipelineDir, cli

TRANSFORM = """\
import pyarrow as pa
import pyarrow.compute as pc

CALLS = []

def euros(batch: pa.RecordBatch) -> pa.RecordBatch:
    CALLS.append(batch.num_rows)
    kept = batch.filter(pc.not_equal(pc.bit_wise_and(batch["id"], 3), 0))
    doubled = pc.multiply(kept["amount"], 2)
    return kept.append_column("twice", doubled)
"""
CONFIG = """\
engine = "local"
[region]
period = "100ms"
checkpoint_dir = "{root}/checkpoints"
[scan]
directory = "{root}/landing"
[source]
format = "csv"
schema = {{ id = "int64", country = "string", amount = "double" }}
[transform]
function = "vector:euros"
vectorized = true
[sink]
file = "{root}/out/part-%FILENUM.parquet"
format = "parquet"
partition_by = ["country"]
[sink.schema]
id = "int64"
country = "string"
amount = "double"
twice = "double"
"""


def test_a_function_of_record_batches_writes_its_columns_for_every_row_once(
    pdir: PipelineDir, capsys: pytest.CaptureFixture[str]
) -> None:
    pdir.landing.mkdir(parents=True)
    rows = [(i, ["DE", "FR", "IT"][i % 3], i * 0.5) for i in range(3000)]
    for part in range(3):
        lines = ["id,country,amount"] + [f"{i},{c},{a}" for i, c, a in rows[part::3]]
        (pdir.landing / f"in-{part}.csv").write_text("\n".join(lines) + "\n")
    (pdir.root / "vector.py").write_text(TRANSFORM)
    config = pdir.root / "job.toml"
    config.write_text(CONFIG.format(root=pdir.root))
    assert main(["run", str(config), "--available-now"]) == 0, capsys.readouterr().err
    table = ds.dataset(pdir.out, format="parquet", partitioning="hive").to_table()
    got = sorted(
        zip(*(table[c].to_pylist() for c in ("id", "country", "amount", "twice")), strict=True)
    )
    expected = sorted((i, c, a, a * 2) for i, c, a in rows if i & 3)
    assert got == expected
    calls = sys.modules["vector"].CALLS  # once per batch of rows, not once per row
    assert sum(calls) == len(rows) and len(calls) <= 6


def test_a_function_that_returns_no_record_batch_is_named() -> None:
    over = OverColumns(lambda batch: batch.to_pylist(), "[transform] function 'm:f'")
    records = Columns(pa.table({"id": [1, 2]}))
    with pytest.raises(TypeError, match=r"\[transform\] function 'm:f' returned list, not a "):
        over(records)


def test_records_that_are_not_columns_are_made_columns_for_the_function(tmp_path: Path) -> None:
    over = OverColumns(lambda batch: batch.slice(1), "f")
    assert list(over([{"id": 1}, {"id": 2}])) == [{"id": 2}]


MAPPING = """\

def euros_row(row):
    if not row["id"] & 3:
        return None
    return {**row, "twice": row["amount"] * 2}
"""


@pytest.mark.integration
@pytest.mark.parametrize(
    ("function", "execution"),
    [
        ('function = "vector:euros"\nvectorized = true', "auto"),
        ('function = "vector:euros"\nvectorized = true', "streaming"),
        ('function = "vector:euros_row"', "auto"),
    ],
    ids=["vectorized-fused", "vectorized-streaming", "mapping-fused"],
)
def test_on_spark_a_function_of_rows_writes_its_columns_as_partitioned_parquet(
    pdir: PipelineDir, function: str, execution: str
) -> None:
    """The same transform on the Spark engine: a vectorized function (fused into each batch's
    job, or a streaming query's mapInArrow) or a mapping per row, its columns written as the
    sink's schema says, every kept row once."""
    pdir.landing.mkdir(parents=True)
    rows = [(i, ["DE", "FR", "IT"][i % 3], i * 0.5) for i in range(900)]
    for part in range(3):
        lines = ["id,country,amount"] + [f"{i},{c},{a}" for i, c, a in rows[part::3]]
        (pdir.landing / f"in-{part}.csv").write_text("\n".join(lines) + "\n")
    (pdir.root / "vector.py").write_text(TRANSFORM + MAPPING)
    config = pdir.root / "job.toml"
    body = CONFIG.format(root=pdir.root).replace('engine = "local"', 'engine = "spark"')
    body = body.replace('function = "vector:euros"\nvectorized = true', function)
    config.write_text(body + f'[spark]\nexecution = "{execution}"\n')
    done = cli("run", str(config), "--available-now", timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    table = ds.dataset(pdir.out, format="parquet", partitioning="hive").to_table()
    assert table.schema.field("twice").type == pa.float64()
    got = sorted(
        zip(*(table[c].to_pylist() for c in ("id", "country", "amount", "twice")), strict=True)
    )
    assert got == sorted((i, c, a, a * 2) for i, c, a in rows if i & 3)


def test_a_streaming_querys_vectorized_output_follows_the_sinks_rule() -> None:
    """What mapInArrow gets from a vectorized function on Spark: its columns as the sink's
    schema (a missing column is null, as for a record without the key); a column the schema
    lacks, or a value that does not fit, fails the batch naming it."""
    from operators.app.engine_spark import _over_batches
    from operators.common.schema import BadValue

    target = pa.schema([("id", pa.int64()), ("twice", pa.float64()), ("note", pa.string())])
    batch = pa.RecordBatch.from_pydict({"id": pa.array([1, 2], pa.int32()), "amount": [1.5, 2.0]})

    def twice(b: pa.RecordBatch) -> pa.RecordBatch:
        return pa.RecordBatch.from_arrays(
            [b["id"], pa.compute.multiply(b["amount"], 2)], ["id", "twice"]
        )

    (out,) = _over_batches(OverColumns(twice, "f"), target, iter([batch]))
    assert out.schema == target
    assert out.to_pylist() == [
        {"id": 1, "twice": 3.0, "note": None},
        {"id": 2, "twice": 4.0, "note": None},
    ]
    with pytest.raises(ValueError, match=r"returned column 'amount', which is not in the sink"):
        list(_over_batches(OverColumns(lambda b: b, "f"), target, iter([batch])))
    words = pa.RecordBatch.from_pydict({"id": ["7", "x"]})
    with pytest.raises(BadValue, match=r"column 'id': 'x' is not a int64"):
        list(_over_batches(OverColumns(lambda b: b, "f"), target, iter([words])))
