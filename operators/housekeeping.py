"""What happens to an input file once every record read from it is published: ``[scan]
after_read = "keep" | "archive" | "delete"``. One rule for both engines.

A file is handed over (:class:`ReadFile`) when the source read it to its end; it is archived
(moved into ``archive_dir``) or deleted only after a cut that covers its last record completed
and the sinks published that cut (the region's ``on_cut_published``; on Spark, after the sink's
commit of the batch). Until then it is in the scan's state, so a crash between publish and
archive redoes the step on recovery. The step is idempotent:

1. The file is gone: done before (a crash after the move) or removed by someone else: nothing
   to do (logged at DEBUG).
2. The file is not the one read (another size, mtime or file id: replaced or appended to since):
   it stays, with a WARNING naming it and a count (``files_kept_changed``).
3. ``delete``: delete it. ``archive``: move it to ``archive_dir`` (``strftime`` tokens of the
   time of the move, e.g. ``/archive/%Y-%m-%d``; created when missing) under its name, or, when
   that name is taken there, under the first free ``name-1.ext``, ``name-2.ext`` (a log line
   says so): an archived file never overwrites another.

An archive directory that cannot be written (or made: a file stands in its path) is an error
naming it (permanent: a retry fails the same); the input file stays where it is. The engines
call :meth:`AfterRead.check` at start, so that such a setting is refused before anything is
read rather than at the first archive (or the first recovery that redoes it).
"""

from __future__ import annotations

import errno
import logging
import posixpath
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

from operators.errors import OperatorError
from operators.sink.layout import numbered_name
from region.atomic import dir_permission
from region.errors import ConfigError, permanent
from region.fs import FileSystem

__all__ = ["AfterRead", "AfterReadMode", "ReadFile", "archive_folder"]

logger = logging.getLogger(__name__)

AfterReadMode = Literal["keep", "archive", "delete"]


@dataclass(frozen=True, slots=True)
class ReadFile:
    """A file read to its end: its path and what it was when read (size = bytes read)."""

    path: str
    mtime_ns: int
    size: int
    file_id: int | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "path": self.path,
            "mtime_ns": self.mtime_ns,
            "size": self.size,
            "file_id": self.file_id,
        }

    @classmethod
    def from_dict(cls, value: dict[str, Any]) -> ReadFile:
        file_id = value.get("file_id")
        return cls(
            str(value["path"]),
            int(value["mtime_ns"]),
            int(value["size"]),
            int(file_id) if file_id is not None else None,
        )


def archive_folder(template: str, now: float) -> str:
    """``archive_dir`` with its ``strftime`` tokens filled in for ``now`` (local time)."""
    return datetime.fromtimestamp(now).strftime(template) if "%" in template else template


