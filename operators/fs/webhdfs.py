"""The WebHDFS backend (``webhdfs://host:9870``) through the ``hdfs`` package (HdfsCLI).

Each WebHDFS write is one HTTP request that opens the file, sends the bytes and closes the file, so
a :class:`WebHdfsWriter` buffers what is written and sends it on ``flush``/``sync``/``close`` as one
APPEND (``create`` sends an empty CREATE at once, so the file exists and a clash is reported where
it happens). The HDFS lease is held by the server only during a request; between requests the
single-writer promise is kept per process (a second writer of the same path from this process gets
``BlockingIOError`` at once) and by the server while an upload runs.
"""

from __future__ import annotations

import errno
import functools
import getpass
import logging
import os
import posixpath
import time
from collections.abc import Callable
from typing import Any, TypeVar

import requests as rq
import urllib3
from hdfs.client import Client, InsecureClient, TokenClient, _Request
from hdfs.util import HdfsError
from pydantic import SecretStr

from region.fs import FileStatus, ListingEntry

from .claims import WriterClaim, claim_path
from .errors import TokenRefusedError, install_log_scrubbing, register_secret, scrub
from .hadoop_errors import INVALID_ARGUMENT, NOT_READY, builtin_error
from .kerberos import explain, is_kerberos_failure
from .settings import WEBHDFS_PREFIX, FileSystemSettings
from .waits import Patience, reconnect_pause, retry_delay

__all__ = ["WebHdfsFileSystem", "WebHdfsWriter"]

logger = logging.getLogger(__name__)

T = TypeVar("T")

# HdfsCLI has no truncate method; its request machinery (HA failover, auth, error mapping) is
# reused for the TRUNCATE operation of the WebHDFS REST API.
_truncate_request = _Request("POST").to_method("TRUNCATE")
#: A directory's listing in pages (Hadoop >= 2.8): each answer holds ``dfs.ls.limit`` children
#: (1000 by default) and how many remain, the next page starts after the last name.
_list_batch_request = _Request("GET").to_method("LISTSTATUS_BATCH")
_get_token_request = _Request("GET").to_method("GETDELEGATIONTOKEN")
#: The NameNode's located blocks of a range of a file (all Hadoop versions; the public
#: GETFILEBLOCKLOCATIONS came with 3.3).
_block_locations_request = _Request("GET").to_method("GET_BLOCK_LOCATIONS")
_renew_token_request = _Request("PUT").to_method("RENEWDELEGATIONTOKEN")
_cancel_token_request = _Request("PUT").to_method("CANCELDELEGATIONTOKEN")

_CONNECTION_ERRORS: tuple[type[BaseException], ...] = (
    rq.exceptions.ConnectionError,
    rq.exceptions.Timeout,
    rq.exceptions.ChunkedEncodingError,
    urllib3.exceptions.HTTPError,  # a body cut off while it is read through ``raw``
)
#: A writer sends its buffer when it grows past this, as a buffered local file would.
_AUTO_FLUSH_BYTES = 16 << 20
_MAX_LEASE_POLL = 2.0
#: What an untrusted server certificate says (ssl.SSLCertVerificationError's text).
_CERT_REFUSED = ("CERTIFICATE_VERIFY_FAILED", "certificate verify failed", "doesn't match")


def _lost_namenode(err: HdfsError) -> bool:
    """Whether a DataNode answered that its connection to the NameNode broke (it was
    restarted): ``java.io.EOFException`` "End of File Exception between ... destination host"."""
    text = str(getattr(err, "message", None) or err)
    return getattr(err, "exception", None) == "EOFException" or "End of File Exception" in text


