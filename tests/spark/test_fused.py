"""Fused execution: each batch one Spark job of Python tasks, progress kept in Spark's own
checkpoint layout, the sink log publishing each batch once."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from operators.fs.local import LocalFileSystem
from operators.spark.batchlog import BatchLog
from operators.spark.fused import FusedRunner, sql_transform, stateful_part
from region.errors import ConfigError, RegionFailedError
from region.settings import RegionSettings
from tests.spark.helpers import leftovers, lines_of, published_lines, write_inputs

pytestmark = pytest.mark.spark

T0 = 1_700_000_000_000_000_000


def inputs(first: int, count: int) -> dict[str, bytes]:
    return {
        f"f{i:02d}.txt": "".join(f"file {i} line {j}\n" for j in range(50)).encode()
        for i in range(first, first + count)
    }


def expected(files: dict[str, bytes], transform: Any = str.upper) -> list[str]:
    return [transform(line) for data in files.values() for line in lines_of(data)]


def upper(value: str) -> str:
    return value.upper()


class Layout:
    def __init__(self, root: Path) -> None:
        self.src, self.out, self.ck = root / "in", root / "out", root / "ck"

    def scan_options(self, **more: str) -> dict[str, str]:
        return {"directory": str(self.src), "plan_dir": str(self.ck / "plans"), **more}

    def sink_options(self, **more: str) -> dict[str, str]:
        return {"file": str(self.out / "part-%FILENUM.txt"), **more}

    def runner(self, spark: Any, **kwargs: Any) -> FusedRunner:
        scan = kwargs.pop("scan", {})
        kwargs.setdefault("transform", upper)
        kwargs.setdefault("available_now", True)
        settings = kwargs.pop("settings", RegionSettings())
        sink = kwargs.pop("sink", {})
        return FusedRunner(
            spark,
            self.scan_options(**scan),
            self.sink_options(**sink),
            LocalFileSystem(),
            str(self.ck / "spark"),
            settings,
            **kwargs,
        )

    def streaming(self, spark: Any, scan: dict[str, str] | None = None, **sink: str) -> None:
        query = (
            spark.readStream.format("hdfs_scan")
            .options(**self.scan_options(maxFilesPerTrigger="1", **(scan or {})))
            .load()
            .selectExpr("upper(value) AS value")
            .writeStream.format("hdfs_sink")
            .options(**self.sink_options(**sink))
            .option("checkpointLocation", str(self.ck / "spark"))
            .trigger(availableNow=True)
            .start()
        )
        query.awaitTermination()
        assert query.exception() is None

    def log(self) -> BatchLog:
        return BatchLog(LocalFileSystem(), str(self.ck / "spark"))

    def write_ahead(self, spark: Any, batch_id: int) -> None:
        """What a driver killed right after step 2 leaves: batch ``batch_id``'s offset (and
        plan), planned from the previous batch's offset, and nothing else."""
        reader = self.runner(spark).reader
        reader.prepareForTriggerAvailableNow()
        start = self.log().offset(batch_id - 1) if batch_id else reader.initialOffset()
        end = reader.latestOffset(start, reader.getDefaultReadLimit())
        self.log().write_offset(batch_id, end, {})


def test_batches_publish_each_record_once_in_order_with_the_transform(
    spark: Any, tmp_path: Path
) -> None:
    lay = Layout(tmp_path)
    files = inputs(0, 5)
    write_inputs(lay.src, files, T0)
    runner = lay.runner(spark, scan={"maxFilesPerTrigger": "2", "split_size": "600"})
    runner.run()
    assert published_lines(lay.out) == expected(files)
    assert [p.num_input_rows for p in runner.progress] == [100, 100, 50]
    assert leftovers(lay.out) == []
    assert lay.log().newest() == (2, 2)


def test_a_pipeline_moves_between_fused_batches_and_a_streaming_query_on_one_checkpoint(
    spark: Any, tmp_path: Path
) -> None:
    lay = Layout(tmp_path)
    first, second, third = inputs(0, 2), inputs(2, 2), inputs(4, 2)
    write_inputs(lay.src, first, T0)
    lay.runner(spark).run()
    # A SQL transform needs a streaming query: it resumes after the fused batches...
    write_inputs(lay.src, second, T0 + 10_000_000_000)
    lay.streaming(spark)
    # ... and fused execution resumes after the streaming query's batches.
    write_inputs(lay.src, third, T0 + 20_000_000_000)
    lay.runner(spark).run()
    assert published_lines(lay.out) == expected({**first, **second, **third})
    assert leftovers(lay.out) == []
    newest, committed = lay.log().newest()
    assert newest == committed and newest is not None and newest >= 3


