"""``[sink] rejects_file`` in the Spark engine's plan, checked without a JVM: passed to the
fused run's sink, refused where nothing would ever reach it."""

from __future__ import annotations

from pathlib import Path

import pytest
from pyspark.sql.datasource import CaseInsensitiveDict

from operators.app.config import load_pipeline
from operators.app.spark_plan import plan_spark
from operators.spark.options import sink_config
from operators.spark.sink import HdfsSinkDataSource
from region.errors import ConfigError

PIPELINE = """\
engine = "spark"
[region]
checkpoint_dir = "{root}/ck"
[scan]
directory = "{root}/in"
[source]
format = "{format}"
on_bad_row = "{on_bad_row}"
{schema}
[sink]
file = "{root}/out/part-%FILENUM.{ext}"
format = "{sink_format}"
rejects_file = "_rejects/r-%FILENUM.jsonl"
{on_bad_record}
[spark]
execution = "{execution}"
"""


def write(tmp_path: Path, **changes: str) -> Path:
    values = {
        "root": str(tmp_path),
        "format": "csv",
        "on_bad_row": "reject",
        "schema": '[source.schema]\nid = "int64"',
        "ext": "parquet",
        "sink_format": "parquet",
        "on_bad_record": "",
        "execution": "auto",
    } | changes
    path = tmp_path / "pipeline.toml"
    path.write_text(PIPELINE.format(**values))
    return path


def test_the_fused_run_s_sink_gets_the_rejects_template_under_its_output(tmp_path: Path) -> None:
    plan = plan_spark(load_pipeline(write(tmp_path)))
    sink = sink_config(CaseInsensitiveDict(plan.sink_options))
    assert sink.rejects == f"{tmp_path}/out/_rejects/r-%FILENUM.jsonl"
    # A streaming query's source cannot hand its bad rows to the sink: refused, not ignored.
    source = HdfsSinkDataSource(CaseInsensitiveDict(plan.sink_options))
    with pytest.raises(ConfigError, match=r"rejects_file .*\(fused execution\)"):
        source.streamWriter(None, False)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("changes", "named"),
    [
        (
            {"format": "line", "schema": "", "ext": "txt", "sink_format": "line"},
            "format = 'line' has no rows",
        ),
        ({"on_bad_row": "skip"}, "on_bad_row = 'skip' hands no row"),
        ({"execution": "streaming"}, "a streaming query"),
        ({"on_bad_record": 'on_bad_record = "reject"'}, "on_bad_record = 'reject': not supported"),
    ],
)
def test_a_rejects_file_nothing_would_reach_on_spark_is_refused_naming_why(
    tmp_path: Path, changes: dict[str, str], named: str
) -> None:
    with pytest.raises(ConfigError, match=named):
        plan_spark(load_pipeline(write(tmp_path, **changes)))