class _TrustAdapter(rq.adapters.HTTPAdapter):
    """HTTPS that trusts the CAs of one PEM file. Per request: requests lets
    ``REQUESTS_CA_BUNDLE`` / ``CURL_CA_BUNDLE`` override a session's ``verify``, and the
    configured ``ca_bundle`` must win."""

    def __init__(self, bundle: str) -> None:
        super().__init__()
        self._bundle = bundle

    def send(
        self,
        request: rq.PreparedRequest,
        stream: bool = False,
        timeout: float | tuple[float | None, float | None] | None = None,
        verify: bool | str = True,
        cert: str | tuple[str, str] | None = None,
        proxies: dict[str, str] | None = None,
    ) -> rq.Response:
        return super().send(request, stream, timeout, self._bundle, cert, proxies)


def _make_client(settings: FileSystemSettings) -> Client:
    for secret in (settings.password, settings.token, settings.keytab):
        if secret is not None:
            register_secret(secret.get_secret_value())
    tls = settings.scheme in ("swebhdfs", "https")
    proto = "https" if tls else "http"
    # The client appends /webhdfs/v1 itself: a gateway's path goes in front of it.
    base = settings.gateway_path[: -len(WEBHDFS_PREFIX)]
    url = ";".join(
        f"{proto}://[{h}]:{p}{base}" if ":" in h else f"{proto}://{h}:{p}{base}"
        for h, p in settings.hosts()
    )
    session = rq.Session()
    if tls and settings.ca_bundle is not None:
        from .tls import verify_path

        password = settings.key_store_password
        bundle = verify_path(settings.ca_bundle, password.get_secret_value() if password else None)
        session.mount("https://", _TrustAdapter(bundle))
    if settings.kerberos_principal is not None:
        from .kerberos import spnego_auth

        session.auth = spnego_auth(settings)
        return Client(url, proxy=settings.user, timeout=settings.timeout, session=session)
    if settings.password is not None:
        if settings.user is None:
            raise ValueError(f"{settings.display()}: a password is set but no user")
        session.auth = (settings.user, settings.password.get_secret_value())
    if settings.token is not None:
        token = settings.token.get_secret_value()
        return TokenClient(
            url, token, proxy=settings.user, timeout=settings.timeout, session=session
        )
    user = settings.user or getpass.getuser()
    return InsecureClient(url, user=user, timeout=settings.timeout, session=session)


class _NoBatchListing(Exception):
    """The server does not know LISTSTATUS_BATCH."""


def _entry(base: str, name: str, st: dict[str, Any]) -> ListingEntry:
    """A child's :data:`~region.fs.ListingEntry` from its WebHDFS FileStatus (milliseconds)."""
    is_dir = st["type"] == "DIRECTORY"
    file_id = st.get("fileId")
    return (
        int(st["modificationTime"]) * 1_000_000,
        name,
        f"{base}/{name}",
        int(st["length"]),
        is_dir,
        None if file_id is None else int(file_id),
    )


