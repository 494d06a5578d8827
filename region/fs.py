"""The filesystem contract the runtime and the operators rely on (close to HDFS semantics).

Paths are POSIX-style strings understood by the backend (``/a/b`` for local disk and HDFS).
There are no random writes: a file is created, appended to, truncated, renamed or deleted.

Errors are Python built-ins whose message names the path:
``FileNotFoundError`` (missing), ``FileExistsError`` (create / rename onto an existing path without
overwrite), ``PermissionError``, ``IsADirectoryError`` / ``NotADirectoryError``, ``ValueError``
(truncate longer than the file), ``BlockingIOError`` (another writer holds the lease),
``OSError`` / ``ConnectionError`` for the rest.
"""

from __future__ import annotations

import io
from collections.abc import Callable
from typing import Any, NamedTuple, Protocol, runtime_checkable

__all__ = [
    "CloseAwaiter",
    "EntryLister",
    "FileIdReader",
    "FileStatus",
    "FileSystem",
    "FileWriter",
    "ForwardReader",
    "LaterCloser",
    "LeaseRecoverer",
    "ListingEntry",
    "RangeReader",
    "file_identity",
    "mtime_tracks_writes",
]


class FileStatus(NamedTuple):
    """One entry of a listing. ``mtime_ns`` is nanoseconds since the epoch.

    A named tuple (immutable, hashable) rather than a frozen dataclass: listings build one per
    file, and a frozen dataclass costs twice as much to build.
    """

    path: str
    size: int
    mtime_ns: int
    is_dir: bool = False
    #: What identifies the file apart from its name, where the filesystem has it (the inode
    #: on a local disk, the HDFS fileId through WebHDFS); ``None`` otherwise. Filled by
    #: ``status()``; listings may leave it out.
    file_id: int | None = None

    @property
    def name(self) -> str:
        return self.path.rstrip("/").rpartition("/")[2]


#: One child of a directory as plain values, its scan key first:
#: ``(mtime_ns, name, path, size, is_dir, file_id)``; ``file_id`` as in :class:`FileStatus`
#: where the listing has it for free (the inode on a local disk, the fileId through WebHDFS),
#: ``None`` otherwise (:class:`FileIdReader` reads it then, for the few files that need it).
ListingEntry = tuple[int, str, str, int, bool, int | None]


@runtime_checkable
class EntryLister(Protocol):
    """Optional capability of a :class:`FileSystem`: ``list_dir`` as :data:`ListingEntry` tuples.

    Directory scans use it when the backend has it. Tuples of plain values cost a fraction of
    FileStatus objects in a listing of 100 000s of files: the garbage collector keeps visiting
    the objects, but leaves such tuples alone after its first pass.
    """

    def list_entries(self, path: str) -> list[ListingEntry]:
        """The same children as ``list_dir(path)``, in no particular order."""


@runtime_checkable
class FileIdReader(Protocol):
    """Optional capability of a :class:`FileSystem` whose listings leave ``file_id`` out but
    that can read it another way (hdfs:// through its WebHDFS twin): one call per file, or
    one listing of their directory when there are many."""

    def file_ids(self, paths: list[str]) -> list[int | None]:
        """The ``file_id`` of each of ``paths`` (``None``: missing, or not known)."""

    @property
    def identifies_files(self) -> bool:
        """Whether that other way is there (hdfs://: a WebHDFS address known and answering);
        without it every id is ``None``."""


@runtime_checkable
class CloseAwaiter(Protocol):
    """Optional capability of a :class:`FileSystem` whose writers close in the background
    (:class:`LaterCloser`): wait for those this process handed over."""

    def await_closes(self, timeout: float) -> bool:
        """Wait at most ``timeout`` seconds; whether any close was running."""


@runtime_checkable
class LeaseRecoverer(Protocol):
    """Optional capability of a :class:`FileSystem` whose files keep a writer's lease after the
    writer died (HDFS): end it now instead of after the lease's soft limit (60 s on HDFS).

    Call it only with the right to write the file (a sink restoring its own in-progress file
    under its region's lock): a live writer would lose the file.
    """

    def recover_lease(self, path: str) -> float:
        """Close ``path`` for its dead writer, its length settled; the seconds it took."""


@runtime_checkable
class RangeReader(Protocol):
    """Optional capability of a :class:`FileSystem` whose ``read`` opens the file each time at
    a cost (HDFS: a NameNode call for the file's blocks): many reads of one file, opened once.
    For reads of one planned byte range after another, all within the file's size at planning.
    """

    def open_ranges(self, path: str) -> Callable[[int, int], bytes]:
        """``(offset, length) -> bytes``: ``read(path, offset, length)`` of the file as it was
        when opened here (what was appended since is read as ``read`` reads it)."""


