"""The local-disk backend: the embedded default (``/path`` or ``file:///path``)."""

from __future__ import annotations

import contextlib
import contextvars
import ctypes
import ctypes.util
import errno
import fcntl
import logging
import os
import shutil
import stat as stat_mod
from collections.abc import Iterator

from region.atomic import dir_permission
from region.errors import permanent
from region.fs import FileStatus, ListingEntry

__all__ = ["LocalFileSystem", "LocalWriter", "unlogged_listing"]

logger = logging.getLogger(__name__)

#: Symbolic links and special files already logged as left out of a listing (a scan lists
#: every few seconds).
_LINKS_LOGGED: set[str] = set()

#: Set while a listing is only searched for names of one's own (a copy's temporaries): the
#: links and special files it leaves out are none of the caller's business, so not logged.
_UNLOGGED: contextvars.ContextVar[bool] = contextvars.ContextVar("unlogged", default=False)


@contextlib.contextmanager
def unlogged_listing() -> Iterator[None]:
    """Listings in the block do not log the links and special files they leave out."""
    token = _UNLOGGED.set(True)
    try:
        yield
    finally:
        _UNLOGGED.reset(token)


#: What each kind of special file is called in messages.
_SPECIAL_KINDS = (
    (stat_mod.S_ISFIFO, "a named pipe (FIFO)"),
    (stat_mod.S_ISSOCK, "a socket"),
    (stat_mod.S_ISCHR, "a character device"),
    (stat_mod.S_ISBLK, "a block device"),
)


def special_kind(mode: int) -> str | None:
    """What a file of ``mode`` is when it is neither a regular file nor a directory (a named
    pipe, a socket, a device); ``None`` for regular files and directories."""
    if stat_mod.S_ISREG(mode) or stat_mod.S_ISDIR(mode):
        return None
    for test, kind in _SPECIAL_KINDS:
        if test(mode):
            return kind
    return "not a regular file"


_AT_FDCWD = -100
_RENAME_NOREPLACE = 1


def _load_renameat2() -> ctypes._CFuncPtr | None:  # type: ignore[name-defined]
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        func = libc.renameat2
    except (OSError, AttributeError):
        return None
    func.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    func.restype = ctypes.c_int
    return func


_renameat2 = _load_renameat2()


def _makedirs(path: str, mode: int | None) -> None:
    """``os.makedirs``, but every directory it creates gets ``mode`` exactly (``os.makedirs``
    gives it to the last one only, filtered by the umask: a umask of 0 left 0777 parents)."""
    if mode is None:
        os.makedirs(path, exist_ok=True)
        return
    missing = []
    current = os.path.abspath(path)
    while not os.path.isdir(current):
        missing.append(current)
        parent = os.path.dirname(current)
        if parent == current:
            break
        current = parent
    for directory in reversed(missing):
        try:
            os.mkdir(directory, mode)
        except FileExistsError:
            if not os.path.isdir(directory):
                raise
            continue  # created meanwhile by someone else: theirs, left as it is
        os.chmod(directory, mode)


