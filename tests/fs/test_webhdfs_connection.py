"""WebHDFS behind a gateway (Apache Knox's path and basic authentication), over TLS with a
private CA, and the reconnection policy against a server that refuses connections.

A real Knox is not available here: the WebHDFS stand-in is mounted under the gateway's path
and requires basic authentication, as Knox does. Certificates are made with the openssl CLI.
"""

from __future__ import annotations

import logging
import os
import shutil
import signal
import socket
import ssl
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from operators.fs import FileSystemSettings, open_path
from operators.fs.webhdfs import WebHdfsFileSystem
from operators.testing.webhdfs_server import WebHdfsServer
from region import stopping
from region.signals import StopSignals
from tests.conftest import webhdfs_settings

PASSWORD = "kn0x-gateway-secret"
GATEWAY = "/gateway/default"


@pytest.fixture
def knox(tmp_path: Path) -> Iterator[WebHdfsServer]:
    server = WebHdfsServer(tmp_path / "root", gateway=GATEWAY, basic_auth=("guest", PASSWORD))
    with server:
        yield server


def test_a_knox_gateway_path_with_basic_auth(knox: WebHdfsServer) -> None:
    assert knox.uri.endswith(f":{knox.port}/gateway/default/webhdfs/v1")
    settings = webhdfs_settings(knox.uri, user="guest", hdfsPassword=PASSWORD)
    assert settings.gateway_path == "/gateway/default/webhdfs/v1"
    fs = WebHdfsFileSystem(settings)
    fs.mkdirs("/landing")
    with fs.create("/landing/a.txt") as w:
        w.write(b"0123456789")
    fs.truncate("/landing/a.txt", 4)
    with fs.append("/landing/a.txt") as w:
        w.write(b"++")
    fs.rename("/landing/a.txt", "/landing/b.txt")
    assert [s.path for s in fs.list_dir("/landing")] == ["/landing/b.txt"]
    assert fs.read("/landing/b.txt") == b"0123++"
    assert (Path(knox.root) / "landing" / "b.txt").read_bytes() == b"0123++"
    assert knox.auth_refusals == 0
    assert fs.display("/x") == f"webhdfs://127.0.0.1:{knox.port}/gateway/default/webhdfs/v1/x"
    # A configured path through the gateway names the same filesystem.
    same, path = open_path(f"{knox.uri}/landing/b.txt", settings)
    assert path == "/landing/b.txt" and same.read(path) == b"0123++"


def test_a_gateway_refuses_a_wrong_password_clearly(knox: WebHdfsServer) -> None:
    fs = WebHdfsFileSystem(webhdfs_settings(knox.uri, user="guest", password="wrong"))
    with pytest.raises(PermissionError, match="Authentication failure") as info:
        fs.status("/")
    assert knox.uri.replace("webhdfs/v1", "webhdfs/v1/") in str(info.value)
    assert knox.auth_refusals == 1  # refused for good: not retried


def test_a_gateway_path_must_end_in_the_webhdfs_path() -> None:
    with pytest.raises(ValueError, match="gateway_path: '/gateway/default' does not end in"):
        FileSystemSettings(uri="https://knox:8443", gateway_path="/gateway/default")
    with pytest.raises(ValueError, match="differs from the gateway"):
        FileSystemSettings(
            uri="https://knox:8443/gateway/default/webhdfs/v1", gateway_path="/g/webhdfs/v1"
        )


# -- TLS ----------------------------------------------------------------------------------


