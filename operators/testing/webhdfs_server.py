"""A WebHDFS-protocol stand-in server for tests and benchmarks, backed by a real directory.

This is a double of the *server*, written from the Hadoop WebHDFS REST specification and held to
Hadoop 3.4.1: tests/fs/test_standin_agrees.py sends the same raw requests here and to the
sandbox's MiniDFSCluster (a real cluster) and asserts the answers agree. The code under test (our
adapter and the ``hdfs`` client) talks to it over real HTTP; the benchmarks and the fault
campaign run against it where a fault must be quick to produce (a server killed mid-write).
It needs only the standard library. What it implements:

- ``/webhdfs/v1/<path>?op=...&user.name=...``: GETFILESTATUS, LISTSTATUS, LISTSTATUS_BATCH
  (startAfter; ``list_page`` children an answer), GETHOMEDIRECTORY, OPEN
  (offset, length), CREATE (overwrite, permission), APPEND, TRUNCATE (newlength), RENAME
  (destination; ``renameoptions=NONE|OVERWRITE`` as Hadoop's rename2), DELETE (recursive),
  MKDIRS (permission), SETPERMISSION, SETTIMES (modificationtime, accesstime).
- Two steps for CREATE, APPEND and OPEN: the "namenode" answers 307 with a Location on a
  "datanode" URL (the same server, marked by ``namenoderpcaddress`` as in Hadoop), which carries
  the data. As in Hadoop, the namenode step of CREATE checks nothing; those of APPEND and OPEN
  check that the path exists (and OPEN's offset against a non-empty file's length); the datanode
  step does the rest. :attr:`WebHdfsServer.redirects` and
  :attr:`WebHdfsServer.datanode_requests` count them.
- RemoteException JSON errors with Hadoop's exception names, HTTP codes and order of checks.
- Blocks of :attr:`WebHdfsServer.block_size` bytes (1 MiB, as in the sandbox). While a file is
  written, GETFILESTATUS reports the length it had plus the blocks completed since. A TRUNCATE
  to a block boundary answers ``true``; inside a block it answers ``false`` and the file keeps
  its old length and bytes while the block is recovered (``truncate_recovery`` seconds): then
  another TRUNCATE gets AlreadyBeingCreatedException, an APPEND or CREATE
  RecoveryInProgressException.
- The single-writer lease: while a CREATE/APPEND upload is in progress, an APPEND, a TRUNCATE or
  a CREATE without overwrite fails with AlreadyBeingCreatedException; a CREATE with overwrite
  (or a DELETE) removes the file, and the upload then fails. A client that goes away
  mid-upload leaves the bytes received so far in a closed file, as a datanode does. A
  *datanode* that dies mid-upload (``cut_next_upload_after``, or the server stopped or killed)
  leaves the bytes and a lease in recovery for ``soft_limit`` seconds
  (RecoveryInProgressException), then the file is free. Leases survive a restart (kept under
  ``<root>/.webhdfs-stand-in/``).
- HDFS permissions: a file or directory made through the server is owned by the user who made
  it; the owner gets the owner bits, everyone else the "other" bits (no groups), ``superuser``
  passes every check, and only the owner or the superuser may SETPERMISSION. The root is the
  superuser's with mode 0777, as in the sandbox; paths put into the backing directory by other
  means belong to whoever asks.

- Behind a gateway, as Apache Knox serves WebHDFS: ``gateway`` puts a path in front of
  ``/webhdfs/v1`` (``/gateway/default``), ``basic_auth`` requires HTTP basic authentication (401
  otherwise; the authenticated user is the caller), ``ssl_context`` serves HTTPS
  (``swebhdfs://``).

Simplified on purpose: one process plays namenode and datanodes; no replicas; durability is the
backing disk's; no groups, ACLs or sticky-bit rule. Run it alone with
``python -m operators.testing.webhdfs_server --root DIR --port N``.
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import errno
import json
import logging
import os
import posixpath
import shutil
import signal
import socket
import ssl
import stat as stat_mod
import subprocess
import sys
import threading
import time
from collections import Counter, deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import parse_qsl, quote, unquote, urlencode, urlsplit

__all__ = ["RemoteError", "ServerProcess", "WebHdfsServer", "start_process"]

# Not ``__name__``: this logger is the remote server's (its access log shows request lines with
# their query strings, delegation tokens included, as a namenode's would), not the package's own
# logging under ``operators.*``, which must never show a credential (tests/fs/test_webhdfs.py).
logger = logging.getLogger("webhdfs_stand_in")

PREFIX = "/webhdfs/v1"
STATE_DIR = ".webhdfs-stand-in"
_DATANODE_MARK = "namenoderpcaddress"
_CHUNK = 1 << 16
#: The sandbox's block size (``dfs.blocksize``), the smallest HDFS allows by default.
DEFAULT_BLOCK_SIZE = 1 << 20
_LEASE_EXCEPTIONS = ("AlreadyBeingCreatedException", "RecoveryInProgressException")
_V = TypeVar("_V")

_JAVA_CLASSES = {
    "FileNotFoundException": "java.io.FileNotFoundException",
    "IOException": "java.io.IOException",
    "EOFException": "java.io.EOFException",
    "IllegalArgumentException": "java.lang.IllegalArgumentException",
    "UnsupportedOperationException": "java.lang.UnsupportedOperationException",
    "HadoopIllegalArgumentException": "org.apache.hadoop.HadoopIllegalArgumentException",
    "AccessControlException": "org.apache.hadoop.security.AccessControlException",
    "FileAlreadyExistsException": "org.apache.hadoop.fs.FileAlreadyExistsException",
    "ParentNotDirectoryException": "org.apache.hadoop.fs.ParentNotDirectoryException",
    "PathIsNotEmptyDirectoryException": "org.apache.hadoop.fs.PathIsNotEmptyDirectoryException",
    "AlreadyBeingCreatedException": (
        "org.apache.hadoop.hdfs.protocol.AlreadyBeingCreatedException"
    ),
    "RecoveryInProgressException": ("org.apache.hadoop.hdfs.protocol.RecoveryInProgressException"),
}


class RemoteError(Exception):
    """An error answered as RemoteException JSON."""

    def __init__(self, status: int, exception: str, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.exception = exception
        self.message = message

    def body(self) -> dict[str, Any]:
        return {
            "RemoteException": {
                "exception": self.exception,
                "javaClassName": _JAVA_CLASSES.get(self.exception, "java.io.IOException"),
                "message": self.message,
            }
        }


def _not_found(message: str) -> RemoteError:
    return RemoteError(404, "FileNotFoundException", message)


def _bad_param(name: str, reason: str) -> RemoteError:
    msg = f'Invalid value for webhdfs parameter "{name}": {reason}'
    return RemoteError(400, "IllegalArgumentException", msg)


def _long_param(params: dict[str, str], name: str, default: int | None) -> int | None:
    """A non-negative integer parameter, refused as Hadoop's parameter parsing does."""
    text = params.get(name)
    if text is None or text == "":
        return default
    try:
        value = int(text)
    except ValueError:
        raise _bad_param(name, f'Failed to parse "{text}" as a radix-10 long integer.') from None
    if value < 0:
        raise _bad_param(name, f"Invalid parameter range: {name} = {value} < 0")
    return value