def _fsync_dir(path: str) -> None:
    fd = os.open(path or ".", os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class LocalWriter:
    """An exclusive writer: an advisory ``flock`` stands in for the HDFS single-writer lease, and
    like a lease it is released by the kernel when the holder dies."""

    def __init__(self, path: str, fd: int) -> None:
        self._path = path
        self._file = os.fdopen(fd, "ab", buffering=1 << 20)
        self._closed = False

    @property
    def path(self) -> str:
        return self._path

    def write(self, data: bytes | memoryview) -> None:
        try:
            self._file.write(data)
        except OSError as exc:
            raise self._naming_path(exc) from exc

    def flush(self) -> None:
        try:
            self._file.flush()
        except OSError as exc:
            raise self._naming_path(exc) from exc

    def sync(self) -> None:
        try:
            self._file.flush()
            os.fsync(self._file.fileno())
        except OSError as exc:
            raise self._naming_path(exc) from exc

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            try:
                self._file.close()  # closing the descriptor releases the flock
            except OSError as exc:
                raise self._naming_path(exc) from exc

    def _naming_path(self, exc: OSError) -> OSError:
        """``exc`` naming this writer's file: the kernel's errors on a descriptor (ENOSPC, EIO,
        EDQUOT) name none. Same type and errno, so callers still tell them apart."""
        if exc.filename is not None or exc.errno is None:
            return exc
        try:
            return type(exc)(exc.errno, exc.strerror, self._path)
        except TypeError:  # a subclass with another constructor: keep it as it is
            return exc


def _refuse_special(path: str, mode: int) -> None:
    """``OSError`` (EINVAL, permanent: no retry makes it a regular file) for a special file."""
    kind = special_kind(mode)
    if kind is not None:
        msg = f"is {kind}, not a regular file: reading it could wait forever, or never end"
        raise permanent(OSError(errno.EINVAL, msg, path))


class LocalFileSystem:
    """Local files through ``os``. Paths are absolute or relative to the working directory.

    Listings leave symbolic links out: a link in a landing directory may point anywhere
    (``/etc/hostname``), and following it would read, or publish into, files outside the
    directory the job was given. Each link is logged once per process (WARNING, its target).
    Special files (named pipes, sockets, devices) are left out the same way: opening a named
    pipe for reading waits for a writer, forever if none comes, and a device may never end.
    :meth:`read` refuses them too, whoever names one (``[source] file``, a copy's source).
    """

    supports_truncate = True

    def display(self, path: str) -> str:
        return "file://" + os.path.abspath(path)

    def status(self, path: str) -> FileStatus:
        st = os.stat(path)
        return FileStatus(path, st.st_size, st.st_mtime_ns, stat_mod.S_ISDIR(st.st_mode), st.st_ino)

    def exists(self, path: str) -> bool:
        return os.path.exists(path)

    def list_dir(self, path: str) -> list[FileStatus]:
        return [
            FileStatus(entry_path, size, mtime_ns, is_dir, file_id)
            for mtime_ns, _, entry_path, size, is_dir, file_id in self.list_entries(path)
        ]

    def list_entries(self, path: str) -> list[ListingEntry]:
        out: list[ListingEntry] = []
        append, is_dir = out.append, stat_mod.S_ISDIR  # 100 000s of entries: keep the loop lean
        with os.scandir(path) as entries:
            for entry in entries:
                if entry.is_symlink():
                    self._left_out(entry.path)
                    continue
                try:
                    st = entry.stat(follow_symlinks=False)
                except FileNotFoundError:  # deleted between readdir and stat
                    continue
                if not stat_mod.S_ISREG(st.st_mode) and not is_dir(st.st_mode):
                    self._left_out_special(entry.path, st.st_mode)
                    continue
                # The inode alone identifies a child: a scan compares it name by name in one
                # directory, whose files share its device, and a device number that moved
                # at a remount would make every file changed in place look replaced.
                append(
                    (
                        st.st_mtime_ns,
                        entry.name,
                        entry.path,
                        st.st_size,
                        is_dir(st.st_mode),
                        st.st_ino,
                    )
                )
        return out

    def _left_out(self, link: str) -> None:
        if link in _LINKS_LOGGED or _UNLOGGED.get():
            return
        _LINKS_LOGGED.add(link)
        try:
            target = os.readlink(link)
        except OSError as exc:
            target = f"unreadable: {exc.strerror}"
        broken = "" if os.path.exists(link) else " (broken)"
        logger.warning(
            "%s is a symbolic link to %s%s: left out (links are not followed)",
            self.display(link),
            target,
            broken,
        )

    def _left_out_special(self, path: str, mode: int) -> None:
        if path in _LINKS_LOGGED or _UNLOGGED.get():
            return
        _LINKS_LOGGED.add(path)
        logger.warning(
            "%s is %s: left out (only regular files are read)",
            self.display(path),
            special_kind(mode),
        )

    def read(self, path: str, offset: int = 0, length: int = -1) -> bytes:
        # O_NONBLOCK: opening a named pipe for reading would otherwise wait for a writer. The
        # open file is checked, not the path, so a file swapped for a pipe is caught as well.
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
        except OSError as exc:
            if exc.errno == errno.ENXIO:  # a socket (or a device without its driver)
                _refuse_special(path, os.stat(path).st_mode)
            raise
        try:
            mode = os.fstat(fd).st_mode
            if stat_mod.S_ISDIR(mode):  # else the read fails naming the descriptor, not the path
                raise IsADirectoryError(errno.EISDIR, "is a directory, not a file", path)
            _refuse_special(path, mode)
            os.set_blocking(fd, True)
        except BaseException:
            os.close(fd)
            raise
        with open(fd, "rb") as f:
            if offset:
                f.seek(offset)
            return f.read(length if length >= 0 else -1)

    def _open_locked(self, path: str, flags: int, permission: int | None) -> LocalWriter:
        fd = os.open(path, flags | os.O_WRONLY | os.O_CLOEXEC, 0o666)
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                msg = f"{path}: another writer holds the file open (lease held)"
                raise BlockingIOError(errno.EWOULDBLOCK, msg) from None
            if flags & os.O_CREAT and not flags & os.O_APPEND:
                os.ftruncate(fd, 0)  # overwrite only once we own the lease
            if permission is not None:
                os.fchmod(fd, permission)
        except BaseException:
            os.close(fd)
            raise
        return LocalWriter(path, fd)

    def create(
        self, path: str, *, overwrite: bool = False, permission: int | None = None
    ) -> LocalWriter:
        parent = os.path.dirname(path)
        if parent:
            _makedirs(parent, dir_permission(permission))
        flags = os.O_CREAT if overwrite else os.O_CREAT | os.O_EXCL
        if os.path.isdir(path):
            raise IsADirectoryError(errno.EISDIR, "is a directory", path)
        return self._open_locked(path, flags, permission)

    def append(self, path: str) -> LocalWriter:
        if not os.path.isfile(path):
            if os.path.isdir(path):
                raise IsADirectoryError(errno.EISDIR, "is a directory", path)
            raise FileNotFoundError(errno.ENOENT, "no such file to append to", path)
        return self._open_locked(path, os.O_APPEND, None)

    def truncate(self, path: str, length: int) -> None:
        size = os.stat(path).st_size
        if length > size:
            raise ValueError(f"{path}: cannot truncate to {length} bytes, the file has {size}")
        if length < 0:
            raise ValueError(f"{path}: cannot truncate to a negative length {length}")
        if length != size:
            os.truncate(path, length)

    def rename(self, src: str, dst: str, *, overwrite: bool = False) -> None:
        parent = os.path.dirname(dst)
        if overwrite:
            os.replace(src, dst)
        else:
            self._rename_noreplace(src, dst)
        _fsync_dir(parent)  # the rename itself must survive a power cut

    @staticmethod
    def _rename_noreplace(src: str, dst: str) -> None:
        if _renameat2 is not None:
            rc = _renameat2(
                _AT_FDCWD, os.fsencode(src), _AT_FDCWD, os.fsencode(dst), _RENAME_NOREPLACE
            )
            if rc == 0:
                return
            err = ctypes.get_errno()
            if err == errno.EEXIST:
                raise FileExistsError(errno.EEXIST, "rename target exists", dst)
            if err not in (errno.EINVAL, errno.ENOSYS):
                raise OSError(err, os.strerror(err), src, None, dst)
        # Filesystem without RENAME_NOREPLACE: check, then rename. Writers hold leases, so the
        # only race left is two processes renaming onto the same new name at once.
        if os.path.lexists(dst):
            raise FileExistsError(errno.EEXIST, "rename target exists", dst)
        os.rename(src, dst)

    def delete(self, path: str, *, recursive: bool = False) -> bool:
        try:
            if os.path.isdir(path) and not os.path.islink(path):
                if recursive:
                    shutil.rmtree(path)
                else:
                    os.rmdir(path)
            else:
                os.unlink(path)
        except FileNotFoundError:
            return False
        return True

    def mkdirs(self, path: str, *, permission: int | None = None) -> None:
        _makedirs(path, permission)
        if permission is not None:
            os.chmod(path, permission)  # also an existing directory, as before
