"""The harness catches what it promises to catch: a sink that duplicates after a crash, a
transform that is not deterministic; and reports it in words that replay."""

from __future__ import annotations

import functools
import itertools
import random
from typing import Any

import pytest
from hypothesis import HealthCheck, Phase, given, settings

from operators.sink import HDFS2FileSink
from operators.testing import PipelineReplay, Schedule

SINK = {"file": "part-%FILENUM.txt", "tuples_per_file": 4}


class AppendingSink(HDFS2FileSink):
    """Broken on purpose: its reset keeps what was written after the cut and appends the replay
    behind it, in exactly_once mode too (the IBM at-least-once behaviour)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._recovery.restore = lambda cur: cur  # type: ignore[method-assign]  # no cut back


CAUGHT = "write a.txt (4 lines, mtime t0); run 1 batch; cut; run 1 batch; crash"


def test_a_sink_that_appends_after_a_crash_is_caught_with_a_readable_report() -> None:
    replay = PipelineReplay(sink=SINK, sink_class=AppendingSink)
    with pytest.raises(AssertionError) as info:
        replay.check(CAUGHT)
    report = str(info.value)
    assert report.startswith(
        "Pipeline replay failed: the published output breaks exactly_once: every input record, "
        "transformed, exactly once:\n"
        "    duplicated (2 extra): 'a.txt:2' x2 (record 2 of a.txt); 'a.txt:3' x2 (record 3 of "
        "a.txt)\n"
        "  published files: part-0.txt (48 bytes)\n"
    )
    assert "\n  5. crash\n" in report  # the schedule, numbered
    assert "\n  5. crash: restart from cut 1\n" in report  # what happened
    assert report.endswith(f"Replay it with:\n  replay.check({CAUGHT!r})")
    # The real sink passes the same schedule.
    PipelineReplay(sink=SINK).check(CAUGHT)


def test_the_broken_sink_is_found_and_shrunk_from_random_schedules() -> None:
    replay = PipelineReplay(sink=SINK, sink_class=AppendingSink)

    # Derandomized: the same search every run (no flaky test), still a real search and shrink.
    @settings(
        max_examples=500,
        derandomize=True,
        database=None,
        report_multiple_bugs=False,
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow],
        phases=[Phase.generate, Phase.shrink],  # no explain phase: it reruns many examples
    )
    @given(replay.schedules())
    def search(schedule: Schedule) -> None:
        replay.check(schedule)

    with pytest.raises(AssertionError) as info:
        search()
    report = str(info.value)
    assert report.startswith("Pipeline replay failed: the published output breaks exactly_once")
    # Records after the cut written twice, or a torn write left in place: both are caught.
    assert "duplicated" in report or "not a record" in report
    words = report.rsplit("replay.check(", 1)[1].rstrip(")")
    shrunk = Schedule.from_words(eval(words))
    assert len(shrunk) <= 8, shrunk  # shrunk to a handful of steps a user can follow
    with pytest.raises(AssertionError):
        replay.check(shrunk)


def test_a_counter_in_a_transform_is_named_with_the_record() -> None:
    counter = itertools.count()

    def tag(line: str) -> str:
        return f"{line}#{next(counter)}"

    replay = PipelineReplay(sink=SINK, transforms=[tag])
    with pytest.raises(AssertionError) as info:
        replay.check("write a.txt (2 lines, mtime t0); run 1 batch")
    assert (
        "Pipeline replay failed: transform test_a_counter_in_a_transform_is_named_with_the_record"
        ".<locals>.tag is not deterministic: record 'a.txt:0' became 'a.txt:0#0' and when "
        "transformed again 'a.txt:0#1'. A transform must be a function of its input alone"
    ) in str(info.value)


def test_a_random_number_in_a_transform_is_caught() -> None:
    replay = PipelineReplay(sink=SINK, transforms=[lambda line: f"{line},{random.random()}"])
    with pytest.raises(AssertionError, match=r"is not deterministic: record 'a\.txt:0' became"):
        replay.check("write a.txt (1 line, mtime t0)")


def test_a_transform_that_changes_between_processes_is_caught_on_replay() -> None:
    """Same answer twice within a process, another one after the restart: caught when the
    records after the cut are replayed."""
    processes = itertools.count()
    generation = [0]

    def make_sink(*args: Any, **kwargs: Any) -> HDFS2FileSink:
        generation[0] = next(processes)
        return HDFS2FileSink(*args, **kwargs)

    replay = PipelineReplay(
        sink=SINK, transforms=[lambda line: f"{line}@{generation[0]}"], sink_class=make_sink
    )
    with pytest.raises(AssertionError) as info:
        replay.check("write a.txt (6 lines, mtime t0); run 1 batch; cut; run 1 batch; crash")
    assert "record 'a.txt:2' became 'a.txt:2@0' and when replayed 'a.txt:2@1'" in str(info.value)


def test_dropping_records_and_skipping_late_files_is_fine() -> None:
    replay = PipelineReplay(
        sink=SINK,
        transforms=[lambda line: None if line.endswith(":1") else line.upper()],
        scan={"late_window": 0},  # IBM's strict rule: a late file is passed over, with a warning
    )
    result = replay.check(
        "write b.txt (3 lines, mtime t0+5s); run 2 batches; cut; "
        "write a.txt (2 lines, mtime t0) [late: beyond the scan's window, may be skipped]; "
        "run 1 batch, crashing before the 1st rename in the output; crash"
    )
    assert result.files == 1 and result.optional_files == 1
    assert result.crashes == 1  # renames happen in cuts only: the first fault never fired
    # a.txt sorts before b.txt, already emitted: without a late window the scan passes it over.
    assert result.log[4] == (
        "5. run 1 batch, crashing before the 1st rename in the output: 1 idle; "
        "no fault: before the 1st rename in the output was never reached"
    )


def test_files_still_being_copied_are_not_expected_and_must_not_be_read() -> None:
    replay = PipelineReplay(sink={"file": "out-%FILENUM"})
    result = replay.check(
        "start copying a.txt (3 lines); write b.txt (1 line, mtime t0); run 3 batches; cut"
    )
    assert result.files == 1 and result.published_bytes == len(b"b.txt:0\n")


def test_a_transform_giving_the_wrong_type_is_reported() -> None:
    replay = PipelineReplay(sink=SINK, transforms=[len])
    with pytest.raises(AssertionError, match=r"into 7 \(int\): a line sink writes str records"):
        replay.check("write a.txt (1 line, mtime t0)")


def test_crashes_and_failures_are_counted() -> None:
    notified: list[str] = []
    sink = functools.partial(HDFS2FileSink, on_published=lambda path, size: notified.append(path))
    replay = PipelineReplay(sink=SINK, sink_class=sink)
    result = replay.check(
        "write a.txt (5 lines, mtime t0), b.txt (4 lines, mtime t0); run 2 batches; "
        "cut, failing after the drain; run 2 batches; "
        "cut, crashing before the 1st rename in the output; run 2 batches; "
        "crash, recovery crashing before the 1st delete in the output; run 3 batches"
    )
    assert (result.crashes, result.failures) == (3, 1)
    assert "restart: crashed during the recovery before delete of " in result.log[7]
    assert result.published == ("part-0.txt", "part-1.txt", "part-2.txt")
    assert sorted({p.rsplit("/", 1)[1] for p in notified}) == list(result.published)


def test_the_fixture_checks_a_schedule(pipeline_replay: Any) -> None:
    result = pipeline_replay(
        "write a.txt (2 lines, mtime t0); run 1 batch; crash",
        sink={"file": "part-%FILENUM.txt"},
        transforms=[str.upper],
    )
    assert result.published == ("part-0.txt",) and result.crashes == 1


@settings(max_examples=10, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(schedule=PipelineReplay(sink=SINK).schedules(max_steps=6))
def test_the_fixture_works_with_given(pipeline_replay: Any, schedule: Schedule) -> None:
    pipeline_replay(schedule, sink=SINK, transforms=[str.upper])


def test_a_transform_that_raises_is_reported_with_the_record() -> None:
    def parse(line: str) -> str:
        return str(int(line.rsplit(":", 1)[1]) // (1 - int(line.endswith(":1"))))

    replay = PipelineReplay(sink=SINK, transforms=[parse])
    with pytest.raises(AssertionError) as info:
        replay.check("write a.txt (3 lines, mtime t0)")
    assert (
        "transform test_a_transform_that_raises_is_reported_with_the_record.<locals>.parse raised "
        "ZeroDivisionError: integer division or modulo by zero on record 'a.txt:1' of a.txt"
    ) in str(info.value)
