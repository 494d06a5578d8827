"""WebHDFS backend behaviour beyond the contract: redirects, leases, faults and credentials."""

from __future__ import annotations

import builtins
import logging
import os
import socket
import time
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import pytest
import requests

from operators.fs.webhdfs import WebHdfsFileSystem
from operators.testing import webhdfs_operations
from operators.testing.webhdfs_server import WebHdfsServer, start_process
from tests.conftest import webhdfs_settings


@pytest.fixture
def server(tmp_path: Path) -> Iterator[WebHdfsServer]:
    """A private server; a cut-off writer's lease is recovered only when a test says so."""
    srv = WebHdfsServer(tmp_path / "root", soft_limit=None)
    srv.start()
    yield srv
    srv.stop()


def make_fs(server: WebHdfsServer, **overrides: object) -> WebHdfsFileSystem:
    settings = {"lease_recovery_timeout": 0.3, **overrides}
    return WebHdfsFileSystem(webhdfs_settings(server.uri, **settings))


def put(fs: WebHdfsFileSystem, path: str, data: bytes) -> None:
    w = fs.create(path, overwrite=True)
    w.write(data)
    w.close()


def wait_for(condition: object, what: str) -> None:
    """Wait for an event another thread causes (no timing is asserted)."""
    deadline = time.monotonic() + 10
    while not condition():  # type: ignore[operator]
        if time.monotonic() > deadline:
            raise AssertionError(f"gave up waiting for {what}")
        time.sleep(0.005)


def send_raw_upload(server: WebHdfsServer, path: str, first: bytes, total: int) -> socket.socket:
    """An APPEND whose body is still being sent: the client part another writer (another
    process of the file's owner: HDFS lets no one else append) plays."""
    step1 = requests.post(
        f"{server.url}/webhdfs/v1{path}",
        params={"op": "APPEND", "user.name": "tester"},
        allow_redirects=False,
        timeout=5,
    )
    assert step1.status_code == 307
    location = urlsplit(step1.headers["Location"])
    sock = socket.create_connection((location.hostname, location.port))
    head = (
        f"POST {location.path}?{location.query} HTTP/1.1\r\n"
        f"Host: {location.netloc}\r\nContent-Length: {total}\r\n\r\n"
    )
    sock.sendall(head.encode() + first)
    return sock


def start_raw_upload(server: WebHdfsServer, path: str, first: bytes, total: int) -> socket.socket:
    """:func:`send_raw_upload`, once the server holds its lease."""
    sock = send_raw_upload(server, path, first, total)
    wait_for(lambda: server.lease_state(path) == "writing", "the upload to start")
    return sock


def datanode_dies_mid_upload(server: WebHdfsServer, path: str, landed: bytes) -> None:
    """Another writer's APPEND whose datanode dies once ``landed`` arrived: its lease goes into
    recovery (the namenode learns of the landed bytes when the recovery ends)."""
    server.cut_next_upload_after = len(landed)
    send_raw_upload(server, path, landed + b".", len(landed) + 100).close()
    wait_for(lambda: server.lease_state(path) == "recovering", "the lease recovery")


def test_create_append_and_open_follow_the_307_redirect(server: WebHdfsServer) -> None:
    fs = make_fs(server)
    w = fs.create("/d/f")
    w.write(b"abc")
    w.close()
    assert server.redirects["CREATE"] == 1
    assert server.datanode_requests["CREATE"] == 1
    assert server.redirects["APPEND"] == server.datanode_requests["APPEND"] == 1
    assert fs.read("/d/f", 1, 1) == b"b"
    assert server.redirects["OPEN"] == server.datanode_requests["OPEN"] == 1
    datanode_open = [r for r in server.requests if r[1] == "OPEN" and "namenoderpcaddress" in r[3]]
    assert datanode_open[0][3]["offset"] == "1"
    assert datanode_open[0][3]["length"] == "1"
    assert datanode_open[0][3]["user.name"] == "tester"


