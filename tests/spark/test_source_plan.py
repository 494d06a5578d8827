"""The source's planning (driver side) without Spark: limits, replay from the plan log."""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any
from unittest import mock

import pytest
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxBytes, ReadMaxFiles

from operators.scan.cursor import LateFileError
from operators.spark.options import scan_config
from operators.spark.source import HdfsScanStreamReader, ScanPartition
from region.errors import ConfigError
from tests.conftest import _local_read_only
from tests.spark.helpers import write_inputs

T0 = 1_700_000_000_000_000_000


def reader(src: Path, **options: str) -> HdfsScanStreamReader:
    plans = str(src.parent / f"{src.name}-plans")  # next to the directory, never inside it
    return HdfsScanStreamReader(scan_config({"directory": str(src), "plan_dir": plans, **options}))


def ranges(r: HdfsScanStreamReader, start: dict[str, Any], end: dict[str, Any]) -> list[tuple]:
    out = []
    for p in r.partitions(start, end):
        assert isinstance(p, ScanPartition)
        out += [(Path(r[0]).name, r[1], r[2]) for r in p.ranges]
    return out


def test_a_replayed_batch_reads_its_plan_whatever_the_listing_says_now(tmp_path: Path) -> None:
    src = tmp_path / "in"
    write_inputs(src, {"a": b"1\n" * 10, "b": b"2\n" * 10}, T0)
    r = reader(src)
    start = r.initialOffset()
    end = r.latestOffset(start, ReadAllAvailable())
    planned = ranges(r, start, end)
    # After a crash: a late file appeared, one planned file grew: the batch is the same.
    write_inputs(src, {"late": b"x\n"}, T0 - 5_000_000_000)
    mtime = (src / "b").stat().st_mtime_ns
    with (src / "b").open("ab") as f:
        f.write(b"more\n")
    os.utime(src / "b", ns=(mtime, mtime))
    restarted = reader(src)
    assert ranges(restarted, start, end) == planned == [("a", 0, 20), ("b", 0, 20)]
    # The next batch reads the late file (the window keeps it), and ignores the growth of b.
    after = restarted.latestOffset(end, ReadAllAvailable())
    assert ranges(restarted, end, after) == [("late", 0, 2)]
    assert restarted.latestOffset(after, ReadAllAvailable()) == after


def test_admission_control_by_files_and_by_bytes(tmp_path: Path) -> None:
    src = tmp_path / "in"
    write_inputs(src, {"a": b"x" * 100, "b": b"y" * 100, "c": b"z" * 100}, T0)
    r = reader(src, maxFilesPerTrigger="2")
    assert isinstance(r.getDefaultReadLimit(), ReadMaxFiles)
    o0 = r.initialOffset()
    o1 = r.latestOffset(o0, r.getDefaultReadLimit())
    assert ranges(r, o0, o1) == [("a", 0, 100), ("b", 0, 100)]
    # Bytes: a batch may end inside a file and the next one continues there.
    o2 = r.latestOffset(o1, ReadMaxBytes(60))
    o3 = r.latestOffset(o2, ReadMaxBytes(60))
    assert ranges(r, o1, o2) == [("c", 0, 60)] and ranges(r, o2, o3) == [("c", 60, 100)]
    assert r.latestOffset(o3, ReadAllAvailable()) == o3
    # Operator-driven: whole files only, at least one per batch.
    whole = reader(
        src, maxBytesPerTrigger="150", batch_boundary="file", plan_dir=str(tmp_path / "p")
    )
    w1 = whole.latestOffset(o0, whole.getDefaultReadLimit())
    assert ranges(whole, o0, w1) == [("a", 0, 100)]


