"""HDFS2DirectoryScan: emit each new file of a directory once, in the strict order (mtime_ns, name).

The scan resumes strictly after the checkpointed key, whatever the number of files sharing an
mtime. An optional late window also emits, once, files that appear with an mtime older than the
key (copies that keep their mtime, write-then-rename): the names emitted within the window below
the key are part of the state, so that state is bounded by the window, not by the directory.

Every effect happens inside :meth:`HDFS2DirectoryScan.next_batch` / :meth:`next_file`, which the
runtime calls only under a permit: whatever they return is covered by the next cut, and nothing
runs in the background that could emit a file across a reset.
"""

from __future__ import annotations

import bisect
import heapq
import logging
import operator
import os
import posixpath
import re
import time
from collections.abc import Callable
from typing import Any

from pydantic import AliasChoices, BaseModel, ConfigDict, Field, field_validator, model_validator

from operators.errors import BadRecordError
from operators.listing import ScanKey, list_ready_keyed
from operators.safepath import path_problem
from region.fs import FileStatus, FileSystem, ListingEntry
from region.settings import Duration
from region.state import Batch, StartOperator, State

__all__ = ["HDFS2DirectoryScan", "ScanSettings", "within_roots"]

logger = logging.getLogger(__name__)

_NS = 1_000_000_000

_mtime_and_name = operator.itemgetter(0, 1)
_path_of = operator.itemgetter(2)


def _alias(*names: str) -> Any:
    return AliasChoices(*names)


def within_roots(path: str, roots: tuple[str, ...]) -> bool:
    """Whether ``path`` is one of ``roots`` or below one (lexically, after folding ``..``)."""
    norm = posixpath.normpath(path)
    for root in roots:
        base = posixpath.normpath(root)
        if norm == base or norm.startswith(base.rstrip("/") + "/"):
            return True
    return False


class ScanSettings(BaseModel):
    """Parameters of the directory scan; IBM Streams names are accepted as aliases."""

    model_config = ConfigDict(frozen=True, extra="forbid", populate_by_name=True)

    #: Directory to watch (not recursive); ``None`` waits for a control input (set_directory).
    directory: str | None = None
    #: Regular expression that must match the whole base name.
    pattern: str | None = None
    #: Seconds between two listings of the directory once every listed file is emitted.
    sleep_time: Duration = Field(5.0, validation_alias=_alias("sleep_time", "sleepTime"))
    #: Seconds before the first listing.
    init_delay: Duration = Field(0.0, validation_alias=_alias("init_delay", "initDelay"))
    #: A missing directory is fatal (``True``) or a warning and an empty listing (``False``).
    strict_mode: bool = Field(False, validation_alias=_alias("strict_mode", "strictMode"))
    #: Files younger than this (by mtime) are still being written: left for a later listing.
    min_file_age: Duration = Field(0.0, validation_alias=_alias("min_file_age", "minFileAge"))
    #: Files appearing with an mtime at most this much older than the last emitted file are still
    #: emitted once. 0 turns it off (the state then has a constant size).
    late_window: Duration = Field(0.0, validation_alias=_alias("late_window", "lateWindow"))
    #: Directories a control input may switch to (the directory or below). ``None``: any.
    roots: tuple[str, ...] | None = None

    @field_validator("pattern")
    @classmethod
    def _pattern_compiles(cls, value: str | None) -> str | None:
        if value is not None:
            try:
                re.compile(value)
            except re.error as exc:
                msg = f"pattern {value!r} is not a valid regular expression: {exc}"
                raise ValueError(msg) from None
        return value

    @field_validator("roots")
    @classmethod
    def _roots_not_empty(cls, value: tuple[str, ...] | None) -> tuple[str, ...] | None:
        if value is not None and (not value or any(not root for root in value)):
            raise ValueError(f"roots {list(value)!r} must be a non-empty list of directories")
        return value

    @model_validator(mode="after")
    def _directory_within_roots(self) -> ScanSettings:
        roots, directory = self.roots, self.directory
        if directory is not None and roots is not None and not within_roots(directory, roots):
            msg = f"directory {directory!r} is outside the allowed roots {list(roots)!r}"
            raise ValueError(msg)
        return self


