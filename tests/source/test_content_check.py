"""``[scan] content_check``: what a file listed again is compared with. ``windows`` (the
default) compares the first 4 KiB and the 4 KiB before where the read stopped; ``exact`` every
byte read (a CRC-32 run on as the bytes are read, kept across cuts and restarts)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from operators.fs.local import LocalFileSystem
from operators.scan import HDFS2DirectoryScan, ScanSettings
from operators.source import HDFS2FileSource, SourceSettings
from operators.testing.harness import ManualClock

NOW = 2_000_000_000.0


def _source(root: Path, clock: ManualClock, check: str) -> HDFS2FileSource:
    fs = LocalFileSystem()
    settings = ScanSettings(
        directory=str(root), sleep_time=0, init_delay=0, hold_partial_line=0, content_check=check
    )
    return HDFS2FileSource(
        SourceSettings(init_delay=0, read_chunk=1000),
        fs,
        files=HDFS2DirectoryScan(settings, fs, clock=clock),
        clock=clock,
    )


def _read(source: HDFS2FileSource, most: int = 10**9) -> list[str]:
    out: list[str] = []
    while len(out) < most and (batch := source.next_batch(min(100, most - len(out)))) is not None:
        out += [r if isinstance(r, str) else bytes(r).decode() for r in batch.records]
    return out


def _land(path: Path, data: bytes, mtime: float) -> None:
    path.write_bytes(data)
    os.utime(path, (mtime, mtime))


ROWS = b"".join(b"row %05d\n" % i for i in range(2000))  # 20,000 bytes


@pytest.mark.parametrize("check", ["windows", "exact"])
def test_an_export_rewritten_in_its_middle_is_read_whole_only_by_the_exact_check(
    tmp_path: Path, check: str
) -> None:
    """Same length, same first and last 4 KiB, other rows between: the windows take it for
    the file read before (the documented way to fool them: nothing read); the exact check
    reads it whole, as new."""
    clock = ManualClock(NOW)
    export = tmp_path / "export.csv"
    _land(export, ROWS, NOW - 100)
    source = _source(tmp_path, clock, check)
    assert len(_read(source)) == 2000
    middle = ROWS[:8000] + ROWS[8000:12000].replace(b"row", b"ROW") + ROWS[12000:]
    _land(export, middle, NOW - 50)
    again = _read(source)
    if check == "exact":
        assert again == middle.decode().splitlines()
    else:
        assert again == []


def test_the_exact_check_holds_across_a_restart_mid_file_a_rotation_and_an_append(
    tmp_path: Path,
) -> None:
    """A cut in the middle of a file keeps the CRC of every byte before its offset; after a
    restart the read runs it on, the file rotated by rename while the job was down continues
    under its new name, and an append to it is what is read next."""
    clock = ManualClock(NOW)
    log = tmp_path / "svc.log"
    _land(log, ROWS, NOW - 100)
    first = _source(tmp_path, clock, "exact")
    head = _read(first, most=700)
    state = first.checkpoint(1)
    offset = state["offset"]
    assert 0 < offset < len(ROWS) and state["opened"][5:7] == [offset, state["opened"][6]]

    log.rename(tmp_path / "svc.log.1")  # while the job is down
    second = _source(tmp_path, clock, "exact")
    second.reset(state)
    rest = _read(second)
    assert head + rest == ROWS.decode().splitlines()
    with (tmp_path / "svc.log.1").open("ab") as f:
        f.write(b"row 02000\n")
    os.utime(tmp_path / "svc.log.1", (NOW - 10, NOW - 10))
    assert _read(second) == ["row 02000"]
    ledger = second._ledger
    assert ledger is not None
    read = ledger.get(str(tmp_path / "svc.log.1"))
    assert read is not None and read.edge_len == read.length == len(ROWS) + 10
