"""Snapshot -> rebuild -> resume: a crashed sink, restored into a NEW object from its checkpoint
and fed the replayed records, writes exactly what a sink without the crash writes."""

from __future__ import annotations

import functools
import posixpath
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from operators.fs import LocalFileSystem
from operators.sink import HDFS2FileSink
from operators.testing import ManualClock, PipelineReplay, Workspace
from tests.landing import (
    BATCHES,
    SinkEnv,
    SinkRun,
    published_bytes,
    write_with_crash,
    write_without_crash,
)

N = 40


def records(fmt: str, n: int = N) -> list[Any]:
    # Varying sizes so byte limits fall at different records.
    text = [f"r{i}" + "x" * (i % 5) for i in range(n)]
    return text if fmt == "line" else [t.encode() + b"|" for t in text]


def encoded(fmt: str, recs: list[Any]) -> bytes:
    return b"".join((r + "\n").encode() for r in recs) if fmt == "line" else b"".join(recs)


LIMITS: dict[str, dict[str, Any]] = {
    "none": {},
    "tuples": {"tuples_per_file": 3},
    "bytes": {"bytes_per_file": 20},
}


def run_without_crash(env: SinkEnv, config: dict[str, Any], fmt: str) -> dict[str, bytes]:
    write_without_crash(SinkRun(env, config), records(fmt))
    return env.published()


def run_with_crash(
    env: SinkEnv, config: dict[str, Any], fmt: str, cut_after: int, crash_after: int, how: str
) -> dict[str, bytes]:
    """Cuts after every batch up to ``cut_after``; crashes after batch ``crash_after``."""
    write_with_crash(SinkRun(env, config), records(fmt), cut_after, crash_after, how)
    return env.published()


@pytest.mark.parametrize("fmt", ["line", "binary"])
@pytest.mark.parametrize("limit", list(LIMITS))
def test_resume_after_crash_matches_the_run_without_crash(
    sink_env: SinkEnv, fmt: str, limit: str
) -> None:
    config = {"format": fmt, **LIMITS[limit]}
    clean = SinkEnv(sink_env.fs, sink_env.root + "/clean")
    expected = run_without_crash(clean, {**config, "file": clean.out + "/part-%FILENUM"}, fmt)
    assert published_bytes(clean) == encoded(fmt, records(fmt))
    cases = [(2, 3, "unstored"), (4, 4, "unpublished"), (0, 6, "unpublished")]
    for case, (cut_after, crash_after, how) in enumerate(cases):
        env = SinkEnv(sink_env.fs, f"{sink_env.root}/case{case}")
        got = run_with_crash(
            env, {**config, "file": env.out + "/part-%FILENUM"}, fmt, cut_after, crash_after, how
        )
        assert got == expected, (cut_after, crash_after, how)
        assert env.hidden() == []


def test_time_rolling_survives_a_crash(sink_env: SinkEnv) -> None:
    clock = ManualClock(1_000_000.0)
    recs = records("line")
    run = SinkRun(
        sink_env, {"file": sink_env.out + "/part-%FILENUM", "time_per_file": 10}, clock=clock
    )
    pos = 0
    for size in BATCHES[:4]:
        run.write(recs[pos : pos + size])
        pos += size
        clock.advance(4)
        run.sink.on_tick(clock.now)
        run.cut()
    cut_pos, opened = pos, run.sink.current_file
    run.write(recs[pos : pos + 5])
    clock.advance(20)
    run.sink.on_tick(clock.now)  # rolls a file after the cut
    run.crash()
    assert run.sink.current_file == opened  # back to the file open at the cut, same opened_at
    run.sink.on_tick(clock.now)  # ...which is old by now and rolls on the next tick
    assert run.sink.current_file is None
    run.write(recs[cut_pos:])
    run.stop()
    assert published_bytes(sink_env) == encoded("line", recs)


# -- property: random arrivals, cuts, crashes and failures (the replay toolkit) ---------------

# (format, limit, publish, close_on_punct, truncate): each cell gets its own random schedules,
# run through scan -> source -> sink with crashes anywhere (see tests/operators/
# test_pipeline_replay.py for the pipeline cells and operators.testing for the harness).
EXACTLY_ONCE = [
    ("line", {"tuples_per_file": 4}, "atomic", False, True),
    ("line", {}, "atomic", True, True),
    ("binary", {"bytes_per_file": 25}, "atomic", True, False),
    ("line", {"tuples_per_file": 4}, "atomic", False, False),
    ("line", {"time_per_file": 10}, "visible", True, True),
    ("binary", {}, "visible", False, True),
]
AT_LEAST_ONCE = [
    ("line", {"tuples_per_file": 4}, "atomic", False, False),
    ("line", {"bytes_per_file": 25}, "visible", True, False),
]


class NoTruncate:
    """The real local filesystem, as a backend without truncate (the sink rewrites a prefix)."""

    supports_truncate = False

    def __init__(self, inner: Any) -> None:
        self._inner = inner

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


LOCAL = Workspace.local()
NO_TRUNCATE = Workspace(NoTruncate(LocalFileSystem()), LOCAL.root, LOCAL.set_mtime)


def check_cell(cell: tuple[Any, ...], delivery: str, data: st.DataObject) -> None:
    fmt, limit, publish, close_on_punct, truncate = cell
    notified: list[str] = []
    replay = PipelineReplay(
        sink={
            "file": "part-%FILENUM",
            "format": fmt,
            "publish": publish,
            "delivery": delivery,
            "close_on_punct": close_on_punct,
            **limit,
        },
        source={"format": "binary", "block_size": 5} if fmt == "binary" else {},
        sink_class=functools.partial(
            HDFS2FileSink, on_published=lambda path, size: notified.append(path)
        ),
        workspace=LOCAL if truncate else NO_TRUNCATE,
    )
    # The harness checks the promise (and, for exactly_once, that no reader ever sees a
    # duplicate and no in-progress file is left behind); here: every published file is announced.
    result = replay.check(data.draw(replay.schedules(), label="schedule"))
    assert {posixpath.basename(p) for p in notified} == set(result.published)


@pytest.mark.parametrize("cell", EXACTLY_ONCE, ids=str)
@given(data=st.data())
def test_exactly_once_under_random_cuts_and_crashes(
    cell: tuple[Any, ...], data: st.DataObject
) -> None:
    check_cell(cell, "exactly_once", data)


@pytest.mark.parametrize("cell", AT_LEAST_ONCE, ids=str)
@settings(max_examples=25)
@given(data=st.data())
def test_at_least_once_loses_nothing_under_random_cuts_and_crashes(
    cell: tuple[Any, ...], data: st.DataObject
) -> None:
    check_cell(cell, "at_least_once", data)
