"""Fused execution from a user's own code (``start_fused``): the user's DataFrame transform runs
inside each batch's job, every record is published once across failures and immediate stops,
and a transform that keeps state across batches is refused, named."""

from __future__ import annotations

import functools
import os
from pathlib import Path
from typing import Any

import pytest

from operators.fs.local import LocalFileSystem
from operators.spark.batchlog import BatchLog
from region.errors import ConfigError, RegionFailedError
from tests.spark.helpers import leftovers, lines_of, published_lines, write_inputs

pytestmark = pytest.mark.spark

T0 = 1_700_000_000_000_000_000


def inputs(count: int, lines: int = 20) -> dict[str, bytes]:
    return {
        f"f{i:02d}.txt": "".join(f"file {i} line {j}\n" for j in range(lines)).encode()
        for i in range(count)
    }


def expected(files: dict[str, bytes]) -> list[str]:
    """What :func:`shout` makes of ``files``."""
    return [
        f"{line.upper()} ({len(line)})"
        for data in files.values()
        for line in lines_of(data)
        if not line.endswith(" 7")
    ]


def shout(frame: Any) -> Any:
    """A user's transform: DataFrame functions, a filter and a column computed from two."""
    from pyspark.sql import functions as F

    kept = frame.where(~F.col("value").endswith(" 7"))
    size = F.length("value").cast("string")
    return kept.select(F.concat(F.upper("value"), F.lit(" ("), size, F.lit(")")).alias("value"))


def start(spark: Any, root: Path, transform: Any = shout, **kwargs: Any) -> Any:
    from operators.spark import start_fused

    kwargs.setdefault("available_now", True)
    return start_fused(
        spark,
        transform,
        scan={"directory": str(root / "in"), "maxFilesPerTrigger": "1"},
        sink={"file": str(root / "out" / "part-%FILENUM.txt")},
        checkpoint_location=str(root / "ck"),
        **kwargs,
    )


def failing_on(marker: Path, record: str) -> Any:
    """``shout`` with a Python UDF that, while ``marker`` exists, fails on ``record`` (or, for
    ``"sleep"``, writes ``marker.started`` and takes 50 ms for each record of file 1: a task
    that Spark can cancel between the batches of rows it sends the UDF)."""
    from pyspark.sql import functions as F
    from pyspark.sql.functions import udf

    flag = str(marker)

    @udf("string")
    def check(value: str) -> str:
        import os
        import time

        if os.path.exists(flag):
            if record == "sleep" and value.startswith("file 1 "):
                open(flag + ".started", "w").close()
                time.sleep(0.05)
            if value == record:
                raise ValueError(f"bad record {value!r}")
        return value

    def transform(frame: Any) -> Any:
        return shout(frame.select(check(F.col("value")).alias("value")))

    return transform


def test_the_users_transform_runs_fused_and_publishes_every_record_once(
    spark: Any, tmp_path: Path
) -> None:
    files = inputs(3)
    write_inputs(tmp_path / "in", files, T0)
    query = start(spark, tmp_path)
    query.awaitTermination()
    assert not query.isActive
    assert published_lines(tmp_path / "out") == expected(files)
    # One batch per file, each counting the records it read (before the filter).
    assert [p.num_input_rows for p in query.recentProgress] == [20, 20, 20]
    assert leftovers(tmp_path / "out") == []
    # The lock went with the query: the next run continues after the published files.
    more = {f"g{i}.txt": f"later {i}\n".encode() for i in range(2)}
    write_inputs(tmp_path / "in", more, T0 + 100_000_000_000)
    start(spark, tmp_path).awaitTermination()
    assert published_lines(tmp_path / "out") == expected(files) + expected(more)


