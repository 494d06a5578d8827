"""Property tests: whatever the cut and crash schedule, replaying from the last cut yields every
input record exactly once (scan -> source, and the source alone)."""

from __future__ import annotations

import itertools
import json
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from operators.fs import LocalFileSystem
from operators.scan import HDFS2DirectoryScan, ScanSettings
from operators.source import HDFS2FileSource, SourceSettings
from tests.operators.conftest import FakeClock, Landing

S = 1_000_000_000
T0 = 1_700_000_000 * S
WINDOW_S = 3


@contextmanager
def fresh_landing() -> Iterator[Landing]:
    with tempfile.TemporaryDirectory() as tmp:
        fs = LocalFileSystem()
        land = Landing(fs, tmp, lambda p: p)
        fs.mkdirs(land.dir)
        yield land


class Replay:
    """Runs a pipeline under a schedule: records after the last cut are lost at a crash, and a
    new pipeline is built from the last cut's state (through JSON, as after a restart)."""

    def __init__(self, build: Any) -> None:
        self.build = build
        self.committed: list[Any] = []
        self.pending: list[Any] = []
        self.state: dict[str, Any] | None = None
        self.cuts = 0
        self.op = self._restart()

    def _restart(self) -> Any:
        op = self.build()
        if self.state is None:
            op.reset_to_initial_state()
        else:
            op.reset(json.loads(json.dumps(self.state)))
        return op

    def run(self, max_records: int, batches: int) -> bool:
        for _ in range(batches):
            batch = self.op.next_batch(max_records)
            if batch is None:
                return False
            assert len(batch.records) <= max_records
            self.pending.extend(batch.records)
        return True

    def cut(self) -> None:
        self.cuts += 1
        self.op.drain()
        self.state = self.op.checkpoint(self.cuts)
        self.committed += self.pending
        self.pending = []

    def crash(self) -> None:
        self.pending = []
        self.op = self._restart()


# -- scan -> source with files arriving -------------------------------------------------------

arrival = st.tuples(
    st.just("arrive"),
    st.sampled_from("abc"),  # name prefix: name order differs from arrival order
    st.integers(-WINDOW_S, 2),  # mtime relative to the newest file so far: ties and late files
    st.integers(0, 3),  # lines
    st.booleans(),  # written as X._COPYING_ first, renamed by a later "copied" step
    st.booleans(),  # CRLF
)
step = st.one_of(
    arrival,
    st.tuples(st.just("copied")),
    st.tuples(st.just("run"), st.integers(1, 4), st.integers(1, 3)),
    st.tuples(st.just("cut")),
    st.tuples(st.just("crash")),
    st.tuples(st.just("tick")),
)


def finish_copy(land: Landing, name: str, mtime: int, newest: int, late_window: bool) -> int:
    """Rename X._COPYING_ to X. The rename keeps the mtime of the last write: within the window
    that is older than files emitted meanwhile; without a window, a newer one (or it is lost)."""
    land.fs.rename(land.path(name + "._COPYING_"), land.path(name))
    mtime = max(mtime, newest - WINDOW_S * S) if late_window else newest + S
    land.set_mtime(land.path(name), mtime)
    return max(newest, mtime)


scenario = {
    "steps": st.lists(step, max_size=40),
    "late_window": st.booleans(),
    "read_chunk": st.sampled_from([1, 3, 8, 1 << 20]),
}


@given(**scenario)
def test_scan_to_source_replays_every_record_exactly_once(
    steps: list[tuple[Any, ...]], late_window: bool, read_chunk: int
) -> None:
    with fresh_landing() as land:
        check_scan_to_source(land, steps, late_window, read_chunk)


_examples = itertools.count()


