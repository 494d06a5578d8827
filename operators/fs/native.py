"""The default ``hdfs://`` backend: HDFS's own RPC protocol through ``hdfs-native``.

``hdfs-native`` is a native client (Rust, no JVM, no libhdfs, no Hadoop install). It reads
``core-site.xml`` / ``hdfs-site.xml`` from ``config_dir`` or ``HADOOP_CONF_DIR``, so
``hdfs://nameservice`` URIs of HA clusters resolve as they do for Hadoop's own client.

What it lacks and how each gap is closed here:

- **truncate**: HDFS has it, the client does not. It is sent as the TRUNCATE operation of the
  same cluster's WebHDFS when its address is known (``webhdfs_uri``, or
  ``dfs.namenode.http-address`` in the Hadoop configuration); otherwise
  :attr:`NativeHdfsFileSystem.supports_truncate` is ``False`` and the sink publishes by rename.
  A recovery is often the first to truncate, so that WebHDFS is tried at start (one
  GETFILESTATUS through the same client, credentials and TLS trust): a refusal (an untrusted
  certificate, a failed login) is a :class:`~region.errors.ConfigError` naming the address; an
  address that does not answer means no truncate, with a WARNING.
- **hflush**: ``flush`` is ``hsync`` (durable, and visible to new readers).
- **a refused block**: the NameNode refuses addBlock (``NotReplicatedYetException``) while the
  DataNodes' reports of earlier blocks lag; Hadoop's client asks again, hdfs-native raises and
  its stream cannot ask again. The writer reopens the file at the length its DataNodes hold and
  writes the rest (bounded backoff); a close the client gave up on is asked again likewise.
- **a delegation token** (``token`` / ``token_env``): it takes none in its API and reads the
  Hadoop token file of ``HADOOP_TOKEN_FILE_LOCATION`` at each connection; the token is written
  to one of this process (:mod:`.token_file`), and the newest in ``token_env`` wins over the
  one the settings were resolved with (a task's, resolved on the driver).
- **the user**: it is read from ``HADOOP_USER_NAME`` whenever the client (re)connects, so a
  configured ``user`` is set there for the whole process; two ``hdfs://`` filesystems of one
  process with different users are refused.

Closes: the NameNode completes a file once a DataNode has reported a replica of its last block;
asked before that report lands (always on a one-DataNode cluster: it trails the write's last
acknowledgement), hdfs-native waits a fixed 500 ms and asks again. A file published whole (all
synced, nothing written after its rename) can be closed in the background instead
(:meth:`NativeHdfsWriter.close_later`, in :mod:`.native_writer` with the writer); the closes
still running when the interpreter exits
are waited for, each up to ``_EXIT_STALL`` seconds after its hand-over (:func:`settle_closes`;
one that takes longer waits on the cluster, and its file is left to the next reader). A
background close is asked no sooner than ``_CLOSE_AFTER`` after its file was opened: a small
file closed within moments of its opening (a checkpoint, a lock change) met that 500 ms wait 8
times in 12 on a one-DataNode sandbox, and never when closed 100 ms after (its DataNode's
report of the new block has gone out by then, and the report of the finished one follows at
once); a file written for longer is closed at once.

Leases: HDFS lets one client write a file. A second writer is refused (``BlockingIOError``)
until the holder closes it, or its lease expires (soft limit, 60 s on a default cluster).
:meth:`NativeHdfsFileSystem.recover_lease` ends a dead writer's lease at once; only a caller
that knows the holder is dead may call it (the sink does, under its region's lock).
"""

from __future__ import annotations

import errno
import logging
import os
import posixpath
import re
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any, TypeVar

from pydantic import SecretStr

from region.errors import ConfigError
from region.fs import FileStatus, ListingEntry