def test_late_files_within_the_window_are_planned_once(tmp_path: Path) -> None:
    src = tmp_path / "in"
    write_inputs(src, {"b": b"b\n"}, T0)
    r = reader(src, late_window="1m")
    o1 = r.latestOffset(r.initialOffset(), ReadAllAvailable())
    write_inputs(src, {"a": b"a\n"}, T0 - 10_000_000_000)  # arrives later, older mtime
    o2 = r.latestOffset(o1, ReadAllAvailable())
    assert ranges(r, o1, o2) == [("a", 0, 2)]
    assert r.latestOffset(o2, ReadAllAvailable()) == o2
    # Far beyond the window: a name new since the last listing is planned all the same, once,
    # also by a reader restarted from the offset (the census knows it).
    write_inputs(src, {"ancient": b"z\n"}, T0 - 3600_000_000_000)
    o3 = r.latestOffset(o2, ReadAllAvailable())
    assert ranges(r, o2, o3) == [("ancient", 0, 2)]
    assert reader(src, late_window="1m").latestOffset(o3, ReadAllAvailable()) == o3
    # A reader restarted from o2 (the batch of o3 not logged) finds it by the census.
    again = reader(src, late_window="1m")
    o3b = again.latestOffset(o2, ReadAllAvailable())
    assert ranges(again, o2, o3b) == [("ancient", 0, 2)]


def test_strict_window_passes_late_files_over_with_a_count(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    src = tmp_path / "in"
    write_inputs(src, {"b": b"b\n"}, T0)
    r = reader(src, late_window="0")
    o1 = r.latestOffset(r.initialOffset(), ReadAllAvailable())
    write_inputs(src, {"a": b"a\n"}, T0 - 10_000_000_000)
    with caplog.at_level(logging.WARNING, logger="operators.scan.cursor"):
        passed = r.latestOffset(o1, ReadAllAvailable())
    assert "a landed late (its mtime is 10.000s before the newest file read)" in caplog.text
    # An empty batch records the decision: a restart does not report the file again.
    assert ranges(r, o1, passed) == [] and passed["passed_over"] == 1
    assert r.latestOffset(passed, ReadAllAvailable()) == passed
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="operators.scan.cursor"):
        assert reader(src, late_window="0").latestOffset(passed, ReadAllAvailable()) == passed
    assert caplog.text == ""
    write_inputs(src, {"c": b"c\n"}, T0 + 1)
    o2 = r.latestOffset(passed, ReadAllAvailable())
    assert ranges(r, passed, o2) == [("c", 0, 2)] and o2["passed_over"] == 1
    failing = reader(src, late_window="0", on_late_file="fail")
    with pytest.raises(LateFileError, match="on_late_file = 'fail'"):
        failing.latestOffset(o1, ReadAllAvailable())


def test_available_now_ignores_files_arriving_after_it_started(tmp_path: Path) -> None:
    src = tmp_path / "in"
    write_inputs(src, {"a": b"a\n"}, T0)
    r = reader(src)
    r.prepareForTriggerAvailableNow()
    write_inputs(src, {"b": b"b\n"}, T0 + 1_000_000_000)
    o1 = r.latestOffset(r.initialOffset(), ReadAllAvailable())
    assert ranges(r, r.initialOffset(), o1) == [("a", 0, 2)]
    assert r.latestOffset(o1, ReadAllAvailable()) == o1


def test_plan_dir_is_required_and_never_inside_the_watched_directory(tmp_path: Path) -> None:
    src = tmp_path / "in"
    with pytest.raises(ConfigError, match=r"the option 'plan_dir' is required.*checkpointLocation"):
        scan_config({"directory": str(src)})
    for inside in (src, src / "_hdfs_scan", src / "a" / "b"):
        with pytest.raises(ConfigError, match="is inside the watched directory"):
            scan_config({"directory": str(src), "plan_dir": str(inside)})
    # A sibling whose name starts like the directory is not inside it.
    assert scan_config({"directory": str(src), "plan_dir": f"{src}-plans"}).plan_dir


def test_two_queries_share_a_read_only_landing_directory(tmp_path: Path) -> None:
    src = tmp_path / "in"
    write_inputs(src, {"a": b"1\n" * 10, "b": b"2\n" * 10}, T0)
    with _local_read_only(str(src)):  # even root cannot write there
        with pytest.raises(PermissionError):
            (src / "probe").write_bytes(b"")
        first, second = (
            HdfsScanStreamReader(
                scan_config({"directory": str(src), "plan_dir": str(tmp_path / name)})
            )
            for name in ("q1-plans", "q2-plans")
        )
        o0 = first.initialOffset()
        o1 = first.latestOffset(o0, ReadAllAvailable())
        p0 = second.initialOffset()
        p1 = second.latestOffset(p0, ReadAllAvailable())
        assert ranges(first, o0, o1) == ranges(second, p0, p1) == [("a", 0, 20), ("b", 0, 20)]
        first.commit(o1)
        # Each query replays its own batch from its own plan.
        assert ranges(second, p0, p1) == [("a", 0, 20), ("b", 0, 20)]
    assert sorted(os.listdir(src)) == ["a", "b"]  # nothing of either query in the landing dir