def run_from_cron(spark: Any, tmp_path: Path, **scan: str) -> None:
    """One ``available_now`` run of ``shout`` from ``in`` to ``out``, as cron starts it."""
    from operators.spark import start_fused

    start_fused(
        spark,
        shout,
        scan={"directory": str(tmp_path / "in"), **scan},
        sink={"file": str(tmp_path / "out" / "part-%FILENUM.txt")},
        checkpoint_location=str(tmp_path / "ck"),
        available_now=True,
    ).awaitTermination()


def test_runs_from_cron_read_a_name_landed_again_after_delete_and_a_file_replaced(
    spark: Any, tmp_path: Path
) -> None:
    """``available_now`` again and again, as cron runs it: a file deleted after it was read
    and landed again under its old name is a new file; so is a file replaced under a name
    already read (``mv new.tmp name``: another inode), read whole with the default
    ``on_modified``. Each run publishes what landed since the last, once."""
    run = functools.partial(run_from_cron, spark, tmp_path)

    first = inputs(2)
    write_inputs(tmp_path / "in", first, T0)
    run(after_read="delete")
    assert sorted(p.name for p in (tmp_path / "in").iterdir()) == []
    again = {"f00.txt": b"landed again 1\nlanded again 2\n"}
    write_inputs(tmp_path / "in", again, T0 + 10_000_000_000)
    run()
    replaced = {"f00.txt": b"replaced 1\n"}
    tmp = tmp_path / "in" / ".f00.txt.tmp"
    tmp.write_bytes(replaced["f00.txt"])
    os.replace(tmp, tmp_path / "in" / "f00.txt")
    run()
    run()  # nothing new: nothing published
    assert published_lines(tmp_path / "out") == expected(first) + expected(again) + expected(
        replaced
    )
    assert leftovers(tmp_path / "out") == []


def test_runs_from_cron_read_a_file_renamed_over_one_with_its_mtime_and_a_pattern_narrowed(
    spark: Any, tmp_path: Path
) -> None:
    """``available_now`` runs as cron runs them: a file renamed over one read with the very
    same mtime and size (``touch -r``, ``cp -p``: another inode) is read whole once; a pattern
    narrowed for a run, then widened again, reads nothing twice, and what landed meanwhile
    once."""
    run = functools.partial(run_from_cron, spark, tmp_path)

    first = {"f00.txt": b"first 1\nfirst 2\n", "f01.txt": b"other 1\n"}
    write_inputs(tmp_path / "in", first, T0)
    run()
    replaced = {"f00.txt": b"again 1\nagain 2\n"}
    tmp = tmp_path / "in" / ".f00.txt.tmp"
    tmp.write_bytes(replaced["f00.txt"])
    os.utime(tmp, ns=(T0, T0))
    os.replace(tmp, tmp_path / "in" / "f00.txt")
    run()
    run(pattern="(f01|g02)[.]txt")
    later = {"g02.txt": b"later 1\n"}
    write_inputs(tmp_path / "in", later, T0 + 10_000_000_000)
    run(pattern="(f01|g02)[.]txt")
    run()
    run()
    assert published_lines(tmp_path / "out") == expected(first) + expected(replaced) + expected(
        later
    )
    assert leftovers(tmp_path / "out") == []


def test_a_batch_failing_in_the_transform_then_a_rerun_publish_each_record_once(
    spark: Any, tmp_path: Path
) -> None:
    files = inputs(3)
    write_inputs(tmp_path / "in", files, T0)
    marker = tmp_path / "fail"
    marker.touch()
    region = {"max_consecutive_reset_attempts": 1, "reset_backoff": 0}
    query = start(spark, tmp_path, failing_on(marker, "file 1 line 3"), region=region)
    with pytest.raises(RegionFailedError, match="bad record 'file 1 line 3'"):
        query.awaitTermination()
    # Batch 0 published; batch 1 written ahead, never committed.
    assert published_lines(tmp_path / "out") == expected(inputs(1))
    assert BatchLog(LocalFileSystem(), str(tmp_path / "ck" / "spark")).newest() == (1, 0)
    marker.unlink()
    start(spark, tmp_path, failing_on(marker, "file 1 line 3")).awaitTermination()
    assert published_lines(tmp_path / "out") == expected(files)
    assert leftovers(tmp_path / "out") == []


