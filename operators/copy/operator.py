"""HDFS2FileCopy: one file per input record (or a fixed pair) between the local disk and a
filesystem, through :func:`operators.copy.transfer.copy_file`, which makes every copy atomic
and safe to repeat. That makes the operator a stateless per-record transform: a pipeline that
replays records after a reset copies each file again to the same result."""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from typing import Any, NamedTuple

from operators.common.errors import BadRecordError
from operators.copy.settings import CopySettings
from operators.copy.transfer import Copied, copy_file
from operators.fs import open_path
from operators.fs.local import LocalFileSystem
from operators.fs.settings import FileSystemSettings, split_uri
from region.fs import FileSystem

__all__ = ["ERROR_PREFIX", "CopyResult", "HDFS2FileCopy", "result_message"]

logger = logging.getLogger(__name__)

#: IBM's ``result`` of a failed copy starts with this.
ERROR_PREFIX = "ERROR :"


def result_message(done: Copied) -> str:
    """IBM's ``result`` of a successful copy (also when the destination already held it)."""
    return f"{done.size} bytes successfully copied from {done.source} to {done.destination} ."


class CopyResult(NamedTuple):
    """IBM's output tuple ``<rstring result, uint64 elapsedTime>``.

    ``result`` is ``"<size> bytes successfully copied from <source> to <destination> ."`` or,
    with ``on_error = "emit"``, ``"ERROR :<message>"``; ``elapsed_time`` is in milliseconds.
    """

    result: str
    elapsed_time: int

    @property
    def ok(self) -> bool:
        return not self.result.startswith(ERROR_PREFIX)


