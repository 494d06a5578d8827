"""Fixtures of the operator tests (scan, source, sink, copy): a landing directory on any backend,
a sink and its runs. Registered for every test folder by tests/conftest.py."""

from __future__ import annotations

import itertools
import json
import os
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from hypothesis import strategies as st

from operators.fs import LocalFileSystem
from operators.sink import HDFS2FileSink, SinkSettings
from operators.testing import ManualClock
from region.fs import FileSystem
from region.state import Batch


@pytest.fixture
def clock() -> ManualClock:
    """Seconds since the epoch, moved by the test (``clock.advance``); after the mtimes tests
    give their files (a scan keeps no key ahead of its clock)."""
    return ManualClock(2_000_000_000.0)


@dataclass
class Landing:
    """A landing directory on a filesystem backend, with files placed at chosen mtimes
    (``set_mtime(path, mtime_ns)``: ``os.utime`` locally, SETTIMES on a real cluster; the
    WebHDFS stand-in and real clusters keep milliseconds)."""

    fs: FileSystem
    root: str
    set_mtime: Callable[[str, int], None]

    @property
    def dir(self) -> str:
        return self.root.rstrip("/") + "/in"

    def path(self, name: str) -> str:
        return self.dir + "/" + name

    def put(self, name: str, data: bytes | str = b"", mtime_ns: int | None = None) -> str:
        path = self.path(name)
        writer = self.fs.create(path, overwrite=True)
        writer.write(data.encode() if isinstance(data, str) else data)
        writer.close()
        if mtime_ns is not None:
            self.set_mtime(path, mtime_ns)
        return path

    def remove(self, name: str) -> None:
        self.fs.delete(self.path(name))


@pytest.fixture
def landing(tmp_path: Path) -> Landing:
    """An empty landing directory ``<root>/in`` on the local disk."""
    fs = LocalFileSystem()
    land = Landing(fs, str(tmp_path), lambda p, ns: os.utime(p, ns=(ns, ns)))
    fs.mkdirs(land.dir)
    return land


@pytest.fixture
def any_landing(any_fs: Any) -> Landing:
    """``landing`` on each backend of ``any_fs``."""
    land = Landing(any_fs.fs, any_fs.root, any_fs.set_mtime)
    land.fs.mkdirs(land.dir)
    return land


@dataclass
class SinkEnv:
    """An output directory ``<root>/out`` for sink tests on a filesystem backend."""

    fs: FileSystem
    root: str

    @property
    def out(self) -> str:
        return self.root.rstrip("/") + "/out"

    def path(self, name: str) -> str:
        return self.out + "/" + name

    def names(self, directory: str | None = None) -> list[str]:
        """Every file name in the directory (hidden ones included), sorted."""
        try:
            entries = self.fs.list_dir(directory or self.out)
        except FileNotFoundError:
            return []
        return sorted(s.name for s in entries if not s.is_dir)

    def published(self, directory: str | None = None) -> dict[str, bytes]:
        """What a plain directory reader sees: the non-hidden files and their content."""
        d = directory or self.out
        return {
            name: self.fs.read(d + "/" + name)
            for name in self.names(d)
            if not name.startswith((".", "_"))
        }

    def hidden(self, directory: str | None = None) -> list[str]:
        return [n for n in self.names(directory) if n.startswith(".")]


@pytest.fixture
def sink_env(any_fs: Any) -> SinkEnv:
    """A sink output directory on each filesystem backend (``any_fs``)."""
    return SinkEnv(any_fs.fs, any_fs.root)


@pytest.fixture
def sink_local(tmp_path: Path) -> SinkEnv:
    """A sink output directory on the local disk (for many-example property tests)."""
    return SinkEnv(LocalFileSystem(), str(tmp_path))