def test_server_answers_remote_exceptions_with_hadoop_codes(server: WebHdfsServer) -> None:
    """A few answers checked without Java (tests/fs/test_standin_agrees.py compares them all
    with a real HDFS)."""
    base = f"{server.url}/webhdfs/v1"
    tester = {"user.name": "tester"}
    missing = requests.get(f"{base}/nope", params={"op": "GETFILESTATUS", **tester}, timeout=5)
    assert missing.status_code == 404
    assert missing.json()["RemoteException"]["exception"] == "FileNotFoundException"
    assert missing.json()["RemoteException"]["javaClassName"] == "java.io.FileNotFoundException"
    put(make_fs(server), "/f", b"abc")
    longer = requests.post(
        f"{base}/f", params={"op": "TRUNCATE", "newlength": "9", **tester}, timeout=5
    )
    assert longer.status_code == 400
    assert longer.json()["RemoteException"]["exception"] == "HadoopIllegalArgumentException"
    # The file is the tester's (0644): another user may read it, not write it.
    other = {"op": "TRUNCATE", "newlength": "0", "user.name": "other"}
    refused = requests.post(f"{base}/f", params=other, timeout=5)
    assert refused.status_code == 403
    assert refused.json()["RemoteException"]["exception"] == "AccessControlException"
    legacy = requests.put(
        f"{base}/f", params={"op": "RENAME", "destination": "/f", **tester}, timeout=5
    )
    assert legacy.json() == {"boolean": True}
    onto_missing_parent = requests.put(
        f"{base}/f", params={"op": "RENAME", "destination": "/no/g", **tester}, timeout=5
    )
    assert onto_missing_parent.json() == {"boolean": False}
    past_the_end = requests.get(f"{base}/f", params={"op": "OPEN", "offset": "3"}, timeout=5)
    assert past_the_end.status_code == 403  # at the namenode step, as Hadoop does
    bad = requests.get(f"{base}/f", params={"op": "NOSUCHOP"}, timeout=5)
    assert bad.status_code == 400


def test_an_upload_in_progress_holds_the_lease(server: WebHdfsServer) -> None:
    fs = make_fs(server)
    put(fs, "/f", b"abc")
    sock = start_raw_upload(server, "/f", b"012", 10)
    try:
        with pytest.raises(BlockingIOError) as info:
            fs.truncate("/f", 1)
        assert f"{server.uri}/f" in str(info.value)
        # HDFS answers AlreadyBeingCreatedException before it says the file exists.
        with pytest.raises(FileExistsError):
            fs.create("/f")
        w = fs.append("/f")
        w.write(b"x")
        with pytest.raises(BlockingIOError):
            w.flush()
        assert server.lease_refusals["AlreadyBeingCreatedException"] >= 4
        sock.sendall(b"3456789")
        assert sock.recv(100).startswith(b"HTTP/1.1 200")
    finally:
        sock.close()
    # The file grew under the refused writer: it says so rather than append after bytes it
    # did not expect.
    with pytest.raises(OSError, match="another writer changed it"):
        w.close()
    assert fs.read("/f") == b"abc0123456789"
    w = fs.append("/f")
    w.write(b"x")
    w.close()
    assert fs.read("/f") == b"abc0123456789x"


def test_a_client_gone_mid_upload_leaves_a_closed_file(server: WebHdfsServer) -> None:
    fs = make_fs(server)
    put(fs, "/f", b"abc")
    start_raw_upload(server, "/f", b"0123", 100).close()
    # The datanode closes the file with what arrived: no lease to recover.
    wait_for(lambda: server.lease_state("/f") is None, "the file to be closed")
    w = fs.append("/f")
    w.write(b"!")
    w.close()
    assert fs.read("/f") == b"abc0123!"
    assert sum(server.lease_refusals.values()) == 0


def test_overwriting_a_file_being_written_wins(server: WebHdfsServer) -> None:
    fs = make_fs(server)
    put(fs, "/f", b"abc")
    sock = start_raw_upload(server, "/f", b"0", 5)
    put(fs, "/f", b"new")  # HDFS deletes the file being written and makes a new one
    sock.sendall(b"1234")
    assert sock.recv(100).startswith(b"HTTP/1.1 403")  # that writer fails when it closes
    sock.close()
    assert fs.read("/f") == b"new"


def test_append_waits_while_a_dead_writers_lease_is_recovered(server: WebHdfsServer) -> None:
    fs = make_fs(server, lease_recovery_timeout=5.0)
    put(fs, "/f", b"abc")
    datanode_dies_mid_upload(server, "/f", b"")
    server.on_lease_refusal = server.recover_leases  # recovery ends after one refusal
    w = fs.append("/f")
    w.write(b"xyz")
    w.close()
    assert server.lease_refusals["RecoveryInProgressException"] == 1
    assert fs.read("/f") == b"abcxyz"