def file_sizes(directory: Path) -> list[int]:
    """Records per published file, in %FILENUM order."""
    names = sorted(
        (n for n in os.listdir(directory) if n.startswith("part-")),
        key=lambda n: int(n[5:].split(".")[0]),
    )
    return [len(lines_of((directory / n).read_bytes())) for n in names]


def test_files_span_batches_in_fused_runs_and_streaming_queries_alike(
    spark: Any, tmp_path: Path
) -> None:
    from operators.spark.sink import close_open_files

    lay = Layout(tmp_path)
    first, second = inputs(0, 4), inputs(4, 3)
    write_inputs(lay.src, first, T0)
    # One 50-record file per batch, files of 120 records: each file spans batches.
    span = {"tuples_per_file": "120", "span_batches": "true"}
    lay.runner(spark, scan={"maxFilesPerTrigger": "1"}, sink=span).run()
    assert file_sizes(lay.out) == [120]  # 80 records still open: not one file per batch
    assert len(leftovers(lay.out)) == 1
    # A streaming query on the same checkpoint continues the open file.
    write_inputs(lay.src, second, T0 + 10_000_000_000)
    lay.streaming(spark, **span)
    assert file_sizes(lay.out) == [120, 120]
    # The query stopped: publish what it left open.
    published = close_open_files(
        {**lay.sink_options(**span), "checkpointLocation": str(lay.ck / "spark")}
    )
    assert len(published) == 1
    assert file_sizes(lay.out) == [120, 120, 110]
    assert published_lines(lay.out) == expected({**first, **second})
    assert leftovers(lay.out) == []


def spark_jobs(spark: Any, runner: FusedRunner) -> list[int]:
    """The Spark jobs the runner's batches ran."""
    return list(spark.sparkContext.statusTracker().getJobIdsForGroup(runner._group))


def test_a_small_batch_runs_in_the_driver_and_publishes_what_a_spark_job_would(
    spark: Any, tmp_path: Path
) -> None:
    """A run from cron over a few small files pays no Spark job (no Python worker's start):
    the same files, names, counts and sink log as when every batch is a Spark job."""
    files = inputs(0, 3)
    results = []
    for name, limit in (("driver", 4 << 20), ("spark", 0)):
        lay = Layout(tmp_path / name)
        write_inputs(lay.src, files, T0)
        runner = lay.runner(
            spark,
            transform=None,
            scan={"maxFilesPerTrigger": "2"},
            sink={"tuples_per_file": "40", "span_batches": "true"},
            driver_batch_bytes=limit,
        )
        runner.run()
        assert (spark_jobs(spark, runner) == []) == (name == "driver")
        progress = [(p.num_input_rows, p.records_out, p.files_out) for p in runner.progress]
        outputs = {n: (lay.out / n).read_bytes() for n in os.listdir(lay.out) if "part-" in n}
        results.append((progress, outputs, len(leftovers(lay.out))))
    assert results[0] == results[1]
    progress, outputs, left = results[0]
    assert [p[0] for p in progress] == [100, 50] and left == 1  # 30 records still open
    assert sum(len(lines_of(d)) for d in outputs.values()) == 120


def test_batches_alternate_between_the_driver_and_spark_jobs_continuing_the_same_open_files(
    spark: Any, tmp_path: Path
) -> None:
    """Small and large batches of one run: each slot's open file is continued whichever ran
    the batch, and every record is published once, in order."""
    lay = Layout(tmp_path)
    files = {
        f"f{i:02d}.txt": "".join(f"file {i} line {j}\n" for j in range(8 if i % 2 else 60)).encode()
        for i in range(6)
    }
    write_inputs(lay.src, files, T0)
    runner = lay.runner(
        spark,
        transform=None,
        scan={"maxFilesPerTrigger": "1"},
        sink={"tuples_per_file": "50", "span_batches": "true"},
        driver_batch_bytes=300,  # the 8-line files (about 140 bytes) run in the driver
    )
    runner.run()
    assert len(spark_jobs(spark, runner)) == 3
    from operators.spark.sink import close_open_files

    close_open_files({**lay.sink_options(tuples_per_file="50", span_batches="true"),
                      "checkpointLocation": str(lay.ck / "spark")})  # fmt: skip
    assert published_lines(lay.out) == expected(files, str)
    assert file_sizes(lay.out) == [50, 50, 50, 50, 4]
    assert leftovers(lay.out) == []


