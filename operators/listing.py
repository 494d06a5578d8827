"""Which files of a directory are ready to read, in the strict total order (mtime_ns, name).

Shared by the directory scan operator and the Spark source so both see the same order.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from region.fs import FileStatus, FileSystem

__all__ = ["ScanKey", "is_in_flight", "list_ready"]

#: Suffix the HDFS shell gives a file while ``hdfs dfs -put`` copies it.
COPYING_SUFFIX = "._COPYING_"


@dataclass(frozen=True, slots=True, order=True)
class ScanKey:
    """A file's place in the scan order. Names break mtime ties, so the order is total."""

    mtime_ns: int
    name: str

    @classmethod
    def of(cls, status: FileStatus) -> ScanKey:
        return cls(status.mtime_ns, status.name)

    def to_dict(self) -> dict[str, Any]:
        return {"mtime_ns": self.mtime_ns, "name": self.name}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ScanKey:
        return cls(int(data["mtime_ns"]), str(data["name"]))


def is_in_flight(name: str) -> bool:
    """Hidden (``.x``, ``_x``) and ``._COPYING_`` names are files still being written."""
    return name.startswith((".", "_")) or name.endswith(COPYING_SUFFIX)


def list_ready(
    fs: FileSystem,
    directory: str,
    *,
    pattern: re.Pattern[str] | None = None,
    min_file_age_ns: int = 0,
    now_ns: int | None = None,
) -> list[FileStatus]:
    """Regular files of ``directory`` that are complete, sorted by (mtime_ns, name).

    A file younger than ``min_file_age_ns`` (relative to ``now_ns``) is left for a later scan;
    ``pattern`` must match the whole base name.
    """
    ready = []
    for status in fs.list_dir(directory):
        name = status.name
        if status.is_dir or is_in_flight(name):
            continue
        if pattern is not None and pattern.fullmatch(name) is None:
            continue
        if min_file_age_ns and now_ns is not None and now_ns - status.mtime_ns < min_file_age_ns:
            continue
        ready.append(status)
    ready.sort(key=lambda s: (s.mtime_ns, s.name))
    return ready