class HDFS2FileCopy:
    """Copies single files local -> filesystem (``copyFromLocalFile``) or back
    (``copyToLocalFile``).

    ``filesystem`` is the non-local side: a :class:`region.fs.FileSystem`, its settings, a URI,
    or ``None`` (the local disk). A plain ``hdfs_file`` is a path on it; a URI names its own
    filesystem (with these settings' user, Kerberos and timeouts). ``local`` replaces the local
    disk (tests). Call :meth:`copy` with the two paths, or :meth:`process` (also ``__call__``,
    so the operator is a pipeline transform) with an input record holding the attributes the
    settings name: a mapping, or an object with those attributes. The count of files copied is
    :attr:`n_copied_files` (IBM's metric ``nCopiedFiles``), in :meth:`metrics` with the rest.
    """

    def __init__(
        self,
        settings: CopySettings,
        filesystem: FileSystem | FileSystemSettings | str | None = None,
        *,
        local: FileSystem | None = None,
        name: str = "copy",
    ) -> None:
        self.name = name
        self.settings = settings
        self._local: FileSystem = local if local is not None else LocalFileSystem()
        self._fs_settings: FileSystemSettings | None = None
        if isinstance(filesystem, FileSystemSettings | str):
            self._fs_settings = (
                filesystem
                if isinstance(filesystem, FileSystemSettings)
                else FileSystemSettings(uri=filesystem)
            )
            self._fs: FileSystem | None = None  # connected on first use
        elif filesystem is None:
            self._fs = self._local
        else:
            self._fs = filesystem
        self._opened: dict[str, FileSystem] = {}
        self.n_copied_files = 0
        self.bytes_copied = 0
        self.files_already_there = 0
        self.copy_errors = 0

    # -- the public face ----------------------------------------------------------------

    def copy(self, local_file: str | None = None, hdfs_file: str | None = None) -> CopyResult:
        """Copy one file between ``local_file`` and ``hdfs_file`` (defaults: the settings'
        fixed paths) in the settings' direction."""
        started = time.monotonic()
        try:
            local_path = self._given("local_file", local_file, self.settings.local_file)
            remote_path = self._given("hdfs_file", hdfs_file, self.settings.hdfs_file)
            done = self._copy(local_path, remote_path)
        except Exception as exc:
            return self._failed(exc, started)
        self.n_copied_files += 1
        self.bytes_copied += done.size if done.written else 0
        self.files_already_there += 0 if done.written else 1
        logger.info(
            "%s --> %s: %d bytes, %d files copied",
            done.source,
            done.destination,
            done.size,
            self.n_copied_files,
        )
        return CopyResult(result_message(done), _millis_since(started))

    def process(self, record: Any) -> CopyResult:
        """Copy the file an input record names (the settings' attribute forms)."""
        started = time.monotonic()
        try:
            local_path = self._attribute(record, self.settings.local_file_attr_name)
            remote_path = self._attribute(record, self.settings.hdfs_file_attr_name)
        except BadRecordError as exc:
            return self._failed(exc, started)
        return self.copy(local_path, remote_path)

    __call__ = process

    def metrics(self) -> dict[str, int]:
        return {
            "n_copied_files": self.n_copied_files,
            "bytes_copied": self.bytes_copied,
            "files_already_there": self.files_already_there,
            "copy_errors": self.copy_errors,
        }

    # -- plumbing -----------------------------------------------------------------------

    def _copy(self, local_path: str, remote_path: str) -> Copied:
        remote_fs, on_remote = self._remote(remote_path)
        s = self.settings
        if s.direction == "copyFromLocalFile":
            src_fs, src, dst_fs, dst = self._local, local_path, remote_fs, on_remote
        else:
            src_fs, src, dst_fs, dst = remote_fs, on_remote, self._local, local_path
        return copy_file(
            src_fs,
            src,
            dst_fs,
            dst,
            overwrite=s.overwrite_destination_file,
            delete_source=s.delete_source_file,
            chunk=s.chunk_size,
        )

    def _remote(self, path: str) -> tuple[FileSystem, str]:
        fs_uri, on_fs = split_uri(path)
        if fs_uri == "file:///" and not path.startswith("file:"):
            fs = self._filesystem()
            if not on_fs.startswith("/") and not isinstance(fs, LocalFileSystem):
                msg = f"hdfs_file={path!r} must be an absolute path on {fs.display('/')}"
                raise ValueError(msg)
            return fs, on_fs
        opened = self._opened.get(fs_uri)
        if opened is None:
            opened, _ = open_path(path, self._fs_settings)
            self._opened[fs_uri] = opened
        return opened, on_fs

    def _filesystem(self) -> FileSystem:
        if self._fs is None:
            from operators.fs import open_filesystem

            self._fs = open_filesystem(self._fs_settings)
        return self._fs

    @staticmethod
    def _given(field: str, value: str | None, fixed: str | None) -> str:
        path = value if value is not None else fixed
        if path is None:
            raise ValueError(f"{field}: no path given and none configured")
        if not isinstance(path, str) or not path:
            raise ValueError(f"{field}={path!r} is not a path")
        return path

    @staticmethod
    def _attribute(record: Any, attr: str | None) -> str | None:
        if attr is None:
            return None
        if isinstance(record, Mapping):
            if attr not in record:
                msg = f"the record has no attribute {attr!r} (keys: {sorted(map(str, record))})"
                raise BadRecordError(msg, field=attr)
            value = record[attr]
        elif hasattr(record, attr):
            value = getattr(record, attr)
        else:
            msg = f"the record {record!r:.80} has no attribute {attr!r}"
            raise BadRecordError(msg, field=attr)
        if not isinstance(value, str) or not value:
            msg = f"attribute {attr!r} must be a non-empty string path, got {value!r:.80}"
            raise BadRecordError(msg, field=attr)
        return value

    def _failed(self, exc: Exception, started: float) -> CopyResult:
        self.copy_errors += 1
        if self.settings.on_error == "fail":
            raise exc
        logger.error("%s: copy failed: %s", self.name, exc)
        return CopyResult(ERROR_PREFIX + str(exc), _millis_since(started))


def _millis_since(started: float) -> int:
    return max(0, int((time.monotonic() - started) * 1000))