class AfterRead:
    """Archives or deletes files read to their end (the rule above); counts what it did."""

    def __init__(
        self,
        mode: AfterReadMode,
        fs: FileSystem,
        *,
        archive_dir: str | None = None,
        name: str = "scan",
        clock: Callable[[], float] = time.time,
        permission: int | None = 0o750,
    ) -> None:
        if mode == "archive" and not archive_dir:
            raise ValueError("after_read='archive' needs archive_dir")
        self.mode = mode
        self._fs = fs
        self._archive_dir = archive_dir
        self._name = name
        self._clock = clock
        self._permission = permission
        self.files_archived = 0
        self.files_deleted = 0
        self.files_kept_changed = 0

    @property
    def active(self) -> bool:
        return self.mode != "keep"

    def check(self, watched: str | None = None) -> None:
        """At start, ``archive``: the archive folder of now exists or can be made, and takes a
        file moved there from the ``watched`` directory by a rename, as archiving does (a hidden
        file made there, moved, removed; made in the folder itself while ``watched`` does not
        exist yet). ``ConfigError`` naming it otherwise: a folder on another filesystem (a
        rename cannot cross) included."""
        if self.mode != "archive":
            return
        assert self._archive_dir is not None
        fs = self._fs
        folder = archive_folder(self._archive_dir, self._clock())
        name = f".hdfs-region-probe-{uuid.uuid4().hex}"
        probe = posixpath.join(folder, name)
        start = probe
        if watched is not None and fs.exists(watched):
            start = posixpath.join(watched, name)
        try:
            if not fs.exists(folder):
                fs.mkdirs(folder, permission=dir_permission(self._permission))
            fs.create(start, permission=self._permission).close()
            if start != probe and fs.exists(probe):
                fs.delete(start)
                msg = (
                    f"[scan] archive_dir: {fs.display(folder)} is the watched directory "
                    f"{fs.display(watched or '.')} under another name: an archived file would "
                    "stay there, renamed, and be read again as a new file"
                )
                raise ConfigError(msg)
            if start != probe:
                try:
                    fs.rename(start, probe)
                finally:
                    fs.delete(start)  # left only when the rename failed
            fs.delete(probe)
        except (PermissionError, NotADirectoryError, FileExistsError, IsADirectoryError) as exc:
            origin = f" from {fs.display(watched or '.')}" if start != probe else ""
            msg = (
                f"[scan] archive_dir: cannot move files{origin} into {fs.display(folder)} "
                f"({exc}), where every file read goes: make both writable (or set [scan] "
                "after_read = 'keep')"
            )
            raise ConfigError(msg) from None
        except OSError as exc:
            if exc.errno != errno.EXDEV:
                raise
            msg = (
                f"[scan] archive_dir: {fs.display(folder)} is on another filesystem than the "
                f"watched directory {fs.display(watched or '.')}, and files are archived by a "
                "rename, which cannot cross filesystems: choose an archive directory on the "
                "same filesystem (or set [scan] after_read = 'keep')"
            )
            raise ConfigError(msg) from None

    def apply(self, read: ReadFile) -> str | None:
        """Archive or delete ``read`` when it is still the file that was read; the archived
        path (or the deleted one), or ``None`` when nothing was done."""
        if not self.active:
            return None
        fs, path = self._fs, read.path
        try:
            status = fs.status(path)
        except FileNotFoundError:
            logger.debug("%s: %s is gone already (after_read=%s)", self._name, path, self.mode)
            return None
        same_id = read.file_id is None or status.file_id is None or status.file_id == read.file_id
        if not same_id or status.size != read.size or status.mtime_ns != read.mtime_ns:
            self.files_kept_changed += 1
            logger.warning(
                "%s: %s changed since it was read (%s bytes, mtime %s ns; read: %s bytes, mtime "
                "%s ns): it is not the file read, so it stays (after_read=%s)",
                self._name,
                fs.display(path),
                status.size,
                status.mtime_ns,
                read.size,
                read.mtime_ns,
                self.mode,
            )
            return None
        if self.mode == "delete":
            fs.delete(path)
            self.files_deleted += 1
            logger.info("%s: deleted %s (read and published)", self._name, fs.display(path))
            return path
        return self._archive(path)

    def _archive(self, path: str) -> str:
        fs = self._fs
        assert self._archive_dir is not None
        folder = archive_folder(self._archive_dir, self._clock())
        base = posixpath.basename(path)
        target = posixpath.join(folder, base)
        try:
            if not fs.exists(folder):
                try:
                    fs.mkdirs(folder, permission=dir_permission(self._permission))
                except FileExistsError as exc:  # a file where a folder of the path should be
                    raise NotADirectoryError(str(exc)) from None
            number = 0
            while True:
                try:
                    fs.rename(path, target)
                    break
                except FileExistsError:
                    number += 1
                    taken, target = target, numbered_name(posixpath.join(folder, base), number)
                    logger.info(
                        "%s: %s exists in the archive; %s goes to %s",
                        self._name,
                        fs.display(taken),
                        base,
                        fs.display(target),
                    )
        except (PermissionError, NotADirectoryError) as exc:
            msg = (
                f"{self._name}: cannot archive {fs.display(path)} into {fs.display(folder)}: "
                f"{exc}. The file stays where it is; make the archive directory writable (or set "
                "[scan] after_read = 'keep') and run again"
            )
            raise permanent(OperatorError(msg)) from None
        self.files_archived += 1
        logger.info("%s: archived %s as %s", self._name, fs.display(path), fs.display(target))
        return target
