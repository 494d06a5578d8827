"""The native HDFS backend (``hdfs://namenode:8020``) through ``pyarrow.fs.HadoopFileSystem``.

It needs libhdfs and a Hadoop client install (``HADOOP_HOME``, ``JAVA_HOME``, ``CLASSPATH`` from
``hadoop classpath --glob``); without them opening fails with an ``ImportError`` naming what is
missing. Known limits of pyarrow's HDFS binding, each handled here:

- no truncate: :attr:`ArrowHdfsFileSystem.supports_truncate` is ``False`` and :meth:`truncate`
  raises :class:`~operators.fs.errors.UnsupportedOperationError` (callers publish by rename);
- no exclusive create and no rename without replace: both look first, so a concurrent creator of
  the same new name can win the race between the look and the act;
- flush is libhdfs ``hdfsFlush``; there is no hsync, so ``sync`` flushes and the bytes are durable
  when the file is closed;
- no chmod: a ``permission`` is logged and the cluster's default applies.
"""

from __future__ import annotations

import errno
import logging
import os
import posixpath
import shutil
import subprocess
import time
from collections.abc import Callable
from typing import Any, TypeVar

from region.fs import FileStatus

from .claims import WriterClaim, claim_path
from .errors import UnsupportedOperationError, register_secret, scrub
from .settings import FileSystemSettings, split_uri

__all__ = ["ArrowHdfsFileSystem", "ArrowHdfsWriter"]

logger = logging.getLogger(__name__)

T = TypeVar("T")

_CONNECT_MARKERS = ("ConnectException", "Connection refused", "No route to host", "UnknownHost")


def _connect(settings: FileSystemSettings) -> Any:
    try:
        from pyarrow import fs as pafs
    except ImportError as err:  # pragma: no cover - pyarrow is a dependency
        raise ImportError(f"{settings.display()}: pyarrow is not installed ({err})") from None
    fs_uri, _ = split_uri(settings.uri)
    authority = fs_uri.split("://", 1)[1]
    host, port = settings.hosts()[0]
    if ":" not in authority:
        port = 0  # a nameservice (HA): libhdfs resolves it from hdfs-site.xml
    kerb_ticket = None
    if settings.kerberos_principal is not None:
        if settings.keytab is not None:
            _kinit(settings)
        kerb_ticket = os.environ.get("KRB5CCNAME")
    try:
        return pafs.HadoopFileSystem(host, port, user=settings.user, kerb_ticket=kerb_ticket)
    except OSError as err:
        text = scrub(str(err))
        if "libhdfs" in text or "JAVA_HOME" in text or "HADOOP_HOME" in text or "libjvm" in text:
            first = text.strip().splitlines()[0] if text.strip() else type(err).__name__
            msg = (
                f"{settings.display()}: pyarrow cannot load libhdfs ({first}); install a Hadoop "
                "client, set HADOOP_HOME, JAVA_HOME and CLASSPATH=$(hadoop classpath --glob), or "
                "use webhdfs:// instead"
            )
            raise ImportError(msg) from None
        raise


def _kinit(settings: FileSystemSettings) -> None:
    kinit = shutil.which("kinit")
    if kinit is None:
        msg = f"{settings.display()}: a keytab is set but the kinit command is not installed"
        raise ImportError(msg)
    assert settings.keytab is not None and settings.kerberos_principal is not None
    keytab = settings.keytab.get_secret_value()
    register_secret(keytab)  # kinit's own messages quote the path
    cmd = [kinit, "-kt", keytab, settings.kerberos_principal]
    done = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        msg = (
            f"{settings.display()}: kinit for {settings.kerberos_principal} with the keytab "
            f"failed: {scrub(done.stderr.strip())}"
        )
        raise PermissionError(errno.EACCES, msg)