from .claims import claim_path
from .errors import scrub
from .hadoop_conf import conf_dir, hadoop_http_addresses, hadoop_properties, https_only
from .hadoop_errors import INVALID_ARGUMENT, LEASE_HELD, NOT_READY, builtin_error
from .kerberos import check_keytab, explain, is_kerberos_failure
from .native_writer import NOT_REPLICATED, NativeHdfsWriter, await_closes, settle_closes
from .settings import MAX_RETRY_DELAY, FileSystemSettings, split_uri
from .token_file import use_token
from .waits import Patience, reconnect_pause, retry_delay

if TYPE_CHECKING:
    from .webhdfs import WebHdfsFileSystem

__all__ = [
    "NativeHdfsFileSystem",
    "NativeHdfsWriter",
    "hadoop_http_addresses",
    "hadoop_properties",
    "settle_closes",
]

logger = logging.getLogger(__name__)

T = TypeVar("T")

_user_lock = threading.Lock()
#: The simple-auth user this module put in ``HADOOP_USER_NAME``.
_process_user: str | None = None
_RPC_ERROR = re.compile(r'RPCError\("(?P<cls>[\w.$]+)", "(?P<msg>.*?)(?:\\n|"\))', re.S)
_LEASE_MARKERS = (
    *LEASE_HELD,
    "lease holder",
    "lease is currently owned",
    "lease recovery is in progress",
    "is being created",
)
_CONNECT_MARKERS = ("Connection refused", "connection reset", "Connection reset", "Broken pipe")
_MAX_LEASE_POLL = 1.0
#: How long an append waits for the NameNode to hear of every replica of the last block.
_REPLICAS_WAIT = 5.0
#: A NameNode that just started refuses changes until enough blocks are reported.
_SAFE_MODE_MARKERS = (*NOT_READY, "in safe mode")
#: Errors hdfs-native raises as Python built-ins (kept, with the path as a URI).
_CLIENT_BUILTINS: tuple[tuple[type[OSError], int], ...] = (
    (FileExistsError, errno.EEXIST),
    (PermissionError, errno.EACCES),
    (IsADirectoryError, errno.EISDIR),
)


def _use_process_user(settings: FileSystemSettings) -> None:
    """Act as ``settings.user``: hdfs-native reads ``HADOOP_USER_NAME`` at each (re)connect
    (after a NameNode restart too), so the variable must hold it for the process's lifetime."""
    global _process_user
    user = settings.user
    if user is None:
        return
    with _user_lock:
        current = os.environ.get("HADOOP_USER_NAME")
        if current == user:
            _process_user = user
            return
        if current is not None:
            owner = "this process set" if current == _process_user else "is set to"
            msg = (
                f"user: {user!r} for {settings.display()} conflicts with HADOOP_USER_NAME, which "
                f"{owner} {current!r}: hdfs:// acts as one user per process (use webhdfs:// "
                "for a second user, or the same user)"
            )
            raise ValueError(msg)
        os.environ["HADOOP_USER_NAME"] = _process_user = user


def _conf_dir(settings: FileSystemSettings) -> str | None:
    return conf_dir(settings.config_dir)


#: Up to this many files, :meth:`NativeHdfsFileSystem.file_ids` asks for each one (a
#: GETFILESTATUS); more, and one listing of their directory (1 000 children an answer) is less.
_IDS_ONE_BY_ONE = 32
#: A WARNING that the fileIds could not be read names this many files (then a count).
_IDS_NAMED = 10