def test_bytes_a_dead_writer_left_appear_when_its_lease_is_recovered(
    server: WebHdfsServer,
) -> None:
    fs = make_fs(server, lease_recovery_timeout=5.0)
    put(fs, "/f", b"abc")
    datanode_dies_mid_upload(server, "/f", b"0123456789")
    assert fs.status("/f").size == 3  # what the namenode knows until the recovery ends
    server.on_lease_refusal = server.recover_leases
    w = fs.append("/f")  # sized while the recovery runs
    w.write(b"xyz")
    with pytest.raises(OSError, match="another writer changed it"):
        w.close()  # refused once; then 10 bytes more than it expected
    assert fs.read("/f") == b"abc0123456789"
    w = fs.append("/f")
    w.write(b"xyz")
    w.close()
    assert fs.read("/f") == b"abc0123456789xyz"


def test_a_lease_never_recovered_ends_in_blocking_io_error(server: WebHdfsServer) -> None:
    fs = make_fs(server, lease_recovery_timeout=0.2)
    put(fs, "/f", b"abc")
    datanode_dies_mid_upload(server, "/f", b"0")
    w = fs.append("/f")
    w.write(b"x")
    with pytest.raises(BlockingIOError) as info:
        w.flush()
    assert "still held" in str(info.value)
    assert f"{server.uri}/f" in str(info.value)


def test_a_cut_off_append_of_ours_sends_only_the_missing_bytes(server: WebHdfsServer) -> None:
    fs = make_fs(server, lease_recovery_timeout=5.0)
    put(fs, "/f", b"head:")
    w = fs.append("/f")
    w.write(b"0123456789")
    server.cut_next_upload_after = 4  # the datanode dies after 4 bytes arrived
    server.on_lease_refusal = server.recover_leases
    w.flush()
    w.close()
    assert fs.read("/f") == b"head:0123456789"
    assert server.lease_refusals["RecoveryInProgressException"] == 1
    appends = [r for r in server.requests if r[1] == "APPEND" and "namenoderpcaddress" in r[3]]
    assert len(appends) == 4  # put's own, then: cut off, refused while recovering, the rest


def test_server_restart_keeps_the_lease_of_a_cut_off_upload(server: WebHdfsServer) -> None:
    fs = make_fs(server, lease_recovery_timeout=5.0)
    put(fs, "/f", b"abc")
    sock = start_raw_upload(server, "/f", b"01", 100)
    port = server.port
    server.stop()  # dies mid-upload
    sock.close()
    server.start()
    assert server.port == port
    assert server.lease_state("/f") == "recovering"
    assert fs.status("/f").size == 3
    with pytest.raises(FileExistsError):  # refused for the lease; it exists all the same
        fs.create("/f")
    server.recover_leases()
    assert fs.status("/f").size == 5
    w = fs.append("/f")
    w.write(b"!")
    w.close()
    assert fs.read("/f") == b"abc01!"


def test_connection_failures_are_retried_logged_then_raised(
    server: WebHdfsServer, caplog: pytest.LogCaptureFixture
) -> None:
    fs = make_fs(server, retries=2, retry_backoff=0.001)
    w = fs.create("/f")
    w.write(b"one")
    w.flush()
    server.stop()
    w.write(b"two")
    with (
        caplog.at_level(logging.WARNING, logger="operators.fs.webhdfs"),
        pytest.raises(ConnectionError) as info,
    ):
        w.flush()
    assert f"{server.uri}/f" in str(info.value)
    assert "3 attempts" in str(info.value)
    retries = [r for r in caplog.records if "retry" in r.getMessage()]
    assert [r.levelno for r in retries] == [logging.WARNING, logging.WARNING]
    server.start()  # same port, same files
    w.flush()  # the failed bytes go out once
    w.close()
    assert fs.read("/f") == b"onetwo"


def test_a_namenode_nobody_listens_on_is_a_connection_error_naming_the_uri_and_call(
    tmp_path: Path,
) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # free once closed: nothing listens there
    fs = WebHdfsFileSystem(webhdfs_settings(f"webhdfs://127.0.0.1:{port}", retry_backoff=0.001))
    with pytest.raises(ConnectionError) as info:
        fs.status("/landing/x")
    assert f"webhdfs://127.0.0.1:{port}/landing/x" in str(info.value)
    assert "GETFILESTATUS" in str(info.value)