class ArrowHdfsFileSystem:
    """:class:`region.fs.FileSystem` over libhdfs. Paths are absolute HDFS paths (``/a/b``)."""

    supports_truncate = False

    def __init__(self, settings: FileSystemSettings | str, *, filesystem: Any = None) -> None:
        if isinstance(settings, str):
            settings = FileSystemSettings(uri=settings)
        if settings.kind != "hdfs":
            raise ValueError(f"uri: {settings.display()!r} is not an hdfs:// URI")
        self.settings = settings
        if filesystem is None:
            filesystem = self._call("CONNECT", "/", lambda: _connect(settings))
        #: The ``pyarrow.fs.HadoopFileSystem``.
        self.arrow = filesystem
        self._permission_warned = False

    def __repr__(self) -> str:
        return f"ArrowHdfsFileSystem({self.settings.display()!r})"

    def display(self, path: str) -> str:
        return self.settings.display(path)

    def status(self, path: str) -> FileStatus:
        from pyarrow import fs as pafs

        info = self._call("GETFILESTATUS", path, lambda: self.arrow.get_file_info(path))
        if info.type == pafs.FileType.NotFound:
            raise FileNotFoundError(errno.ENOENT, "GETFILESTATUS: no such file", self.display(path))
        return self._to_status(path, info)

    def exists(self, path: str) -> bool:
        try:
            self.status(path)
        except FileNotFoundError:
            return False
        return True

    def list_dir(self, path: str) -> list[FileStatus]:
        from pyarrow import fs as pafs

        st = self.status(path)
        if not st.is_dir:
            raise NotADirectoryError(
                errno.ENOTDIR, "LISTSTATUS: not a directory", self.display(path)
            )
        selector = pafs.FileSelector(path, allow_not_found=False, recursive=False)
        infos = self._call("LISTSTATUS", path, lambda: self.arrow.get_file_info(selector))
        return [self._to_status(posixpath.join(path, info.base_name), info) for info in infos]

    def read(self, path: str, offset: int = 0, length: int = -1) -> bytes:
        if offset < 0:
            raise ValueError(f"{self.display(path)}: cannot read at a negative offset {offset}")

        def fetch() -> bytes:
            with self.arrow.open_input_file(path) as f:
                size = f.size()
                if offset >= size or length == 0:
                    return b""
                n = size - offset if length < 0 else min(length, size - offset)
                data: bytes = f.read_at(n, offset)
                return data

        return self._call("OPEN", path, fetch)

    def create(
        self, path: str, *, overwrite: bool = False, permission: int | None = None
    ) -> ArrowHdfsWriter:
        claim = claim_path(self.settings.authority(), posixpath.normpath(path), self.display(path))
        try:
            st = self._status_or_none(path)
            if st is not None and st.is_dir:
                raise IsADirectoryError(errno.EISDIR, "CREATE: is a directory", self.display(path))
            if st is not None and not overwrite:
                raise FileExistsError(errno.EEXIST, "CREATE: file exists", self.display(path))
            self._permission_ignored(permission, path)
            parent = posixpath.dirname(path)
            if parent:
                self._call("MKDIRS", parent, lambda: self.arrow.create_dir(parent, recursive=True))
            stream = self._call("CREATE", path, lambda: self.arrow.open_output_stream(path))
        except BaseException:
            claim.release()
            raise
        return ArrowHdfsWriter(self, path, stream, claim)

    def append(self, path: str) -> ArrowHdfsWriter:
        claim = claim_path(self.settings.authority(), posixpath.normpath(path), self.display(path))
        try:
            st = self.status(path)
            if st.is_dir:
                raise IsADirectoryError(errno.EISDIR, "APPEND: is a directory", self.display(path))
            stream = self._call("APPEND", path, lambda: self.arrow.open_append_stream(path))
        except BaseException:
            claim.release()
            raise
        return ArrowHdfsWriter(self, path, stream, claim)

    def truncate(self, path: str, length: int) -> None:
        msg = (
            "TRUNCATE: pyarrow's HDFS binding has no truncate; use webhdfs:// for truncate, "
            "or publish by rename"
        )
        raise UnsupportedOperationError(errno.EOPNOTSUPP, msg, self.display(path))

    def rename(self, src: str, dst: str, *, overwrite: bool = False) -> None:
        # pyarrow's move replaces an existing file (delete, then rename): look first.
        dst_st = self._status_or_none(dst)
        if dst_st is not None and not overwrite:
            raise FileExistsError(errno.EEXIST, "RENAME: target exists", self.display(dst))
        if not self.exists(src):
            raise FileNotFoundError(errno.ENOENT, "RENAME: source missing", self.display(src))
        self._call("RENAME", src, lambda: self.arrow.move(src, dst))

    def delete(self, path: str, *, recursive: bool = False) -> bool:
        st = self._status_or_none(path)
        if st is None:
            return False
        if not st.is_dir:
            self._call("DELETE", path, lambda: self.arrow.delete_file(path))
        elif recursive:
            self._call("DELETE", path, lambda: self.arrow.delete_dir(path))
        else:
            if self.list_dir(path):
                raise OSError(errno.ENOTEMPTY, "DELETE: directory not empty", self.display(path))
            self._call("DELETE", path, lambda: self.arrow.delete_dir(path))
        return True

    def mkdirs(self, path: str, *, permission: int | None = None) -> None:
        st = self._status_or_none(path)
        if st is not None and not st.is_dir:
            raise FileExistsError(errno.EEXIST, "MKDIRS: a file has this name", self.display(path))
        self._permission_ignored(permission, path)
        self._call("MKDIRS", path, lambda: self.arrow.create_dir(path, recursive=True))

    # -- plumbing ------------------------------------------------------------------------

    @staticmethod
    def _to_status(path: str, info: Any) -> FileStatus:
        from pyarrow import fs as pafs

        is_dir = info.type == pafs.FileType.Directory
        size = 0 if is_dir or info.size is None else int(info.size)
        mtime_ns = int(info.mtime_ns) if info.mtime_ns is not None else 0
        return FileStatus(path, size, mtime_ns, is_dir)

    def _status_or_none(self, path: str) -> FileStatus | None:
        try:
            return self.status(path)
        except FileNotFoundError:
            return None

    def _permission_ignored(self, permission: int | None, path: str) -> None:
        if permission is not None and not self._permission_warned:
            self._permission_warned = True
            logger.warning(
                "%s: pyarrow's HDFS binding cannot set permissions; %o is ignored and the "
                "cluster default applies",
                self.display(path),
                permission,
            )

    def _error(self, err: OSError, op: str, path: str) -> OSError:
        text = scrub(str(err))
        where = self.display(path)
        msg = f"{op}: {text}"
        if isinstance(err, FileNotFoundError) or "FileNotFoundException" in text:
            return FileNotFoundError(errno.ENOENT, msg, where)
        if isinstance(err, PermissionError) or "AccessControlException" in text:
            return PermissionError(errno.EACCES, msg, where)
        if "AlreadyBeingCreatedException" in text or "RecoveryInProgressException" in text:
            return BlockingIOError(errno.EWOULDBLOCK, msg, where)
        if isinstance(err, FileExistsError) or "FileAlreadyExistsException" in text:
            return FileExistsError(errno.EEXIST, msg, where)
        if "ParentNotDirectoryException" in text:
            return NotADirectoryError(errno.ENOTDIR, msg, where)
        return OSError(err.errno or errno.EIO, msg, where)

    def _call(self, op: str, path: str, fn: Callable[[], T]) -> T:
        """``fn()`` with connection failures retried (each logged) and errors mapped."""
        attempt = 0
        while True:
            try:
                return fn()
            except ImportError:
                raise
            except OSError as err:
                text = scrub(str(err))
                if not any(marker in text for marker in _CONNECT_MARKERS):
                    raise self._error(err, op, path) from None
                attempt += 1
                if attempt > self.settings.retries:
                    msg = f"{self.display(path)}: {op} failed after {attempt} attempts: {text}"
                    raise ConnectionError(errno.ECONNABORTED, msg) from None
                delay = self.settings.retry_backoff * 2 ** (attempt - 1)
                logger.warning(
                    "%s: %s failed (%s); retry %d of %d in %.2fs",
                    self.display(path),
                    op,
                    text,
                    attempt,
                    self.settings.retries,
                    delay,
                )
                time.sleep(delay)


class ArrowHdfsWriter:
    """An HDFS output stream; the namenode's lease makes it the file's only writer."""

    def __init__(self, fs: ArrowHdfsFileSystem, path: str, stream: Any, claim: WriterClaim) -> None:
        self._fs = fs
        self._path = path
        self._stream = stream
        self._claim = claim
        self._closed = False

    @property
    def path(self) -> str:
        return self._path

    def write(self, data: bytes) -> None:
        self._fs._call("WRITE", self._path, lambda: self._stream.write(data))

    def flush(self) -> None:
        self._fs._call("FLUSH", self._path, self._stream.flush)

    def sync(self) -> None:
        # pyarrow exposes no hsync: flushing is the most it offers before close.
        self.flush()

    def close(self) -> None:
        if self._closed:
            return
        try:
            self._fs._call("CLOSE", self._path, self._stream.close)
        finally:
            self._closed = True
            self._claim.release()

    def __enter__(self) -> ArrowHdfsWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