@pytest.mark.parametrize("transform", [None, upper])
def test_close_on_punct_closes_a_file_at_the_end_of_each_input_file(
    spark: Any, tmp_path: Path, transform: Any
) -> None:
    lay = Layout(tmp_path)
    files = {**inputs(0, 3), "f09.txt": b"no newline at the end"}
    write_inputs(lay.src, files, T0)
    punct = {"close_on_punct": "true", "tuples_per_file": "40", "span_batches": "true"}
    lay.runner(spark, scan={"maxFilesPerTrigger": "3"}, sink=punct, transform=transform).run()
    # 50 records per input file: one file of 40 and one of 10 each; the last file's one record.
    assert file_sizes(lay.out) == [40, 10, 40, 10, 40, 10, 1]
    want = expected(files, transform or (lambda v: v))
    assert published_lines(lay.out) == want
    assert leftovers(lay.out) == []


def test_after_read_archives_input_only_behind_published_records(
    spark: Any, tmp_path: Path
) -> None:
    from operators.spark.sink import close_open_files

    lay = Layout(tmp_path)
    files = inputs(0, 3)
    write_inputs(lay.src, files, T0)
    archive = tmp_path / "archive"
    scan = {"maxFilesPerTrigger": "1", "after_read": "archive", "archive_dir": str(archive)}
    sink = {"tuples_per_file": "120", "span_batches": "true"}
    lay.runner(spark, scan=scan, sink=sink).run()
    # 150 records: one file of 120 is published (f00, f01 and 20 of f02); the open file holds
    # the rest of f02, so f02 stays in the landing directory.
    assert file_sizes(lay.out) == [120]
    assert sorted(os.listdir(archive)) == ["f00.txt", "f01.txt"]
    assert sorted(os.listdir(lay.src)) == ["f02.txt"]
    options = {**lay.sink_options(**sink), "checkpointLocation": str(lay.ck / "spark")}
    close_open_files(options)
    lay.runner(spark, scan=scan, sink=sink).run()  # a restart handles what the stop published
    assert sorted(os.listdir(archive)) == ["f00.txt", "f01.txt", "f02.txt"]
    assert os.listdir(lay.src) == []
    assert published_lines(lay.out) == expected(files)


def test_a_streaming_query_archives_each_batch_at_its_source_commit(
    spark: Any, tmp_path: Path
) -> None:
    lay = Layout(tmp_path)
    files = inputs(0, 3)
    write_inputs(lay.src, files, T0)
    archive = tmp_path / "archive" / "%Y"
    lay.streaming(spark, scan={"after_read": "archive", "archive_dir": str(archive)})
    assert published_lines(lay.out) == expected(files)
    assert os.listdir(lay.src) == []
    (year,) = os.listdir(tmp_path / "archive")
    assert sorted(os.listdir(tmp_path / "archive" / year)) == ["f00.txt", "f01.txt", "f02.txt"]


def test_after_read_into_an_archive_that_cannot_be_made_stops_and_keeps_the_input(
    spark: Any, tmp_path: Path
) -> None:
    lay = Layout(tmp_path)
    files = inputs(0, 2)
    write_inputs(lay.src, files, T0)
    (tmp_path / "blocked").write_text("a file where the archive's folder would be\n")
    bad = {"after_read": "archive", "archive_dir": str(tmp_path / "blocked" / "archive")}
    with pytest.raises(RegionFailedError, match=r"cannot archive .*f00\.txt.*stays where it is"):
        lay.runner(spark, scan=bad).run()
    assert sorted(os.listdir(lay.src)) == ["f00.txt", "f01.txt"]
    # The batch was published and committed; the next run archives its files, reading nothing
    # twice.
    good = {"after_read": "archive", "archive_dir": str(tmp_path / "archive")}
    lay.runner(spark, scan=good).run()
    assert os.listdir(lay.src) == []
    assert sorted(os.listdir(tmp_path / "archive")) == ["f00.txt", "f01.txt"]
    assert published_lines(lay.out) == expected(files)