def test_a_failed_plan_write_leaves_nothing_and_old_leftovers_are_cleaned(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    src = tmp_path / "in"
    plans = tmp_path / "in-plans"
    write_inputs(src, {"a": b"1\n"}, T0)
    r = reader(src, plan_retain="1")
    fs = r.plan_fs

    def full_disk(src_path: str, dst: str, *, overwrite: bool = False) -> None:
        raise OSError(28, "No space left on device", dst)

    monkeypatch.setattr(fs, "rename", full_disk)
    o0 = r.initialOffset()
    with pytest.raises(OSError, match="No space left"):
        r.latestOffset(o0, ReadAllAvailable())
    assert os.listdir(plans) == []  # no plan, and no temporary file of it
    monkeypatch.undo()

    # A temporary plan a killed driver left behind goes once its batch is long committed.
    (plans / f".{1:020d}-{'0' * 32}.tmp").write_bytes(b"{")
    offsets = [o0]
    for i in range(3):
        write_inputs(src, {f"b{i}": b"2\n"}, T0 + (i + 1) * 1_000_000_000)
        offsets.append(r.latestOffset(offsets[-1], ReadAllAvailable()))
        r.commit(offsets[-1])
    assert not [name for name in os.listdir(plans) if name.endswith(".tmp")]


def _mid_file_batch(tmp_path: Path) -> tuple[Path, dict[str, Any], dict[str, Any], list[tuple]]:
    """A batch planned to end in the middle of ``svc.log`` (kill -9 before it was read)."""
    src = tmp_path / "in"
    write_inputs(src, {"svc.log": b"".join(b"old %05d\n" % i for i in range(1000))}, T0)
    r = reader(src)
    start = r.latestOffset(r.initialOffset(), ReadMaxBytes(4000))
    end = r.latestOffset(start, ReadMaxBytes(4000))
    planned = ranges(r, start, end)
    assert planned == [("svc.log", 4000, 8000)]
    return src, start, end, planned


@pytest.mark.parametrize("rotation", ["rename", "copytruncate"])
def test_a_replayed_batch_reads_its_bytes_where_a_rotation_moved_them(
    tmp_path: Path, rotation: str, caplog: pytest.LogCaptureFixture
) -> None:
    """The log is rotated while the job is down: the replayed batch reads its planned bytes
    from the rotated copy, never the new file's bytes at the old offsets (which read nothing:
    a batch's lines lost)."""
    src, start, end, _ = _mid_file_batch(tmp_path)
    old = (src / "svc.log").read_bytes()
    if rotation == "rename":
        os.replace(src / "svc.log", src / "svc.log.1")
    else:
        (src / "svc.log.1").write_bytes(old)
        os.truncate(src / "svc.log", 0)
    (src / "svc.log").write_bytes(b"new\n" * 10)
    restarted = reader(src)
    with caplog.at_level(logging.INFO, logger="operators.spark.source"):
        assert ranges(restarted, start, end) == [("svc.log.1", 4000, 8000)]
    assert "now at" in caplog.text and "svc.log.1" in caplog.text
    # Then the copy continues after the batch, and the new file is read whole.
    after = restarted.latestOffset(end, ReadAllAvailable())
    assert sorted(ranges(restarted, end, after)) == [("svc.log", 0, 40), ("svc.log.1", 8000, 10000)]


def test_a_replayed_batch_whose_bytes_are_gone_is_skipped_loudly_or_refused_when_strict(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    src, start, end, _ = _mid_file_batch(tmp_path)
    (src / "svc.log").write_bytes(b"other\n" * 2000)  # other bytes, longer: nothing holds them
    with caplog.at_level(logging.WARNING, logger="operators.spark.source"):
        assert ranges(reader(src), start, end) == []
    assert "no longer holds the 8000 bytes planned" in caplog.text and "svc.log" in caplog.text
    with pytest.raises(FileNotFoundError, match=r"svc\.log no longer holds"):
        ranges(reader(src, strict_mode="true"), start, end)


def test_a_young_files_last_line_without_newline_waits_for_it_on_the_planner(
    tmp_path: Path,
) -> None:
    """The planner ends a young file's range after its last newline; the line is planned
    whole once its newline lands, or once the file stays unchanged for the hold."""
    src = tmp_path / "in"
    src.mkdir()
    log = src / "app.log"
    log.write_bytes(b"a\nb\npart")  # mtime now: young
    r = reader(src, hold_partial_line="1s")
    o0 = r.initialOffset()
    o1 = r.latestOffset(o0, ReadAllAvailable())
    assert ranges(r, o0, o1) == [("app.log", 0, 4)]
    assert [h[:4] for h in o1["held"]] == [[str(log), log.stat().st_mtime_ns, 8, 4]]
    assert r.latestOffset(o1, ReadAllAvailable()) == o1  # not due, unchanged
    with log.open("ab") as f:
        f.write(b"ial\nc")
    o2 = r.latestOffset(o1, ReadAllAvailable())
    assert ranges(r, o1, o2) == [("app.log", 4, 12)]  # "partial\n", and "c" waits
    # Restarted: the wait is in the offset; unchanged for the hold, "c" is planned as it is.
    restarted = reader(src, hold_partial_line="1s")
    time.sleep(1.1)
    o3 = restarted.latestOffset(o2, ReadAllAvailable())
    assert ranges(restarted, o2, o3) == [("app.log", 12, 13)]
    assert "held" not in o3
    assert restarted.latestOffset(o3, ReadAllAvailable()) == o3


def test_available_now_waits_for_a_held_line_then_plans_it(tmp_path: Path) -> None:
    src = tmp_path / "in"
    src.mkdir()
    (src / "only.log").write_bytes(b"no newline yet")
    r = reader(src, hold_partial_line="1s")
    r.prepareForTriggerAvailableNow()
    o0 = r.initialOffset()
    o1 = r.latestOffset(o0, ReadAllAvailable())  # the file held whole: an empty batch
    assert ranges(r, o0, o1) == [] and len(o1["held"]) == 1
    o2 = r.latestOffset(o1, ReadAllAvailable())  # waits the hold instead of ending the run
    assert ranges(r, o1, o2) == [("only.log", 0, 14)]


@pytest.mark.parametrize("check", ["windows", "exact"])
def test_the_planner_reads_an_export_rewritten_in_its_middle_whole_only_under_the_exact_check(
    tmp_path: Path, check: str
) -> None:
    """The same rule as the in-process source: a rewrite that keeps the first and last 4 KiB
    of what was read passes the windows (nothing planned) and not the exact check (planned
    whole). An append, after a restart, is planned alone under both; what the exact check
    remembers (and the plan's fingerprint, which a replay checks) covers every byte read."""
    src = tmp_path / "in"
    rows = b"".join(b"row %05d\n" % i for i in range(2000))
    write_inputs(src, {"export.csv": rows}, T0)
    r = reader(src, content_check=check)
    o0 = r.initialOffset()
    o1 = r.latestOffset(o0, ReadAllAvailable())
    assert ranges(r, o0, o1) == [("export.csv", 0, 20000)]
    restarted = reader(src, content_check=check)
    write_inputs(src, {"export.csv": rows + b"row 02000\n"}, T0 + 10**9)
    o2 = restarted.latestOffset(o1, ReadAllAvailable())
    assert ranges(restarted, o1, o2) == [("export.csv", 20000, 20010)]
    remembered = restarted._ledger.get(str(src / "export.csv")) if restarted._ledger else None
    assert remembered is not None and remembered.length == 20010
    assert remembered.edge_len == (20010 if check == "exact" else 4096)
    middle = rows[:8000] + rows[8000:12000].replace(b"row", b"ROW") + rows[12000:]
    write_inputs(src, {"export.csv": middle + b"row 02000\n"}, T0 + 2 * 10**9)
    o3 = restarted.latestOffset(o2, ReadAllAvailable())
    expected = [("export.csv", 0, 20010)] if check == "exact" else []
    assert ranges(restarted, o2, o3) == expected


def _lines(r: HdfsScanStreamReader, parts: Sequence[Any]) -> list[str]:
    """What the tasks of ``parts`` read."""
    return [v for p in parts for b in r.read(p) for v in b.column(0).to_pylist()]


@pytest.mark.parametrize("rotation", ["rename", "copytruncate", "gone"])
def test_a_task_reads_a_range_where_a_rotation_moved_it_since_the_plan(
    tmp_path: Path, rotation: str, caplog: pytest.LogCaptureFixture
) -> None:
    """A live run: the log is rotated between the plan and the task's read, and the new file
    under the name is already longer than the planned range (so no read comes up short).
    The task checks the range's file before its first record and reads the planned bytes
    from the rotated copy: never the new file's bytes at the old offsets. Bytes no file
    holds any more are skipped with a WARNING, refused under strict_mode."""
    src = tmp_path / "in"
    old = b"".join(b"old %05d\n" % i for i in range(1000))
    write_inputs(src, {"svc.log": old}, T0)
    r = reader(src)
    start = r.latestOffset(r.initialOffset(), ReadMaxBytes(4000))
    end = r.latestOffset(start, ReadMaxBytes(4000))
    parts = r.partitions(start, end)  # planned by this reader: not a replay
    if rotation == "rename":
        os.replace(src / "svc.log", src / "svc.log.1")
    elif rotation == "copytruncate":
        (src / "svc.log.1").write_bytes(old)
    (src / "svc.log").write_bytes(b"".join(b"NEW %05d\n" % i for i in range(2000)))
    with caplog.at_level(logging.INFO, logger="operators.spark.source"):
        got = _lines(r, parts)
    if rotation == "gone":
        assert got == []
        assert "no longer holds the 8000 bytes planned" in caplog.text
        strict = reader(src, strict_mode="true")
        strict_parts = [ScanPartition(p.ranges) for p in parts if isinstance(p, ScanPartition)]
        with pytest.raises(FileNotFoundError, match=r"svc\.log no longer holds"):
            _lines(strict, strict_parts)
        return
    assert got == [f"old {i:05d}" for i in range(400, 800)]
    assert "rotated since this batch was planned" in caplog.text and "svc.log.1" in caplog.text


def test_a_task_checks_a_small_file_in_the_read_it_makes_anyway(tmp_path: Path) -> None:
    """The check costs a small file no read more: its first chunk holds the head and the
    edge."""
    src = tmp_path / "in"
    write_inputs(src, {"a.csv": b"x,1\ny,2\n"}, T0)
    r = reader(src)
    o0 = r.initialOffset()
    o1 = r.latestOffset(o0, ReadAllAvailable())
    parts = r.partitions(o0, o1)
    calls: list[tuple[int, int]] = []
    fs = r.fs
    real = fs.read

    def counted(path: str, offset: int = 0, length: int = -1) -> bytes:
        calls.append((offset, length))
        return real(path, offset, length)

    with mock.patch.object(fs, "read", counted):
        assert _lines(r, parts) == ["x,1", "y,2"]
    assert len(calls) == 1


def test_the_planning_process_of_a_query_loads_only_what_planning_needs(tmp_path: Path) -> None:
    """Spark starts a new Python process for every query to plan the source's batches: it
    unpickles the data source and imports its modules, which every query waits for. The
    operators' settings models (pydantic) and the in-process operators stay out of it."""
    import subprocess
    import sys

    from pyspark import cloudpickle

    from operators.spark.source import HdfsScanDataSource

    source = HdfsScanDataSource(
        {"directory": str(tmp_path / "in"), "plan_dir": str(tmp_path / "plans")}
    )
    source.schema()  # as Spark's load() does, in another process: the options parsed there
    pickled = tmp_path / "source.pickle"
    pickled.write_bytes(cloudpickle.dumps(source))
    heavy = (
        "pydantic",
        "region.settings",
        "operators.scan.operator",
        "operators.source.operator",
        "operators.sink.operator",
    )
    program = (
        "import pickle, sys\n"
        f"source = pickle.loads(open({str(pickled)!r}, 'rb').read())\n"
        "reader = source.streamReader(None)\n"
        "reader.latestOffset(reader.initialOffset(), reader.getDefaultReadLimit())\n"
        f"print(sorted(m for m in sys.modules if m.split('.')[0] == 'pydantic' or m in {heavy!r}))"
    )
    done = subprocess.run(
        [sys.executable, "-c", program], capture_output=True, text=True, check=True
    )
    assert done.stdout.strip() == "[]", done.stdout + done.stderr