def _openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True, timeout=60)


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A private CA and a server certificate for 127.0.0.1 it signed."""
    if shutil.which("openssl") is None:
        pytest.skip("the openssl command is not installed")
    d = tmp_path_factory.mktemp("pki")
    _openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key", "-out",
             "ca.pem", "-days", "2", "-subj", "/CN=hdfs-region test CA", cwd=d)  # fmt: skip
    _openssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", "server.key", "-out",
             "server.csr", "-subj", "/CN=127.0.0.1", cwd=d)  # fmt: skip
    (d / "ext.cnf").write_text("subjectAltName=IP:127.0.0.1\n")
    _openssl("x509", "-req", "-in", "server.csr", "-CA", "ca.pem", "-CAkey", "ca.key",
             "-CAcreateserial", "-out", "server.pem", "-days", "2", "-extfile", "ext.cnf",
             cwd=d)  # fmt: skip
    return d


@pytest.fixture
def tls_server(tmp_path: Path, pki: Path) -> Iterator[WebHdfsServer]:
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(pki / "server.pem", pki / "server.key")
    with WebHdfsServer(tmp_path / "root", ssl_context=context) as server:
        yield server


def test_swebhdfs_needs_the_private_ca_and_works_with_it(
    tls_server: WebHdfsServer, pki: Path
) -> None:
    uri = tls_server.uri
    assert uri.startswith("swebhdfs://")
    untrusted = WebHdfsFileSystem(webhdfs_settings(uri))
    with pytest.raises(PermissionError) as info:
        untrusted.status("/")
    text = str(info.value)
    assert f"{uri}/" in text and "not trusted" in text and "ca_bundle" in text
    assert not tls_server.requests  # refused before any request was made

    trusting = WebHdfsFileSystem(webhdfs_settings(uri, ca_bundle=str(pki / "ca.pem")))
    with trusting.create("/a.txt") as w:
        w.write(b"secure")
    assert trusting.read("/a.txt") == b"secure"


def test_a_pkcs12_trust_store_with_its_password(tls_server: WebHdfsServer, pki: Path) -> None:
    pytest.importorskip("cryptography")
    store = pki / "ca.p12"
    _openssl("pkcs12", "-export", "-nokeys", "-in", "ca.pem", "-out", store.name,
             "-passout", "pass:st0re-pw", cwd=pki)  # fmt: skip
    uri = tls_server.uri
    settings = webhdfs_settings(uri, keyStorePath=str(store), keyStorePassword="st0re-pw")
    fs = WebHdfsFileSystem(settings)
    fs.mkdirs("/p12")
    assert fs.status("/p12").is_dir
    with pytest.raises(ValueError, match=rf"ca_bundle: '{store}' is not a readable PKCS12") as info:
        webhdfs_settings(tls_server.uri, keyStorePath=str(store), keyStorePassword="wrong-pw")
    assert "wrong-pw" not in str(info.value)


def test_a_trust_store_that_cannot_be_read_is_named(tmp_path: Path) -> None:
    jks = tmp_path / "truststore.jks"
    jks.write_bytes(b"\xfe\xed\xfe\xed" + os.urandom(32))
    with pytest.raises(ValueError, match=rf"ca_bundle: '{jks}' is a Java KeyStore .*keytool"):
        FileSystemSettings(uri="swebhdfs://nn:9871", keyStorePath=str(jks))
    junk = tmp_path / "ca.txt"
    junk.write_text("not a certificate")
    with pytest.raises(ValueError, match=rf"ca_bundle: '{junk}' holds no PEM certificate"):
        FileSystemSettings(uri="swebhdfs://nn:9871", ca_bundle=str(junk))
    with pytest.raises(ValueError, match=r"ca_bundle: '.*missing.pem' cannot be read"):
        FileSystemSettings(uri="swebhdfs://nn:9871", ca_bundle=str(tmp_path / "missing.pem"))


# -- reconnection policy -------------------------------------------------------------------


@pytest.fixture
def refused_uri() -> str:
    """A WebHDFS URI whose port refuses connections (nothing listens there)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"webhdfs://127.0.0.1:{port}"


class _Attempts(logging.Handler):
    """Counts the reconnection WARNINGs; ``enough`` is set after ``after`` of them."""

    def __init__(self, after: int) -> None:
        super().__init__(logging.WARNING)
        self.after = after
        self.messages: list[str] = []
        self.enough = threading.Event()

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())
        if len(self.messages) >= self.after:
            self.enough.set()


@pytest.fixture
def attempts() -> Iterator[_Attempts]:
    handler = _Attempts(after=3)
    target = logging.getLogger("operators.fs.webhdfs")
    target.addHandler(handler)
    stopping.clear()
    try:
        yield handler
    finally:
        target.removeHandler(handler)
        stopping.clear()