class NativeHdfsFileSystem:
    """:class:`region.fs.FileSystem` over HDFS RPC. Paths are absolute HDFS paths (``/a/b``)."""

    #: HDFS sets a file's mtime when the file is closed, not on writes (hflush, hsync): an
    #: old mtime does not say a file open for writing is idle (see ``hold_partial_line``).
    mtime_tracks_writes = False

    def __init__(self, settings: FileSystemSettings | str, *, client: Any = None) -> None:
        if isinstance(settings, str):
            settings = FileSystemSettings(uri=settings)
        if settings.kind != "hdfs":
            raise ValueError(f"uri: {settings.display()!r} is not an hdfs:// URI")
        newest = os.environ.get(settings.token_env) if settings.token_env else None
        if newest and (settings.token is None or newest != settings.token.get_secret_value()):
            # Settings resolved elsewhere (a task's, pickled on the driver) carry the token of
            # then; the variable holds the one the login handed on since.
            settings = settings.model_copy(update={"token": SecretStr(newest)})
        self.settings = settings
        self._authority = split_uri(settings.uri)[0].split("://", 1)[1]
        if settings.token is not None:
            # hdfs-native reads tokens only from the process's token file (the RPC service of
            # a name service is "ha-hdfs:<name>", as Hadoop names it); its WebHDFS twin
            # passes the same token as ``delegation``.
            service = self._authority
            if ":" not in service:
                service = f"ha-hdfs:{service}"
            use_token([service], settings.token.get_secret_value())
        #: The ``hdfs_native.Client``.
        self.client = client if client is not None else self._connect()
        #: The same cluster through WebHDFS: TRUNCATE, and reads of a block still being written.
        self._truncator = self._webhdfs_for_truncate()
        #: ``True`` when a WebHDFS address is known for TRUNCATE.
        self.supports_truncate = self._truncator is not None

    def __repr__(self) -> str:
        return f"NativeHdfsFileSystem({self.settings.display()!r})"

    def _connect(self) -> Any:
        try:
            from hdfs_native import Client
        except ImportError as err:  # pragma: no cover - a dependency
            raise ImportError(
                f"{self.settings.display()}: hdfs-native is missing ({err})"
            ) from None
        s = self.settings
        keytab = s.keytab.get_secret_value() if s.keytab is not None else None
        url = f"hdfs://{self._authority}"
        # The client retries and fails over between NameNodes itself: give it our budget
        # (InfiniteRetry: ``retries`` per call, and ``_call`` calls again without end).
        tries = s.retries if s.max_retries is None else s.max_retries
        config = {
            "dfs.client.failover.max.attempts": str(tries),
            "dfs.client.failover.sleep.base.millis": str(int(s.retry_backoff * 1000)),
            "dfs.client.failover.sleep.max.millis": str(
                int(min(s.retry_backoff * 2**tries, MAX_RETRY_DELAY) * 1000)
            ),
            "dfs.client.socket-timeout": str(int(s.timeout * 1000)),
        }
        if s.kerberos_principal is not None or s.keytab is not None:
            # A login asked for is a Kerberos cluster's: without a core-site.xml saying so the
            # client offers SIMPLE authentication, which such a NameNode refuses by closing the
            # connection ("RPC listener disconnected", nothing about Kerberos).
            config["hadoop.security.authentication"] = "kerberos"
        _use_process_user(s)
        check_keytab(s)
        client = self._call(
            "CONNECT",
            "/",
            lambda: Client(
                url,
                config,
                _conf_dir(s),
                kerberos_principal=s.kerberos_principal,
                kerberos_keytab=keytab,
            ),
        )
        self._call("GETFILESTATUS", "/", lambda: client.get_file_info("/"))
        return client

    def _webhdfs_for_truncate(self) -> Any:
        from .webhdfs import WebHdfsFileSystem

        uri = self.settings.webhdfs_uri
        if uri is None:
            addresses = hadoop_http_addresses(self._authority, _conf_dir(self.settings))
            if not addresses:
                logger.info(
                    "%s: no WebHDFS address known (webhdfs_uri, or dfs.namenode.http-address in "
                    "the Hadoop configuration): no truncate, the sink publishes by rename; with "
                    "on_modified = 'warn' or 'fail' a scan cannot tell a file replaced under a "
                    "name read from one changed in place (the default decides by content)",
                    self.display("/"),
                )
                return None
            scheme = "swebhdfs" if https_only(_conf_dir(self.settings)) else "webhdfs"
            uri = f"{scheme}://" + ",".join(addresses)
        # The same cluster, user and credentials, over HTTP.
        validated = FileSystemSettings(uri=uri)  # a bad webhdfs_uri fails here, named
        update = {"uri": validated.uri, "webhdfs_uri": None, "config_dir": None}
        truncator = WebHdfsFileSystem(self.settings.model_copy(update=update))
        # Tried now, not first at a recovery (months later, and then with every retry failing).
        shown = truncator.display("/")
        try:
            truncator.status("/")
        except PermissionError as exc:
            msg = (
                f"{self.display('/')}: truncate (used when a run recovers) goes through the "
                f"cluster's WebHDFS {shown}, which refused this client: {exc}"
            )
            raise ConfigError(msg) from None
        except OSError as exc:
            logger.warning(
                "%s: the cluster's WebHDFS %s does not answer (%s): no truncate, the sink "
                "publishes by rename and recovers by rewriting; with on_modified = 'warn' or "
                "'fail' a scan cannot tell a file replaced under a name read from one changed "
                "in place (the default decides by content)",
                self.display("/"),
                shown,
                exc,
            )
            return None
        return truncator

    def display(self, path: str) -> str:
        return self.settings.display(path)

    def await_closes(self, timeout: float) -> bool:
        """Wait, at most ``timeout`` seconds, for the closes this process handed to the
        background on this cluster (:class:`~region.fs.CloseAwaiter`): a file this process
        wrote and renamed into place may still be open, and ending its lease would make its
        own close fail."""
        return await_closes(self.display("/"), timeout)

    @property
    def identifies_files(self) -> bool:
        return self._truncator is not None

    @property
    def webhdfs(self) -> WebHdfsFileSystem | None:
        """The same cluster over WebHDFS when its address is known: what hdfs-native's
        FileStatus leaves out (the fileId) is read through it."""
        twin: WebHdfsFileSystem | None = self._truncator
        return twin

    # -- the contract --------------------------------------------------------------------

    def status(self, path: str) -> FileStatus:
        info = self._call("GETFILESTATUS", path, lambda: self.client.get_file_info(path))
        return self._to_status(path, info)

    def exists(self, path: str) -> bool:
        try:
            self.status(path)
        except FileNotFoundError:
            return False
        return True

    def list_dir(self, path: str) -> list[FileStatus]:
        st = self.status(path)
        if not st.is_dir:
            msg = "LISTSTATUS: not a directory"
            raise NotADirectoryError(errno.ENOTDIR, msg, self.display(path))

        def listing() -> list[FileStatus]:
            items: Iterator[Any] = self.client.list_status(path, False)
            base = path.rstrip("/") or "/"
            return [
                self._to_status(posixpath.join(base, posixpath.basename(i.path)), i) for i in items
            ]

        return self._call("LISTSTATUS", path, listing)

    def list_entries(self, path: str) -> list[ListingEntry]:
        """:meth:`list_dir` as :data:`~region.fs.ListingEntry` tuples (what a scan lists): one
        tuple per child straight from the client's pages, no FileStatus in between."""
        st = self.status(path)
        if not st.is_dir:
            msg = "LISTSTATUS: not a directory"
            raise NotADirectoryError(errno.ENOTDIR, msg, self.display(path))
        base = path.rstrip("/")

        def listing() -> list[ListingEntry]:
            out: list[ListingEntry] = []
            append = out.append  # 100 000s of children: each step costs
            for i in self.client.list_status(path, False):
                child = i.path  # the directory's path joined with the child's name
                is_dir = i.isdir
                name = child.rpartition("/")[2]
                append(
                    (
                        i.modification_time * 1_000_000,
                        name,
                        child,
                        0 if is_dir else i.length,
                        is_dir,
                        None,  # hdfs-native's FileStatus has no fileId: file_ids reads it
                    )
                )
            if out and out[0][2] != f"{base}/{out[0][1]}":
                # The client spelled the paths in another form than <directory>/<name>.
                out = [(m, n, f"{base}/{n}", size, d, i) for m, n, _, size, d, i in out]
            return out

        return self._call("LISTSTATUS", path, listing)

    def file_ids(self, paths: list[str]) -> list[int | None]:
        """The fileId of each of ``paths`` through the WebHDFS twin (``None`` without one, or
        for a file gone): a GETFILESTATUS each when they are few, else one listing (in pages)
        of each directory they are in. A scan asks this only for files it emits or finds
        changed, never for every file it lists."""
        twin = self.webhdfs
        if twin is None or not paths:
            return [None] * len(paths)
        try:
            if len(paths) <= _IDS_ONE_BY_ONE:

                def one(path: str) -> int | None:
                    try:
                        return twin.status(path).file_id
                    except FileNotFoundError:
                        return None

                if len(paths) == 1:
                    return [one(paths[0])]
                # A round trip each: several at once (a scan waits for them).
                with ThreadPoolExecutor(min(8, len(paths)), "file-ids") as pool:
                    return list(pool.map(one, paths))
            ids: dict[str, int | None] = {}
            for folder in {posixpath.dirname(p) for p in paths}:
                try:
                    entries = twin.list_entries(folder)
                except FileNotFoundError:
                    continue
                ids.update((e[2], e[5]) for e in entries)
            return [ids.get(p) for p in paths]
        except OSError as exc:
            # Not worth failing a scan for: without the ids, a file replaced under one of
            # these names is taken as changed in place, which on_modified reports.
            shown = ", ".join(self.display(p) for p in paths[:_IDS_NAMED])
            if len(paths) > _IDS_NAMED:
                shown += f" and {len(paths) - _IDS_NAMED} more"
            logger.warning(
                "%s: the fileIds of %s could not be read through WebHDFS %s (%s): a file "
                "replaced under such a name counts as changed in place (on_modified = 'warn' "
                "reads it not, 'new_version' reads it again whole)",
                self.display("/"),
                shown,
                twin.display("/"),
                exc,
            )
            return [None] * len(paths)

    def read(self, path: str, offset: int = 0, length: int = -1) -> bytes:
        if offset < 0:
            raise ValueError(f"{self.display(path)}: cannot read at a negative offset {offset}")

        def fetch() -> tuple[bytes, int]:
            reader = self.client.read(path)
            readable = len(reader)  # never read past it: the client panics
            end = readable if length < 0 else min(offset + length, readable)
            data: bytes = reader.read_range(offset, end - offset) if end > offset else b""
            return data, readable

        data, readable = self._call("OPEN", path, fetch)
        if length >= 0 and len(data) == length:
            return data
        # The client reads complete blocks only; the NameNode knows the length hsync'ed into
        # a block still being written, which WebHDFS (Hadoop's own reader) can read.
        size = self.status(path).size
        want = size if length < 0 else min(size, offset + length)
        if want <= max(readable, offset) or self._truncator is None:
            return data
        start = max(readable, offset)
        rest: bytes = self._truncator.read(path, start, want - start)
        return data + rest

    def open_ranges(self, path: str) -> Callable[[int, int], bytes]:
        """:class:`~region.fs.RangeReader`: the file opened once (the client's open asks the
        NameNode for the blocks); a range past what it held then is read by :meth:`read`."""
        reader = self._call("OPEN", path, lambda: self.client.read(path))
        readable = len(reader)

        def read(offset: int, length: int) -> bytes:
            if offset < 0 or length < 0 or offset + length > readable:
                return self.read(path, offset, length)
            if not length:
                return b""
            data: bytes = self._call("OPEN", path, lambda: reader.read_range(offset, length))
            return data

        return read

    def create(
        self, path: str, *, overwrite: bool = False, permission: int | None = None
    ) -> NativeHdfsWriter:
        from hdfs_native import WriteOptions

        claim = claim_path(self.settings.authority(), posixpath.normpath(path), self.display(path))
        try:
            st = self._status_or_none(path)
            if st is not None and st.is_dir:
                raise IsADirectoryError(errno.EISDIR, "CREATE: is a directory", self.display(path))
            if st is not None and not overwrite:
                # HDFS answers a lease error first when another client is writing it.
                raise FileExistsError(errno.EEXIST, "CREATE: file exists", self.display(path))
            options = WriteOptions(
                overwrite=overwrite,
                create_parent=True,
                permission=0o644 if permission is None else permission,
            )
            stream = self._call("CREATE", path, lambda: self.client.create(path, options))
        except BaseException:
            claim.release()
            raise
        return NativeHdfsWriter(self, path, stream, claim, 0)

    def append(self, path: str) -> NativeHdfsWriter:
        claim = claim_path(self.settings.authority(), posixpath.normpath(path), self.display(path))
        try:
            info = self._call("GETFILESTATUS", path, lambda: self.client.get_file_info(path))
            st = self._to_status(path, info)
            if st.is_dir:
                raise IsADirectoryError(errno.EISDIR, "APPEND: is a directory", self.display(path))
            if st.size % max(int(info.blocksize), 1):  # a partial last block is appended to
                self._await_replicas(path, int(info.replication))
            stream = self._lease_wait("APPEND", path, lambda: self.client.append(path))
        except BaseException:
            claim.release()
            raise
        return NativeHdfsWriter(self, path, stream, claim, st.size)

    def _await_replicas(self, path: str, replication: int) -> None:
        """Wait until the NameNode knows every replica of the file's last block, or at most
        ``_REPLICAS_WAIT`` seconds (then go on, with a warning).

        hdfs-native appends to the last block without a new generation stamp (the Java client
        asks for one): a DataNode whose replica the NameNode has not heard of yet (its report
        trails a close by milliseconds) is left out of the append's pipeline and keeps a shorter
        replica of the same stamp. The next append through it then fails, and recovering that
        file's lease rolls it back to the shorter replica: bytes of a close that succeeded are
        gone. Seen on 1 append in 200 right after a close, on 2 DataNodes. Only the WebHDFS
        twin tells the replicas; without one this check is skipped.
        """
        twin = self._truncator
        if twin is None or replication <= 1:
            return
        deadline = time.monotonic() + _REPLICAS_WAIT
        delay = 0.005
        while True:
            known = twin.last_block_replicas(path)
            if known is None or known >= replication:
                return
            if time.monotonic() >= deadline:
                logger.warning(
                    "%s: the NameNode knows %d of the %d replicas of the last block after "
                    "%.0fs; appending through those (a DataNode is down or slow to report)",
                    self.display(path),
                    known,
                    replication,
                    _REPLICAS_WAIT,
                )
                return
            time.sleep(delay)
            delay = min(delay * 2, 0.25)

    def truncate(self, path: str, length: int) -> None:
        if self._truncator is None:
            from .errors import UnsupportedOperationError

            msg = (
                "TRUNCATE: no WebHDFS address is known for this cluster (set webhdfs_uri or "
                "dfs.namenode.http-address); the sink publishes by rename"
            )
            raise UnsupportedOperationError(errno.EOPNOTSUPP, msg, self.display(path))
        if length < 0:
            raise ValueError(f"{self.display(path)}: cannot truncate to a negative length {length}")
        size = self.status(path).size
        if length > size:
            msg = f"{self.display(path)}: cannot truncate {size} bytes to a longer {length}"
            raise ValueError(msg)
        if length == size:
            return
        self._truncator.truncate(path, length)

    def rename(self, src: str, dst: str, *, overwrite: bool = False) -> None:
        self._call("RENAME", src, lambda: self.client.rename(src, dst, overwrite))

    def delete(self, path: str, *, recursive: bool = False) -> bool:
        st = self._status_or_none(path)
        if st is None:
            return False
        return bool(self._call("DELETE", path, lambda: self.client.delete(path, recursive)))

    def mkdirs(self, path: str, *, permission: int | None = None) -> None:
        st = self._status_or_none(path)
        if st is not None:
            if not st.is_dir:
                msg = "MKDIRS: a file has this name"
                raise FileExistsError(errno.EEXIST, msg, self.display(path))
            return
        perm = 0o755 if permission is None else permission
        self._call("MKDIRS", path, lambda: self.client.mkdirs(path, perm, True))

    # -- beyond the contract -------------------------------------------------------------

    def set_permission(self, path: str, permission: int) -> None:
        """Set the permission bits (e.g. ``0o644``) of a file or directory."""
        self._call("SETPERMISSION", path, lambda: self.client.set_permission(path, permission))

    def recover_lease(self, path: str, *, own: bool = False) -> float:
        """End the lease of a writer known to be dead and wait until the file is closed, with
        its length settled (block recovery over). Returns the seconds it took (0 when the file
        was not open). ``BlockingIOError`` after ``lease_recovery_timeout``.

        Only for a caller that holds the right to write ``path`` (the sink, under its region's
        lock): a live writer loses the file. ``own``: the writer is this process's own (a close
        or a block the NameNode refused), which is no news worth a WARNING.
        """
        started = time.monotonic()
        patience = Patience(self.settings.lease_recovery_timeout, most=_MAX_LEASE_POLL)
        first = True
        while not self._call("RECOVERLEASE", path, lambda: self.client.recover_lease(path)):
            if first:
                logger.log(
                    logging.INFO if own else logging.WARNING,
                    "%s: recovering the lease of %s",
                    self.display(path),
                    "this process's own writer" if own else "a writer that did not close the file",
                )
                first = False
            if not patience.pause():
                msg = f"RECOVERLEASE: the file is still open after {patience.timeout:g}s"
                raise BlockingIOError(errno.EWOULDBLOCK, msg, self.display(path))
        took = time.monotonic() - started
        if not first:
            logger.info("%s: lease recovered in %.2fs", self.display(path), took)
        return took

    # -- plumbing ------------------------------------------------------------------------

    @staticmethod
    def _to_status(path: str, info: Any) -> FileStatus:
        # HDFS keeps milliseconds.
        is_dir = bool(info.isdir)
        return FileStatus(
            path, 0 if is_dir else int(info.length), int(info.modification_time) * 1_000_000, is_dir
        )

    def _status_or_none(self, path: str) -> FileStatus | None:
        try:
            return self.status(path)
        except FileNotFoundError:
            return None

    def _error(self, err: BaseException, op: str, path: str) -> OSError:
        """The built-in exception for a client error; the message names the path as a URI."""
        text = scrub(str(err))
        match = _RPC_ERROR.search(text)
        cls = match.group("cls").rpartition(".")[2] if match else ""
        detail = match.group("msg") if match else text.split("\n\tat ", 1)[0].strip()
        where = self.display(path)
        msg = f"{op}: {detail}"
        s = self.settings
        login = s.kerberos_principal is not None or s.keytab is not None
        if "DataTransferError" in text and login and _conf_dir(s) is None:
            msg += (
                " (the DataNodes of a Kerberized cluster may ask for SASL, set by "
                "dfs.data.transfer.protection in its hdfs-site.xml, which this client has not "
                "read: give [filesystem] config_dir, or HADOOP_CONF_DIR, the cluster's "
                "configuration directory)"
            )
        if any(marker in text for marker in _LEASE_MARKERS):
            return BlockingIOError(errno.EWOULDBLOCK, msg, where)
        # hdfs-native raises some as Python built-ins, and some texts carry no class name.
        if isinstance(err, FileNotFoundError) or cls == "FileNotFoundException":
            if "is not a file" in text or "Path is not a file" in text:
                return IsADirectoryError(errno.EISDIR, msg, where)
            return FileNotFoundError(errno.ENOENT, msg, where)
        for builtin, code in _CLIENT_BUILTINS:
            if isinstance(err, builtin):
                return builtin(code, msg, where)
        if cls in INVALID_ARGUMENT:
            return OSError(errno.EINVAL, msg, where)
        if cls == NOT_REPLICATED:  # the writer retries on the class name: keep it
            return OSError(errno.EIO, f"{op}: {cls}: {detail}", where)
        mapped = builtin_error(cls, msg, where)
        if mapped is not None:
            return mapped
        if "not a directory" in text:
            return NotADirectoryError(errno.ENOTDIR, msg, where)
        if "is non empty" in text:
            return OSError(errno.ENOTEMPTY, msg, where)
        return OSError(getattr(err, "errno", None) or errno.EIO, msg, where)

    def _call(self, op: str, path: str, fn: Callable[[], T]) -> T:
        """``fn()`` with errors mapped. The client has already retried connection failures
        ``retries`` times (and failed over between the NameNodes of an HA cluster); under
        ``InfiniteRetry`` the call is made again without end (each time logged) until a stop of
        the job. A NameNode in safe mode is waited for, up to ``safe_mode_timeout``."""
        patience: Patience | None = None
        rounds = 0
        while True:
            try:
                return fn()
            except TimeoutError:
                raise  # already names the file (a writer's bounded call)
            except (OSError, RuntimeError) as err:
                text = scrub(str(err))
                if is_kerberos_failure(err):  # no retry logs anyone in
                    raise explain(self.settings, text, op, self.display(path)) from None
                if isinstance(err, ConnectionError) or any(m in text for m in _CONNECT_MARKERS):
                    first = text.splitlines()[0] if text else type(err).__name__
                    if self.settings.max_retries is None:
                        rounds += 1
                        self._reconnect_later(op, path, first, rounds)
                        continue
                    retries = self.settings.max_retries
                    msg = f"{self.display(path)}: {op} failed after {retries} retries: {first}"
                    raise ConnectionError(errno.ECONNABORTED, msg) from None
                if not any(m in text for m in _SAFE_MODE_MARKERS):
                    raise self._error(err, op, path) from None
                if patience is None:
                    patience = Patience(self.settings.safe_mode_timeout, first=0.1)
                    logger.warning("%s: %s waits for the NameNode to leave safe mode", path, op)
                if not patience.pause():
                    raise self._error(err, op, path) from None

    def _reconnect_later(self, op: str, path: str, reason: str, rounds: int) -> None:
        """Log and pause before ``InfiniteRetry`` calls again (a stop ends the pause)."""
        where = self.display(path)
        delay = retry_delay(self.settings.retry_backoff, rounds)
        logger.warning(
            "%s: %s failed (%s); retry %d of unlimited (InfiniteRetry) in %.2fs",
            where,
            op,
            reason,
            rounds,
            delay,
        )
        reconnect_pause(delay, interruptible=True, what=op, where=where)

    def _lease_wait(self, op: str, path: str, fn: Callable[[], T]) -> T:
        """``_call`` that waits while another writer holds the lease (or it is recovered)."""
        patience = Patience(self.settings.lease_recovery_timeout, most=_MAX_LEASE_POLL)
        while True:
            try:
                return self._call(op, path, fn)
            except BlockingIOError as err:
                logger.info("%s: %s waits for the lease (%s)", self.display(path), op, err)
                if not patience.pause():
                    timeout = patience.timeout
                    msg = f"{op}: the lease is still held after {timeout:g}s: {err.strerror}"
                    raise BlockingIOError(errno.EWOULDBLOCK, msg, self.display(path)) from None
