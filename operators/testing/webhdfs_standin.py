"""The WebHDFS stand-in server (:class:`WebHdfsServer`): its settings and counters, start, stop
and restart, the controls a test has over it, and the route of each request to its operation.

A request's route: the gateway's path and ``/webhdfs/v1``, the basic-auth user, the path
(normalized as the namenode does), then the operation of ``(method, op)``
(:mod:`operators.testing.webhdfs_operations`). Every error is answered as RemoteException JSON
with Hadoop's exception name and HTTP code; a server fault as one too, not as a dropped
connection.
"""

from __future__ import annotations

import contextlib
import os
import socket
import ssl
import threading
from collections import Counter, deque
from collections.abc import Callable
from pathlib import Path
from urllib.parse import parse_qsl, unquote, urlsplit

from operators.testing.webhdfs_errors import RemoteError
from operators.testing.webhdfs_http import (
    DATANODE_MARK,
    PREFIX,
    CutOff,
    Handler,
    HttpServer,
    Unauthorized,
    authorized,
    drain,
    logger,
    redirect,
    send,
    send_json,
)
from operators.testing.webhdfs_namespace import DEFAULT_BLOCK_SIZE, Namespace, normalize
from operators.testing.webhdfs_operations import OPERATIONS

__all__ = ["WebHdfsServer"]

_LEASE_EXCEPTIONS = ("AlreadyBeingCreatedException", "RecoveryInProgressException")


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
        #: Leases, owners and modes: what the namenode knows beyond the bytes (it reads the
        #: settings above as they are at each request).
        self.namespace = Namespace(self)
        #: Held by every request while it reads or changes the namespace or a counter.
        self._lock = threading.RLock()
        self._connections: set[socket.socket] = set()
        self._httpd: HttpServer | None = None
        self._thread: threading.Thread | None = None
        self._generation = 0

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
        self.namespace.prepare()
        with self._lock:
            self._generation += 1
            self.namespace.load()
        httpd = HttpServer((self.host, self.port), Handler)
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

    def _connection_opened(self, conn: socket.socket) -> None:
        with self._lock:
            self._connections.add(conn)

    def _connection_closed(self, conn: socket.socket) -> None:
        with self._lock:
            self._connections.discard(conn)

    # -- test controls ---------------------------------------------------------------------

    def recover_leases(self, path: str | None = None) -> None:
        """End the recoveries (of dead writers' leases, of truncated blocks) now, of ``path``
        or all."""
        with self._lock:
            self.namespace.recover(path)

    def lease_state(self, path: str) -> str | None:
        """``"writing"``, ``"recovering"`` or ``None``."""
        with self._lock:
            return self.namespace.lease_state(path)

    def local_path(self, path: str) -> Path:
        """The backing file of an HDFS path."""
        return self.root / path.lstrip("/")

    # -- a request's route -----------------------------------------------------------------

    def _handle(self, req: Handler, method: str) -> None:
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
            path = normalize(unquote(url.path[len(prefix) :]) or "/")
            user = params.get("doas") or authenticated or params.get("user.name") or "dr.who"
            with self._lock:
                self.requests.append((method, op, path, params))
            datanode = DATANODE_MARK in params
            handler = OPERATIONS.get((method, op))
            if handler is None:
                if not op:
                    raise RemoteError(
                        400, "UnsupportedOperationException", "op=NULL is not supported"
                    )
                msg = f'Invalid value for webhdfs parameter "op": {op} is not a valid {method} '
                raise RemoteError(400, "IllegalArgumentException", msg + "operation.")
            handler(self, req, path, params, user, datanode, consumed)
        except Unauthorized:
            # As a gateway answers: no RemoteException, a challenge.
            drain(req, consumed)
            challenge = {"WWW-Authenticate": 'Basic realm="webhdfs"'}
            send(req, 401, b"Unauthorized", "text/plain", challenge)
        except RemoteError as err:
            if err.exception in _LEASE_EXCEPTIONS:
                with self._lock:
                    self.lease_refusals[err.exception] += 1
            drain(req, consumed)
            send_json(req, err.status, err.body())
            if err.exception in _LEASE_EXCEPTIONS:
                hook = self.on_lease_refusal
                if hook is not None:
                    hook(path)
        except CutOff:
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
            drain(req, consumed)
            send_json(req, status, RemoteError(status, name, f"{path}: {exc}").body())

    def _authenticate(self, req: Handler) -> str | None:
        """The basic-auth user when ``basic_auth`` is required; ``Unauthorized`` otherwise."""
        if self.basic_auth is None:
            return None
        if not authorized(req, self.basic_auth):
            with self._lock:
                self.auth_refusals += 1
            raise Unauthorized()
        return self.basic_auth[0]

    def _redirect(self, req: Handler, op: str, path: str, params: dict[str, str]) -> None:
        """The namenode's answer to the first step of ``op``: 307 to its datanode step."""
        with self._lock:
            self.redirects[op] += 1
        # ``url`` has the gateway's path: the datanode step goes through the gateway too.
        redirect(req, self.url, f"{self.host}:{self.port}", path, params)