def test_a_batch_written_ahead_but_not_run_is_run_from_its_plan_after_a_restart(
    spark: Any, tmp_path: Path
) -> None:
    lay = Layout(tmp_path)
    files = inputs(0, 2)
    write_inputs(lay.src, files, T0)
    lay.write_ahead(spark, 0)
    # Meanwhile a file grew and a late one landed: batch 0 stays what was planned.
    with (lay.src / "f00.txt").open("ab") as f:
        f.write(b"appended later\n")
    os.utime(lay.src / "f00.txt", ns=(T0, T0))
    write_inputs(lay.src, {"a-late.txt": b"late\n"}, T0 - 5_000_000_000)
    restarted = lay.runner(spark)
    restarted.run()
    assert restarted.progress[0].batch_id == 0
    assert restarted.progress[0].num_input_rows == 100
    # The late file is read by the next batch (the late window keeps it); the growth is not.
    assert published_lines(lay.out) == [*expected(files), "LATE"]


def test_a_batch_published_before_its_commit_record_is_not_published_again(
    spark: Any, tmp_path: Path
) -> None:
    lay = Layout(tmp_path)
    files = inputs(0, 2)
    write_inputs(lay.src, files, T0)
    lay.runner(spark).run()
    before = sorted(os.listdir(lay.out))
    # The driver died between the sink's publish (step 4) and commits/0 (step 5).
    (lay.ck / "spark" / "commits" / "0").unlink()
    restarted = lay.runner(spark)
    restarted.run()
    assert sorted(os.listdir(lay.out)) == before
    assert published_lines(lay.out) == expected(files)
    assert lay.log().newest() == (0, 0)
    assert [p.num_input_rows for p in restarted.progress] == [0]  # no job ran


def test_at_least_once_never_takes_a_newer_sink_entry_for_a_pending_batch(
    spark: Any, tmp_path: Path
) -> None:
    lay = Layout(tmp_path)
    first, second = inputs(0, 1), inputs(1, 1)
    write_inputs(lay.src, first, T0)
    sink = {**lay.sink_options(), "delivery": "at_least_once"}
    lay.sink_options = lambda: sink  # type: ignore[method-assign]
    lay.runner(spark).run()
    # Published, then killed before commits/0: the re-run batch 0 is published again under a
    # fresh sink entry (at least once), so the sink log runs one entry ahead of the batches.
    (lay.ck / "spark" / "commits" / "0").unlink()
    lay.runner(spark).run()
    # Batch 1 written ahead, then killed before its job ran.
    write_inputs(lay.src, second, T0 + 10_000_000_000)
    lay.write_ahead(spark, 1)
    lay.runner(spark).run()
    published = published_lines(lay.out)
    assert set(published) == set(expected({**first, **second}))
    assert published.count("FILE 1 LINE 0") == 1


def test_a_failed_batch_runs_again_and_leaves_no_partial_output(spark: Any, tmp_path: Path) -> None:
    lay = Layout(tmp_path)
    files = inputs(0, 3)
    write_inputs(lay.src, files, T0)
    flag = tmp_path / "fail-once"
    flag.write_text("")
    restarts: list[int] = []
    runner = lay.runner(
        spark,
        transform=FailOnce(str(flag), "file 1 line 20"),
        settings=RegionSettings(reset_backoff=0),
        on_restart=lambda attempt, error: restarts.append(attempt),
    )
    runner.run()
    assert restarts == [1]
    assert published_lines(lay.out) == expected(files)
    assert leftovers(lay.out) == []


def test_a_permanent_error_ends_the_run_at_once_naming_the_file(spark: Any, tmp_path: Path) -> None:
    lay = Layout(tmp_path)
    write_inputs(lay.src, {"bad.txt": b"ok\n\xff\xfe broken\n"}, T0)
    runner = lay.runner(spark, settings=RegionSettings(reset_backoff=0))
    with pytest.raises(RegionFailedError) as info:
        runner.run()
    message = str(info.value)
    assert "A restart would fail the same way" in message and "bad.txt" in message
    assert not lay.out.exists() or published_lines(lay.out) == []