def _rekey(table: dict[str, _V], moved: Callable[[str], str | None]) -> bool:
    """Move the entries of ``table`` whose path ``moved`` maps to a new one; whether any did."""
    moves = {p: new for p in table if (new := moved(p)) is not None}
    values = {new: table.pop(p) for p, new in moves.items()}
    table.update(values)
    return bool(moves)


class _Unauthorized(Exception):
    """The request lacks the basic-auth credentials the server requires."""


class _CutOff(Exception):
    """The request body ended before it was complete."""


@dataclass
class _Lease:
    holder: str
    #: ``None`` while the upload runs; else the monotonic time the recovery ends.
    recovering_until: float | None = None
    #: The file's length when the upload began: the namenode knows no more until a block fills.
    start_length: int = 0
    #: A truncate's block recovery: the length the file has once it is over.
    truncate_to: int | None = None

    def to_json(self, path: str) -> dict[str, Any]:
        return {
            "path": path,
            "holder": self.holder,
            "start_length": self.start_length,
            "truncate_to": self.truncate_to,
        }


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _HttpServer
    timeout = 60  # an idle keep-alive connection ends after this

    def setup(self) -> None:
        if isinstance(self.request, ssl.SSLSocket):
            # Here, on the connection's own thread: a client that refuses the certificate
            # must not hold up the accept loop. A failed handshake ends the connection.
            self.request.settimeout(self.timeout)
            self.request.do_handshake()
        super().setup()
        # Without TCP_NODELAY every small response waits ~40 ms for a delayed ACK.
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.server.app._connection_opened(self.connection)

    def finish(self) -> None:
        self.server.app._connection_closed(self.connection)
        with contextlib.suppress(OSError):
            super().finish()

    def log_message(self, format: str, *args: Any) -> None:
        logger.debug("%s %s", self.address_string(), format % args)

    def do_GET(self) -> None:
        self.server.app._handle(self, "GET")

    def do_PUT(self) -> None:
        self.server.app._handle(self, "PUT")

    def do_POST(self) -> None:
        self.server.app._handle(self, "POST")

    def do_DELETE(self) -> None:
        self.server.app._handle(self, "DELETE")