def test_a_second_namenode_takes_over(server: WebHdfsServer) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        dead = s.getsockname()[1]
    uri = f"webhdfs://127.0.0.1:{dead},127.0.0.1:{server.port}"
    fs = WebHdfsFileSystem(webhdfs_settings(uri))
    put(fs, "/f", b"ha")
    assert fs.read("/f") == b"ha"


def test_no_credentials_in_messages_or_logs(
    server: WebHdfsServer, caplog: pytest.LogCaptureFixture
) -> None:
    password, token = "pa55-w0rd-x", "t0ken-s3cret-y"
    uri = f"webhdfs://alice:{password}@127.0.0.1:{server.port}"
    settings = webhdfs_settings(uri, user="alice", token=token, retries=1, retry_backoff=0.001)
    fs = WebHdfsFileSystem(settings)
    put(fs, "/f", b"abc")
    fs.mkdirs("/ro", permission=0o555)
    errors: list[BaseException] = []
    caplog.set_level(logging.DEBUG)
    for call in (
        lambda: fs.status("/missing"),
        lambda: fs.truncate("/f", 10),
        lambda: put(fs, "/ro/g", b"x"),
        lambda: fs.create("/f"),
    ):
        with pytest.raises((OSError, ValueError)) as info:
            call()
        errors.append(info.value)
    server.stop()
    with pytest.raises(ConnectionError) as info:
        fs.status("/f")
    errors.append(info.value)
    assert any(r[3].get("delegation") == token for r in server.requests)  # it was sent
    shown = [str(e) for e in errors] + [repr(e) for e in errors]
    shown += [repr(fs), repr(settings), str(settings)]
    # Ours at every level, anyone's from WARNING up (urllib3 logs whole URLs at DEBUG).
    shown += [
        r.getMessage()
        for r in caplog.records
        if r.name.startswith("operators") or r.levelno >= logging.WARNING
    ]
    for text in shown:
        assert password not in text
        assert token not in text


def test_truncate_waits_for_block_recovery(tmp_path: Path) -> None:
    with WebHdfsServer(tmp_path / "root", truncate_recovery=0.1, block_size=4) as server:
        fs = make_fs(server, lease_recovery_timeout=5.0)
        put(fs, "/f", b"0123456789")
        fs.truncate("/f", 8)  # a block boundary: whole blocks go at once
        assert server.truncate_answers == {True: 1}
        fs.truncate("/f", 3)
        assert server.truncate_answers[False] == 1  # the server said "recovering"
        assert fs.status("/f").size == 3
        assert server.lease_state("/f") is None
        w = fs.append("/f")
        w.write(b"x")
        w.close()
        assert fs.read("/f") == b"012x"


