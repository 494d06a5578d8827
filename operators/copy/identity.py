"""Whether two names reach one file, decided by what identifies a file apart from its name,
never by comparing the names.

- Local disk: ``(st_dev, st_ino)`` after following links (a symlinked directory or a link to
  the file gives the same pair). Decisive both ways.
- HDFS: a file keeps one fileId (its inode id) whatever name reaches it. Two different fileIds
  are two files, even on two clusters. The same fileId, or the same path, is one file only on
  the same NameNode: one of its resolved addresses (RPC or HTTP, ``localhost`` and
  ``127.0.0.1`` alike) in common. ``webhdfs://`` reads the fileId from GETFILESTATUS;
  hdfs-native's FileStatus has none, so ``hdfs://`` asks its WebHDFS twin when its address is
  known.
- Anything else (two clusters under unrelated names, a local path against HDFS, a filesystem
  without file ids) is unknown: the copy then proves the destination is another file by
  writing it itself and finding the source unchanged (:func:`mark` before and after).
"""

from __future__ import annotations

import os
import posixpath
import socket
from dataclasses import dataclass
from typing import TYPE_CHECKING

from operators.fs.local import LocalFileSystem
from region.fs import FileSystem

if TYPE_CHECKING:
    from operators.fs.settings import FileSystemSettings

__all__ = ["Mark", "mark", "same_file", "same_namenode"]

#: What identifies a file apart from its name: ``("inode", st_dev, st_ino)`` on the local disk,
#: ``("fileId", id)`` elsewhere.
Key = tuple[str, int] | tuple[str, int, int]


@dataclass(frozen=True, slots=True)
class Mark:
    """A file as it is now: its identity (``None`` where the filesystem has none), size and
    modification time. A file replaced under the same name gets another mark."""

    key: Key | None
    size: int
    mtime_ns: int

    def matches(self, other: Mark) -> bool:
        """Whether ``other`` may be this file as it is: size and mtime equal, and the keys
        too where both handles have one (one handle may read no fileId where the other does)."""
        if (self.size, self.mtime_ns) != (other.size, other.mtime_ns):
            return False
        return self.key is None or other.key is None or self.key == other.key


def mark(fs: FileSystem, path: str) -> Mark:
    """The :class:`Mark` of ``path`` on ``fs`` (``FileNotFoundError`` when it is missing)."""
    if isinstance(fs, LocalFileSystem):
        st = os.stat(path)
        return Mark(("inode", st.st_dev, st.st_ino), st.st_size, st.st_mtime_ns)
    from operators.fs.native import NativeHdfsFileSystem  # not imported for local copies

    status = fs.status(path)
    file_id = status.file_id
    if file_id is None and isinstance(fs, NativeHdfsFileSystem) and fs.webhdfs is not None:
        file_id = fs.webhdfs.status(path).file_id
    return Mark(None if file_id is None else ("fileId", file_id), status.size, status.mtime_ns)


def _addresses(settings: FileSystemSettings) -> set[tuple[str, int]]:
    out: set[tuple[str, int]] = set()
    for host, port in settings.hosts():
        try:
            infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
        except OSError:  # a name service, or a name this machine cannot resolve
            out.add((host.lower(), port))
            continue
        out.update((str(info[4][0]), port) for info in infos)
    return out


def _namenode(fs: FileSystem) -> set[tuple[str, int]]:
    """The resolved addresses (RPC and HTTP) known to reach the NameNode behind ``fs``."""
    from operators.fs.native import NativeHdfsFileSystem
    from operators.fs.webhdfs import WebHdfsFileSystem

    if isinstance(fs, WebHdfsFileSystem):
        return _addresses(fs.settings)
    if isinstance(fs, NativeHdfsFileSystem):
        twin = fs.webhdfs
        return _addresses(fs.settings) | (_addresses(twin.settings) if twin is not None else set())
    return set()


def same_namenode(a: FileSystem, b: FileSystem) -> bool:
    """Whether ``a`` and ``b`` are known to be one namespace (``False``: not known)."""
    if a is b or (isinstance(a, LocalFileSystem) and isinstance(b, LocalFileSystem)):
        return True
    return bool(_namenode(a) & _namenode(b))


def same_file(
    a_fs: FileSystem, a: str, a_mark: Mark, b_fs: FileSystem, b: str, b_mark: Mark
) -> bool | None:
    """``True``: one file under two names; ``False``: two files; ``None``: not known."""
    if a_mark.key is not None and b_mark.key is not None and a_mark.key[0] == b_mark.key[0]:
        if a_mark.key != b_mark.key:
            return False  # a file has one identity, whatever name or cluster
        return True if same_namenode(a_fs, b_fs) else None
    if (
        not isinstance(a_fs, LocalFileSystem)  # a local name may be a link: its key decides
        and a.startswith("/")
        and posixpath.normpath(a) == posixpath.normpath(b)
        and same_namenode(a_fs, b_fs)
    ):
        return True
    return None
