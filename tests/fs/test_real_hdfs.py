"""Real-HDFS facts the backends must handle, on the session's MiniDFSCluster: a writer killed
with its file open (the lease), TRUNCATE that answers false (block recovery), a user per
process for hdfs://, and the sandbox's own promises (ready line, client configuration)."""

from __future__ import annotations

import json
import logging
import posixpath
import signal
import socket
import subprocess
import sys
import textwrap
import threading
import time
import urllib.request
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from operators.fs import FileSystemSettings, NativeHdfsFileSystem, WebHdfsFileSystem
from operators.fs.native import hadoop_http_addresses, settle_closes
from operators.fs.webhdfs import _truncate_request
from operators.sandbox import Sandbox
from operators.scan import HDFS2DirectoryScan, ScanSettings
from operators.sink import HDFS2FileSink, SinkSettings
from operators.sink.owner import OWNER_FILE, Owner, claim_output, read_owner
from region.checkpoint import CheckpointStore, cut_file_name
from region.fs import FileSystem
from region.lock import CheckpointLock
from region.state import Batch
from tests.conftest import CLUSTER_USER, cluster_settings, real_fs

BLOCK = 1024 * 1024  # the sandbox's block size


def _root(request: pytest.FixtureRequest, backend: str) -> tuple[FileSystem, str, Sandbox]:
    fs, base, sandbox = real_fs(request, backend)
    if sandbox is None:
        pytest.skip("needs the sandbox (HDFS_URI / WEBHDFS_URL name another cluster)")
    root = posixpath.join(base, f"faults-{time.monotonic_ns()}")
    fs.mkdirs(root)
    return fs, root, sandbox


