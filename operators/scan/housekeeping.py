"""What happens to an input file once every record read from it is published: ``[scan]
after_read = "keep" | "archive" | "delete"``. One rule for both engines.

A file is handed over (:class:`ReadFile`) when the source read it to its end; it is archived
(moved into ``archive_dir``) or deleted only after a cut that covers its last record completed
and the sinks published that cut (the region's ``on_cut_published``; on Spark, after the sink's
commit of the batch). Until then it is in the scan's state, so a crash between publish and
archive redoes the step on recovery. The step is idempotent:

1. The file is gone: done before (a crash after the move) or removed by someone else: nothing
   to do (logged at DEBUG).
2. Another file stands under its name (another file id: the one read was archived or deleted
   before a stop or a crash, and a new file landed under the same name since): nothing to do to
   it; it is a new file, which the scan reads.
3. The file is the one read but changed (the same file id, another size or mtime: appended to
   since): it stays, with a WARNING naming it and a count (``files_kept_changed``).
4. ``delete``: move it to a hidden name beside it (``.NAME.<mtime_ns>.read``, which no scan
   lists), deleted for good once the state that forgot its name is durable
   (:meth:`AfterRead.recorded`, then :meth:`AfterRead.purge`). Until then its file id stays
   taken, so a new file landing under the name after a crash has another one (case 2); after
   a crash the hidden file, when there, is the file read, moved. ``archive``: move it to
   ``archive_dir`` (``strftime`` tokens of the time of the move, e.g. ``/archive/%Y-%m-%d``;
   created when missing) under its name, or, when that name is taken there, under the first
   free ``name-1.ext``, ``name-2.ext`` (a log line says so): an archived file never
   overwrites another.

:meth:`AfterRead.handle` says whether the file read left its path (cases 1, 2 and 4): the scan
then forgets its name (:meth:`operators.scan.cursor.ScanCursor.forget`), so that a file landing
later
under that name is read as a new file.

An archive directory that cannot be written (or made: a file stands in its path) is an error
naming it (permanent: a retry fails the same); the input file stays where it is. The engines
call :meth:`AfterRead.check` at start, so that such a setting is refused before anything is
read rather than at the first archive (or the first recovery that redoes it).
"""

from __future__ import annotations

import contextlib
import errno
import logging
import posixpath
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

from operators.common.errors import OperatorError
from operators.common.safepath import numbered_name
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


def _hidden_of(read: ReadFile) -> str:
    """Where ``delete`` moves a file read before deleting it (a name no scan lists)."""
    folder, base = posixpath.split(read.path)
    return posixpath.join(folder, f".{base}.{read.mtime_ns}.read")


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
        # delete: files moved to their hidden name, not yet recorded; recorded, not yet purged.
        self._moved: list[str] = []
        self._recorded: list[str] = []

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
        return self._apply(read)[0]

    def handle(self, read: ReadFile) -> bool:
        """:meth:`apply`, then whether the file read is no longer at its path (moved, deleted,
        gone already, or another file stands under its name now)."""
        return self._apply(read)[1]

    def _apply(self, read: ReadFile) -> tuple[str | None, bool]:
        if not self.active:
            return None, False
        fs, path = self._fs, read.path
        try:
            status = fs.status(path)
        except FileNotFoundError:
            self._found_moved(read)
            logger.debug("%s: %s is gone already (after_read=%s)", self._name, path, self.mode)
            return None, True
        if read.file_id is not None and status.file_id not in (None, read.file_id):
            logger.info(
                "%s: %s is another file than the one read (file id %s, read: %s): the one read "
                "left before; this one is new (after_read=%s)",
                self._name,
                fs.display(path),
                status.file_id,
                read.file_id,
                self.mode,
            )
            self._found_moved(read)
            return None, True
        if status.size != read.size or status.mtime_ns != read.mtime_ns:
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
            return None, False
        if self.mode == "delete":
            hidden = _hidden_of(read)
            try:
                fs.rename(path, hidden)
            except FileExistsError:  # a file read earlier under that name and mtime: done
                fs.delete(hidden)
                fs.rename(path, hidden)
            self._moved.append(hidden)
            self.files_deleted += 1
            logger.info("%s: deleted %s (read and published)", self._name, fs.display(path))
            return path, True
        return self._archive(path), True

    def _found_moved(self, read: ReadFile) -> None:
        """``delete``: the file read, moved to its hidden name before a crash, is deleted once
        the state is recorded again."""
        if self.mode != "delete":
            return
        hidden = _hidden_of(read)
        try:
            status = self._fs.status(hidden)
        except FileNotFoundError:
            return
        if status.size == read.size and status.mtime_ns == read.mtime_ns:
            self._moved.append(hidden)

    def recorded(self) -> None:
        """The state taken now forgets every file moved so far (``delete``): :meth:`purge`
        deletes them once that state is durable."""
        self._recorded += self._moved
        self._moved = []

    def purge(self) -> None:
        """Delete the files :meth:`recorded` set aside (``delete``)."""
        while self._recorded:
            hidden = self._recorded.pop()
            with contextlib.suppress(FileNotFoundError):
                self._fs.delete(hidden)

    def forget_moves(self) -> None:
        """After a reset: what was set aside is found again from the state."""
        self._moved = []
        self._recorded = []

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
