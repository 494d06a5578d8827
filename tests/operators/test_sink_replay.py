"""Snapshot -> rebuild -> resume: a crashed sink, restored into a NEW object from its checkpoint
and fed the replayed records, writes exactly what a sink without the crash writes."""

from __future__ import annotations

import itertools
import os
import shutil
import tempfile
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from operators.fs import LocalFileSystem

from .conftest import FakeClock, SinkEnv, SinkRun, published_bytes

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
BATCHES = [3, 5, 1, 7, 4, 6, 2, 5, 7]  # sums to N


def run_without_crash(env: SinkEnv, config: dict[str, Any], fmt: str) -> dict[str, bytes]:
    recs = records(fmt)
    run = SinkRun(env, config)
    pos = 0
    for size in BATCHES:
        run.write(recs[pos : pos + size])
        pos += size
        run.cut()
    run.stop()
    return env.published()


def run_with_crash(
    env: SinkEnv, config: dict[str, Any], fmt: str, cut_after: int, crash_after: int, how: str
) -> dict[str, bytes]:
    """Cuts after every batch up to ``cut_after``; crashes after batch ``crash_after``."""
    recs = records(fmt)
    run = SinkRun(env, config)
    pos = cut_pos = 0
    for index, size in enumerate(BATCHES):
        run.write(recs[pos : pos + size])
        pos += size
        if index < cut_after:
            run.cut()
            cut_pos = pos
        elif index == cut_after:
            if how == "unstored":  # the region checkpoint was never written
                run.cut(store=False)
            else:  # written, but the publish renames never ran
                run.cut(complete=False)
                cut_pos = pos
        if index == crash_after:
            run.crash()
            pos = cut_pos
            break
    for size in itertools.chain([1], itertools.repeat(6)):  # replay in other batch sizes
        if pos >= N:
            break
        run.write(recs[pos : pos + size])
        pos += size
    run.stop()
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
    clock = FakeClock()
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


# -- property: random writes, cuts and crashes ------------------------------------------------

# One step: write a batch (with or without punctuation), then maybe an event.
EVENTS = ["none", "none", "cut", "cut", "crash", "cut_unstored", "cut_unpublished", "tick"]
STEPS = st.tuples(st.integers(1, 9), st.booleans(), st.sampled_from(EVENTS))
# (format, limit, publish, close_on_punct, truncate): each cell gets its own random steps.
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


def config(cell: tuple[str, dict[str, Any], str, bool, bool]) -> dict[str, Any]:
    fmt, limit, publish, close_on_punct, truncate = cell
    return {
        "format": fmt,
        "limit": limit,
        "publish": publish,
        "close_on_punct": close_on_punct,
        "truncate": truncate,
    }


@pytest.fixture
def ram_dir() -> Iterator[str]:
    """A directory on tmpfs when there is one: fsync is free there, the code paths are the same."""
    base = "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) else None
    path = tempfile.mkdtemp(prefix="sink-replay-", dir=base)
    yield path
    shutil.rmtree(path, ignore_errors=True)


_example = itertools.count()


class NoTruncate:
    """The real local filesystem, as a backend without truncate."""

    supports_truncate = False

    def __init__(self, inner: Any) -> None:
        self._inner = inner

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


def replay_once(
    env: SinkEnv, cfg: dict[str, Any], steps: list[tuple[int, bool, str]], delivery: str
) -> tuple[list[Any], bytes, SinkRun]:
    fmt = cfg["format"]
    recs = records(fmt, 200)
    full = encoded(fmt, recs)
    publish = cfg["publish"] if cfg["truncate"] or delivery == "at_least_once" else "atomic"
    config = {
        "file": env.out + "/part-%FILENUM",
        "format": fmt,
        "publish": publish,
        "delivery": delivery,
        "close_on_punct": cfg["close_on_punct"],
        **cfg["limit"],
    }
    fs = env.fs if cfg["truncate"] else NoTruncate(env.fs)
    run = SinkRun(env, config, fs=fs)
    pos = cut_pos = 0
    for size, punct, event in steps:
        if pos < len(recs):
            run.write(recs[pos : pos + size], punctuation=punct)
            pos = min(pos + size, len(recs))
        if event == "cut":
            run.cut()
            cut_pos = pos
        elif event == "cut_unstored":  # crash before the region checkpoint was written
            run.cut(store=False)
        elif event == "cut_unpublished":  # crash after it was written, before any rename
            run.cut(complete=False)
            cut_pos = pos
        elif event == "tick":
            run.clock.advance(6)
            run.sink.on_tick(run.clock.now)
        if event in ("crash", "cut_unstored", "cut_unpublished"):
            run.crash()
            pos = cut_pos
        if delivery == "exactly_once":
            # A plain reader only ever sees a prefix of the input, never a duplicate.
            assert full.startswith(published_bytes(env))
    run.write(recs[pos:])
    run.stop()
    return recs, full, run


PROPERTY = settings(suppress_health_check=[HealthCheck.function_scoped_fixture])


@pytest.mark.parametrize("cell", EXACTLY_ONCE, ids=str)
@PROPERTY
@given(steps=st.lists(STEPS, min_size=2, max_size=20))
def test_exactly_once_under_random_cuts_and_crashes(
    ram_dir: str, cell: tuple[Any, ...], steps: list[tuple[int, bool, str]]
) -> None:
    env = SinkEnv(LocalFileSystem(), f"{ram_dir}/ex{next(_example)}")
    _, full, run = replay_once(env, config(cell), steps, "exactly_once")
    assert published_bytes(env) == full
    assert env.hidden() == []
    assert {n for n, _ in run.notified} == {env.path(n) for n in env.published()}


@pytest.mark.parametrize("cell", AT_LEAST_ONCE, ids=str)
@PROPERTY
@given(steps=st.lists(STEPS, min_size=2, max_size=20))
def test_at_least_once_loses_nothing_under_random_cuts_and_crashes(
    ram_dir: str, cell: tuple[Any, ...], steps: list[tuple[int, bool, str]]
) -> None:
    env = SinkEnv(LocalFileSystem(), f"{ram_dir}/al{next(_example)}")
    recs, _, _ = replay_once(env, config(cell), steps, "at_least_once")
    out = published_bytes(env).decode().splitlines()
    assert set(out) == set(recs)
    assert env.hidden() == []
