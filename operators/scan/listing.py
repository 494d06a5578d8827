"""Which files of a directory are ready to read, in the strict total order (mtime_ns, name).

Shared by the directory scan operator and the Spark source so both see the same order.
"""

from __future__ import annotations

import operator
import re
from dataclasses import dataclass
from typing import Any

from region.fs import EntryLister, FileStatus, FileSystem, ListingEntry

__all__ = [
    "ScanKey",
    "is_in_flight",
    "list_ready",
    "list_ready_keyed",
    "sort_keyed",
    "would_list",
]

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


_IN_FLIGHT_PREFIXES = (".", "_")
_mtime = operator.itemgetter(0)
_name = operator.itemgetter(1)


def is_in_flight(name: str) -> bool:
    """Hidden (``.x``, ``_x``) and ``._COPYING_`` names are files still being written."""
    return name.startswith(_IN_FLIGHT_PREFIXES) or name.endswith(COPYING_SUFFIX)


def would_list(name: str, pattern: re.Pattern[str] | None) -> bool:
    """Whether a file named ``name`` is one the scan reads (once complete and old enough)."""
    return not is_in_flight(name) and (pattern is None or pattern.fullmatch(name) is not None)


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
    entries = list_ready_keyed(
        fs, directory, pattern=pattern, min_file_age_ns=min_file_age_ns, now_ns=now_ns
    )
    return [FileStatus(path, size, mtime_ns) for mtime_ns, _, path, size, _, _ in entries]


def sort_keyed(entries: list[ListingEntry]) -> list[ListingEntry]:
    """Sort ``entries`` in place by (mtime_ns, name); returns them."""
    # Two stable sorts on one element each, by name then by mtime, give the (mtime_ns, name)
    # order faster than one sort comparing tuples: each compares values of one type only.
    entries.sort(key=_name)
    entries.sort(key=_mtime)
    return entries


def list_ready_keyed(
    fs: FileSystem,
    directory: str,
    *,
    pattern: re.Pattern[str] | None = None,
    min_file_age_ns: int = 0,
    now_ns: int | None = None,
    young: list[ListingEntry] | None = None,
    unmatched: list[str] | None = None,
    ordered: bool = True,
) -> list[ListingEntry]:
    """:func:`list_ready` as :data:`~region.fs.ListingEntry` tuples, in the same order (in the
    listing's own order with ``ordered=False``).

    Made for directories of 100 000s of files: the key of each file is built once, and a
    backend that is an :class:`~region.fs.EntryLister` lists without building a FileStatus.
    Files left out only for being younger than the minimum age are added to ``young``, the
    names of files left out only by ``pattern`` to ``unmatched``.
    A caller that needs only the new files in order (:meth:`ScanCursor.new_files
    <operators.scan.cursor.ScanCursor.new_files>`) passes ``ordered=False``: sorting every file of
    a huge directory each scan costs more than the rest of the scan's own work.
    """
    entries: list[ListingEntry]
    if isinstance(fs, EntryLister):
        entries = fs.list_entries(directory)
    else:
        entries = [
            (s.mtime_ns, s.name, s.path, s.size, s.is_dir, s.file_id)
            for s in fs.list_dir(directory)
        ]
    # Comprehensions, one condition each: these run once per file listed, and a comprehension
    # costs a fraction of a loop calling append.
    ready = [
        e
        for e in entries
        if not e[4] and not e[1].startswith(_IN_FLIGHT_PREFIXES)
        if not e[1].endswith(COPYING_SUFFIX)
    ]
    del entries
    if pattern is not None:
        match = pattern.fullmatch
        if unmatched is not None:
            unmatched += [e[1] for e in ready if match(e[1]) is None]
        ready = [e for e in ready if match(e[1]) is not None]
    if min_file_age_ns and now_ns is not None:
        # A file younger than the minimum age has an mtime after this.
        newest_ns = now_ns - min_file_age_ns
        if young is not None:
            young += [e for e in ready if e[0] > newest_ns]
        ready = [e for e in ready if e[0] <= newest_ns]
    return sort_keyed(ready) if ordered else ready