class SinkRun:
    """Drives one sink the way the region controller does, with crashes where a test wants them.

    ``cut()`` drains, checkpoints, stores the state (as JSON, like the checkpoint store) and
    completes the cut. ``crash()`` abandons the sink object and restores a NEW one from the last
    stored state (or the initial state), as a restarted process would.
    """

    def __init__(
        self,
        env: SinkEnv,
        settings: SinkSettings | dict[str, Any],
        *,
        name: str = "sink",
        clock: ManualClock | None = None,
        fs: FileSystem | None = None,
    ) -> None:
        self.env = env
        self.fs = fs if fs is not None else env.fs
        self.settings = settings if isinstance(settings, SinkSettings) else SinkSettings(**settings)
        self.name = name
        self.clock = clock if clock is not None else ManualClock(1_000_000.0)
        self.notified: list[tuple[str, int]] = []
        self.state: dict[str, Any] | None = None
        self.cut_id = 0
        self.sink = self.new_sink()
        self.sink.reset_to_initial_state()

    def new_sink(self) -> HDFS2FileSink:
        return HDFS2FileSink(
            self.settings,
            self.fs,
            name=self.name,
            on_published=lambda name, size: self.notified.append((name, size)),
            clock=self.clock,
        )

    def write(self, records: Iterable[Any], punctuation: bool = False) -> None:
        self.sink.write(Batch(list(records), punctuation))

    def cut(self, *, store: bool = True, complete: bool = True) -> dict[str, Any]:
        """``store=False``: the region checkpoint was never written (a crash during the cut);
        ``complete=False``: it was written but ``on_cut_completed`` did not run."""
        self.cut_id += 1
        self.sink.drain()
        state: dict[str, Any] = json.loads(json.dumps(self.sink.checkpoint(self.cut_id)))
        if store:
            self.state = state
            if complete:
                self.sink.on_cut_completed(self.cut_id)
        return state

    def crash(self) -> None:
        self.sink.abandon()
        self.sink = self.new_sink()
        if self.state is None:
            self.sink.reset_to_initial_state()
        else:
            self.sink.reset(self.state)

    def stop(self) -> None:
        """Graceful stop: the final punctuation, a final cut, close."""
        self.sink.finish()
        self.cut()
        self.sink.close()


def filenum_order(name: str) -> tuple[int, str]:
    """Sort key of ``part-<n>...`` names by their number."""
    match = re.search(r"(\d+)", name)
    return (int(match.group(1)) if match else -1, name)


def published_bytes(env: SinkEnv, directory: str | None = None) -> bytes:
    """The published files of a directory concatenated in file-number order."""
    files = env.published(directory)
    return b"".join(files[n] for n in sorted(files, key=filenum_order))


#: The batch sizes of a sink run (they sum to 40).
BATCHES = [3, 5, 1, 7, 4, 6, 2, 5, 7]


def write_without_crash(run: SinkRun, recs: list[Any]) -> None:
    """``recs`` in :data:`BATCHES`, a cut after each, then a graceful stop."""
    pos = 0
    for size in BATCHES:
        run.write(recs[pos : pos + size])
        pos += size
        run.cut()
    run.stop()


def write_with_crash(
    run: SinkRun, recs: list[Any], cut_after: int, crash_after: int, how: str
) -> None:
    """``recs`` in :data:`BATCHES`: a cut after every batch up to ``cut_after`` (that one's
    ``how``: ``unstored``, the region checkpoint never written; ``unpublished``, written but
    the publish renames never ran), a crash after batch ``crash_after``, then the records
    after the last stored cut replayed in other batch sizes and a graceful stop."""
    pos = cut_pos = 0
    for index, size in enumerate(BATCHES):
        run.write(recs[pos : pos + size])
        pos += size
        if index < cut_after:
            run.cut()
            cut_pos = pos
        elif index == cut_after:
            if how == "unstored":
                run.cut(store=False)
            else:
                run.cut(complete=False)
                cut_pos = pos
        if index == crash_after:
            run.crash()
            pos = cut_pos
            break
    for size in itertools.chain([1], itertools.repeat(6)):
        if pos >= len(recs):
            break
        run.write(recs[pos : pos + size])
        pos += size
    run.stop()


#: Steps of a random sink run (hypothesis): writes of 1-9 records, cuts, cuts whose
#: checkpoint is never stored, cuts stored but not completed, crashes.
STEPS = st.one_of(
    st.tuples(st.just("write"), st.integers(1, 9)),
    st.just(("cut",)),
    st.just(("cut-unstored",)),
    st.just(("cut-unpublished",)),
    st.just(("crash",)),
)


def write_steps(run: SinkRun, recs: list[Any], steps: list[tuple[Any, ...]]) -> None:
    """``recs`` written through ``steps`` (:data:`STEPS`), the source replaying from the last
    stored cut after each crash, then the rest and a graceful stop."""
    pos = cut_pos = 0
    for step in steps:
        if step[0] == "write":
            run.write(recs[pos : pos + step[1]])
            pos = min(pos + step[1], len(recs))
        elif step[0] == "cut":
            run.cut()
            cut_pos = pos
        elif step[0] == "cut-unstored":
            run.cut(store=False)
        elif step[0] == "cut-unpublished":
            run.cut(complete=False)
            cut_pos = pos
        else:
            run.crash()
            pos = cut_pos
    run.write(recs[pos:])
    run.stop()