class WebHdfsFileSystem:
    """:class:`region.fs.FileSystem` over WebHDFS. Paths are absolute HDFS paths (``/a/b``)."""

    supports_truncate = True
    #: HDFS sets a file's mtime when the file is closed, not on writes (hflush, hsync): an
    #: old mtime does not say a file open for writing is idle (see ``hold_partial_line``).
    mtime_tracks_writes = False

    def __init__(self, settings: FileSystemSettings | str, *, client: Client | None = None) -> None:
        if isinstance(settings, str):
            settings = FileSystemSettings(uri=settings)
        if settings.kind != "webhdfs":
            raise ValueError(f"uri: {settings.display()!r} is not a webhdfs:// URI")
        self.settings = settings
        # urllib3 logs request URLs (with the delegation token) at DEBUG.
        install_log_scrubbing()
        #: The ``hdfs`` package client (for operations outside the contract).
        self.client = client if client is not None else _make_client(settings)
        #: ``None`` until a RENAME tells whether the server honours ``renameoptions``.
        self._rename2: bool | None = None
        #: False once the server refused LISTSTATUS_BATCH: directories are listed whole.
        self._batch_listing = True

    def __repr__(self) -> str:
        return f"WebHdfsFileSystem({self.settings.display()!r})"

    def display(self, path: str) -> str:
        return self.settings.display(path)

    # -- the contract --------------------------------------------------------------------

    def status(self, path: str) -> FileStatus:
        data = self._call("GETFILESTATUS", path, lambda: self.client.status(path))
        return self._to_status(path, data)

    def exists(self, path: str) -> bool:
        try:
            self.status(path)
        except (FileNotFoundError, NotADirectoryError):  # missing, or under a file
            return False
        return True

    def list_dir(self, path: str) -> list[FileStatus]:
        entries = self._call("LISTSTATUS", path, lambda: self.client.list(path, status=True))
        return [self._to_status(posixpath.join(path, name), st) for name, st in entries]

    def list_entries(self, path: str) -> list[ListingEntry]:
        """:meth:`list_dir` as :data:`~region.fs.ListingEntry` tuples, fetched in pages
        (LISTSTATUS_BATCH): one LISTSTATUS of a directory of a million children is one JSON
        answer of 100s of MB, parsed whole into a dict per child before the first is looked at;
        a page at a time, only the tuples stay. A server without LISTSTATUS_BATCH (Hadoop < 2.8,
        an older HttpFS) is asked with LISTSTATUS from then on.

        Pages are not one snapshot, and neither is LISTSTATUS (the NameNode streams it from the
        same pages): a child created or removed meanwhile may be missing from this listing,
        never listed twice; the next listing has it.
        """
        if self._batch_listing:
            try:
                return self._list_in_pages(path)
            except _NoBatchListing as err:
                self._batch_listing = False
                logger.info(
                    "%s: the server has no LISTSTATUS_BATCH (%s): directories are listed whole",
                    self.display("/"),
                    err,
                )
        entries = self._call("LISTSTATUS", path, lambda: self.client.list(path, status=True))
        base = path.rstrip("/")
        return [_entry(base, name, st) for name, st in entries]

    def _list_in_pages(self, path: str) -> list[ListingEntry]:
        base = path.rstrip("/")
        out: list[ListingEntry] = []
        after = ""
        while True:
            page = self._call("LISTSTATUS_BATCH", path, functools.partial(self._page, path, after))
            statuses = page["partialListing"]["FileStatuses"]["FileStatus"]
            if len(statuses) == 1 and not statuses[0]["pathSuffix"] and not after:
                # The path itself: a file (LISTSTATUS answers the same for a file).
                msg = "LISTSTATUS_BATCH: not a directory"
                raise NotADirectoryError(errno.ENOTDIR, msg, self.display(path))
            out += [_entry(base, st["pathSuffix"], st) for st in statuses]
            if not statuses or not int(page.get("remainingEntries") or 0):
                return out
            after = statuses[-1]["pathSuffix"]

    def _page(self, path: str, after: str) -> dict[str, Any]:
        params = {"startAfter": after} if after else {}
        try:
            res = _list_batch_request(self.client, path, **params)
        except HdfsError as err:
            message = str(getattr(err, "message", None) or err)
            if getattr(err, "exception", None) == "UnsupportedOperationException" or (
                '"op"' in message and "LISTSTATUS_BATCH" in message
            ):
                raise _NoBatchListing(scrub(message)) from None
            raise
        listing: dict[str, Any] = res.json()["DirectoryListing"]
        return listing

    def read(self, path: str, offset: int = 0, length: int = -1) -> bytes:
        if offset < 0:
            raise ValueError(f"{self.display(path)}: cannot read at a negative offset {offset}")
        if length == 0:
            return b""

        def fetch() -> bytes:
            size = None if length < 0 else length
            with self.client.read(path, offset=offset, length=size) as reader:
                data: bytes = reader.read()
                return data

        try:
            return self._call("OPEN", path, fetch)
        except (ConnectionError, FileNotFoundError, PermissionError):
            raise
        except OSError as err:
            # HDFS refuses an offset past the end; the contract answers no bytes, as a file does.
            if offset > 0:
                st = self.status(path)
                if not st.is_dir and offset >= st.size:
                    return b""
            raise err from None

    def create(
        self, path: str, *, overwrite: bool = False, permission: int | None = None
    ) -> WebHdfsWriter:
        claim = claim_path(self.settings.authority(), self._resolve(path), self.display(path))
        perm = None if permission is None else f"{permission:o}"

        def send() -> None:
            self.client.write(path, data=b"", overwrite=overwrite, permission=perm)

        try:
            if overwrite:  # replacing a file another writer holds waits for its lease
                self._lease_wait("CREATE", path, send)
            else:
                try:
                    self._call("CREATE", path, send)
                except BlockingIOError as err:
                    # HDFS looks at the lease before it says the file exists: a file another
                    # writer holds (or one being recovered) is refused as a lease conflict.
                    msg = f"{err.strerror} (the file exists)"
                    raise FileExistsError(errno.EEXIST, msg, self.display(path)) from None
        except BaseException:
            claim.release()
            raise
        return WebHdfsWriter(self, path, claim, 0)

    def append(self, path: str) -> WebHdfsWriter:
        claim = claim_path(self.settings.authority(), self._resolve(path), self.display(path))
        try:
            st = self.status(path)
            if st.is_dir:
                raise IsADirectoryError(errno.EISDIR, "APPEND: is a directory", self.display(path))
        except BaseException:
            claim.release()
            raise
        return WebHdfsWriter(self, path, claim, st.size)

    # -- delegation tokens (a Kerberos login hands them to processes without a keytab) ------

    def get_delegation_token(self, renewer: str | None = None) -> str:
        """A new HDFS delegation token of the logged-in user (``token`` / ``token_env`` of
        another process's settings); registered as a secret at once."""
        params = {} if renewer is None else {"renewer": renewer}
        data = self._call(
            "GETDELEGATIONTOKEN", "/", lambda: _get_token_request(self.client, "/", **params).json()
        )
        token = (data.get("Token") or {}).get("urlString")
        if not token:
            raise OSError(
                errno.EIO, "GETDELEGATIONTOKEN: no token in the answer", self.display("/")
            )
        register_secret(token)
        return str(token)

    def renew_delegation_token(self, token: str) -> float:
        """Renew ``token`` (this user must be its renewer); its new expiry, epoch seconds."""
        data = self._call(
            "RENEWDELEGATIONTOKEN",
            "/",
            lambda: _renew_token_request(self.client, "/", token=token).json(),
        )
        return int(data["long"]) / 1000.0

    def cancel_delegation_token(self, token: str) -> None:
        """End ``token`` now: the NameNode refuses it from then on."""
        self._call(
            "CANCELDELEGATIONTOKEN",
            "/",
            lambda: _cancel_token_request(self.client, "/", token=token),
        )

    def last_block_replicas(self, path: str) -> int | None:
        """How many replicas of the file's last block the NameNode knows of (``None`` when the
        file has no block)."""

        def send() -> Any:
            return _block_locations_request(self.client, path, offset=0, length=1).json()

        blocks = self._call("GET_BLOCK_LOCATIONS", path, send).get("LocatedBlocks") or {}
        last = blocks.get("lastLocatedBlock")
        return None if last is None else len(last.get("locations") or ())

    def truncate(self, path: str, length: int) -> None:
        where = self.display(path)
        if length < 0:
            raise ValueError(f"{where}: cannot truncate to a negative length {length}")

        def send() -> Any:
            return _truncate_request(self.client, path, newlength=length).json()

        # 1. TRUNCATE answers true when done, false when the cut block is being recovered.
        answer = self._lease_wait("TRUNCATE", path, send)
        if answer.get("boolean", True):
            return
        # 2. Wait until the namenode reports the new length (the recovery is over).
        deadline = time.monotonic() + self.settings.lease_recovery_timeout
        delay = 0.05
        while (size := self.status(path).size) != length:
            if time.monotonic() >= deadline:
                msg = (
                    f"TRUNCATE to {length} bytes: block recovery not finished after "
                    f"{self.settings.lease_recovery_timeout:g}s (length {size})"
                )
                raise BlockingIOError(errno.EWOULDBLOCK, msg, where)
            time.sleep(delay)
            delay = min(delay * 2, _MAX_LEASE_POLL)

    def rename(self, src: str, dst: str, *, overwrite: bool = False) -> None:
        dst_abs = self._resolve(dst)
        # A server that ignores ``renameoptions`` moves src *into* an existing directory dst and
        # answers true: look first while it is not known to honour them.
        if self._rename2 is not True and self.exists(dst):
            if not overwrite:
                raise FileExistsError(errno.EEXIST, "RENAME: target exists", self.display(dst))
            if self._rename2 is False:
                self.delete(dst)  # not atomic: such a server has no rename-with-overwrite
        attempts = [0]
        option = "OVERWRITE" if overwrite else "NONE"

        def send() -> rq.Response:
            attempts[0] += 1
            res: rq.Response = self.client._rename(src, destination=dst_abs, renameoptions=option)
            return res

        try:
            res = self._call("RENAME", src, send)
        except FileNotFoundError:
            if attempts[0] > 1 and not self.exists(src) and self.exists(dst):
                return  # an earlier attempt was done; only its answer was lost
            raise
        except OSError as err:
            # rename2 compares the kinds before it looks at the overwrite flag: a target of
            # the other kind (a file onto a directory) is an IOException, not "exists".
            if not overwrite and "must both be directories" in str(err):
                msg = "RENAME: target exists"
                raise FileExistsError(errno.EEXIST, msg, self.display(dst)) from None
            raise
        if not res.content:
            self._rename2 = True  # rename2 answers nothing and raises for each refusal
            return
        self._rename2 = False
        if not res.json().get("boolean", False):
            self._rename_refused(src, dst, overwrite)

    def delete(self, path: str, *, recursive: bool = False) -> bool:
        return bool(
            self._call("DELETE", path, lambda: self.client.delete(path, recursive=recursive))
        )

    def mkdirs(self, path: str, *, permission: int | None = None) -> None:
        perm = None if permission is None else f"{permission:o}"
        self._call("MKDIRS", path, lambda: self.client.makedirs(path, permission=perm))

    # -- beyond the contract -------------------------------------------------------------

    def set_permission(self, path: str, permission: int) -> None:
        """Set the permission bits (e.g. ``0o644``) of a file or directory."""
        perm = f"{permission:o}"
        self._call("SETPERMISSION", path, lambda: self.client.set_permission(path, perm))

    # -- plumbing ------------------------------------------------------------------------

    @staticmethod
    def _to_status(path: str, data: dict[str, Any]) -> FileStatus:
        # WebHDFS gives milliseconds since the epoch.
        mtime_ns = int(data["modificationTime"]) * 1_000_000
        file_id = data.get("fileId")
        return FileStatus(
            path,
            int(data["length"]),
            mtime_ns,
            data["type"] == "DIRECTORY",
            int(file_id) if file_id is not None else None,
        )

    def _resolve(self, path: str) -> str:
        if path.startswith("/"):
            return posixpath.normpath(path)
        resolved: str = self._call("GETHOMEDIRECTORY", path, lambda: self.client.resolve(path))
        return resolved

    def _error(self, err: HdfsError, op: str, path: str) -> Exception:
        """The built-in exception for a WebHDFS error; the message names the path as a URI."""
        exc = getattr(err, "exception", None) or ""
        remote = scrub(str(getattr(err, "message", None) or err))
        where = self.display(path)
        text = f"{op}: {remote}"
        # What WebHDFS's texts refine in a class (hdfs:// says these differently).
        if exc == "FileNotFoundException" and "is not a file" in remote:
            return IsADirectoryError(errno.EISDIR, text, where)
        if exc == "FileAlreadyExistsException" and "as a directory" in remote:
            return IsADirectoryError(errno.EISDIR, text, where)
        if exc == "AccessControlException" and "(is not a directory)" in remote.split("\n")[0]:
            # Hadoop refuses a path through a file so (CREATE and MKDIRS: ParentNotDirectory).
            return NotADirectoryError(errno.ENOTDIR, text, where)
        if "InvalidToken" in remote and self.settings.token is not None:
            msg = (
                f"{op}: the cluster refused the delegation token (expired, cancelled, or of "
                "another cluster): give a new one (token / token_env), or log in with "
                "kerberos_principal and keytab"
            )
            return TokenRefusedError(errno.EACCES, msg, where)
        if "Authentication failure" in remote:
            s = self.settings
            if s.kerberos_principal is None and s.token is None and s.password is None:
                # HTTP 401 without credentials of ours: the cluster wants Kerberos.
                msg = (
                    f"{op}: the cluster refuses a caller without Kerberos (HTTP 401): set "
                    "kerberos_principal and keytab (or run kinit), or a delegation token"
                )
                return PermissionError(errno.EACCES, msg, where)
            if self.settings.kerberos_principal is not None:
                principal = self.settings.kerberos_principal
                msg = (
                    f"{op}: the cluster refused the Kerberos login of {principal} (HTTP 401; "
                    "its ticket expired?): run kinit again, or set keytab"
                )
                return PermissionError(errno.EACCES, msg, where)
            return PermissionError(errno.EACCES, text, where)
        if exc in INVALID_ARGUMENT:
            return ValueError(f"{where}: {text}")
        mapped = builtin_error(exc, text, where)
        if mapped is not None:
            return mapped
        if not exc and "is not a directory" in remote:
            return NotADirectoryError(errno.ENOTDIR, text, where)
        return OSError(errno.EIO, f"{text} ({exc})" if exc else text, where)

    def _backoff(self, attempt: int, op: str, path: str, err: BaseException) -> None:
        """Log a connection failure and wait, or raise ``ConnectionError`` when out of retries
        (``reconnection_policy``). A retry without end is ended by a stop of the job."""
        where = self.display(path)
        reason = scrub(f"{type(err).__name__}: {err}")
        limit = self.settings.max_retries
        if limit is not None and attempt > limit:
            policy = self.settings.reconnection_policy
            msg = f"{where}: {op} failed after {attempt} attempts ({policy}): {reason}"
            raise ConnectionError(errno.ECONNABORTED, msg) from None
        delay = retry_delay(self.settings.retry_backoff, attempt)
        logger.warning(
            "%s: %s failed (%s); retry %d of %s in %.2fs",
            where,
            op,
            reason,
            attempt,
            "unlimited (InfiniteRetry)" if limit is None else limit,
            delay,
        )
        reconnect_pause(delay, interruptible=limit is None, what=op, where=where)

    def _untrusted(self, op: str, path: str, err: rq.exceptions.SSLError) -> OSError | None:
        """``PermissionError`` for a server certificate that is not trusted: no retry helps."""
        text = str(err)
        if not any(marker in text for marker in _CERT_REFUSED):
            return None  # a handshake cut off, ...: a passing connection failure
        hint = (
            "set ca_bundle (keyStorePath) to the PEM file of the CA that signed it"
            if self.settings.ca_bundle is None
            else f"it is not signed by a CA of ca_bundle {self.settings.ca_bundle!r}"
        )
        detail = text.split("(Caused by ", 1)[-1].rstrip(")")
        msg = f"{op}: the server's TLS certificate is not trusted ({scrub(detail)}): {hint}"
        return PermissionError(errno.EACCES, msg, self.display(path))

    def _call(self, op: str, path: str, fn: Callable[[], T]) -> T:
        """``fn()`` with connection failures retried and WebHDFS errors mapped to built-ins."""
        attempt = 0
        patience: Patience | None = None
        while True:
            try:
                return fn()
            except HdfsError as err:
                if _lost_namenode(err):
                    # A DataNode's own connection to a restarted NameNode broke: retry.
                    attempt += 1
                    self._backoff(attempt, op, path, err)
                    continue
                if getattr(err, "exception", None) not in NOT_READY:
                    mapped = self._error(err, op, path)
                    if isinstance(mapped, TokenRefusedError) and self._take_new_token():
                        continue
                    raise mapped from None
                # A NameNode that just started refuses changes until its blocks are reported.
                if patience is None:
                    patience = Patience(self.settings.safe_mode_timeout, first=0.1)
                    logger.warning("%s: %s waits for the NameNode to leave safe mode", path, op)
                if not patience.pause():
                    raise self._error(err, op, path) from None
            except rq.exceptions.SSLError as err:
                untrusted = self._untrusted(op, path, err)
                if untrusted is not None:
                    raise untrusted from None
                attempt += 1
                self._backoff(attempt, op, path, err)
            except _CONNECTION_ERRORS as err:
                attempt += 1
                self._backoff(attempt, op, path, err)
            except rq.exceptions.RequestException as err:
                # Too many redirects, a bad URL, ...: the text may quote a URL with the token.
                reason = scrub(f"{type(err).__name__}: {err}")
                if is_kerberos_failure(err):  # SPNEGO: GSSAPI could not make a token
                    raise explain(self.settings, reason, op, self.display(path)) from None
                raise OSError(errno.EIO, f"{op}: {reason}", self.display(path)) from None

    def _take_new_token(self) -> bool:
        """After a refused token: whether ``token_env`` now holds another one (the process with
        the Kerberos login replaced it, :mod:`operators.fs.tokens`); if so, the client uses it
        from now on and the call is made again."""
        name = self.settings.token_env
        token = os.environ.get(name) if name else None
        current = self.settings.token
        if not token or (current is not None and token == current.get_secret_value()):
            return False
        self.settings = self.settings.model_copy(update={"token": SecretStr(token)})
        self.client = _make_client(self.settings)
        logger.info("%s: using the new delegation token in %s", self.display("/"), name)
        return True

    def _lease_wait(self, op: str, path: str, fn: Callable[[], T]) -> T:
        """``_call`` that waits while another writer holds the lease or it is being recovered."""
        timeout = self.settings.lease_recovery_timeout
        deadline = time.monotonic() + timeout
        delay = 0.05
        refusals = 0
        while True:
            try:
                return self._call(op, path, fn)
            except BlockingIOError as err:
                refusals += 1
                self._lease_pause(op, path, err, refusals, deadline, delay)
                delay = min(delay * 2, _MAX_LEASE_POLL)

    def _lease_pause(
        self, op: str, path: str, err: OSError, refusals: int, deadline: float, delay: float
    ) -> None:
        now = time.monotonic()
        if now >= deadline:
            timeout = self.settings.lease_recovery_timeout
            msg = f"{op}: the lease is still held after {timeout:g}s: {err.strerror}"
            raise BlockingIOError(errno.EWOULDBLOCK, msg, self.display(path)) from None
        log = logger.warning if refusals == 1 else logger.info
        log("%s: %s waits for the lease (%s)", self.display(path), op, err.strerror)
        time.sleep(min(delay, deadline - now))

    def _rename_refused(self, src: str, dst: str, overwrite: bool) -> None:
        """Explain a ``false`` from a RENAME without options (servers without rename2)."""
        if not self.exists(src):
            raise FileNotFoundError(errno.ENOENT, "RENAME: source missing", self.display(src))
        if self.exists(dst):
            if not overwrite:
                raise FileExistsError(errno.EEXIST, "RENAME: target exists", self.display(dst))
            self.delete(dst)  # not atomic: such a server has no rename-with-overwrite
            res = self._call("RENAME", src, lambda: self.client._rename(src, destination=dst))
            if res.json().get("boolean", False):
                return
        parent = posixpath.dirname(dst)
        if not self.exists(parent):
            raise FileNotFoundError(
                errno.ENOENT, "RENAME: target directory missing", self.display(parent)
            )
        msg = f"RENAME to {self.display(dst)} refused by the server"
        raise OSError(errno.EIO, msg, self.display(src))

    def _append_data(self, path: str, data: bytes, size_before: int, resync: bool) -> None:
        """Send ``data`` as one APPEND to a file of ``size_before`` bytes (numbered steps).

        1. Unless the file's size is known, read it: an earlier attempt may have landed part or
           all of ``data`` (a request cut off mid-upload keeps what arrived); send only the rest.
        2. APPEND; a held lease (a live writer, or a dead one being recovered) is retried until
           ``lease_recovery_timeout``, a connection failure ``retries`` times.
        3. After a retry, check the file has exactly the expected size.
        """
        where = self.display(path)
        deadline = time.monotonic() + self.settings.lease_recovery_timeout
        delay = 0.05
        failures = refusals = 0
        while True:
            try:
                if resync:
                    actual = self._to_status(path, self.client.status(path)).size
                    if not size_before <= actual <= size_before + len(data):
                        msg = (
                            f"APPEND: the file has {actual} bytes where {size_before} to "
                            f"{size_before + len(data)} were expected: another writer changed it"
                        )
                        raise OSError(errno.EIO, msg, where)
                    data, size_before = data[actual - size_before :], actual
                    if not data:
                        return
                self.client.write(path, data=data, append=True)
                if resync:
                    size = self._to_status(path, self.client.status(path)).size
                    if size != size_before + len(data):
                        msg = (
                            f"APPEND: the file has {size} bytes, {size_before + len(data)} expected"
                        )
                        raise OSError(errno.EIO, msg, where)
                return
            except HdfsError as err:
                if _lost_namenode(err):
                    failures += 1
                    self._backoff(failures, "APPEND", path, err)
                    resync = True
                    continue
                mapped = self._error(err, "APPEND", path)
                if getattr(err, "exception", None) in NOT_READY:
                    mapped = BlockingIOError(errno.EWOULDBLOCK, str(mapped), where)
                if not isinstance(mapped, BlockingIOError):
                    raise mapped from None
                refusals += 1
                self._lease_pause("APPEND", path, mapped, refusals, deadline, delay)
                delay = min(delay * 2, _MAX_LEASE_POLL)
            except _CONNECTION_ERRORS as err:
                if isinstance(err, rq.exceptions.SSLError):
                    untrusted = self._untrusted("APPEND", path, err)
                    if untrusted is not None:
                        raise untrusted from None
                failures += 1
                self._backoff(failures, "APPEND", path, err)
            resync = True