class HDFS2DirectoryScan(StartOperator):
    """Emits the full path of each new ready file of a directory, once, in (mtime_ns, name) order.

    State: ``{"directory": str | None, "key": ScanKey dict | None, "late": {name: mtime_ns}}``.
    ``key`` is the greatest file emitted; ``late`` holds the names emitted with an mtime inside
    the late window below the key (always empty without a window).
    """

    def __init__(
        self,
        settings: ScanSettings,
        fs: FileSystem,
        *,
        name: str = "scan",
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.name = name
        self.settings = settings
        self._fs = fs
        self._clock = clock
        self._pattern = re.compile(settings.pattern) if settings.pattern is not None else None
        self._window_ns = round(settings.late_window * _NS)
        self._min_age_ns = round(settings.min_file_age * _NS)
        self._not_before = clock() + settings.init_delay
        self.files_scanned = 0
        self.files_emitted = 0
        self.listings = 0
        # Checkpointed state. The key is a plain (mtime_ns, name) tuple: it is compared with
        # every listed file, and tuples compare several times faster than ScanKeys.
        self._directory = settings.directory
        self._key: tuple[int, str] | None = None
        self._late: dict[str, int] = {}
        # Derived from the state, rebuilt on reset: (mtime_ns, name) of ``_late``, oldest first.
        self._late_heap: list[tuple[int, str]] = []
        # The last listing, sorted (never state): it only saves work, the key decides what is
        # emitted.
        self._listing: list[ListingEntry] = []
        self._pos = 0
        self._next_list_at = 0.0
        self._missing_warned = False

    # -- emitting ---------------------------------------------------------------------------

    def next_batch(self, max_records: int) -> Batch | None:
        """Up to ``max_records`` full paths; every batch ends with a punctuation so that an
        operator-driven region cuts after each batch (one file per batch with ``max_records=1``,
        as IBM cuts after each file). ``None`` when no new file is ready."""
        if max_records < 1:
            raise ValueError(f"{self.name}: max_records must be >= 1, got {max_records}")
        paths: list[str] = []
        while len(paths) < max_records:
            if self._window_ns <= 0 and self._pos < len(self._listing):
                # Without a late window the listing after the position is all new: it is sorted,
                # starts after the key, and the key only moves along it.
                take = self._listing[self._pos : self._pos + max_records - len(paths)]
                paths += map(_path_of, take)
                self._pos += len(take)
                self.files_emitted += len(take)
                last = take[-1]
                self._key = (last[0], last[1])
                continue
            status = self.next_file()
            if status is None:
                break
            paths.append(status.path)
        if not paths:
            return None
        return Batch(paths, punctuation=True)

    def next_file(self) -> FileStatus | None:
        """The next file to emit, or ``None`` when none is ready now. The file counts as emitted
        (the key moves past it), so call this only where the next cut covers the result."""
        if self._directory is None or self._clock() < self._not_before:
            return None
        listed = False
        while True:
            listing = self._listing
            while self._pos < len(listing):
                mtime_ns, name, path, size, _ = listing[self._pos]
                self._pos += 1
                if self._is_new(mtime_ns, name):
                    self._emit(mtime_ns, name, path)
                    return FileStatus(path, size, mtime_ns)
            # At most one listing per call: with sleep_time=0 the clock alone never stops it.
            if listed or self._clock() < self._next_list_at:
                return None
            self._relist()
            listed = True
            if not self._listing:
                return None

    def _is_new(self, mtime_ns: int, name: str) -> bool:
        key = self._key
        if key is None or (mtime_ns, name) > key:
            return True
        return (
            self._window_ns > 0 and mtime_ns >= key[0] - self._window_ns and name not in self._late
        )

    def _emit(self, mtime_ns: int, name: str, path: str) -> None:
        key = self._key
        self.files_emitted += 1
        if key is not None and (mtime_ns, name) < key:
            logger.info(
                "%s: emitting late file %s (mtime %s ns is before the last emitted file %s)",
                self.name,
                path,
                mtime_ns,
                key[1],
            )
        else:
            self._key = (mtime_ns, name)
        if self._window_ns > 0:
            self._late[name] = mtime_ns
            heapq.heappush(self._late_heap, (mtime_ns, name))
            self._prune_late()

    def _prune_late(self) -> None:
        assert self._key is not None
        floor = self._key[0] - self._window_ns
        heap = self._late_heap
        while heap and heap[0][0] < floor:
            mtime_ns, name = heapq.heappop(heap)
            # A name re-emitted with a newer mtime has a newer heap entry: keep that one.
            if self._late.get(name) == mtime_ns:
                del self._late[name]

    def _relist(self) -> None:
        directory = self._directory
        assert directory is not None
        now = self._clock()
        self._next_list_at = now + self.settings.sleep_time
        self.listings += 1
        try:
            listing = list_ready_keyed(
                self._fs,
                directory,
                pattern=self._pattern,
                min_file_age_ns=self._min_age_ns,
                now_ns=round(now * _NS),
            )
        except FileNotFoundError:
            if self.settings.strict_mode:
                msg = f"{self.name}: directory {self._fs.display(directory)} does not exist"
                raise FileNotFoundError(msg) from None
            if not self._missing_warned:
                logger.warning(
                    "%s: directory %s does not exist; treated as empty until it appears",
                    self.name,
                    self._fs.display(directory),
                )
                self._missing_warned = True
            listing = []
        else:
            self._missing_warned = False
        self.files_scanned += len(listing)
        self._listing = listing
        self._pos = self._start_index(listing)

    def _start_index(self, listing: list[ListingEntry]) -> int:
        """First position that may hold a file to emit: after the key, or at the window's floor."""
        key = self._key
        if key is None:
            return 0
        if self._window_ns > 0:
            return bisect.bisect_left(listing, (key[0] - self._window_ns,))
        return bisect.bisect_right(listing, key, key=_mtime_and_name)

    # -- control input ----------------------------------------------------------------------

    def set_directory(self, path: str) -> None:
        """Watch ``path`` from now on (the control input). Call it under a permit, like a tuple:
        the change is state, covered by the next cut. A new directory starts from an empty key.

        Raises :class:`~operators.errors.BadRecordError` (a ``ValueError``), changing nothing,
        when ``path`` is not an acceptable path (control characters, look-alike slashes, not
        NFKC, too long: :func:`operators.safepath.path_problem`) or, with ``roots``, lies
        outside them: lexically after folding ``..`` (a relative path is outside absolute
        roots) and, on the local disk, also after resolving symbolic links.
        """
        problem = self._refusal(path)
        if problem is not None:
            raise BadRecordError(f"{self.name}: directory {path!r} {problem}", field="directory")
        if path == self._directory:
            return
        logger.info("%s: now watching %s (was %s)", self.name, path, self._directory)
        self._directory = path
        self._key = None
        self._late = {}
        self._forget_listing()

    def _refusal(self, path: str) -> str | None:
        """Why the control input may not switch to ``path``, or ``None``."""
        problem = path_problem(path)
        if problem is not None:
            return problem
        roots = self.settings.roots
        if roots is None:
            return None
        if not within_roots(path, roots):
            return f"is outside the allowed roots {list(roots)!r}"
        if self._fs.display(path).startswith("file:"):
            real = os.path.realpath(path)
            if not within_roots(real, tuple(os.path.realpath(root) for root in roots)):
                return (
                    f"resolves through a symbolic link to {real!r}, outside the allowed roots "
                    f"{list(roots)!r}"
                )
        return None

    @property
    def directory(self) -> str | None:
        return self._directory

    @property
    def key(self) -> ScanKey | None:
        """The greatest file emitted so far (the scan resumes strictly after it)."""
        return None if self._key is None else ScanKey(*self._key)

    def metrics(self) -> dict[str, int]:
        return {
            "files_scanned": self.files_scanned,
            "files_emitted": self.files_emitted,
            "listings": self.listings,
            "late_names": len(self._late),
        }

    def poll_interval(self) -> float:
        if self._pos < len(self._listing):
            return 0.0
        wait = max(self._next_list_at, self._not_before) - self._clock()
        return wait if wait > 0 else 0.05

    # -- state ------------------------------------------------------------------------------

    def drain(self) -> None:
        """Nothing is buffered: every emitted path is already downstream."""

    def checkpoint(self, cut_id: int) -> dict[str, Any]:
        return {
            "directory": self._directory,
            "key": None if self._key is None else ScanKey(*self._key).to_dict(),
            "late": dict(self._late),
        }

    def reset(self, state: State) -> None:
        directory = state.get("directory")
        roots = self.settings.roots
        if directory is not None and roots is not None and not within_roots(directory, roots):
            msg = (
                f"{self.name}: checkpointed directory {directory!r} is outside the allowed "
                f"roots {list(roots)!r}"
            )
            raise ValueError(msg)
        key = state.get("key")
        self._directory = directory
        if key is None:
            self._key = None
        else:
            restored = ScanKey.from_dict(key)
            self._key = (restored.mtime_ns, restored.name)
        self._late = {str(n): int(m) for n, m in (state.get("late") or {}).items()}
        if self._window_ns <= 0:
            self._late = {}
        self._forget_listing()

    def reset_to_initial_state(self) -> None:
        self._directory = self.settings.directory
        self._key = None
        self._late = {}
        self._forget_listing()

    def _forget_listing(self) -> None:
        # The next call lists again at once: a replay must not wait sleep_time.
        self._listing = []
        self._pos = 0
        self._next_list_at = 0.0
        self._late_heap = [(m, n) for n, m in self._late.items()]
        heapq.heapify(self._late_heap)
        if self._key is not None and self._window_ns > 0:
            self._prune_late()
