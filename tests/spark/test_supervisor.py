"""The supervisor: region triggers on Spark, progress per batch, restarts from the checkpoint."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from operators.spark.supervisor import BatchProgress, SparkSupervisor
from region.errors import RegionFailedError
from region.settings import RegionSettings
from tests.spark.helpers import leftovers, lines_of, published_lines, write_inputs

pytestmark = pytest.mark.spark

T0 = 1_700_000_000_000_000_000


def builder(spark: Any, tmp: Path, **options: str) -> Any:
    def build(region_options: dict[str, str]) -> Any:
        reader = spark.readStream.format("hdfs_scan").option("directory", str(tmp / "in"))
        for key, value in {"plan_dir": str(tmp / "plans"), **options, **region_options}.items():
            reader = reader.option(key, value)
        return (
            reader.load()
            .writeStream.format("hdfs_sink")
            .option("file", str(tmp / "out" / "part-%FILENUM.txt"))
            .option("checkpointLocation", str(tmp / "ck"))
        )

    return build


def test_operator_driven_batches_end_at_file_boundaries(spark: Any, tmp_path: Path) -> None:
    files = {
        f"f{i}.txt": "".join(f"{i}:{j}\n" for j in range(10 + 7 * i)).encode() for i in range(3)
    }
    write_inputs(tmp_path / "in", files, T0)
    seen: list[BatchProgress] = []
    supervisor = SparkSupervisor(
        builder(spark, tmp_path, maxBytesPerTrigger="16"),
        RegionSettings(trigger="operator_driven"),
        available_now=True,
        on_progress=seen.append,
    )
    supervisor.run()
    # A 16-byte limit would cut every file; operator-driven batches hold whole files instead.
    assert [p.num_input_rows for p in seen] == [len(lines_of(d)) for d in files.values()]
    assert [p.batch_id for p in seen] == [0, 1, 2]
    assert published_lines(tmp_path / "out") == [x for d in files.values() for x in lines_of(d)]


def test_a_failed_query_restarts_from_its_checkpoint(spark: Any, tmp_path: Path) -> None:
    good = b"one\ntwo\n"
    write_inputs(tmp_path / "in", {"a.txt": good, "b.txt": b"bad \xff\n"}, T0)
    restarts: list[str] = []

    def repair(attempt: int, error: BaseException) -> None:
        restarts.append(str(error))
        # Same size and mtime: the same file to the scan (a new mtime would be a new file).
        path = tmp_path / "in" / "b.txt"
        mtime = path.stat().st_mtime_ns
        path.write_bytes(b"bad ?\n")
        os.utime(path, ns=(mtime, mtime))

    supervisor = SparkSupervisor(
        builder(spark, tmp_path, maxFilesPerTrigger="1"),
        RegionSettings(max_consecutive_reset_attempts=3),
        available_now=True,
        on_restart=repair,
    )
    supervisor.run()
    assert len(restarts) == 1 and "b.txt: the line at byte offset 0" in restarts[0]
    assert "at byte 4" in restarts[0]
    assert supervisor.attempt == 2
    assert published_lines(tmp_path / "out") == ["one", "two", "bad ?"]
    assert leftovers(tmp_path / "out") == []


def test_the_region_fails_after_max_consecutive_reset_attempts(spark: Any, tmp_path: Path) -> None:
    write_inputs(tmp_path / "in", {"bad.txt": b"\xfe\xff\n"}, T0)
    supervisor = SparkSupervisor(
        builder(spark, tmp_path),
        RegionSettings(max_consecutive_reset_attempts=2),
        available_now=True,
    )
    with pytest.raises(RegionFailedError, match=r"failed 2 time\(s\) in a row.*bad\.txt"):
        supervisor.run()