@runtime_checkable
class FileWriter(Protocol):
    """An open output stream; the only writer of its file until closed (the HDFS lease)."""

    @property
    def path(self) -> str: ...

    def write(self, data: bytes | memoryview) -> None:
        """Append ``data`` (bytes, or a view of bytes held elsewhere: an Arrow buffer,
        written or copied before the call returns, never kept) at the end of the file.
        A writer may gather or send written bytes
        in the background: a failure may then be raised by a later write, or by sync or
        close (written bytes count only once synced)."""

    def flush(self) -> None:
        """Make written bytes visible to new readers (HDFS hflush)."""

    def sync(self) -> None:
        """Make written bytes durable on the storage (HDFS hsync, local fsync)."""

    def close(self) -> None:
        """Flush and release the file; closing twice is a no-op."""


@runtime_checkable
class LaterCloser(Protocol):
    """Optional capability of a :class:`FileWriter` whose close may wait on the storage: HDFS
    completes a file only once a DataNode has reported a replica of its last block, and the
    client asks again after a fixed pause (500 ms with hdfs-native) when it has not yet.

    For a file whose bytes are all synced and to which nothing more will be written (a file
    published whole by :func:`region.atomic.write_atomically`): the close runs in the
    background, and the file stays open (its writer's lease held) until it lands, or after a
    crash until the lease is recovered. Its synced bytes are durable and readable meanwhile;
    :func:`region.atomic.read_whole` reads such a file.
    """

    def close_later(self) -> None:
        """Hand the close to the background; this writer is closed for its caller."""


@runtime_checkable
class FileSystem(Protocol):
    """What the runtime and operators need from a filesystem. Implemented in ``operators.fs``."""

    #: ``True`` when :meth:`truncate` works (local disk, HDFS >= 2.7, WebHDFS TRUNCATE).
    supports_truncate: bool

    def display(self, path: str) -> str:
        """The path as a URI for messages and logs (never with credentials)."""

    def status(self, path: str) -> FileStatus:
        """Size and mtime of ``path``. ``FileNotFoundError`` when missing."""

    def exists(self, path: str) -> bool: ...

    def list_dir(self, path: str) -> list[FileStatus]:
        """Direct children of a directory, in no particular order."""

    def read(self, path: str, offset: int = 0, length: int = -1) -> bytes:
        """Up to ``length`` bytes from ``offset`` (all the rest when negative)."""

    def create(
        self, path: str, *, overwrite: bool = False, permission: int | None = None
    ) -> FileWriter:
        """A new file, parents created. ``FileExistsError`` if it exists and not ``overwrite``."""

    def append(self, path: str) -> FileWriter:
        """Write at the end of an existing file. ``FileNotFoundError`` when missing."""

    def truncate(self, path: str, length: int) -> None:
        """Cut the file to ``length`` bytes; equal is a no-op, longer is ``ValueError``."""

    def rename(self, src: str, dst: str, *, overwrite: bool = False) -> None:
        """Atomic rename. ``FileExistsError`` when ``dst`` exists and not ``overwrite``."""

    def delete(self, path: str, *, recursive: bool = False) -> bool:
        """Remove a file (or a tree when ``recursive``); ``False`` when it was missing."""

    def mkdirs(self, path: str, *, permission: int | None = None) -> None:
        """Create a directory and its parents; existing directories are fine."""


def file_identity(fs: FileSystem, status: FileStatus) -> int | None:
    """What tells the file of ``status`` from another file under its name: its ``file_id``
    (inode, HDFS fileId), read through :class:`FileIdReader` where the status leaves it out
    (hdfs://: WebHDFS); ``None`` when the filesystem cannot say. The one rule the scan's
    listings and the source's resume both follow."""
    if status.file_id is not None:
        return status.file_id
    if isinstance(fs, FileIdReader):
        return fs.file_ids([status.path])[0]
    return None


def mtime_tracks_writes(fs: FileSystem) -> bool:
    """Whether ``fs`` moves a file's mtime on every write (a local disk), so that an old mtime
    says the file is idle. ``False`` where a filesystem says so (``mtime_tracks_writes``
    attribute): HDFS sets it when the file is closed, so a file open for writing for hours
    keeps the mtime of its creation."""
    return bool(getattr(fs, "mtime_tracks_writes", True))


class ForwardReader(io.RawIOBase):
    """The bytes of the file ``path`` of ``fs`` read forwards from its start, at most
    ``chunk`` bytes a read: a file object for readers that take one (pyarrow's streams)."""

    def __init__(self, fs: FileSystem, path: str, chunk: int = 8 << 20) -> None:
        self._fs, self._path, self._chunk = fs, path, chunk
        self.pos = 0

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        data = self._fs.read(self._path, self.pos, min(len(buffer), self._chunk))
        buffer[: len(data)] = data
        self.pos += len(data)
        return len(data)
