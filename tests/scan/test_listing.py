from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

from operators.fs import LocalFileSystem
from operators.scan.listing import ScanKey, list_ready
from region.fs import EntryLister, FileStatus


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


class _ListDirOnly:
    """The local disk seen through ``list_dir`` alone, as a backend without ``list_entries``."""

    def __init__(self) -> None:
        self._fs = LocalFileSystem()

    def list_dir(self, path: str) -> list[FileStatus]:
        return self._fs.list_dir(path)


def test_backend_listing_entries_gives_the_same_ready_files_as_list_dir(tmp_path: Path) -> None:
    for i, name in enumerate(["b.txt", "a.txt", "c.txt", "z.bin", "y.txt", "a.txt.bak"]):
        _touch(tmp_path / name, 10**9 * (1 + i // 3))  # ties: three files per mtime
    _touch(tmp_path / "young.txt", 9 * 10**9)
    _touch(tmp_path / "_part.txt", 10**9)
    _touch(tmp_path / "c.txt._COPYING_", 10**9)
    (tmp_path / "dir.txt").mkdir()
    local = LocalFileSystem()
    assert isinstance(local, EntryLister)
    assert not isinstance(_ListDirOnly(), EntryLister)
    assert sorted(
        FileStatus(path, size, mtime, is_dir, file_id)
        for mtime, _, path, size, is_dir, file_id in local.list_entries(str(tmp_path))
    ) == sorted(local.list_dir(str(tmp_path)))
    cases: list[dict[str, Any]] = [
        {},
        {"pattern": re.compile(r".*\.txt")},
        {"min_file_age_ns": 2 * 10**9, "now_ns": 10 * 10**9},
    ]
    for options in cases:
        fast = list_ready(local, str(tmp_path), **options)
        generic = list_ready(_ListDirOnly(), str(tmp_path), **options)
        assert fast == generic
        assert [(s.mtime_ns, s.name) for s in fast] == sorted((s.mtime_ns, s.name) for s in fast)
    assert [s.name for s in list_ready(local, str(tmp_path))] == [
        "a.txt",
        "b.txt",
        "c.txt",
        "a.txt.bak",
        "y.txt",
        "z.bin",
        "young.txt",
    ]
