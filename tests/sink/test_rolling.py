"""The rolling policy, and both sinks rolling the same records into the same files (no JVM:
the Spark sink's task writer and driver commit are called directly)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pyspark.sql.datasource import CaseInsensitiveDict
from pyspark.sql.types import StringType, StructField, StructType

from operators.fs.local import LocalFileSystem
from operators.sink import HDFS2FileSink, SinkSettings
from operators.sink.rolling import RollingPolicy
from operators.spark.sink import HdfsSinkDataSource
from region.state import Batch


def roll(policy: RollingPolicy, sizes: list[int]) -> list[list[int]]:
    """Split records of these sizes into files the way both sinks ask the policy."""
    files: list[list[int]] = []
    current: list[int] = []
    i = 0
    while i < len(sizes):
        room = policy.room(len(current))
        take = len(sizes) - i if room is None else max(1, room)
        cumulative, total = [], 0
        for s in sizes[i : i + take]:
            total += s
            cumulative.append(total)
        n = policy.fitting(cumulative, sum(current))
        current += sizes[i : i + n]
        i += n
        if policy.full(len(current), sum(current)):
            files.append(current)
            current = []
    return [*files, current] if current else files


@settings(max_examples=300, deadline=None)
@given(
    sizes=st.lists(st.integers(1, 50), max_size=60),
    limit=st.one_of(
        st.tuples(st.just("tuples"), st.integers(1, 10)),
        st.tuples(st.just("bytes"), st.integers(1, 200)),
    ),
)
def test_every_record_lands_once_and_files_end_where_the_limit_is_reached(
    sizes: list[int], limit: tuple[str, int]
) -> None:
    kind, value = limit
    policy = RollingPolicy(**{kind: value})  # type: ignore[arg-type]
    files = roll(policy, sizes)
    assert [s for f in files for s in f] == sizes  # every record once, in order
    assert all(f for f in files)  # no empty file
    for f in files[:-1]:  # every file but the last is complete...
        assert policy.full(len(f), sum(f))
        if kind == "tuples":
            assert len(f) == value
        else:  # ...and reaches the byte limit only with its last record
            assert sum(f) >= value and sum(f) - f[-1] < value
    if files:
        last = files[-1]
        assert len(last) <= value if kind == "tuples" else sum(last) - last[-1] < value


def test_a_file_expires_after_its_seconds_and_rolls_on_punctuation_only_when_asked() -> None:
    policy = RollingPolicy(seconds=2.0, on_punctuation=True)
    assert not policy.expired(10.0, 11.9) and policy.expired(10.0, 12.0)
    assert policy.on_punctuation and not RollingPolicy().on_punctuation
    assert RollingPolicy().fitting([5, 10], 1000) == 2 and RollingPolicy().room(7) is None


def in_process(out: Path, records: list[str], **limits: Any) -> list[bytes]:
    settings = SinkSettings(file=str(out / "part-%FILENUM.txt"), **limits)
    sink = HDFS2FileSink(settings, LocalFileSystem())
    sink.reset_to_initial_state()
    sink.write(Batch(records))
    sink.finish()
    sink.checkpoint(1)
    sink.on_cut_completed(1)
    return files_of(out)


def on_spark(out: Path, records: list[str], **limits: Any) -> list[bytes]:
    options = {"file": str(out / "part-%FILENUM.txt")}
    options.update({k: str(v) for k, v in limits.items()})
    schema = StructType([StructField("value", StringType())])
    writer = HdfsSinkDataSource(CaseInsensitiveDict(options)).streamWriter(schema, False)
    batch = pa.RecordBatch.from_arrays([pa.array(records, pa.string())], names=["value"])
    message = writer.write(iter([batch]))
    writer.commit([message], 0)
    return files_of(out)


def files_of(out: Path) -> list[bytes]:
    if not out.exists():
        return []
    names = sorted(
        (n for n in os.listdir(out) if n.startswith("part-")), key=lambda n: int(n[5:-4])
    )
    return [(out / n).read_bytes() for n in names]


@settings(max_examples=60, deadline=None)
@given(
    records=st.lists(st.text(alphabet="ab€ ", max_size=12), min_size=1, max_size=40),
    limit=st.one_of(
        st.tuples(st.just("tuples_per_file"), st.integers(1, 8)),
        st.tuples(st.just("bytes_per_file"), st.integers(1, 120)),
    ),
)
def test_both_sinks_roll_the_same_records_into_the_same_files(
    tmp_path_factory: pytest.TempPathFactory, records: list[str], limit: tuple[str, int]
) -> None:
    kind, value = limit
    base = tmp_path_factory.mktemp("roll")
    local = in_process(base / "local", records, **{kind: value})
    spark = on_spark(base / "spark", records, **{kind: value})
    assert local == spark
    assert b"".join(local) == "".join(f"{r}\n" for r in records).encode()