def test_an_immediate_stop_mid_batch_then_a_restart_publish_each_record_once(
    spark: Any, tmp_path: Path
) -> None:
    # File 1: 10 s in the transform. The UDF gets its rows in batches, and the cancel takes effect
    # only between them: the stop can wait for the whole file.
    files = inputs(3, lines=200)
    write_inputs(tmp_path / "in", files, T0)
    marker = tmp_path / "sleep"
    marker.touch()
    query = start(spark, tmp_path, failing_on(marker, "sleep"), available_now=False)
    started = Path(str(marker) + ".started")
    while not started.exists():  # batch 1's task is in the transform
        assert query.isActive, query.exception()
        query.awaitTermination(0.2)
    query.stop(immediate=True)
    assert not query.isActive and query.exception() is None
    # Batch 0 published; batch 1 written ahead, its job cancelled.
    assert published_lines(tmp_path / "out") == expected(inputs(1, lines=200))
    assert BatchLog(LocalFileSystem(), str(tmp_path / "ck" / "spark")).newest() == (1, 0)
    marker.unlink()
    start(spark, tmp_path, failing_on(marker, "sleep")).awaitTermination()
    assert published_lines(tmp_path / "out") == expected(files)
    assert leftovers(tmp_path / "out") == []


def deduplicate(frame: Any) -> Any:
    return frame.dropDuplicates(["value"])


def in_order(frame: Any) -> Any:
    return frame.orderBy("value")


def nothing_read(frame: Any) -> Any:
    return frame.where("false")


def with_extra(frame: Any) -> Any:
    """Returns ``(value, extra)``: ``extra`` was dropped without a word."""
    from pyspark.sql import functions as F

    return frame.select("value", F.length("value").alias("extra"))


def renamed(frame: Any) -> Any:
    """Returns one column ``v``: it was written as the value without a word."""
    return frame.select(frame["value"].alias("v"))


@pytest.mark.parametrize(
    ("transform", "why"),
    [
        (deduplicate, r"transform deduplicate: its plan keeps state across batches \(Aggregate\)"),
        (in_order, r"transform in_order: its plan keeps state across batches \(Sort\)"),
        (nothing_read, r"transform nothing_read: its plan does not read its input"),
        (
            with_extra,
            r"transform with_extra returns the columns value, extra; the sink writes value",
        ),
        (renamed, r"transform renamed returns the columns v; the sink writes value, each"),
    ],
)
def test_a_transform_that_cannot_run_batch_by_batch_is_refused_naming_it(
    spark: Any, tmp_path: Path, transform: Any, why: str
) -> None:
    write_inputs(tmp_path / "in", inputs(1), T0)
    with pytest.raises(ConfigError, match=why):
        start(spark, tmp_path, transform)
    # Refused before anything was written or locked.
    assert not (tmp_path / "ck").exists()
    assert not (tmp_path / "out").exists()


def test_a_stop_of_a_running_query_publishes_the_file_a_limit_kept_open(
    spark: Any, tmp_path: Path
) -> None:
    from operators.spark import start_fused

    files = inputs(2)
    write_inputs(tmp_path / "in", files, T0)
    query = start_fused(
        spark,
        shout,
        scan={"directory": str(tmp_path / "in")},
        sink={"file": str(tmp_path / "out" / "part-%FILENUM.txt"), "tuples_per_file": "1000"},
        checkpoint_location=str(tmp_path / "ck"),
    )
    while not query.recentProgress:  # the batch committed, its file kept open for the next
        assert query.isActive, query.exception()
        query.awaitTermination(0.2)
    assert published_lines(tmp_path / "out") == []
    query.stop()
    assert not query.isActive and query.exception() is None
    assert published_lines(tmp_path / "out") == expected(files)
    assert leftovers(tmp_path / "out") == []