def _kill_when_ready(sandbox: Sandbox, script: str, path: str) -> None:
    """Run ``script`` (argv: the cluster, ``path``, the user, the client configuration) in a
    process of its own and SIGKILL it once it prints ``ready``."""
    child = subprocess.Popen(
        [
            sys.executable,
            "-c",
            script,
            sandbox.info.hdfs,
            path,
            CLUSTER_USER,
            sandbox.info.conf_dir,
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert child.stdout is not None
        assert child.stdout.readline().strip() == "ready"
        child.send_signal(signal.SIGKILL)
        child.wait(30)
    finally:
        if child.poll() is None:
            child.kill()


def _put(fs: FileSystem, path: str, data: bytes) -> None:
    w = fs.create(path)
    w.write(data)
    w.close()


KILLED_WRITER = """\
import sys, time
from operators.fs import FileSystemSettings, open_path
settings = FileSystemSettings(uri=sys.argv[1], user=sys.argv[3], config_dir=sys.argv[4])
fs, _ = open_path(sys.argv[1], settings)
w = fs.create(sys.argv[2])
w.write(b"synced\\n" * 1000)
w.sync()
w.write(b"never synced\\n")
print("ready", flush=True)
time.sleep(600)
"""


def test_a_killed_writers_lease_is_recovered_at_once_and_the_synced_bytes_stay(
    request: pytest.FixtureRequest, caplog: pytest.LogCaptureFixture
) -> None:
    """IBM's sink could not reopen a file whose writer died until the lease expired (60 s soft
    limit, 1 h hard). recover_lease ends it at once; the hsync'ed bytes are all there."""
    fs, root, sandbox = _root(request, "hdfs")
    assert isinstance(fs, NativeHdfsFileSystem)
    path = posixpath.join(root, "open.txt")
    _kill_when_ready(sandbox, KILLED_WRITER, path)
    quick = NativeHdfsFileSystem(
        cluster_settings(
            sandbox.info.hdfs, sandbox, lease_recovery_timeout=0.5, retries=0, user=CLUSTER_USER
        )
    )
    with pytest.raises(BlockingIOError) as held:
        quick.append(path)  # the dead writer still holds the lease
    assert path in str(held.value)
    took = fs.recover_lease(path)
    print(f"lease recovery after SIGKILL: {took:.2f}s")
    assert fs.read(path).startswith(b"synced\n" * 1000)
    w = fs.append(path)
    w.write(b"after\n")
    w.close()
    assert fs.read(path).endswith(b"after\n")
    assert "recovering the lease" in caplog.text  # said when there was a lease to end
    caplog.clear()
    fs.recover_lease(path)  # a closed file: nothing to recover, nothing said
    assert "recovering the lease" not in caplog.text


@pytest.mark.parametrize("backend", ["hdfs", "webhdfs-cluster"])
def test_truncate_into_a_block_answers_false_and_an_append_after_it_waits_for_recovery(
    request: pytest.FixtureRequest, backend: str
) -> None:
    fs, root, sandbox = _root(request, backend)
    data = bytes(range(256)) * (BLOCK * 3 // 2 // 256)  # one and a half blocks
    # What real HDFS does: a cut inside a block starts block recovery and answers false.
    probe = posixpath.join(root, "probe")
    _put(fs, probe, data)
    web = WebHdfsFileSystem(cluster_settings(sandbox.info.webhdfs, sandbox))
    answer = _truncate_request(web.client, probe, newlength=BLOCK + 100).json()
    assert answer == {"boolean": False}
    # The backends wait it out: the append right after the truncate lands at the new end.
    path = posixpath.join(root, "f")
    _put(fs, path, data)
    fs.truncate(path, BLOCK + 7)
    w = fs.append(path)
    w.write(b"tail")
    w.close()
    assert fs.read(path) == data[: BLOCK + 7] + b"tail"
    fs.truncate(path, BLOCK)  # on a block boundary: answered true at once
    assert fs.status(path).size == BLOCK


def test_hdfs_file_ids_are_read_through_webhdfs_one_by_one_or_by_a_listing(
    request: pytest.FixtureRequest,
) -> None:
    """hdfs-native lists no fileId; ``file_ids`` reads it through the cluster's WebHDFS, a
    GETFILESTATUS each for a few files, one listing of their directory for many: the same ids
    either way, another id for a file replaced by rename, ``None`` for a file gone."""
    fs, root, _ = _root(request, "hdfs")
    assert isinstance(fs, NativeHdfsFileSystem) and fs.webhdfs is not None
    paths = [f"{root}/f{i:02d}" for i in range(40)]
    for path in paths:
        fs.create(path).close()
    assert all(e[5] is None for e in fs.list_entries(root))
    many = fs.file_ids([*paths, f"{root}/gone"])
    assert many[-1] is None and None not in many[:-1] and len(set(many[:-1])) == 40
    assert fs.file_ids(paths[:3]) == many[:3]
    assert fs.file_ids(paths[:3]) == [fs.webhdfs.status(p).file_id for p in paths[:3]]
    fs.create(f"{root}/.f00.tmp").close()
    fs.rename(f"{root}/.f00.tmp", paths[0], overwrite=True)
    assert fs.file_ids(paths[:1]) != many[:1]


def test_a_webhdfs_failing_at_the_id_lookup_names_the_files_and_the_scan_goes_on(
    request: pytest.FixtureRequest, caplog: pytest.LogCaptureFixture
) -> None:
    """The cluster's WebHDFS answers at start, not when a scan asks the fileIds of the names
    it found changed: no error, a WARNING naming those files, and the change handled as one in
    place (``on_modified = "warn"``, which decides by identity): reported and counted, never
    read twice."""
    fs, root, _ = _root(request, "hdfs")
    assert isinstance(fs, NativeHdfsFileSystem) and fs.webhdfs is not None
    settings = ScanSettings(directory=root, sleep_time=0, on_modified="warn")
    scan = HDFS2DirectoryScan(settings, fs)
    scan.reset_to_initial_state()
    for name in ("a.csv", "b.csv"):
        fs.create(f"{root}/{name}").close()
    assert sorted(p for b in iter(lambda: scan.next_batch(10), None) for p in b.records) == [
        f"{root}/a.csv",
        f"{root}/b.csv",
    ]
    for name in ("a.csv", "b.csv"):
        writer = fs.create(f"{root}/.{name}.tmp")
        writer.write(b"new\n")
        writer.close()
        fs.rename(f"{root}/.{name}.tmp", f"{root}/{name}", overwrite=True)
    with socket.socket() as unused:
        unused.bind(("127.0.0.1", 0))
        dead = f"webhdfs://127.0.0.1:{unused.getsockname()[1]}"
    fs._truncator = WebHdfsFileSystem(cluster_settings(dead, None, retries=0))
    with caplog.at_level(logging.WARNING):
        assert scan.next_batch(10) is None
        assert scan.next_batch(10) is None
    said = [r.getMessage() for r in caplog.records if r.name == "operators.fs.native"]
    assert len(said) == 1, said
    assert (
        f"the fileIds of {fs.display(root)}/a.csv, {fs.display(root)}/b.csv could not" in (said[0])
    )
    reported = [r.getMessage() for r in caplog.records if r.name == "operators.scan.cursor"]
    assert [m.split(" changed after")[0] for m in reported] == [
        f"scan: file {fs.display(root)}/a.csv",
        f"scan: file {fs.display(root)}/b.csv",
    ]
    assert scan.modified == 2


def test_one_user_per_process_for_hdfs(request: pytest.FixtureRequest) -> None:
    _, _, sandbox = _root(request, "hdfs")
    other = FileSystemSettings(uri=sandbox.info.hdfs, user="someone-else")
    with pytest.raises(ValueError) as info:
        NativeHdfsFileSystem(other)
    assert "someone-else" in str(info.value) and CLUSTER_USER in str(info.value)


def test_the_ready_line_and_the_client_configuration(request: pytest.FixtureRequest) -> None:
    """The sandbox's JSON line names both URIs; its configuration directory is what
    HADOOP_CONF_DIR users need: the default filesystem and the WebHDFS address for truncate."""
    _, _, sandbox = _root(request, "hdfs")
    info = sandbox.info
    assert info.hdfs.startswith("hdfs://127.0.0.1:")
    assert info.webhdfs.startswith("webhdfs://127.0.0.1:")
    assert info.datanodes == 2
    authority = info.hdfs.removeprefix("hdfs://")
    [http] = hadoop_http_addresses(authority, info.conf_dir)
    assert info.webhdfs == f"webhdfs://{http}"
    fs = NativeHdfsFileSystem(cluster_settings(info.hdfs, sandbox))
    assert fs.supports_truncate
    no_conf = NativeHdfsFileSystem(cluster_settings(info.hdfs, None))
    assert not no_conf.supports_truncate  # no configuration: publish by rename, said in the log
    status = sandbox.command("status")
    assert status["datanodes"] == 2


def _block_size(sandbox: Sandbox, path: str) -> tuple[int, str | None]:
    """``(the blockSize WebHDFS's GETFILESTATUS answers for path, the clients' dfs.blocksize)``."""
    http = sandbox.info.webhdfs.removeprefix("webhdfs://")
    url = f"http://{http}/webhdfs/v1{path}?op=GETFILESTATUS&user.name={CLUSTER_USER}"
    with urllib.request.urlopen(url, timeout=30) as answer:
        size = int(json.load(answer)["FileStatus"]["blockSize"])
    site = ET.parse(Path(sandbox.info.conf_dir) / "hdfs-site.xml").getroot()
    names = {p.findtext("name"): p.findtext("value") for p in site.iter("property")}
    return size, names.get("dfs.blocksize")


def test_the_sandbox_writes_1_mib_blocks_unless_told(request: pytest.FixtureRequest) -> None:
    fs, root, sandbox = _root(request, "hdfs")
    path = posixpath.join(root, "small-blocks")
    _put(fs, path, b"x")
    assert _block_size(sandbox, path) == (BLOCK, str(BLOCK))


@pytest.mark.slow
def test_a_sandbox_started_with_a_block_size_writes_blocks_of_it(
    tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """Benchmarks run at a production block size: hdfs:// (the NameNode's default) and
    Hadoop's own client (the configuration directory's) both write blocks of it."""
    request.getfixturevalue("hdfs_sandbox")  # Java and Maven, or a skip
    big = 128 * BLOCK
    with Sandbox.start(tmp_path / "sandbox", block_size=big) as sandbox:
        fs = NativeHdfsFileSystem(cluster_settings(sandbox.info.hdfs, sandbox))
        _put(fs, "/big-blocks", b"x" * 1000)
        assert _block_size(sandbox, "/big-blocks") == (big, str(big))


def test_a_block_size_hdfs_refuses_is_refused_before_the_start() -> None:
    with pytest.raises(ValueError, match="block_size: 1000 is not a multiple of 512"):
        Sandbox.start("/nonexistent", block_size=1000)


def test_a_dead_after_shorter_than_ten_heartbeats_is_refused_before_the_start() -> None:
    # The NameNode declares a DataNode dead after 2 rechecks and 10 heartbeats of 1 s.
    with pytest.raises(ValueError, match="dead_after: 5s is under 12 seconds"):
        Sandbox.start("/nonexistent", dead_after=5)


def test_the_command_without_java_says_what_to_install(tmp_path: pytest.TempPathFactory) -> None:
    code = textwrap.dedent(
        """
        import shutil, sys
        from operators import sandbox
        shutil.which = lambda name: None
        sandbox.cache_dir = lambda: __import__("pathlib").Path(sys.argv[1])
        from operators.app.cli import main
        sys.exit(main(["sandbox", sys.argv[1]]))
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", code, str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "install a JDK" in lines[0] and "Maven" in lines[0]


def test_an_ha_name_service_through_hadoop_conf_dir(
    tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """hdfs://<nameservice> resolves from HADOOP_CONF_DIR as for Hadoop's own client, and is
    the default filesystem when no uri is given (fs.defaultFS): two NameNodes, truncate
    through either one's WebHDFS, and the active one restarted mid-way."""
    from tests.conftest import require_java_and_maven

    require_java_and_maven()
    with Sandbox.start(tmp_path_factory.mktemp("ha"), datanodes=1, ha=True) as sandbox:
        assert sandbox.info.hdfs == "hdfs://sandbox"
        monkeypatch.setenv("HADOOP_CONF_DIR", sandbox.info.conf_dir)
        # No uri: fs.defaultFS of HADOOP_CONF_DIR's core-site.xml names the name service.
        settings = FileSystemSettings(user=CLUSTER_USER)
        assert settings.uri == "hdfs://sandbox"
        fs = NativeHdfsFileSystem(settings)
        assert fs.display("/x") == "hdfs://sandbox/x"
        assert fs.supports_truncate  # the NameNodes' HTTP addresses come from the same files
        _put(fs, "/tmp/ha.txt", b"0123456789")
        fs.truncate("/tmp/ha.txt", 4)
        sandbox.command("restart-namenode 0")
        w = fs.append("/tmp/ha.txt")
        w.write(b"++")
        w.close()
        assert fs.read("/tmp/ha.txt") == b"0123++"


def _refused_block(path: str) -> RuntimeError:
    """What hdfs-native raises when the NameNode refuses a new block, as a real one read (four
    writers of 96 MB each on the sandbox's 1 MiB blocks): its error's debug text."""
    return RuntimeError(
        'RPCError("org.apache.hadoop.hdfs.server.namenode.NotReplicatedYetException", "Not '
        f"replicated yet: {path}\\n\\tat org.apache.hadoop.hdfs.server.namenode.FSDirWriteFileOp"
        '.validateAddBlock(FSDirWriteFileOp.java:181)\\n")'
    )


class _Stream:
    """The client's real stream, with the refusals the test asks for: the ``refuse_at``-th
    write (and every later one when ``always``) hands ``sent`` bytes to the DataNode first, as
    the client does with the block it finished before asking for the next; a close gives up
    ``close_fails`` times as the client's does when the NameNode cannot complete the file."""

    def __init__(self, real: object, path: str, refuse_at: int, sent: int, always: bool) -> None:
        self.real, self.path, self.refuse_at, self.sent, self.always = (
            real,
            path,
            refuse_at,
            sent,
            always,
        )
        self.writes = 0
        self.close_fails = 0

    def write(self, data: bytes) -> int:
        self.writes += 1
        if self.writes == self.refuse_at or (self.always and self.writes > self.refuse_at):
            self.real.write(data[: self.sent])  # type: ignore[attr-defined]
            self.real.hsync()  # type: ignore[attr-defined]
            raise _refused_block(self.path)
        return self.real.write(data)  # type: ignore[attr-defined,no-any-return]

    def close(self) -> None:
        if self.close_fails:
            self.close_fails -= 1
            # The client's close sends every byte and waits for its acknowledgements before it
            # asks the NameNode to complete the file (as a real one did with every replica
            # report held: test_a_close_the_namenode_cannot_complete_ends_by_a_lease_recovery).
            self.real.hsync()  # type: ignore[attr-defined]
            raise RuntimeError('OperationFailed("Failed to complete file in time")')
        self.real.close()  # type: ignore[attr-defined]

    def __getattr__(self, name: str) -> object:
        return getattr(self.real, name)


class _Client:
    """The real client; the streams of ``create`` are :class:`_Stream`."""

    def __init__(self, real: object, **refusals: object) -> None:
        self.real, self.refusals, self.streams = real, refusals, list[_Stream]()

    def create(self, path: str, options: object) -> _Stream:
        return self._wrap(self.real.create(path, options), path)  # type: ignore[attr-defined]

    def append(self, path: str) -> _Stream:
        return self._wrap(self.real.append(path), path)  # type: ignore[attr-defined]

    def _wrap(self, real: object, path: str) -> _Stream:
        stream = _Stream(real, path, **self.refusals)  # type: ignore[arg-type]
        self.streams.append(stream)
        return stream

    def __getattr__(self, name: str) -> object:
        return getattr(self.real, name)


def test_a_refused_block_is_asked_for_again_and_every_byte_lands_once(
    request: pytest.FixtureRequest,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """hdfs-native raises the NameNode's NotReplicatedYetException (Hadoop's client waits and
    asks again) and its stream cannot ask again; the writer reopens the file at the length its
    DataNode holds and writes the rest, once."""
    fs, root, _ = _root(request, "hdfs")
    assert isinstance(fs, NativeHdfsFileSystem)
    monkeypatch.setattr("operators.fs.native_writer._WRITE_AT", 1)  # each write is one client call
    fs.client = _Client(fs.client, refuse_at=2, sent=1000, always=False)
    path = posixpath.join(root, "refused")
    chunks = [bytes([n]) * 300_000 for n in range(4)]
    w = fs.create(path)
    for chunk in chunks:
        w.write(chunk)
    w.close()
    assert fs.read(path) == b"".join(chunks)
    assert "NotReplicatedYetException: Not replicated yet" in caplog.text
    assert "try 2 of 5" in caplog.text


def test_a_block_refused_at_every_try_fails_naming_the_namenodes_error(
    request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> None:
    fs, root, _ = _root(request, "hdfs")
    assert isinstance(fs, NativeHdfsFileSystem)
    monkeypatch.setattr("operators.fs.native_writer._REPLICATION_FIRST_DELAY", 0.01)
    fs.client = _Client(fs.client, refuse_at=1, sent=10, always=True)
    path = posixpath.join(root, "refused")
    w = fs.create(path)
    w.write(b"x" * 1000)  # sent with the sync: its failure is the sync's
    with pytest.raises(OSError) as failed:
        w.sync()
    text = str(failed.value)
    assert "refused a new block 5 times" in text
    assert "NotReplicatedYetException: Not replicated yet" in text
    assert path in text
    fs.recover_lease(path)
    # Each try sent 10 bytes and the next one only what was missing: no byte twice.
    assert fs.read(path) == b"x" * 50


def test_small_writes_reach_the_client_in_few_calls_and_a_failed_one_is_raised_later(
    request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A sink writes a batch of lines at a time: each client call was a hand-off to the
    writer's thread. Written bytes are gathered up to _WRITE_AT and sent while the caller goes
    on; a send that failed is raised by the next send, sync or close."""
    from operators.fs import native_writer

    fs, root, _ = _root(request, "hdfs")
    assert isinstance(fs, NativeHdfsFileSystem)
    fs.client = _Client(fs.client, refuse_at=0, sent=0, always=False)
    path = posixpath.join(root, "gathered")
    chunks = [bytes([n % 251]) * 10_000 for n in range(250)]  # 2.5 MB in 250 writes
    w = fs.create(path)
    for chunk in chunks:
        w.write(chunk)
    w.sync()
    assert fs.read(path) == b"".join(chunks)  # durable at the sync, in order
    w.close()
    (stream,) = fs.client.streams
    assert stream.writes == 3  # 1 MiB, 1 MiB, and the rest at the sync
    monkeypatch.setattr(native_writer, "_REPLICATION_FIRST_DELAY", 0.01)
    fs.client = _Client(fs.client.real, refuse_at=1, sent=0, always=True)
    w = fs.create(path + ".2")
    w.write(b"y" * native_writer._WRITE_AT)  # handed to the client: refused meanwhile
    w.write(b"z")
    with pytest.raises(OSError, match="refused a new block 5 times"):
        w.sync()
    fs.recover_lease(path + ".2")


def test_a_close_the_namenode_could_not_complete_is_not_asked_again_but_recovered(
    request: pytest.FixtureRequest, caplog: pytest.LogCaptureFixture
) -> None:
    fs, root, _ = _root(request, "hdfs")
    assert isinstance(fs, NativeHdfsFileSystem)
    client = _Client(fs.client, refuse_at=0, sent=0, always=False)
    fs.client = client
    path = posixpath.join(root, "closed")
    w = fs.create(path)
    w.write(b"data")
    client.streams[0].close_fails = 5  # the old code asked 5 times, then failed
    with caplog.at_level(logging.INFO, logger="operators.fs.native_writer"):
        w.close()
    assert fs.read(path) == b"data"
    assert "recovering this writer's own lease" in caplog.text
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]
    fs.append(path).close()  # closed: no lease is left behind


@pytest.mark.slow
def test_a_close_the_namenode_cannot_complete_ends_by_a_lease_recovery(
    request: pytest.FixtureRequest, caplog: pytest.LogCaptureFixture
) -> None:
    """No DataNode reports the last block (a report lost while the NameNode restarted is sent
    again only with the next full report, hours later): the client asks to complete the file
    for about 13 s, then the writer recovers its own lease instead of asking again for as long
    again (35 s, then a failed close and an open file), and the file is closed whole."""
    fs, root, sandbox = _root(request, "hdfs")
    assert isinstance(fs, NativeHdfsFileSystem)
    path = posixpath.join(root, "unreported")
    w = fs.create(path)
    w.write(b"x" * 5000)
    w.sync()
    guard = threading.Timer(90.0, _resume_reports, [sandbox])
    for index in range(sandbox.info.datanodes):
        sandbox.command(f"pause-ibr {index}")
    guard.start()
    try:
        with caplog.at_level(logging.INFO, logger="operators.fs.native_writer"):
            w.close()
        assert not _still_open(fs, path)
    finally:
        guard.cancel()
        _resume_reports(sandbox)
    assert fs.read(path) == b"x" * 5000
    assert "Failed to complete file in time" in caplog.text
    assert "recovering this writer's own lease" in caplog.text


def test_an_append_right_after_a_close_keeps_every_byte_while_a_datanode_reports_late(
    request: pytest.FixtureRequest, caplog: pytest.LogCaptureFixture
) -> None:
    """hdfs-native appends to the last block under its old generation stamp: a DataNode the
    NameNode has not heard from yet (its report trails the close) is left out of the append and
    keeps a shorter replica of the same stamp; the next append through it failed, and the lease
    recovery that followed rolled the file back past a close that had succeeded. The append
    waits until the NameNode knows every replica."""
    fs, root, sandbox = _root(request, "hdfs")
    assert isinstance(fs, NativeHdfsFileSystem) and fs.webhdfs is not None
    path = posixpath.join(root, "late")
    resume = threading.Timer(1.0, sandbox.command, ["resume-ibr 1"])
    sandbox.command("pause-ibr 1")
    try:
        _put(fs, path, b"one\n")  # the NameNode knows the replica of DataNode 0 only
        resume.start()
        w = fs.append(path)
        w.write(b"two\n")
        w.close()
        resume.join()
        time.sleep(0.5)  # DataNode 1's report is in
        w = fs.append(path)  # through DataNode 1 too
        w.write(b"three\n")
        w.close()
    finally:
        resume.cancel()
        if resume.is_alive():
            resume.join()
        sandbox.command("resume-ibr 1")
    assert fs.read(path) == b"one\ntwo\nthree\n"
    fs.recover_lease(path)  # closed: nothing for a recovery to roll back
    assert fs.read(path) == b"one\ntwo\nthree\n"
    assert fs.webhdfs.last_block_replicas(path) == 2


def _still_open(fs: NativeHdfsFileSystem, path: str) -> bool:
    """An open file's last block is not complete: hdfs-native reads complete blocks only."""
    return len(fs.client.read(path)) < fs.status(path).size


def test_cuts_and_the_lock_are_written_while_the_datanodes_hold_their_reports(
    request: pytest.FixtureRequest,
) -> None:
    """The NameNode completes a file only once a DataNode has reported its last block; asked
    before, hdfs-native waits a fixed 500 ms (always on one DataNode, whose report trails its
    acknowledgement). The lock's take, heartbeat and release, a checkpoint and the output's
    owner stamp are durable at their sync and renamed into place without that close: with
    every report held, each returns and the files are read back; their closes land in the
    background once the reports come."""
    fs, root, sandbox = _root(request, "hdfs")
    assert isinstance(fs, NativeHdfsFileSystem) and fs.webhdfs is not None
    directory = posixpath.join(root, "ck")
    sink_dir = posixpath.join(root, "out", "_hdfs_sink")
    lock = CheckpointLock(fs, directory, heartbeat_interval=0)
    store = CheckpointStore(fs, directory, guard=lock.check)
    guard = threading.Timer(90.0, _resume_reports, [sandbox])  # the old code's closes wait
    for index in range(sandbox.info.datanodes):
        sandbox.command(f"pause-ibr {index}")
    guard.start()
    try:
        lock.acquire()
        lock.refresh()
        store.write(1, {"op": {"offset": 7}})
        claim_output(fs, sink_dir, Owner(directory, "job-1"))
        held = [s.path for s in fs.list_dir(directory) if s.name.startswith(".lock-")]
        published = [*held, posixpath.join(directory, cut_file_name(1))]
        published.append(posixpath.join(sink_dir, OWNER_FILE))
        assert all(_still_open(fs, path) for path in published)  # no close landed
        latest = store.latest()
        assert latest is not None and latest.operators == {"op": {"offset": 7}}
        assert lock.holder() is not None and lock.holder().token == lock._token  # type: ignore[union-attr]
        assert read_owner(fs, sink_dir) == Owner(directory, "job-1")
        lock.release()
    finally:
        guard.cancel()
        _resume_reports(sandbox)
    assert settle_closes(60.0)
    survivors = [s.path for s in fs.list_dir(directory)] + [posixpath.join(sink_dir, OWNER_FILE)]
    assert not any(_still_open(fs, path) for path in survivors)


def _resume_reports(sandbox: Sandbox) -> None:
    for index in range(sandbox.info.datanodes):
        sandbox.command(f"resume-ibr {index}")


KILLED_BEFORE_CLOSES = """\
import sys, time
from operators.fs import FileSystemSettings, open_path
from operators.fs.native_writer import NativeHdfsWriter
from region.checkpoint import CheckpointStore
from region.lock import CheckpointLock
# Killed before any close lands: the published files stay open with this process's lease.
held = []
NativeHdfsWriter.close = NativeHdfsWriter.close_later = lambda self: held.append(self)
settings = FileSystemSettings(uri=sys.argv[1], user=sys.argv[3], config_dir=sys.argv[4])
fs, _ = open_path(sys.argv[1], settings)
lock = CheckpointLock(fs, sys.argv[2], ttl=600, heartbeat_interval=0)
lock.acquire()
CheckpointStore(fs, sys.argv[2], guard=lock.check).write(1, {"op": {"offset": 7}})
print("ready", flush=True)
time.sleep(600)
"""


def test_a_cut_and_a_lock_left_open_by_a_killed_process_are_read_at_the_restart(
    request: pytest.FixtureRequest,
) -> None:
    """A process killed after renaming a checkpoint and a lock generation into place but
    before their closes landed leaves both open under a dead writer's lease. hdfs-native
    without the cluster's WebHDFS reads an open file's complete blocks only (none here): the
    restart recovers their leases (they are final: all synced before the rename) and reads
    them whole, so it resumes from that cut and takes the dead holder's lock at once."""
    _, root, sandbox = _root(request, "hdfs")
    directory = posixpath.join(root, "ck")
    _kill_when_ready(sandbox, KILLED_BEFORE_CLOSES, directory)
    bare = NativeHdfsFileSystem(cluster_settings(sandbox.info.hdfs, None, config_dir=None))
    assert bare.webhdfs is None
    cut = posixpath.join(directory, cut_file_name(1))
    assert _still_open(bare, cut) and bare.read(cut) == b""
    latest = CheckpointStore(bare, directory).latest()
    assert latest is not None and latest.operators == {"op": {"offset": 7}}
    lock = CheckpointLock(bare, directory, heartbeat_interval=0)
    lock.acquire()  # the holder's process is gone: taken at once, not after its ttl of 600 s
    lock.release()


KILLED_WITH_ITS_BATCH_LOG_OPEN = """\
import sys, time
from operators.fs import FileSystemSettings, open_path
from operators.fs.native_writer import NativeHdfsWriter
from operators.spark.batchlog import BatchLog
# Killed before the background closes land: the entries stay open with this process's lease.
held = []
NativeHdfsWriter.close_later = lambda self: held.append(self)
settings = FileSystemSettings(uri=sys.argv[1], user=sys.argv[3], config_dir=sys.argv[4])
fs, _ = open_path(sys.argv[1], settings)
log = BatchLog(fs, sys.argv[2])
log.write_offset(0, {"seq": 7}, {})
log.write_commit(0)
print("ready", flush=True)
time.sleep(600)
"""


def test_a_batch_log_left_open_by_a_killed_driver_is_sealed_for_spark_and_read_whole(
    request: pytest.FixtureRequest,
) -> None:
    """Fused execution renames a batch's ``offsets/N`` and ``commits/N`` into place once synced
    and closes them in the background (a foreground close waits 500 ms a batch on a small
    cluster). A driver killed before those closes landed leaves them open under a dead lease,
    which Spark's own client cannot read after a DataNode restart: before a streaming query
    takes the checkpoint over, ``seal`` closes them; fused execution reads them whole."""
    from operators.spark.batchlog import BatchLog

    _, root, sandbox = _root(request, "hdfs")
    directory = posixpath.join(root, "spark")
    _kill_when_ready(sandbox, KILLED_WITH_ITS_BATCH_LOG_OPEN, directory)
    bare = NativeHdfsFileSystem(cluster_settings(sandbox.info.hdfs, None, config_dir=None))
    entries = [posixpath.join(directory, kind, "0") for kind in ("offsets", "commits")]
    assert all(_still_open(bare, path) for path in entries)
    log = BatchLog(bare, directory)
    assert log.newest() == (0, 0)
    log.seal()
    assert not any(_still_open(bare, path) for path in entries)
    assert log.offset(0) == {"seq": 7}
    opened = posixpath.join(root, "spark2")
    _kill_when_ready(sandbox, KILLED_WITH_ITS_BATCH_LOG_OPEN, opened)
    assert BatchLog(bare, opened).offset(0) == {"seq": 7}  # read whole, its lease recovered


STOPPED_JOB = """\
import sys
from operators.fs import FileSystemSettings, open_path
from region.checkpoint import CheckpointStore
from region.lock import CheckpointLock
settings = FileSystemSettings(uri=sys.argv[1], user=sys.argv[3], config_dir=sys.argv[4])
fs, _ = open_path(sys.argv[1], settings)
lock = CheckpointLock(fs, sys.argv[2], heartbeat_interval=0)
lock.acquire()
CheckpointStore(fs, sys.argv[2], guard=lock.check).write(1, {"op": {"offset": 7}})
lock.release()
print("released", flush=True)
"""


def test_a_stopped_job_unlocks_at_once_and_its_exit_waits_for_the_closes(
    request: pytest.FixtureRequest,
) -> None:
    """A job's unlock returns without waiting for the DataNodes' reports; the process's exit
    waits until the closes it handed to the background have landed, so a clean stop leaves no
    file open behind it."""
    fs, root, sandbox = _root(request, "hdfs")
    assert isinstance(fs, NativeHdfsFileSystem)
    directory = posixpath.join(root, "ck")
    fired = threading.Event()

    def resume_late() -> None:  # the old code's closes wait for the reports
        fired.set()
        _resume_reports(sandbox)

    guard = threading.Timer(90.0, resume_late)
    for index in range(sandbox.info.datanodes):
        sandbox.command(f"pause-ibr {index}")
    guard.start()
    child = subprocess.Popen(
        [
            sys.executable,
            "-c",
            STOPPED_JOB,
            sandbox.info.hdfs,
            directory,
            CLUSTER_USER,
            sandbox.info.conf_dir,
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert child.stdout is not None
        assert child.stdout.readline().strip() == "released"
        assert not fired.is_set()  # unlocked while every report was held
        assert child.poll() is None  # its exit waits for the closes
    finally:
        guard.cancel()
        _resume_reports(sandbox)
        try:
            child.wait(90)
        finally:
            if child.poll() is None:
                child.kill()
    assert child.returncode == 0
    files = [s.path for s in fs.list_dir(directory)]
    assert files and not any(_still_open(fs, path) for path in files)


def test_the_unlock_of_a_stopping_job_starts_no_close(request: pytest.FixtureRequest) -> None:
    """The released generation is the record written ahead when the lock was taken, long
    closed: with every DataNode report held (no close can complete), the unlock returns,
    nothing is left for the exit to wait for, and the released generation is a closed file."""
    fs, root, sandbox = _root(request, "hdfs")
    assert isinstance(fs, NativeHdfsFileSystem)
    directory = posixpath.join(root, "ck")
    lock = CheckpointLock(fs, directory, heartbeat_interval=0)
    lock.acquire()
    assert settle_closes(60.0)  # the take's closes landed (the reports flow)
    guard = threading.Timer(90.0, _resume_reports, [sandbox])
    for index in range(sandbox.info.datanodes):
        sandbox.command(f"pause-ibr {index}")
    guard.start()
    try:
        lock.release()
        assert settle_closes(0.0)  # no close handed to the background
        released = lock.holder()
        assert released is not None and released.released
        assert not _still_open(fs, released.path)
    finally:
        guard.cancel()
        _resume_reports(sandbox)
    assert [s.path for s in fs.list_dir(directory)] == [released.path]


def test_the_exit_leaves_a_close_the_namenode_cannot_complete_to_the_next_reader(
    request: pytest.FixtureRequest,
) -> None:
    """A background close whose file the NameNode cannot complete (every DataNode report held,
    as when a report is lost while the NameNode restarts) holds the exit up for its stall time
    only, not for the minute the exit allows all closes; its bytes are durable, and the close
    lands once the reports flow."""
    from operators.fs import native_writer

    fs, root, sandbox = _root(request, "hdfs")
    assert isinstance(fs, NativeHdfsFileSystem)
    path = posixpath.join(root, "last-cut")
    guard = threading.Timer(90.0, _resume_reports, [sandbox])
    for index in range(sandbox.info.datanodes):
        sandbox.command(f"pause-ibr {index}")
    guard.start()
    try:
        writer = fs.create(path)
        writer.write(b"last cut\n")
        writer.sync()
        writer.close_later()
        # No deadline: only the stall rule can end this wait while the reports are held.
        left = native_writer._background.settle(None, stall=0.5)
        assert left == [fs.display(path)]
    finally:
        guard.cancel()
        _resume_reports(sandbox)
    assert settle_closes(60.0)  # it lands once the reports flow
    assert not _still_open(fs, path)
    assert fs.read(path, 0, 100) == b"last cut\n"


CLOSED_AT_EXIT = """\
import sys
from operators.fs import FileSystemSettings, native_writer, open_path
native_writer._CLOSE_AFTER = 1.0  # the close starts while the exit waits for it
settings = FileSystemSettings(uri=sys.argv[1], user=sys.argv[3], config_dir=sys.argv[4], timeout=5)
fs, _ = open_path(sys.argv[1], settings)
writer = fs.create(sys.argv[2])
writer.write(b"last cut\\n")
writer.sync()
writer.close_later()
"""


def test_a_close_handed_to_the_background_just_before_the_exit_lands(
    request: pytest.FixtureRequest,
) -> None:
    """The exit waits for the background closes, including one not started yet (a young file's
    close waits a moment after its opening, see operators.fs.native_writer): the writer's call
    thread must still answer then, so the file is closed and no close fails."""
    fs, root, sandbox = _root(request, "hdfs")
    path = posixpath.join(root, "cut.json")
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            CLOSED_AT_EXIT,
            sandbox.info.hdfs,
            path,
            CLUSTER_USER,
            sandbox.info.conf_dir,
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert "close failed" not in done.stderr
    assert isinstance(fs, NativeHdfsFileSystem) and not _still_open(fs, path)
    assert fs.read(path) == b"last cut\n"


def test_a_young_file_is_closed_in_the_background_a_moment_after_its_opening(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """On one DataNode a close asked within moments of the file's opening mostly meets
    hdfs-native's 500 ms wait; asked _CLOSE_AFTER after it, mostly not (measured, see
    operators.fs.native_writer). A background close of a young file waits out the rest of that
    time; an older file's is asked at once."""
    from operators.fs import native_writer

    slept: list[float] = []
    monkeypatch.setattr(native_writer.time, "sleep", slept.append)

    class _Writer:
        path = "/ck/cut.json"
        _stream = None

        def __init__(self, age: float) -> None:
            self.opened = time.monotonic() - age
            self.closed = False

        def close(self) -> None:
            self.closed = True

    young, old = _Writer(0.0), _Writer(5.0)
    closes = native_writer._BackgroundCloses()
    closes.submit(young)  # type: ignore[arg-type]
    closes.submit(old)  # type: ignore[arg-type]
    assert closes.settle(10.0) == []  # every close landed
    assert young.closed and old.closed
    assert len(slept) == 1 and 0 < slept[0] <= native_writer._CLOSE_AFTER


def _sink(fs: FileSystem, root: str) -> HDFS2FileSink:
    sink = HDFS2FileSink(SinkSettings(file=posixpath.join(root, "out", "part-%FILENUM.txt")), fs)
    sink.reset_to_initial_state()
    return sink


def test_a_rolled_output_file_is_covered_by_a_cut_before_its_close_lands_and_published_closed(
    request: pytest.FixtureRequest,
) -> None:
    """The sink's close of an output file waits, on HDFS, for a DataNode's report of its last
    block (500 ms on one DataNode). The file is synced first, so the cut covering it and that
    cut's checkpoint need not wait: with every report held, the final punctuation and the
    checkpoint return, the state promising the file; its publish waits for the close, so what
    a reader finds under the final name is a closed file with every record."""
    fs, root, sandbox = _root(request, "hdfs")
    assert isinstance(fs, NativeHdfsFileSystem)
    sink = _sink(fs, root)
    work = posixpath.join(root, "out", ".part-0.txt~sink.inprogress")
    final = posixpath.join(root, "out", "part-0.txt")
    guard = threading.Timer(90.0, _resume_reports, [sandbox])  # the old code's close waits
    for index in range(sandbox.info.datanodes):
        sandbox.command(f"pause-ibr {index}")
    guard.start()
    try:
        sink.write(Batch(["a", "b", "c"]))
        sink.finish()
        state = sink.checkpoint(1)
        assert [p["work"] for p in state["pending"]] == [work]
        assert _still_open(fs, work)  # no close landed: the cut did not wait for it
    finally:
        guard.cancel()
        _resume_reports(sandbox)
    sink.on_cut_completed(1)
    assert not _still_open(fs, final)
    assert fs.read(final) == b"a\nb\nc\n"
    sink.close()


KILLED_BEFORE_OUTPUT_CLOSE = """\
import json, sys, time
from operators.fs import FileSystemSettings, open_path
from operators.sink import HDFS2FileSink, SinkSettings
from region.state import Batch
settings = FileSystemSettings(uri=sys.argv[1], user=sys.argv[3], config_dir=sys.argv[4])
fs, _ = open_path(sys.argv[1], settings)
sink = HDFS2FileSink(SinkSettings(file=sys.argv[2] + "/out/part-%FILENUM.txt"), fs)
sink.reset_to_initial_state()
sink.write(Batch(["a", "b", "c"]))
sink.finish()
print(json.dumps(sink.checkpoint(1)), flush=True)
time.sleep(600)
"""


def test_a_file_a_killed_sink_left_open_after_the_cut_is_published_closed_at_the_restart(
    request: pytest.FixtureRequest,
) -> None:
    """A sink killed after the cut that covers a file but before the file's close landed
    leaves it open under a dead writer's lease; the restart's reset publishes it closed, at
    the length the cut promised."""
    fs, root, sandbox = _root(request, "hdfs")
    assert isinstance(fs, NativeHdfsFileSystem)
    for index in range(sandbox.info.datanodes):
        sandbox.command(f"pause-ibr {index}")
    args = [sandbox.info.hdfs + root, root, CLUSTER_USER, sandbox.info.conf_dir]
    child = subprocess.Popen(
        [sys.executable, "-c", KILLED_BEFORE_OUTPUT_CLOSE, *args], stdout=subprocess.PIPE, text=True
    )
    try:
        assert child.stdout is not None
        state = json.loads(child.stdout.readline())
        child.send_signal(signal.SIGKILL)
        child.wait(30)
    finally:
        if child.poll() is None:
            child.kill()
        _resume_reports(sandbox)
    work = posixpath.join(root, "out", ".part-0.txt~sink.inprogress")
    assert _still_open(fs, work)
    sink = HDFS2FileSink(SinkSettings(file=posixpath.join(root, "out", "part-%FILENUM.txt")), fs)
    sink.reset(state)
    final = posixpath.join(root, "out", "part-0.txt")
    assert not _still_open(fs, final)
    assert fs.read(final) == b"a\nb\nc\n"
    sink.close()


class _CountedOpens:
    """The client, counting the opens (``read``) of files: one NameNode call each."""

    def __init__(self, client: object) -> None:
        self._client = client
        self.opens = 0

    def read(self, path: str) -> object:
        self.opens += 1
        return self._client.read(path)  # type: ignore[attr-defined]

    def __getattr__(self, name: str) -> object:
        return getattr(self._client, name)


def test_a_range_read_chunk_by_chunk_opens_its_file_once(request: pytest.FixtureRequest) -> None:
    """A Spark task reads its byte range in chunks: one NameNode call for the file's blocks,
    not one a chunk; and bytes appended after that open are still read as ``read`` reads them."""
    from operators.spark.arrow_io import copy_lines

    fs, root, _ = _root(request, "hdfs")
    assert isinstance(fs, NativeHdfsFileSystem)
    path = posixpath.join(root, "lines.txt")
    data = b"".join(b"line %07d\n" % i for i in range(300_000))  # 3.6 MB: 4 blocks
    _put(fs, path, data)
    counted = _CountedOpens(fs.client)
    fs.client = counted
    chunks = copy_lines(fs, path, 0, len(data), size=len(data), chunk_size=256 << 10)
    assert b"".join(piece for piece, _ in chunks) == data
    assert counted.opens == 1
    read = fs.open_ranges(path)
    w = fs.append(path)
    w.write(b"more\n")
    w.close()
    assert read(len(data) - 5, 10) == data[-5:] + b"more\n"
