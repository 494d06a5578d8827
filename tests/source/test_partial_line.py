"""A last line without newline (``[scan] hold_partial_line``, with ``on_modified = "continue"``,
the defaults): held back while its file is young, never split in two records; emitted whole
when its newline lands, or once the file stays unchanged for the hold; held across a restart."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from operators.fs.local import LocalFileSystem
from operators.scan import HDFS2DirectoryScan, ScanSettings
from operators.source import HDFS2FileSource, SourceSettings
from operators.testing.harness import ManualClock

NOW = 2_000_000_000.0  # the clock of the scan and the source; files stamped near it


class Reader:
    """The scan and the source of one process, on a manual clock."""

    def __init__(
        self, root: Path, clock: ManualClock, hold: float = 30.0, fs: LocalFileSystem | None = None
    ) -> None:
        fs = fs or LocalFileSystem()
        settings = ScanSettings(
            directory=str(root), sleep_time=0, init_delay=0, hold_partial_line=hold
        )
        self.source = HDFS2FileSource(
            SourceSettings(init_delay=0),
            fs,
            files=HDFS2DirectoryScan(settings, fs, clock=clock),
            clock=clock,
        )

    def read(self) -> list[str]:
        """Every record available now."""
        out: list[str] = []
        while (batch := self.source.next_batch(100)) is not None:
            out += [r if isinstance(r, str) else bytes(r).decode() for r in batch.records]
        return out


def land(path: Path, text: str, mtime: float, mode: str = "w") -> None:
    with path.open(mode) as f:
        f.write(text)
    os.utime(path, (mtime, mtime))


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(NOW)


def test_the_line_being_written_waits_for_its_newline_and_is_emitted_whole(
    tmp_path: Path, clock: ManualClock
) -> None:
    log = tmp_path / "app.log"
    land(log, "a\nb\npart", NOW - 1)
    reader = Reader(tmp_path, clock)
    assert reader.read() == ["a", "b"]
    assert reader.source.holding()
    clock.advance(5)
    assert reader.read() == []  # not due, not changed
    land(log, "ial\nc\n", NOW + 5, mode="a")
    assert reader.read() == ["partial", "c"]
    assert not reader.source.holding()


def test_a_file_unchanged_for_the_hold_has_its_last_line_emitted_as_it_is(
    tmp_path: Path, clock: ManualClock
) -> None:
    land(tmp_path / "x.log", "x\ny", NOW)
    land(tmp_path / "only.log", "no newline at all", NOW)
    reader = Reader(tmp_path, clock)
    assert reader.read() == ["x"]
    clock.advance(29)
    assert reader.read() == []
    clock.advance(2)
    assert sorted(reader.read()) == ["no newline at all", "y"]
    assert not reader.source.holding()
    clock.advance(60)
    assert reader.read() == []  # once


def test_a_held_line_survives_a_restart_and_is_emitted_once(
    tmp_path: Path, clock: ManualClock
) -> None:
    log = tmp_path / "app.log"
    land(log, "a\npar", NOW)
    first = Reader(tmp_path, clock)
    assert first.read() == ["a"]
    state: dict[str, Any] = first.source.checkpoint(1)
    assert state["held"] == [[str(log), log.stat().st_mtime_ns, 5]]
    # Restarted from the cut, the file unchanged: the line waits the hold again, then goes
    # out as it is.
    second = Reader(tmp_path, clock)
    second.source.reset(state)
    assert second.read() == []
    clock.advance(31)
    assert second.read() == ["par"]
    # Restarted from the same cut (what the second emitted was never cut), and the line
    # completed meanwhile: emitted whole, at once.
    land(log, "t\n", NOW + 40, mode="a")
    third = Reader(tmp_path, clock)
    third.source.reset(state)
    assert third.read() == ["part"]
    assert not third.source.holding()


@pytest.mark.parametrize(
    ("hold", "mtime", "held"),
    [
        pytest.param(0.0, NOW, False, id="hold 0: at once"),
        pytest.param(30.0, NOW - 3600, False, id="an old file: at once"),
        pytest.param(30.0, NOW + 3600, True, id="an mtime an hour ahead: held"),
    ],
)
def test_which_lines_are_held(
    tmp_path: Path, clock: ManualClock, hold: float, mtime: float, held: bool
) -> None:
    land(tmp_path / "f.log", "a\nb", mtime)
    reader = Reader(tmp_path, clock, hold=hold)
    assert reader.read() == (["a"] if held else ["a", "b"])
    if held:
        # A writer's clock ahead: the wait is this process's, not the mtime's.
        clock.advance(31)
        assert reader.read() == ["b"]


class MtimeAtClose(LocalFileSystem):
    """The local disk, saying what HDFS says: its mtimes move when a file is closed."""

    mtime_tracks_writes = False


def test_where_mtimes_move_only_at_close_an_old_mtime_holds_the_line_once(
    tmp_path: Path, clock: ManualClock
) -> None:
    """HDFS keeps a file's mtime while a writer holds it open for hours: an old mtime does not
    say the line is complete, so it waits the hold once, as this process sees the file."""
    land(tmp_path / "open.log", "a\nb", NOW - 3600)
    reader = Reader(tmp_path, clock, fs=MtimeAtClose())
    assert reader.read() == ["a"]
    clock.advance(31)
    assert reader.read() == ["b"]