class _HttpServer(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    app: WebHdfsServer

    def handle_error(self, request: Any, client_address: Any) -> None:
        logger.debug("connection from %s ended with an error", client_address)

    def get_request(self) -> tuple[socket.socket, Any]:
        sock, addr = super().get_request()
        context = self.app.ssl_context
        if context is not None:
            sock = context.wrap_socket(sock, server_side=True, do_handshake_on_connect=False)
        return sock, addr


class WebHdfsServer:
    """The server. :meth:`start`, :meth:`stop` and :meth:`restart` keep the port and the root."""

    def __init__(
        self,
        root: str | os.PathLike[str],
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        soft_limit: float | None = 1.0,
        truncate_recovery: float = 0.1,
        block_size: int = DEFAULT_BLOCK_SIZE,
        rename_options: bool = True,
        superuser: str = "hdfs",
        gateway: str = "",
        basic_auth: tuple[str, str] | None = None,
        ssl_context: ssl.SSLContext | None = None,
        list_page: int | None = 1000,
    ) -> None:
        self.root = Path(root)
        #: Children per LISTSTATUS_BATCH answer (Hadoop's ``dfs.ls.limit``); ``None`` mimics a
        #: server without LISTSTATUS_BATCH (Hadoop < 2.8): the op is refused as unknown.
        self.list_page = list_page
        #: A gateway's path in front of ``/webhdfs/v1`` (Apache Knox: ``/gateway/default``).
        self.gateway = "/" + gateway.strip("/") if gateway.strip("/") else ""
        #: ``(user, password)`` every request must authenticate with (HTTP basic).
        self.basic_auth = basic_auth
        #: Serve HTTPS with this context (its certificate chain loaded).
        self.ssl_context = ssl_context
        #: Requests refused for want of the basic-auth credentials.
        self.auth_refusals = 0
        self.host = host
        self.port = port
        #: Seconds the lease of a writer whose datanode died stays in recovery (``None``: until
        #: recover_leases()).
        self.soft_limit = soft_limit
        #: Seconds the block recovery after a TRUNCATE inside a block lasts (the sandbox takes
        #: about one DataNode heartbeat, ~1 s); 0 ends it at once (the answer is still false).
        self.truncate_recovery = truncate_recovery
        #: Bytes per block: what GETFILESTATUS reports and where TRUNCATE answers true.
        self.block_size = block_size
        #: False mimics servers that ignore ``renameoptions`` (always the boolean RENAME).
        self.rename_options = rename_options
        self.superuser = superuser
        self.redirects: Counter[str] = Counter()
        self.datanode_requests: Counter[str] = Counter()
        self.lease_refusals: Counter[str] = Counter()
        #: The latest requests' (method, op, path, query parameters).
        self.requests: deque[tuple[str, str, str, dict[str, str]]] = deque(maxlen=100_000)
        #: Called (with the path) after a lease refusal was answered.
        self.on_lease_refusal: Callable[[str], None] | None = None
        #: Fault injection: the next upload is cut off after this many bytes, as if the
        #: datanode died mid-write (the bytes stay, the lease goes into recovery).
        self.cut_next_upload_after: int | None = None
        #: TRUNCATE answers given (``True`` done, ``False`` block recovery started).
        self.truncate_answers: Counter[bool] = Counter()
        self._lock = threading.RLock()
        self._leases: dict[str, _Lease] = {}
        self._perms: dict[str, int] = {}
        self._owners: dict[str, str] = {}
        self._connections: set[socket.socket] = set()
        self._httpd: _HttpServer | None = None
        self._thread: threading.Thread | None = None
        self._generation = 0
        self._holders = 0

    # -- lifecycle -------------------------------------------------------------------------

    @property
    def url(self) -> str:
        """``http://host:port`` (``https``, and the gateway's path): what an ``hdfs`` client
        is given."""
        proto = "https" if self.ssl_context is not None else "http"
        return f"{proto}://{self.host}:{self.port}{self.gateway}"

    @property
    def uri(self) -> str:
        """``webhdfs://host:port`` (``swebhdfs``; behind a gateway with its whole REST path):
        the filesystem URI."""
        scheme = "swebhdfs" if self.ssl_context is not None else "webhdfs"
        rest = self.gateway + PREFIX if self.gateway else ""
        return f"{scheme}://{self.host}:{self.port}{rest}"

    @property
    def running(self) -> bool:
        return self._httpd is not None

    def start(self) -> WebHdfsServer:
        if self._httpd is not None:
            return self
        (self.root / STATE_DIR / "leases").mkdir(parents=True, exist_ok=True)
        with self._lock:
            self._generation += 1
            self._load_state()
        httpd = _HttpServer((self.host, self.port), _Handler)
        httpd.app = self
        self.port = httpd.server_address[1]
        self._httpd = httpd
        self._thread = threading.Thread(
            target=httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop at once: in-flight requests are cut off, as when the process dies."""
        httpd, self._httpd = self._httpd, None
        if httpd is None:
            return
        with self._lock:
            self._generation += 1
        httpd.shutdown()
        httpd.server_close()
        with self._lock:
            connections = list(self._connections)
            self._connections.clear()
        for conn in connections:
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)
        if self._thread is not None:
            self._thread.join()

    def restart(self) -> None:
        self.stop()
        self.start()

    def __enter__(self) -> WebHdfsServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- test controls ---------------------------------------------------------------------

    def recover_leases(self, path: str | None = None) -> None:
        """End the recoveries (of dead writers' leases, of truncated blocks) now, of ``path``
        or all."""
        with self._lock:
            for p, lease in list(self._leases.items()):
                if lease.recovering_until is not None and path in (None, p):
                    self._end_recovery(p, lease)

    def lease_state(self, path: str) -> str | None:
        """``"writing"``, ``"recovering"`` or ``None``."""
        with self._lock:
            lease = self._current_lease(path)
            if lease is None:
                return None
            return "writing" if lease.recovering_until is None else "recovering"

    def local_path(self, path: str) -> Path:
        """The backing file of an HDFS path."""
        return self.root / path.lstrip("/")

    # -- state -----------------------------------------------------------------------------

    def _state(self, *parts: str) -> Path:
        return self.root.joinpath(STATE_DIR, *parts)

    def _load_state(self) -> None:
        self._leases.clear()
        # A restarted namenode finds the leases of the writers that were cut off.
        until = self._recovery_deadline()
        for entry in self._state("leases").iterdir():
            try:
                data = json.loads(entry.read_text())
                lease = _Lease(
                    data["holder"],
                    until,
                    int(data.get("start_length") or 0),
                    data.get("truncate_to"),
                )
            except (OSError, ValueError, KeyError):
                continue
            if lease.truncate_to is not None:
                lease.recovering_until = time.monotonic() + self.truncate_recovery
            self._leases[data["path"]] = lease
        try:
            meta = json.loads(self._state("meta.json").read_text())
        except (OSError, ValueError):
            meta = {}
        self._perms = {p: int(m) for p, m in meta.get("permissions", {}).items()}
        self._owners = {p: str(u) for p, u in meta.get("owners", {}).items()}

    def _recovery_deadline(self) -> float:
        if self.soft_limit is None:
            return float("inf")
        return time.monotonic() + self.soft_limit

    def _save_lease(self, path: str, lease: _Lease) -> None:
        self._write_state(self._state("leases", quote(path, safe="")), lease.to_json(path))

    def _drop_lease(self, path: str) -> None:
        self._leases.pop(path, None)
        with contextlib.suppress(FileNotFoundError):
            self._state("leases", quote(path, safe="")).unlink()

    def _save_meta(self) -> None:
        meta = {"permissions": self._perms, "owners": self._owners}
        self._write_state(self._state("meta.json"), meta)

    @staticmethod
    def _write_state(target: Path, data: object) -> None:
        tmp = target.with_name(target.name + ".tmp")
        tmp.write_text(json.dumps(data))
        os.replace(tmp, target)

    def _current_lease(self, path: str) -> _Lease | None:
        lease = self._leases.get(path)
        if (
            lease is not None
            and lease.recovering_until is not None
            and time.monotonic() >= lease.recovering_until
        ):
            self._end_recovery(path, lease)
            return None
        return lease

    def _end_recovery(self, path: str, lease: _Lease) -> None:
        if lease.truncate_to is not None:
            with contextlib.suppress(OSError):
                os.truncate(self._local(path), lease.truncate_to)
        self._drop_lease(path)

    def _move_meta(self, src: str, dst: str) -> None:
        def moved(p: str) -> str | None:
            if p == src:
                return dst
            if p.startswith(src.rstrip("/") + "/"):
                return dst + p[len(src) :]
            return None

        # ``|``, not ``or``: both tables must be re-keyed.
        changed = _rekey(self._perms, moved) | _rekey(self._owners, moved)
        if changed:
            self._save_meta()
        for p in list(self._leases):
            new = moved(p)
            if new is not None:
                lease = self._leases[p]
                self._drop_lease(p)
                self._leases[new] = lease
                self._save_lease(new, lease)

    def _drop_meta(self, path: str) -> None:
        prefix = path.rstrip("/") + "/"
        changed = False
        for table in (self._perms, self._owners):
            gone = [p for p in table if p == path or p.startswith(prefix)]
            for p in gone:
                del table[p]
            changed = changed or bool(gone)
        if changed:
            self._save_meta()
        for p in [p for p in self._leases if p == path or p.startswith(prefix)]:
            self._drop_lease(p)

    def _connection_opened(self, conn: socket.socket) -> None:
        with self._lock:
            self._connections.add(conn)

    def _connection_closed(self, conn: socket.socket) -> None:
        with self._lock:
            self._connections.discard(conn)

    # -- request plumbing ------------------------------------------------------------------

    def _handle(self, req: _Handler, method: str) -> None:
        url = urlsplit(req.path)
        params = dict(parse_qsl(url.query, keep_blank_values=True))
        op = params.get("op", "").upper()
        consumed = [False]
        path = ""
        try:
            prefix = self.gateway + PREFIX
            if not url.path.startswith(prefix):
                raise RemoteError(404, "IOException", f"not a WebHDFS URL: {url.path}")
            authenticated = self._authenticate(req)
            path = self._normalize(unquote(url.path[len(prefix) :]) or "/")
            user = params.get("doas") or authenticated or params.get("user.name") or "dr.who"
            with self._lock:
                self.requests.append((method, op, path, params))
            datanode = _DATANODE_MARK in params
            handler = self._dispatch.get((method, op))
            if handler is None:
                if not op:
                    raise RemoteError(
                        400, "UnsupportedOperationException", "op=NULL is not supported"
                    )
                msg = f'Invalid value for webhdfs parameter "op": {op} is not a valid {method} '
                raise RemoteError(400, "IllegalArgumentException", msg + "operation.")
            handler(self, req, path, params, user, datanode, consumed)
        except _Unauthorized:
            # As a gateway answers: no RemoteException, a challenge.
            self._drain(req, consumed)
            challenge = {"WWW-Authenticate": 'Basic realm="webhdfs"'}
            self._send(req, 401, b"Unauthorized", "text/plain", challenge)
        except RemoteError as err:
            if err.exception in _LEASE_EXCEPTIONS:
                with self._lock:
                    self.lease_refusals[err.exception] += 1
            self._drain(req, consumed)
            self._send_json(req, err.status, err.body())
            if err.exception in _LEASE_EXCEPTIONS:
                hook = self.on_lease_refusal
                if hook is not None:
                    hook(path)
        except _CutOff:
            req.close_connection = True
        except (ConnectionError, TimeoutError):
            req.close_connection = True
        except Exception as exc:  # a server fault is an error answer, not a dropped connection
            logger.exception("%s %s %s failed", method, op, path)
            status, name = (
                (403, "IOException") if isinstance(exc, OSError) else (500, "RuntimeException")
            )
            if consumed[0]:
                req.close_connection = True  # part of the body may still be unread
            self._drain(req, consumed)
            self._send_json(req, status, RemoteError(status, name, f"{path}: {exc}").body())

    def _authenticate(self, req: _Handler) -> str | None:
        """The basic-auth user when ``basic_auth`` is required; ``_Unauthorized`` otherwise."""
        if self.basic_auth is None:
            return None
        header = req.headers.get("Authorization", "")
        scheme, _, encoded = header.partition(" ")
        try:
            given = base64.b64decode(encoded.strip(), validate=True).decode()
        except (ValueError, UnicodeDecodeError):
            given = ""
        if scheme.lower() != "basic" or given != ":".join(self.basic_auth):
            with self._lock:
                self.auth_refusals += 1
            raise _Unauthorized()
        return self.basic_auth[0]

    def _normalize(self, path: str) -> str:
        norm = posixpath.normpath("/" + path.lstrip("/"))
        if norm.startswith("//"):
            norm = "/" + norm.lstrip("/")
        parts = [p for p in norm.split("/") if p]
        if ".." in path.split("/") or (parts and parts[0] == STATE_DIR):
            raise RemoteError(400, "IllegalArgumentException", f"Invalid path name {path}")
        return norm

    @staticmethod
    def _send(
        req: _Handler,
        status: int,
        body: bytes = b"",
        ctype: str = "application/octet-stream",
        headers: dict[str, str] | None = None,
    ) -> None:
        try:
            req.send_response(status)
            req.send_header("Content-Type", ctype)
            req.send_header("Content-Length", str(len(body)))
            for k, v in (headers or {}).items():
                req.send_header(k, v)
            req.end_headers()
            if body:
                req.wfile.write(body)
            req.wfile.flush()
        except OSError:
            req.close_connection = True

    def _send_json(self, req: _Handler, status: int, data: object) -> None:
        self._send(req, status, json.dumps(data).encode(), "application/json")

    def _redirect(self, req: _Handler, op: str, path: str, params: dict[str, str]) -> None:
        with self._lock:
            self.redirects[op] += 1
        query = dict(params)
        query[_DATANODE_MARK] = f"{self.host}:{self.port}"
        location = f"{self.url}{PREFIX}{quote(path)}?{urlencode(query)}"  # url has the gateway
        self._send(req, 307, headers={"Location": location})

    @staticmethod
    def _body(req: _Handler) -> Iterator[bytes]:
        """The request body as it arrives; ``_CutOff`` when it ends early."""
        try:
            if "chunked" in req.headers.get("Transfer-Encoding", "").lower():
                while True:
                    line = req.rfile.readline(1 << 16)
                    if not line:
                        raise _CutOff
                    size = int(line.split(b";")[0].strip() or b"0", 16)
                    if size == 0:
                        while req.rfile.readline(1 << 16) not in (b"\r\n", b"\n", b""):
                            pass
                        return
                    yield from WebHdfsServer._read_exact(req, size)
                    req.rfile.readline(1 << 16)
            else:
                yield from WebHdfsServer._read_exact(req, int(req.headers.get("Content-Length", 0)))
        except (OSError, ValueError) as err:
            raise _CutOff from err

    @staticmethod
    def _read_exact(req: _Handler, size: int) -> Iterator[bytes]:
        while size > 0:
            data = req.rfile.read1(min(size, _CHUNK))
            if not data:
                raise _CutOff
            size -= len(data)
            yield data

    def _drain(self, req: _Handler, consumed: list[bool]) -> None:
        if consumed[0]:
            return
        consumed[0] = True
        try:
            for _ in self._body(req):
                pass
        except _CutOff:
            req.close_connection = True

    # -- namespace helpers -----------------------------------------------------------------

    def _local(self, path: str) -> str:
        return os.path.join(self.root, path.lstrip("/"))

    def _stat(self, path: str) -> os.stat_result | None:
        try:
            return os.stat(self._local(path))
        except (FileNotFoundError, NotADirectoryError):
            return None

    def _mode(self, path: str, is_dir: bool) -> int:
        default = 0o777 if path == "/" else 0o755 if is_dir else 0o644
        return self._perms.get(path, default)

    def _owner(self, path: str, user: str) -> str:
        """Who owns ``path``: its maker; the root is the superuser's; others whoever asks."""
        return self._owners.get(path, self.superuser if path == "/" else user)

    @staticmethod
    def _mode_string(mode: int, is_dir: bool) -> str:
        out = "d" if is_dir else "-"
        for shift in (6, 3, 0):
            bits = (mode >> shift) & 7
            out += ("r" if bits & 4 else "-") + ("w" if bits & 2 else "-")
            out += "x" if bits & 1 else "-"
        if mode & 0o1000:
            out = out[:-1] + ("t" if mode & 1 else "T")
        return out

    def _traverse(self, user: str, path: str) -> None:
        """Hadoop's path resolution: execute on every existing ancestor of ``path``; a file
        among them is refused (as AccessControlException; CREATE, MKDIRS and a RENAME's
        target say ParentNotDirectoryException first, see :meth:`_check_parents_are_dirs`)."""
        ancestors = []
        p = path
        while p != "/":
            p = posixpath.dirname(p)
            ancestors.append(p)
        for anc in reversed(ancestors):
            st = self._stat(anc)
            if st is None:
                break
            if not stat_mod.S_ISDIR(st.st_mode):
                raise RemoteError(403, "AccessControlException", f"{anc} (is not a directory)")
            if user != self.superuser:
                self._require(user, anc, True, 1, "EXECUTE")

    def _check(self, user: str, path: str, access: str) -> None:
        """HDFS permission check: :meth:`_traverse` to ``path``, ``access`` on ``path``."""
        self._traverse(user, path)
        if user == self.superuser:
            return
        want = {"READ": 4, "WRITE": 2, "EXECUTE": 1, "READ_EXECUTE": 5, "ALL": 7}[access]
        st = self._stat(path)
        if st is not None:
            self._require(user, path, stat_mod.S_ISDIR(st.st_mode), want, access)

    def _require(self, user: str, path: str, is_dir: bool, want: int, access: str) -> None:
        mode = self._mode(path, is_dir)
        owner = self._owner(path, user)
        bits = (mode >> 6) & 7 if user == owner else mode & 7
        if bits & want != want:
            inode = f'"{path}":{owner}:supergroup:{self._mode_string(mode, is_dir)}'
            msg = f"Permission denied: user={user}, access={access}, inode={inode}"
            raise RemoteError(403, "AccessControlException", msg)

    def _check_subtree(self, user: str, path: str) -> None:
        """A DELETE needs all access to every non-empty directory of the tree."""
        if user == self.superuser:
            return
        local = self._local(path)
        for dirpath, dirnames, filenames in os.walk(local):
            dirnames.sort()
            if dirpath == local and path == "/" and STATE_DIR in dirnames:
                dirnames.remove(STATE_DIR)
            if dirnames or filenames:
                rel = os.path.relpath(dirpath, local)
                sub = path if rel == "." else posixpath.join(path, rel.replace(os.sep, "/"))
                self._require(user, sub, True, 7, "ALL")

    def _existing_ancestor(self, path: str) -> str:
        p = posixpath.dirname(path)
        while p != "/" and self._stat(p) is None:
            p = posixpath.dirname(p)
        return p

    def _check_parents_are_dirs(self, path: str) -> None:
        p = posixpath.dirname(path)
        while p != "/":
            st = self._stat(p)
            if st is not None and not stat_mod.S_ISDIR(st.st_mode):
                raise RemoteError(403, "ParentNotDirectoryException", f"{p} (is not a directory)")
            p = posixpath.dirname(p)
        # a file somewhere above makes os.stat fail with ENOTDIR; checked above

    def _check_lease(self, path: str, user: str, action: str) -> None:
        """Refuse ``action`` (APPEND_FILE, CREATE_FILE, TRUNCATE_FILE) while a lease is held."""
        lease = self._current_lease(path)
        if lease is None:
            return
        start = f"Failed to {action} {path} for {user} on 127.0.0.1 because"
        if lease.recovering_until is None:
            raise RemoteError(
                403,
                "AlreadyBeingCreatedException",
                f"{start} this file lease is currently owned by {lease.holder} on 127.0.0.1",
            )
        if lease.truncate_to is not None:
            if action == "TRUNCATE_FILE":
                msg = f"{start} {path} is being truncated."
                raise RemoteError(403, "AlreadyBeingCreatedException", msg)
            msg = f"{start} another recovery is in progress by {lease.holder} on 127.0.0.1"
            raise RemoteError(403, "RecoveryInProgressException", msg)
        raise RemoteError(
            403,
            "RecoveryInProgressException",
            f"{start} lease recovery is in progress. Try again later.",
        )

    def _file_status(self, path: str, st: os.stat_result, suffix: str, user: str) -> dict[str, Any]:
        is_dir = stat_mod.S_ISDIR(st.st_mode)
        length = 0 if is_dir else st.st_size
        lease = None if is_dir else self._current_lease(path)
        if lease is not None and lease.truncate_to is None:
            # The namenode learns a file's new bytes block by block (or when it is closed).
            complete = length - length % self.block_size
            length = min(length, max(lease.start_length, complete))
        children = 0
        if is_dir:
            try:
                children = len(os.listdir(self._local(path)))
            except OSError:
                children = 0
        return {
            "accessTime": 0 if is_dir else st.st_atime_ns // 1_000_000,
            "blockSize": 0 if is_dir else self.block_size,
            "childrenNum": children,
            "fileId": st.st_ino,
            "group": "supergroup",
            "length": length,
            "modificationTime": st.st_mtime_ns // 1_000_000,
            "owner": self._owner(path, user),
            "pathSuffix": suffix,
            "permission": f"{self._mode(path, is_dir):o}",
            "replication": 0 if is_dir else 1,
            "storagePolicy": 0,
            "type": "DIRECTORY" if is_dir else "FILE",
        }

    def _require_file(self, path: str) -> os.stat_result:
        st = self._stat(path)
        if st is None:
            raise _not_found(f"File does not exist: {path}")
        if stat_mod.S_ISDIR(st.st_mode):
            raise _not_found(f"Path is not a file: {path}")
        return st

    # -- operations ------------------------------------------------------------------------

    def _op_getfilestatus(self, req: _Handler, path: str, params: dict[str, str], user: str,
                          datanode: bool, consumed: list[bool]) -> None:  # fmt: skip
        with self._lock:
            self._traverse(user, path)
            st = self._stat(path)
            if st is None:
                raise _not_found(f"File does not exist: {path}")
            status = self._file_status(path, st, "", user)
        self._drain(req, consumed)
        self._send_json(req, 200, {"FileStatus": status})

    def _op_liststatus(self, req: _Handler, path: str, params: dict[str, str], user: str,
                       datanode: bool, consumed: list[bool]) -> None:  # fmt: skip
        with self._lock:
            self._traverse(user, path)
            st = self._stat(path)
            if st is None:
                raise _not_found(f"File {path} does not exist.")
            if not stat_mod.S_ISDIR(st.st_mode):
                statuses = [self._file_status(path, st, "", user)]
            else:
                self._check(user, path, "READ_EXECUTE")
                statuses = []
                for name in sorted(os.listdir(self._local(path))):
                    if path == "/" and name == STATE_DIR:
                        continue
                    child = posixpath.join(path, name)
                    cst = self._stat(child)
                    if cst is not None:
                        statuses.append(self._file_status(child, cst, name, user))
        self._drain(req, consumed)
        self._send_json(req, 200, {"FileStatuses": {"FileStatus": statuses}})

    def _op_liststatus_batch(self, req: _Handler, path: str, params: dict[str, str], user: str,
                             datanode: bool, consumed: list[bool]) -> None:  # fmt: skip
        if self.list_page is None:
            msg = 'Invalid value for webhdfs parameter "op": LISTSTATUS_BATCH is not a valid GET '
            raise RemoteError(400, "IllegalArgumentException", msg + "operation.")
        after = params.get("startAfter", "")
        with self._lock:
            self._traverse(user, path)
            st = self._stat(path)
            if st is None:
                raise _not_found(f"File {path} does not exist.")
            if not stat_mod.S_ISDIR(st.st_mode):
                statuses = [self._file_status(path, st, "", user)]
                remaining = 0
            else:
                self._check(user, path, "READ_EXECUTE")
                # Hadoop orders children by their names' bytes and pages after startAfter.
                names = sorted(
                    (
                        n
                        for n in os.listdir(self._local(path))
                        if not (path == "/" and n == STATE_DIR)
                    ),
                    key=os.fsencode,
                )
                names = [n for n in names if os.fsencode(n) > os.fsencode(after)]
                statuses = []
                for name in names[: self.list_page]:
                    child = posixpath.join(path, name)
                    cst = self._stat(child)
                    if cst is not None:
                        statuses.append(self._file_status(child, cst, name, user))
                remaining = max(0, len(names) - self.list_page)
        self._drain(req, consumed)
        body = {
            "partialListing": {"FileStatuses": {"FileStatus": statuses}},
            "remainingEntries": remaining,
        }
        self._send_json(req, 200, {"DirectoryListing": body})

    def _op_gethomedirectory(self, req: _Handler, path: str, params: dict[str, str], user: str,
                             datanode: bool, consumed: list[bool]) -> None:  # fmt: skip
        self._drain(req, consumed)
        self._send_json(req, 200, {"Path": f"/user/{user}"})

    def _op_open(self, req: _Handler, path: str, params: dict[str, str], user: str,
                 datanode: bool, consumed: list[bool]) -> None:  # fmt: skip
        offset = _long_param(params, "offset", 0) or 0
        length = _long_param(params, "length", None)
        if not datanode:
            # The namenode: the path must exist, a non-empty file's offset be inside it.
            with self._lock:
                self._traverse(user, path)
                st = self._stat(path)
                if st is None:
                    raise _not_found(f"File {path} not found.")
                if not stat_mod.S_ISDIR(st.st_mode):
                    size = st.st_size
                    if size > 0 and offset >= size:
                        msg = f"Offset={offset} out of the range [0, {size}); OPEN, path={path}"
                        raise RemoteError(403, "IOException", msg)
                    self._check(user, path, "READ")
            self._drain(req, consumed)
            self._redirect(req, "OPEN", path, params)
            return
        with self._lock:
            self.datanode_requests["OPEN"] += 1
            st = self._require_file(path)
            self._check(user, path, "READ")
        if offset > st.st_size:
            raise RemoteError(403, "EOFException", "Cannot seek after EOF")
        with open(self._local(path), "rb") as f:
            f.seek(offset)
            data = f.read(-1 if length is None else length)
        self._drain(req, consumed)
        self._send(req, 200, data)

    def _op_create(self, req: _Handler, path: str, params: dict[str, str], user: str,
                   datanode: bool, consumed: list[bool]) -> None:  # fmt: skip
        if not datanode:
            # Like Hadoop's namenode: CREATE is only redirected, the datanode step does the work.
            self._drain(req, consumed)
            self._redirect(req, "CREATE", path, params)
            return
        overwrite = params.get("overwrite", "false").lower() == "true"
        permission = params.get("permission")
        with self._lock:
            self.datanode_requests["CREATE"] += 1
            self._check_parents_are_dirs(path)
            st = self._stat(path)
            if st is not None and stat_mod.S_ISDIR(st.st_mode):
                msg = f"{path} already exists as a directory"
                raise RemoteError(403, "FileAlreadyExistsException", msg)
            if st is not None and overwrite:
                self._check(user, path, "WRITE")
            self._check(user, self._existing_ancestor(path), "WRITE")
            if st is not None:
                if not overwrite:
                    self._check_lease(path, user, "CREATE_FILE")
                    msg = f"{path} for client 127.0.0.1 already exists"
                    raise RemoteError(403, "FileAlreadyExistsException", msg)
                # Overwriting deletes the old file, a writer's lease on it included: that
                # writer's upload fails when it ends.
                self._drop_meta(path)
                os.unlink(self._local(path))
            os.makedirs(os.path.dirname(self._local(path)), exist_ok=True)
            f = open(self._local(path), "wb")  # noqa: SIM115 (closed in _upload)
            if permission:
                self._perms[path] = int(permission, 8) & 0o777  # no sticky bit on a file
            self._owners[path] = user
            self._save_meta()
            holder = self._take_lease(path, user, 0)
        self._upload(req, path, f, holder, consumed, 201)

    def _op_append(self, req: _Handler, path: str, params: dict[str, str], user: str,
                   datanode: bool, consumed: list[bool]) -> None:  # fmt: skip
        if not datanode:
            # The namenode only looks the path up; the datanode's append checks the rest.
            with self._lock:
                self._traverse(user, path)
                if self._stat(path) is None:
                    raise _not_found(f"File {path} not found.")
            self._drain(req, consumed)
            self._redirect(req, "APPEND", path, params)
            return
        with self._lock:
            self.datanode_requests["APPEND"] += 1
            self._check(user, path, "WRITE")
            st = self._stat(path)
            if st is None:
                raise _not_found(
                    f"Failed to append to non-existent file {path} for client 127.0.0.1"
                )
            if stat_mod.S_ISDIR(st.st_mode):
                msg = f"Cannot append to directory {path}; already exists as a directory."
                raise RemoteError(403, "FileAlreadyExistsException", msg)
            self._check_lease(path, user, "APPEND_FILE")
            f = open(self._local(path), "ab")  # noqa: SIM115 (closed in _upload)
            holder = self._take_lease(path, user, st.st_size)
        self._upload(req, path, f, holder, consumed, 200)

    def _take_lease(self, path: str, user: str, start_length: int) -> str:
        self._holders += 1
        holder = f"DFSClient_webhdfs_{user}_{os.getpid()}_{self._holders}"
        lease = _Lease(holder, start_length=start_length)
        self._leases[path] = lease
        self._save_lease(path, lease)
        return holder

    def _upload(self, req: _Handler, path: str, f: Any, holder: str, consumed: list[bool],
                status: int) -> None:  # fmt: skip
        generation = self._generation
        datanode_died = False
        consumed[0] = True
        with self._lock:
            cut_after, self.cut_next_upload_after = self.cut_next_upload_after, None
        try:
            received = 0
            for data in self._body(req):
                if cut_after is not None and received + len(data) >= cut_after:
                    f.write(data[: cut_after - received])
                    datanode_died = True
                    raise _CutOff
                f.write(data)
                f.flush()  # what was received is on disk, as a datanode's replica would be
                received += len(data)
        finally:
            f.close()
            found = False
            with self._lock:
                if generation == self._generation:  # else a restart reloaded the leases
                    for p, lease in list(self._leases.items()):
                        if lease.holder != holder:
                            continue
                        found = True
                        if datanode_died:
                            lease.recovering_until = self._recovery_deadline()
                        else:
                            # Done, or the client went away: the datanode closes the file.
                            self._drop_lease(p)
        if generation != self._generation:
            req.close_connection = True
            return
        if not found:  # the file was deleted or overwritten meanwhile: closing it fails
            if status == 201:
                msg = f"File does not exist: {path} Holder {holder} does not have any open files."
                raise _not_found(msg)
            msg = f"The file {path} does not exist or it is not under construction."
            raise RemoteError(403, "IOException", msg)
        headers = {"Location": f"hdfs://{self.host}:{self.port}{quote(path)}"}
        self._send(req, status, headers=headers if status == 201 else None)

    def _op_truncate(self, req: _Handler, path: str, params: dict[str, str], user: str,
                     datanode: bool, consumed: list[bool]) -> None:  # fmt: skip
        newlength = _long_param(params, "newlength", None)
        if newlength is None:
            msg = "Required param newlength for op: TRUNCATE is null or empty"
            raise RemoteError(400, "IllegalArgumentException", msg)
        with self._lock:
            self._check(user, path, "WRITE")
            st = self._require_file(path)
            lease = self._current_lease(path)
            if lease is not None and lease.truncate_to == newlength:
                done = False  # asked again while the block is recovered: the same answer
            else:
                self._check_lease(path, user, "TRUNCATE_FILE")
                size = st.st_size
                if newlength > size:
                    msg = (
                        "Cannot truncate to a larger file size. Current size: "
                        f"{size}, truncate size: {newlength}."
                    )
                    raise RemoteError(400, "HadoopIllegalArgumentException", msg)
                # On a block boundary whole blocks go; inside one, it must be recovered.
                done = newlength == size or newlength % self.block_size == 0
                if done or self.truncate_recovery <= 0:
                    os.truncate(self._local(path), newlength)
                else:
                    self._holders += 1
                    lease = _Lease(
                        f"DFSClient_truncate_{user}_{os.getpid()}_{self._holders}",
                        time.monotonic() + self.truncate_recovery,
                        size,
                        newlength,
                    )
                    self._leases[path] = lease
                    self._save_lease(path, lease)
            self.truncate_answers[done] += 1
        self._drain(req, consumed)
        self._send_json(req, 200, {"boolean": done})

    def _op_rename(self, req: _Handler, path: str, params: dict[str, str], user: str,
                   datanode: bool, consumed: list[bool]) -> None:  # fmt: skip
        dst = self._normalize(params.get("destination", ""))
        options = {o.strip().upper() for o in params.get("renameoptions", "").split(",") if o}
        with_options = self.rename_options and bool(options)
        with self._lock:
            self._traverse(user, path)
            self._check_parents_are_dirs(dst)
            self._check(user, posixpath.dirname(path), "WRITE")
            self._check(user, self._existing_ancestor(dst), "WRITE")
            result: bool | None = None
            if with_options:
                self._rename2(path, dst, "OVERWRITE" in options)
            else:
                result = self._rename_boolean(path, dst)
        self._drain(req, consumed)
        if result is None:
            self._send(req, 200)
        else:
            self._send_json(req, 200, {"boolean": result})

    def _rename_boolean(self, src: str, dst: str) -> bool:
        """Hadoop's old RENAME: ``false`` for any refusal; onto a directory moves into it."""
        if src == "/" or self._stat(src) is None:
            return False
        if src == dst:
            return True
        dst_st = self._stat(dst)
        if dst_st is not None and stat_mod.S_ISDIR(dst_st.st_mode):
            dst = posixpath.join(dst, posixpath.basename(src))
            dst_st = self._stat(dst)
        parent = self._stat(posixpath.dirname(dst))
        if dst_st is not None or parent is None or not stat_mod.S_ISDIR(parent.st_mode):
            return False
        if dst.startswith(src.rstrip("/") + "/"):
            return False
        os.rename(self._local(src), self._local(dst))
        self._move_meta(src, dst)
        return True

    def _rename2(self, src: str, dst: str, overwrite: bool) -> None:
        """Hadoop's rename2 (``renameoptions``): an error for each refusal, in Hadoop's order."""
        src_st = self._stat(src)
        if src_st is None:
            raise _not_found(f"rename source {src} is not found.")
        if src == "/":
            raise RemoteError(403, "IOException", "rename source cannot be the root")
        if src == dst:
            msg = f"The source {src} and destination {dst} are the same"
            raise RemoteError(403, "FileAlreadyExistsException", msg)
        if dst.startswith(src.rstrip("/") + "/"):
            msg = f"Rename destination {dst} is a directory or file under source {src}"
            raise RemoteError(403, "IOException", msg)
        if dst == "/":
            raise RemoteError(403, "IOException", "rename destination cannot be the root")
        dst_st = self._stat(dst)
        if dst_st is not None:
            src_dir = stat_mod.S_ISDIR(src_st.st_mode)
            dst_dir = stat_mod.S_ISDIR(dst_st.st_mode)
            if src_dir != dst_dir:
                msg = f"Source {src} and destination {dst} must both be directories"
                raise RemoteError(403, "IOException", msg)
            if not overwrite:
                msg = f"rename destination {dst} already exists"
                raise RemoteError(403, "FileAlreadyExistsException", msg)
            if dst_dir and os.listdir(self._local(dst)):
                msg = f"rename destination directory is not empty: {dst}"
                raise RemoteError(403, "IOException", msg)
        elif self._stat(posixpath.dirname(dst)) is None:
            raise _not_found(f"rename destination parent {dst} not found.")
        if dst_st is not None:
            self._drop_meta(dst)
        os.replace(self._local(src), self._local(dst))
        self._move_meta(src, dst)

    def _op_delete(self, req: _Handler, path: str, params: dict[str, str], user: str,
                   datanode: bool, consumed: list[bool]) -> None:  # fmt: skip
        recursive = params.get("recursive", "false").lower() == "true"
        with self._lock:
            self._traverse(user, path)
            st = self._stat(path)
            is_dir = st is not None and stat_mod.S_ISDIR(st.st_mode)
            local = self._local(path)
            # Permissions first (the parent, all of the tree even when not recursive), then
            # whether a directory is empty.
            if path != "/":
                self._check(user, posixpath.dirname(path), "WRITE")
            if is_dir:
                self._check_subtree(user, path)
            if is_dir and not recursive and os.listdir(local):
                msg = f"`{path} is non empty': Directory is not empty"
                raise RemoteError(403, "PathIsNotEmptyDirectoryException", msg)
            if st is None or path == "/":
                result = False  # missing; and the root is never deleted
            else:
                if is_dir:
                    shutil.rmtree(local)
                else:
                    os.unlink(local)
                self._drop_meta(path)
                result = True
        self._drain(req, consumed)
        self._send_json(req, 200, {"boolean": result})

    def _op_mkdirs(self, req: _Handler, path: str, params: dict[str, str], user: str,
                   datanode: bool, consumed: list[bool]) -> None:  # fmt: skip
        permission = int(params.get("permission") or "755", 8)
        with self._lock:
            self._check_parents_are_dirs(path)
            st = self._stat(path)
            if st is not None and not stat_mod.S_ISDIR(st.st_mode):
                raise RemoteError(
                    403, "FileAlreadyExistsException", f"Path is not a directory: {path}"
                )
            if st is None:
                self._check(user, self._existing_ancestor(path), "WRITE")
                missing = []
                p = path
                while self._stat(p) is None:
                    missing.append(p)
                    p = posixpath.dirname(p)
                os.makedirs(self._local(path), exist_ok=True)
                for p in missing:
                    self._owners[p] = user
                    if permission != 0o755:  # the default is not stored
                        self._perms[p] = permission
                self._save_meta()
        self._drain(req, consumed)
        self._send_json(req, 200, {"boolean": True})

    def _op_setpermission(self, req: _Handler, path: str, params: dict[str, str], user: str,
                          datanode: bool, consumed: list[bool]) -> None:  # fmt: skip
        with self._lock:
            self._traverse(user, path)
            if self._stat(path) is None:
                raise _not_found(f"File does not exist: {path}")
            if user not in (self.superuser, self._owner(path, user)):
                msg = f"Permission denied. user={user} is not the owner of inode={path}"
                raise RemoteError(403, "AccessControlException", msg)
            self._perms[path] = int(params.get("permission") or "755", 8)
            self._save_meta()
        self._drain(req, consumed)
        self._send(req, 200)

    def _op_settimes(self, req: _Handler, path: str, params: dict[str, str], user: str,
                     datanode: bool, consumed: list[bool]) -> None:  # fmt: skip
        def millis(name: str) -> int:
            text = params.get(name) or "-1"
            try:
                return int(text)
            except ValueError:
                raise _bad_param(name, f'Failed to parse "{text}"') from None

        mtime, atime = millis("modificationtime"), millis("accesstime")
        with self._lock:
            self._check(user, path, "WRITE")
            st = self._stat(path)
            if st is None:
                raise _not_found(f"File/Directory {path} does not exist.")
            if mtime >= 0 or atime >= 0:  # -1: left as it is
                times = (
                    atime * 1_000_000 if atime >= 0 else st.st_atime_ns,
                    mtime * 1_000_000 if mtime >= 0 else st.st_mtime_ns,
                )
                os.utime(self._local(path), ns=times)
        self._drain(req, consumed)
        self._send(req, 200)

    _dispatch: dict[tuple[str, str], Callable[..., None]] = {
        ("GET", "GETFILESTATUS"): _op_getfilestatus,
        ("GET", "LISTSTATUS"): _op_liststatus,
        ("GET", "LISTSTATUS_BATCH"): _op_liststatus_batch,
        ("GET", "GETHOMEDIRECTORY"): _op_gethomedirectory,
        ("GET", "OPEN"): _op_open,
        ("PUT", "CREATE"): _op_create,
        ("POST", "APPEND"): _op_append,
        ("POST", "TRUNCATE"): _op_truncate,
        ("PUT", "RENAME"): _op_rename,
        ("DELETE", "DELETE"): _op_delete,
        ("PUT", "MKDIRS"): _op_mkdirs,
        ("PUT", "SETPERMISSION"): _op_setpermission,
        ("PUT", "SETTIMES"): _op_settimes,
    }


# -- running it in its own process ---------------------------------------------------------


@dataclass
class ServerProcess:
    """A server running in a child process (this file run as a script)."""

    process: subprocess.Popen[str]
    port: int
    root: Path

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def uri(self) -> str:
        return f"webhdfs://127.0.0.1:{self.port}"

    def kill(self) -> None:
        """SIGKILL: in-flight uploads are cut off as when a machine dies."""
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait()

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
        self.process.wait()


def start_process(
    root: str | os.PathLike[str], *, port: int = 0, soft_limit: float = 1.0
) -> ServerProcess:
    """Start the server in a child process and wait until it listens."""
    # The file itself, not ``-m operators.testing.webhdfs_server``: the server needs only the
    # standard library, and importing the toolkit package (hypothesis, the operators) would add
    # about 0.3 s to every start and restart. ``-P`` keeps this directory off ``sys.path``.
    cmd = [sys.executable, "-P", os.fspath(Path(__file__).resolve()), "--root", os.fspath(root)]
    cmd += ["--port", str(port), "--soft-limit", str(soft_limit)]
    # The directory above the ``operators`` package (the checkout): a relative ``root`` is
    # taken from there, whoever the caller is.
    cwd = Path(__file__).resolve().parents[2]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True, cwd=cwd)
    assert proc.stdout is not None
    line = proc.stdout.readline()
    if not line.startswith("READY "):
        proc.kill()
        proc.wait()
        raise RuntimeError(f"the WebHDFS test server did not start: {line!r}")
    return ServerProcess(proc, int(line.rsplit(":", 1)[1]), Path(root))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="WebHDFS-protocol test server")
    parser.add_argument("--root", required=True, help="backing directory")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--soft-limit", type=float, default=1.0, help="lease recovery seconds")
    parser.add_argument("--truncate-recovery", type=float, default=0.1)
    args = parser.parse_args(argv)
    os.makedirs(args.root, exist_ok=True)
    server = WebHdfsServer(
        args.root,
        host=args.host,
        port=args.port,
        soft_limit=args.soft_limit,
        truncate_recovery=args.truncate_recovery,
    )
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    try:
        server.start()
    except OSError as err:
        print(f"FAILED {err}", flush=True)
        return 1 if err.errno != errno.EADDRINUSE else 2
    print(f"READY {server.url}", flush=True)
    stop.wait()
    server.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
