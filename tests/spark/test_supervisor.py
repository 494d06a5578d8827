"""The supervisor: region triggers on Spark, progress per batch, restarts from the checkpoint."""

from __future__ import annotations

import logging
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from operators.spark.supervisor import BatchProgress, SparkSupervisor
from region.errors import ConfigError, RegionFailedError
from region.settings import RegionSettings
from tests.spark.helpers import leftovers, lines_of, published_lines, write_inputs

pytestmark = pytest.mark.spark

T0 = 1_700_000_000_000_000_000


def builder(spark: Any, tmp: Path, *, transform: Any = None, **options: str) -> Any:
    def build(region_options: dict[str, str]) -> Any:
        reader = spark.readStream.format("hdfs_scan").option("directory", str(tmp / "in"))
        for key, value in {"plan_dir": str(tmp / "plans"), **options, **region_options}.items():
            reader = reader.option(key, value)
        frame = reader.load()
        if transform is not None:
            frame = transform(frame)
        return (
            frame.writeStream.format("hdfs_sink")
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


def flaky(marker: Path, times: int) -> Any:
    """A transform whose tasks raise ConnectionError (transient) while ``marker`` holds fewer than
    ``times`` lines; each failing task adds one. The executors share this machine's disk."""

    def transform(frame: Any) -> Any:
        from pyspark.sql.functions import udf

        path = str(marker)

        def through(value):  # type: ignore[no-untyped-def]  # no hints: a plain Python UDF
            with open(path, "a+") as f:
                f.seek(0)
                if len(f.read().splitlines()) < times:
                    f.write("failed\n")
                    raise ConnectionError(f"namenode:8020 refused the connection ({value})")
            return value

        return frame.select(udf(through, "string")("value").alias("value"))

    return transform


def test_a_failed_query_restarts_from_its_checkpoint(spark: Any, tmp_path: Path) -> None:
    write_inputs(tmp_path / "in", {"a.txt": b"one\ntwo\n", "b.txt": b"three\n"}, T0)
    restarts: list[str] = []
    supervisor = SparkSupervisor(
        builder(spark, tmp_path, transform=flaky(tmp_path / "marker", 1), maxFilesPerTrigger="1"),
        RegionSettings(max_consecutive_reset_attempts=3, reset_backoff=0.1),
        available_now=True,
        on_restart=lambda attempt, error: restarts.append(str(error)),
    )
    supervisor.run()
    assert len(restarts) == 1 and "ConnectionError: namenode:8020 refused" in restarts[0]
    assert supervisor.attempt == 2
    assert published_lines(tmp_path / "out") == ["one", "two", "three"]
    assert leftovers(tmp_path / "out") == []


def test_transient_failures_fail_the_run_after_max_consecutive_reset_attempts(
    spark: Any, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    write_inputs(tmp_path / "in", {"a.txt": b"one\n"}, T0)
    supervisor = SparkSupervisor(
        builder(spark, tmp_path, transform=flaky(tmp_path / "marker", 10**6)),
        RegionSettings(max_consecutive_reset_attempts=3, reset_backoff=0.1),
        available_now=True,
    )
    with (
        caplog.at_level(logging.WARNING, logger="operators.spark.supervisor"),
        pytest.raises(RegionFailedError, match=r"failed 3 time\(s\) in a row.*reset_backoff"),
    ):
        supervisor.run()
    restarts = [m.split(":")[0] for m in caplog.messages if "restarting" in m]
    # The first restart at once, then reset_backoff doubled (the local engine's rule).
    assert [r.rsplit(" checkpoint", 1)[1] for r in restarts] == ["", " in 0.1 s"]
    assert supervisor.attempt == 3
    assert not (tmp_path / "out").exists() or published_lines(tmp_path / "out") == []


def test_a_permanent_error_ends_the_run_without_a_restart(spark: Any, tmp_path: Path) -> None:
    write_inputs(tmp_path / "in", {"bad.txt": b"\xfe\xff\n"}, T0)
    supervisor = SparkSupervisor(
        builder(spark, tmp_path),
        RegionSettings(max_consecutive_reset_attempts=5),
        available_now=True,
        on_restart=lambda attempt, error: pytest.fail(f"restarted after {error}"),
    )
    with pytest.raises(RegionFailedError) as failed:
        supervisor.run()
    message = str(failed.value)
    assert "stopped: BadRecordError: " in message and "bad.txt" in message
    assert "A restart would fail the same way, so none was tried" in message
    assert supervisor.attempt == 1


def held(started: Path, release: Path) -> Any:
    """A transform whose tasks write ``started`` and then wait until ``release`` exists."""

    def transform(frame: Any) -> Any:
        from pyspark.sql.functions import udf

        began, go = str(started), str(release)

        def through(value):  # type: ignore[no-untyped-def]  # no hints: a plain Python UDF
            import os
            import time

            open(began, "a").close()
            for _ in range(1200):  # at most 2 minutes, so that nothing hangs for ever
                if os.path.exists(go):
                    break
                time.sleep(0.1)
            return value

        return frame.select(udf(through, "string")("value").alias("value"))

    return transform


def test_an_immediate_stop_does_not_wait_for_the_batch_and_the_next_run_replays_it(
    spark: Any, tmp_path: Path
) -> None:
    # The second Ctrl-C of `hdfs-region run`: stop now; the interrupted batch is replayed.
    write_inputs(tmp_path / "in", {"a.txt": b"one\ntwo\n"}, T0)
    started, release = tmp_path / "started", tmp_path / "release"
    supervisor = SparkSupervisor(
        builder(spark, tmp_path, transform=held(started, release)), RegionSettings()
    )

    def stop_once_started() -> None:  # as the second signal would, from the outside
        for _ in range(1200):
            if started.exists():
                supervisor.stop(immediate=True)
                return
            time.sleep(0.05)

    # The query runs on this thread: Spark finds Python data sources through its session here.
    stopper = threading.Thread(target=stop_once_started)
    stopper.start()
    try:
        supervisor.run()
        assert started.exists(), "the batch never started"
        assert not release.exists()  # the batch was still held when the query stopped
        assert supervisor.progress == []  # no batch completed
        out = tmp_path / "out"
        assert not out.exists() or published_lines(out) == []
    finally:
        release.touch()
        stopper.join(timeout=90)
    SparkSupervisor(builder(spark, tmp_path), RegionSettings(), available_now=True).run()
    assert published_lines(tmp_path / "out") == ["one", "two"]
    assert leftovers(tmp_path / "out") == []


def test_a_query_spark_cannot_start_is_one_line_naming_why(spark: Any, tmp_path: Path) -> None:
    write_inputs(tmp_path / "in", {"a.txt": b"x\nx\n"}, T0)
    supervisor = SparkSupervisor(
        builder(spark, tmp_path, transform=lambda f: f.groupBy("value").count().select("value")),
        RegionSettings(),
        available_now=True,
    )
    with pytest.raises(ConfigError) as info:
        supervisor.run()
    message = str(info.value)
    assert message.startswith("the streaming query cannot start: ")
    assert "append" in message and "\n" not in message