@settings(max_examples=8, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(**scenario)
def test_scan_to_source_replay_on_every_backend(
    any_landing: Landing, steps: list[tuple[Any, ...]], late_window: bool, read_chunk: int
) -> None:
    land = Landing(any_landing.fs, f"{any_landing.root}/{next(_examples)}", any_landing.local_path)
    land.fs.mkdirs(land.dir)
    check_scan_to_source(land, steps, late_window, read_chunk)


def check_scan_to_source(
    land: Landing, steps: list[tuple[Any, ...]], late_window: bool, read_chunk: int
) -> None:
    clock = FakeClock()
    scan_settings = ScanSettings(
        directory=land.dir, sleep_time=1, late_window=WINDOW_S if late_window else 0
    )
    source_settings = SourceSettings(read_chunk=read_chunk)

    def build() -> HDFS2FileSource:
        scan = HDFS2DirectoryScan(scan_settings, land.fs, clock=clock)
        return HDFS2FileSource(source_settings, land.fs, files=scan)

    replay = Replay(build)
    newest = T0
    expected: dict[str, list[str]] = {}
    copying: list[tuple[str, int]] = []
    for n, action in enumerate(steps):
        kind = action[0]
        if kind == "arrive":
            _, prefix, delta, lines, copy, crlf = action
            mtime = newest + delta * S
            if late_window:
                name = f"{prefix}{n:02d}"  # a tie may sort before files already emitted
            else:
                # Without a window only files sorting after every earlier one are promised:
                # ties keep arrival order by name, older mtimes are never seen.
                name = f"{n:02d}{prefix}"
                mtime = max(mtime, newest)
            newest = max(newest, mtime)
            records = [f"{name}:{i}" for i in range(lines)]
            data = "".join(r + ("\r\n" if crlf else "\n") for r in records)
            if copy:
                land.put(name + "._COPYING_", data, mtime)
                copying.append((name, mtime))
            else:
                land.put(name, data, mtime)
            expected[name] = records
        elif kind == "copied" and copying:
            newest = finish_copy(land, *copying.pop(0), newest, late_window)
        elif kind == "run":
            replay.run(action[1], action[2])
        elif kind == "cut":
            replay.cut()
        elif kind == "crash":
            replay.crash()
        else:
            clock.advance(1)
    for name, mtime in copying:
        newest = finish_copy(land, name, mtime, newest, late_window)
    for _ in range(2):  # two listings: everything present now is seen
        clock.advance(1)
        while replay.run(5, 10):
            pass
    replay.cut()

    got = replay.committed
    want = sorted(r for records in expected.values() for r in records)
    assert sorted(got) == want, "every record exactly once"
    # Each file's records are contiguous and in order.
    files = [r.split(":")[0] for r in got]
    order = [f for i, f in enumerate(files) if i == 0 or files[i - 1] != f]
    assert len(order) == len(set(order))
    for name in order:
        assert [r for r in got if r.startswith(name + ":")] == expected[name]


# -- the source alone, line and block mode ----------------------------------------------------

line_text = st.text(st.characters(blacklist_characters="\r\n", max_codepoint=0x2FF), max_size=6)


@given(
    lines=st.lists(st.tuples(line_text, st.sampled_from(["\n", "\r\n"])), max_size=12),
    unterminated=line_text,
    binary=st.booleans(),
    block_size=st.integers(1, 5),
    read_chunk=st.integers(1, 9),
    schedule=st.lists(st.one_of(st.integers(1, 4), st.sampled_from(["cut", "crash"])), max_size=30),
)
def test_file_source_replays_every_record_exactly_once(
    lines: list[tuple[str, str]],
    unterminated: str,
    binary: bool,
    block_size: int,
    read_chunk: int,
    schedule: list[int | str],
) -> None:
    data = ("".join(text + end for text, end in lines) + unterminated).encode()
    if binary:
        want: list[Any] = [data[i : i + block_size] for i in range(0, len(data), block_size)]
    else:
        want = [text for text, _ in lines] + ([unterminated] if unterminated else [])
    with fresh_landing() as land:
        path = land.put("f", data)
        settings = SourceSettings(
            file=path,
            format="binary" if binary else "line",
            block_size=block_size,
            read_chunk=read_chunk,
        )
        replay = Replay(lambda: HDFS2FileSource(settings, land.fs))
        for item in schedule:
            if item == "cut":
                replay.cut()
            elif item == "crash":
                replay.crash()
            else:
                replay.run(int(item), 1)
        while replay.run(3, 1):
            pass
        replay.cut()
        assert replay.op.exhausted()
        assert replay.state is not None and replay.state["offset"] == len(data)
    assert replay.committed == want