class WebHdfsWriter:
    """A buffered writer: bytes are sent (one APPEND) on flush, sync and close. Not thread-safe."""

    def __init__(
        self,
        fs: WebHdfsFileSystem,
        path: str,
        claim: WriterClaim,
        size: int,
    ) -> None:
        self._fs = fs
        self._path = path
        self._claim = claim
        self._size = size  # the file's size once everything sent so far has landed
        self._buf = bytearray()
        self._uncertain = False  # a send failed: the file's size must be read again
        self._closed = False

    @property
    def path(self) -> str:
        return self._path

    def write(self, data: bytes | memoryview) -> None:
        if self._closed:
            raise ValueError(f"{self._fs.display(self._path)}: write to a closed writer")
        self._buf += data
        if len(self._buf) >= _AUTO_FLUSH_BYTES:
            self.flush()

    def flush(self) -> None:
        if self._closed:
            raise ValueError(f"{self._fs.display(self._path)}: flush of a closed writer")
        if not self._buf:
            return
        data = bytes(self._buf)
        try:
            self._fs._append_data(self._path, data, self._size, self._uncertain)
        except BaseException:
            self._uncertain = True
            raise
        self._uncertain = False
        self._size += len(data)
        del self._buf[: len(data)]

    def sync(self) -> None:
        # A WebHDFS write request completes once the datanodes hold the bytes and the file is
        # closed, which is as durable as HDFS makes anything: flushing is syncing here.
        self.flush()

    def close(self) -> None:
        if self._closed:
            return
        try:
            self.flush()
        finally:
            self._closed = True
            self._claim.release()

    def __enter__(self) -> WebHdfsWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