@pytest.mark.parametrize(("policy", "tries"), [("NoRetry", 1), ("BoundedRetry", 3)])
def test_no_retry_and_bounded_retry(
    refused_uri: str, attempts: _Attempts, policy: str, tries: int
) -> None:
    values: dict[str, object] = {"uri": refused_uri, "reconnectionPolicy": policy}
    if policy == "BoundedRetry":
        values["reconnectionBound"] = 2
    fs = WebHdfsFileSystem(FileSystemSettings.model_validate({**values, "retry_backoff": 0.01}))
    with pytest.raises(ConnectionError, match=f"failed after {tries} attempts \\({policy}\\)"):
        fs.status("/x")
    assert len(attempts.messages) == tries - 1


def test_infinite_retry_logs_every_attempt_until_the_job_stops(
    refused_uri: str, attempts: _Attempts
) -> None:
    """The region's stop (a signal through StopSignals, as ``hdfs-region run`` installs it)
    ends a retry that would go on forever."""
    fs = WebHdfsFileSystem(
        webhdfs_settings(refused_uri, reconnection_policy="InfiniteRetry", retry_backoff=0.01)
    )
    graceful = threading.Event()

    def interrupt() -> None:
        if attempts.enough.wait(60):
            os.kill(os.getpid(), signal.SIGINT)

    sender = threading.Thread(target=interrupt)
    with StopSignals(graceful.set, lambda: None).installed():
        sender.start()
        with pytest.raises(InterruptedError) as info:
            fs.status("/landing")
    sender.join()
    assert graceful.is_set()
    assert f"{refused_uri}/landing" in str(info.value)
    assert "stopped while retrying the connection" in str(info.value)
    assert len(attempts.messages) >= 3
    for n, message in enumerate(attempts.messages[:3], start=1):
        assert message.startswith(f"{refused_uri}/landing: GETFILESTATUS failed")
        assert f"retry {n} of unlimited (InfiniteRetry)" in message


def test_ctrl_c_ends_an_infinite_retry(refused_uri: str, attempts: _Attempts) -> None:
    """Without a runner's handlers, Ctrl-C is a KeyboardInterrupt out of the pause."""
    fs = WebHdfsFileSystem(
        webhdfs_settings(refused_uri, reconnection_policy="InfiniteRetry", retry_backoff=0.01)
    )
    # Python's own Ctrl-C handler (a SparkContext started earlier in the session installs one
    # of its own in this process).
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        _ctrl_c_during_status(fs, attempts)
    finally:
        signal.signal(signal.SIGINT, previous)


def _ctrl_c_during_status(fs: WebHdfsFileSystem, attempts: _Attempts) -> None:
    def interrupt() -> None:
        if attempts.enough.wait(60):
            os.kill(os.getpid(), signal.SIGINT)

    sender = threading.Thread(target=interrupt)
    sender.start()
    with pytest.raises(KeyboardInterrupt):
        fs.status("/landing")
    sender.join()
    assert len(attempts.messages) >= 3


def test_infinite_retry_of_hdfs_native_ends_on_a_stop(refused_uri: str) -> None:
    """hdfs:// retries inside its client; InfiniteRetry calls again, logging each round, until a
    stop (what PipelineRunner.request_stop raises from another thread)."""
    from operators.fs.native import NativeHdfsFileSystem

    uri = refused_uri.replace("webhdfs://", "hdfs://")
    handler = _Attempts(after=3)
    target = logging.getLogger("operators.fs.native")
    target.addHandler(handler)
    stopping.clear()
    stopper = threading.Thread(target=lambda: handler.enough.wait(60) and stopping.request())
    stopper.start()
    try:
        settings = FileSystemSettings(
            uri=uri, reconnection_policy="InfiniteRetry", retries=0, retry_backoff=0.01
        )
        with pytest.raises(InterruptedError, match="stopped while retrying the connection"):
            NativeHdfsFileSystem(settings)
    finally:
        stopper.join()
        target.removeHandler(handler)
        stopping.clear()
    assert all(f"{uri}/: GETFILESTATUS failed" in m for m in handler.messages[:3])
    assert "retry 3 of unlimited (InfiniteRetry)" in handler.messages[2]
