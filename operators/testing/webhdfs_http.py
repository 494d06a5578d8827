"""The WebHDFS stand-in's HTTP plumbing: the threading server (HTTPS with an ``ssl_context``),
the request handler, request bodies as they arrive (chunked or not, cut off early), answers,
HTTP basic authentication, and the namenode's 307 redirect to its "datanode".

- Two steps for CREATE, APPEND and OPEN: the "namenode" answers 307 with a Location on a
  "datanode" URL (the same server, marked by ``namenoderpcaddress`` as in Hadoop), which carries
  the data; the server's ``redirects`` and ``datanode_requests`` count them. What each step
  checks is the operation's (:mod:`operators.testing.webhdfs_operations`).
- Behind a gateway, as Apache Knox serves WebHDFS: the server's ``gateway`` path stands in front
  of ``/webhdfs/v1`` in every URL, a redirect's included; ``basic_auth`` requires HTTP basic
  authentication (401 otherwise; the authenticated user is the caller); ``ssl_context`` serves
  HTTPS (``swebhdfs://``).

The server (:mod:`operators.testing.webhdfs_standin`) routes each request the handler receives.
"""

from __future__ import annotations

import base64
import contextlib
import json
import logging
import socket
import ssl
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Protocol
from urllib.parse import quote, urlencode

__all__ = [
    "DATANODE_MARK",
    "PREFIX",
    "App",
    "CutOff",
    "Handler",
    "HttpServer",
    "Unauthorized",
    "authorized",
    "drain",
    "redirect",
    "request_body",
    "send",
    "send_json",
]

# Not ``__name__``: this logger is the remote server's (its access log shows request lines with
# their query strings, delegation tokens included, as a namenode's would), not the package's own
# logging under ``operators.*``, which must never show a credential (tests/fs/test_webhdfs.py).
logger = logging.getLogger("webhdfs_stand_in")

PREFIX = "/webhdfs/v1"
#: The query parameter that makes a request a datanode's (Hadoop's redirect adds it).
DATANODE_MARK = "namenoderpcaddress"
_CHUNK = 1 << 16


class Unauthorized(Exception):
    """The request lacks the basic-auth credentials the server requires."""


class CutOff(Exception):
    """The request body ended before it was complete."""


class App(Protocol):
    """What the HTTP server serves: the WebHDFS server
    (:class:`~operators.testing.webhdfs_standin.WebHdfsServer`)."""

    @property
    def ssl_context(self) -> ssl.SSLContext | None: ...

    def _handle(self, req: Handler, method: str) -> None: ...

    def _connection_opened(self, conn: socket.socket) -> None: ...

    def _connection_closed(self, conn: socket.socket) -> None: ...


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: HttpServer
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


class HttpServer(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    app: App

    def handle_error(self, request: Any, client_address: Any) -> None:
        logger.debug("connection from %s ended with an error", client_address)

    def get_request(self) -> tuple[socket.socket, Any]:
        sock, addr = super().get_request()
        context = self.app.ssl_context
        if context is not None:
            sock = context.wrap_socket(sock, server_side=True, do_handshake_on_connect=False)
        return sock, addr


def authorized(req: Handler, credentials: tuple[str, str]) -> bool:
    """Whether the request carries ``(user, password)`` as HTTP basic authentication."""
    header = req.headers.get("Authorization", "")
    scheme, _, encoded = header.partition(" ")
    try:
        given = base64.b64decode(encoded.strip(), validate=True).decode()
    except (ValueError, UnicodeDecodeError):
        given = ""
    return scheme.lower() == "basic" and given == ":".join(credentials)


def send(
    req: Handler,
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


def send_json(req: Handler, status: int, data: object) -> None:
    send(req, status, json.dumps(data).encode(), "application/json")


def redirect(req: Handler, url: str, namenode: str, path: str, params: dict[str, str]) -> None:
    """Answer 307 to the datanode step of a request: the same query with ``DATANODE_MARK``
    (``namenode``, the namenode's address) added, on ``url`` (the server's, gateway and all)."""
    query = dict(params)
    query[DATANODE_MARK] = namenode
    location = f"{url}{PREFIX}{quote(path)}?{urlencode(query)}"
    send(req, 307, headers={"Location": location})


def request_body(req: Handler) -> Iterator[bytes]:
    """The request body as it arrives; ``CutOff`` when it ends early."""
    try:
        if "chunked" in req.headers.get("Transfer-Encoding", "").lower():
            while True:
                line = req.rfile.readline(1 << 16)
                if not line:
                    raise CutOff
                size = int(line.split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    while req.rfile.readline(1 << 16) not in (b"\r\n", b"\n", b""):
                        pass
                    return
                yield from _read_exact(req, size)
                req.rfile.readline(1 << 16)
        else:
            yield from _read_exact(req, int(req.headers.get("Content-Length", 0)))
    except (OSError, ValueError) as err:
        raise CutOff from err


def _read_exact(req: Handler, size: int) -> Iterator[bytes]:
    while size > 0:
        data = req.rfile.read1(min(size, _CHUNK))
        if not data:
            raise CutOff
        size -= len(data)
        yield data


def drain(req: Handler, consumed: list[bool]) -> None:
    """Read the rest of the body unless ``consumed[0]`` says it was (the connection is kept
    for the next request only if the body ends where it should)."""
    if consumed[0]:
        return
    consumed[0] = True
    try:
        for _ in request_body(req):
            pass
    except CutOff:
        req.close_connection = True
