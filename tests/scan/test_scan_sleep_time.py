"""Regression: a scan with ``sleep_time=0`` returns when nothing is new instead of listing the
directory again forever (the replay harness runs scans with sleep_time 0)."""

from __future__ import annotations

from operators.scan import HDFS2DirectoryScan, ScanSettings
from operators.testing import ManualClock
from tests.landing import Landing


def test_sleep_time_zero_returns_none_when_every_file_was_emitted(
    landing: Landing, clock: ManualClock
) -> None:
    landing.put("a", b"x", mtime_ns=1)
    scan = HDFS2DirectoryScan(
        ScanSettings(directory=landing.dir, sleep_time=0), landing.fs, clock=clock
    )
    scan.reset_to_initial_state()
    first = scan.next_file()
    assert first is not None and first.name == "a"
    assert scan.next_file() is None  # listed once, nothing new: returns (the clock never moved)
    landing.put("b", b"y", mtime_ns=2)
    second = scan.next_file()
    assert second is not None and second.name == "b"
    assert scan.listings == 3