def test_a_file_deleted_as_its_read_opens_it_is_not_found(
    server: WebHdfsServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A DELETE landing between the datanode step's checks of an OPEN and its open of the file:
    Hadoop's datanode opens the file through the namenode, so the read finds no file, as one
    deleted before it began (a lock's reader meets this when a heartbeat replaces the generation
    it is reading), never an IOException naming the server's disk."""
    fs = make_fs(server)
    put(fs, "/d/f", b"abc")
    local = os.fspath(server.local_path("/d/f"))
    real_open = builtins.open

    def open_after_a_delete(file: str, mode: str = "r", *args: object, **kw: object) -> object:
        if mode == "rb" and os.fspath(file) == local and os.path.exists(local):
            fs.delete("/d/f")  # another client's DELETE, served meanwhile
        return real_open(file, mode, *args, **kw)  # type: ignore[call-overload]

    monkeypatch.setattr(webhdfs_operations, "open", open_after_a_delete, raising=False)
    with pytest.raises(FileNotFoundError, match="/d/f"):
        fs.read("/d/f")
    assert not fs.exists("/d/f")


def test_paths_under_a_file_and_kinds_that_differ(server: WebHdfsServer) -> None:
    """Hadoop refuses a path through a file with AccessControlException "(is not a
    directory)", and a rename of a file onto a directory with "must both be directories"."""
    fs = make_fs(server)
    put(fs, "/f", b"x")
    fs.mkdirs("/d")
    with pytest.raises(NotADirectoryError):
        fs.status("/f/x")
    assert not fs.exists("/f/x")
    fs.rename("/f", "/g")  # the first rename finds out the server does rename2
    with pytest.raises(FileExistsError):
        fs.rename("/g", "/d")
    with pytest.raises(OSError, match="must both be directories"):
        fs.rename("/g", "/d", overwrite=True)
    assert fs.read("/g") == b"x"


def test_rename_on_a_server_without_rename_options(tmp_path: Path) -> None:
    with WebHdfsServer(tmp_path / "root", rename_options=False) as server:
        fs = make_fs(server)
        put(fs, "/a", b"A")
        put(fs, "/b", b"B")
        fs.mkdirs("/dir")
        with pytest.raises(FileExistsError):
            fs.rename("/a", "/b")
        with pytest.raises(FileExistsError):
            fs.rename("/a", "/dir")  # the old RENAME would have moved it into /dir
        fs.rename("/a", "/c")
        assert fs.read("/c") == b"A"
        fs.rename("/c", "/b", overwrite=True)
        assert fs.read("/b") == b"A"
        assert not fs.exists("/c")
        with pytest.raises(FileNotFoundError):
            fs.rename("/missing", "/d")
        with pytest.raises(FileNotFoundError):
            fs.rename("/b", "/no/parent")


def test_server_in_its_own_process_restarts_on_the_same_port(tmp_path: Path) -> None:
    root = tmp_path / "root"
    proc = start_process(root, soft_limit=0.2)
    try:
        fs = WebHdfsFileSystem(webhdfs_settings(proc.uri))
        put(fs, "/landing/f", b"kept")
        proc.kill()
        proc = start_process(root, port=proc.port, soft_limit=0.2)
        assert fs.read("/landing/f") == b"kept"
        assert [e.name for e in fs.list_dir("/")] == ["landing"]  # its own state is hidden
    finally:
        proc.stop()


def _batch_requests(server: WebHdfsServer, op: str) -> list[dict[str, str]]:
    return [params for _, o, _, params in server.requests if o == op]


def test_a_scan_lists_a_directory_in_pages(tmp_path: Path) -> None:
    """``list_entries`` asks for LISTSTATUS_BATCH pages, each after the last name of the one
    before, and gives every child once: no LISTSTATUS of the whole directory."""
    with WebHdfsServer(tmp_path / "root", list_page=3) as server:
        fs = WebHdfsFileSystem(webhdfs_settings(server.uri))
        for i in range(10):
            with fs.create(f"/land/f{i:02d}") as w:
                w.write(b"x" * i)
        fs.mkdirs("/land/sub")
        server.requests.clear()
        entries = fs.list_entries("/land")
        assert sorted(e[1] for e in entries) == [f"f{i:02d}" for i in range(10)] + ["sub"]
        assert sorted(entries) == sorted(
            (s.mtime_ns, s.name, s.path, s.size, s.is_dir, s.file_id) for s in fs.list_dir("/land")
        )
        pages = _batch_requests(server, "LISTSTATUS_BATCH")
        assert [p.get("startAfter") for p in pages] == [None, "f02", "f05", "f08"]
        assert len(_batch_requests(server, "LISTSTATUS")) == 1  # the list_dir above


def test_a_server_without_pages_is_listed_whole_from_then_on(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with WebHdfsServer(tmp_path / "root", list_page=None) as server:
        fs = WebHdfsFileSystem(webhdfs_settings(server.uri))
        for name in ("b", "a"):
            with fs.create(f"/land/{name}") as w:
                w.write(b"x")
        with caplog.at_level(logging.INFO, logger="operators.fs.webhdfs"):
            assert sorted(e[1] for e in fs.list_entries("/land")) == ["a", "b"]
            assert sorted(e[1] for e in fs.list_entries("/land")) == ["a", "b"]
        assert len(_batch_requests(server, "LISTSTATUS_BATCH")) == 1  # asked once
        assert len(_batch_requests(server, "LISTSTATUS")) == 2
        assert sum("no LISTSTATUS_BATCH" in r.getMessage() for r in caplog.records) == 1
        with pytest.raises(NotADirectoryError):
            fs.list_entries("/land/a")