@pytest.mark.parametrize("pause", [0.05, 600.0], ids=["50 ms a record", "10 minutes a record"])
def test_an_immediate_stop_cancels_the_job_and_the_next_run_replays_the_batch(
    spark: Any, tmp_path: Path, pause: float
) -> None:
    """Also inside a user's function that takes ten minutes a record: the job's tasks are
    interrupted and Spark kills their Python workers (the cancel waited for the function to
    return, minutes per record)."""
    lay = Layout(tmp_path)
    files = inputs(0, 2)
    write_inputs(lay.src, files, T0)
    started = tmp_path / "started"
    runner = lay.runner(spark, transform=Slow(str(started), pause))
    thread = threading.Thread(target=runner.run)
    thread.start()
    deadline = time.monotonic() + 120
    while not started.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    runner.stop(immediate=True)
    thread.join(60)
    assert not thread.is_alive()
    assert lay.log().newest() == (0, None)  # written ahead, not committed
    lay.runner(spark).run()
    assert published_lines(lay.out) == expected(files)
    assert leftovers(lay.out) == []


class FailOnce:
    """Raises on ``value`` while ``flag`` exists, removing it (workers are other processes)."""

    def __init__(self, flag: str, value: str) -> None:
        self.flag, self.value = flag, value

    def __call__(self, value: str) -> str:
        if value == self.value and os.path.exists(self.flag):
            os.unlink(self.flag)
            raise ConnectionError("the disk went away for a moment")
        return value.upper()


class Slow:
    """Upper-cases slowly (``pause`` seconds a record), after touching ``started``."""

    def __init__(self, started: str, pause: float = 0.05) -> None:
        self.started = started
        self.pause = pause

    def __call__(self, value: str) -> str:
        Path(self.started).touch()
        time.sleep(self.pause)
        return value.upper()


def test_local_python_workers_import_the_installed_pyspark_not_its_zip(spark: Any) -> None:
    def where(batches: Any) -> Any:
        import pyarrow as pa
        import pyspark

        for _ in batches:
            yield pa.RecordBatch.from_pylist([{"file": pyspark.__file__}])

    (row,) = spark.range(0, 1, 1, 1).mapInArrow(where, "file string").collect()
    assert "pyspark.zip" not in row.file and row.file.endswith("__init__.py")


