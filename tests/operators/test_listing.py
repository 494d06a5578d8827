from __future__ import annotations

import os
import re
from pathlib import Path

from operators.fs import LocalFileSystem
from operators.listing import ScanKey, list_ready


def _touch(path: Path, mtime_ns: int) -> None:
    path.write_text(path.name)
    os.utime(path, ns=(mtime_ns, mtime_ns))


def test_ready_files_are_ordered_by_mtime_then_name_and_skip_in_flight(tmp_path: Path) -> None:
    for name, ts in [("E", 1000), ("A", 3000), ("C", 2000), ("H", 6000), ("G", 6000), ("F", 6000)]:
        _touch(tmp_path / name, ts)
    _touch(tmp_path / ".hidden", 1)
    _touch(tmp_path / "_tmp", 1)
    _touch(tmp_path / "big.csv._COPYING_", 1)
    (tmp_path / "sub").mkdir()
    names = [s.name for s in list_ready(LocalFileSystem(), str(tmp_path))]
    assert names == ["E", "C", "A", "F", "G", "H"]


def test_pattern_is_a_full_match_and_min_age_defers_young_files(tmp_path: Path) -> None:
    _touch(tmp_path / "a.txt", 10**9)
    _touch(tmp_path / "a.txt.bak", 10**9)
    _touch(tmp_path / "young.txt", 5 * 10**9)
    ready = list_ready(
        LocalFileSystem(),
        str(tmp_path),
        pattern=re.compile(r".*\.txt"),
        min_file_age_ns=2 * 10**9,
        now_ns=6 * 10**9,
    )
    assert [s.name for s in ready] == ["a.txt"]


def test_scan_key_round_trips_and_orders_ties_by_name() -> None:
    key = ScanKey(6000, "F")
    assert ScanKey.from_dict(key.to_dict()) == key
    assert ScanKey(6000, "F") < ScanKey(6000, "G") < ScanKey(7000, "A")