def test_the_worker_wrapper_drops_only_the_installed_zip(tmp_path: Path) -> None:
    import subprocess

    import pyspark

    from operators.spark.session import worker_python

    wrapper = worker_python()
    zip_path = str(Path(pyspark.__file__).parent / "python" / "lib" / "pyspark.zip")
    other = str(tmp_path / "elsewhere" / "pyspark.zip")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([zip_path, other, "/x", zip_path]))
    shown = subprocess.run(
        [wrapper, "-c", "import os; print(os.environ['PYTHONPATH'])"],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    assert shown == os.pathsep.join([other, "/x"])


def test_a_stateless_sql_transform_runs_fused_counting_the_records_read(
    spark: Any, tmp_path: Path
) -> None:
    lay = Layout(tmp_path)
    files = inputs(0, 3)
    write_inputs(lay.src, files, T0)
    sql = "SELECT upper(value) AS value FROM input WHERE value NOT LIKE '%line 7'"
    runner = lay.runner(
        spark, transform=None, frame=sql_transform(spark, sql), scan={"maxFilesPerTrigger": "2"}
    )
    runner.run()
    kept = [line for line in expected(files) if not line.endswith("LINE 7")]
    assert published_lines(lay.out) == kept
    assert [p.num_input_rows for p in runner.progress] == [100, 50]
    assert leftovers(lay.out) == []


@pytest.mark.parametrize(
    ("sql", "stateful"),
    [
        ("SELECT upper(value) AS value FROM input WHERE length(value) > 3", None),
        ("SELECT explode(split(value, ' ')) AS value FROM input", None),
        ("SELECT DISTINCT value FROM input", "Aggregate"),
        ("SELECT value FROM input GROUP BY value", "Aggregate"),
        ("SELECT value FROM input ORDER BY value", "Sort"),
        ("SELECT value FROM input LIMIT 3", "GlobalLimit"),
    ],
)
def test_only_sql_without_state_across_batches_runs_fused(
    spark: Any, sql: str, stateful: str | None
) -> None:
    assert stateful_part(spark, sql, binary=False) == stateful


def test_wrong_sql_is_a_config_error_naming_it(spark: Any) -> None:
    with pytest.raises(ConfigError, match=r"\[transform\] sql: .*no_such_column"):
        stateful_part(spark, "SELECT no_such_column FROM input", binary=False)


@pytest.mark.parametrize("mode", ["archive", "delete"])
def test_cron_style_runs_read_a_name_that_lands_again_after_after_read(
    spark: Any, tmp_path: Path, mode: str
) -> None:
    # hdfs-region run --available-now again and again: each run ends after the last batch's
    # after_read, which moved a.txt away after the batch's offset was written.
    lay = Layout(tmp_path)
    archive = tmp_path / "archive"
    scan = {"after_read": mode, **({"archive_dir": str(archive)} if mode == "archive" else {})}
    landed: dict[str, bytes] = {}
    for run in range(3):
        data = "".join(f"run {run} line {j}\n" for j in range(10)).encode()
        write_inputs(lay.src, {"a.txt": data}, T0 + run * 1_000_000_000)
        landed[f"a{run}"] = data
        lay.runner(spark, scan=scan).run()
        assert os.listdir(lay.src) == []
    assert published_lines(lay.out) == expected(landed)
    if mode == "archive":
        assert sorted(os.listdir(archive)) == ["a-1.txt", "a-2.txt", "a.txt"]


def test_a_file_with_an_mtime_a_day_ahead_hides_none_of_the_files_after_it(
    spark: Any, tmp_path: Path
) -> None:
    lay = Layout(tmp_path)
    now = time.time_ns()
    files = inputs(0, 3)
    write_inputs(lay.src, files, now - 60_000_000_000)
    ahead = {"skewed.txt": b"skewed\n"}
    write_inputs(lay.src, ahead, now + 86_400_000_000_000)
    lay.runner(spark).run()
    # More files than the census below the late window tells apart land meanwhile.
    later = {f"g{i:03d}.txt": f"later {i}\n".encode() for i in range(1000)}
    for name, data in later.items():
        (lay.src / name).write_bytes(data)  # mtime now
    restarted = lay.runner(spark)
    restarted.run()
    assert sorted(published_lines(lay.out)) == sorted(expected({**files, **ahead, **later}))
    assert restarted.progress[-1].passed_over == 0


def test_a_streaming_query_takes_a_checkpoint_over_once_its_newest_batch_entries_are_closed(
    tmp_path: Path,
) -> None:
    """Fused batches close their batch log entries in the background; a driver killed before
    those closes landed leaves them open, which Spark's client cannot read after a DataNode
    restart. So the command closes (recovers the lease of) the entries a streaming query reads
    first before it starts one on that checkpoint: the newest commit and the two newest
    offsets."""
    from types import SimpleNamespace

    from operators.app.engine_spark import SPARK_DIR, _streaming

    class Recovering(LocalFileSystem):
        def __init__(self) -> None:
            super().__init__()
            self.recovered: list[str] = []

        def recover_lease(self, path: str) -> float:
            self.recovered.append(path)
            return 0.0

    fs = Recovering()
    log = BatchLog(fs, str(tmp_path / "ck" / SPARK_DIR))
    for batch_id in range(3):
        log.write_offset(batch_id, {"seq": batch_id}, {})
        log.write_commit(batch_id)
    log.write_offset(3, {"seq": 3}, {})  # killed while batch 3 ran
    plan = SimpleNamespace(config=SimpleNamespace(region=RegionSettings()))
    totals = SimpleNamespace(on_batch=lambda progress: None)
    _streaming(None, plan, True, totals, (fs, str(tmp_path / "ck")), lambda *_: None)  # type: ignore[arg-type]
    closed = [str(Path(p).relative_to(tmp_path / "ck" / SPARK_DIR)) for p in fs.recovered]
    assert closed == ["offsets/2", "offsets/3", "commits/2"]
