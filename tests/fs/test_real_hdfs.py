"""Real-HDFS facts the backends must handle, on the session's MiniDFSCluster: a writer killed
with its file open (the lease), TRUNCATE that answers false (block recovery), a user per
process for hdfs://, and the sandbox's own promises (ready line, client configuration)."""

from __future__ import annotations

import posixpath
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from operators.fs import FileSystemSettings, NativeHdfsFileSystem, WebHdfsFileSystem
from operators.fs.native import hadoop_http_addresses
from operators.fs.webhdfs import _truncate_request
from operators.sandbox import Sandbox
from region.fs import FileSystem
from tests.conftest import CLUSTER_USER, cluster_settings, real_fs

BLOCK = 1024 * 1024  # the sandbox's block size


def _root(request: pytest.FixtureRequest, backend: str) -> tuple[FileSystem, str, Sandbox]:
    fs, base, sandbox = real_fs(request, backend)
    if sandbox is None:
        pytest.skip("needs the sandbox (HDFS_URI / WEBHDFS_URL name another cluster)")
    root = posixpath.join(base, f"faults-{time.monotonic_ns()}")
    fs.mkdirs(root)
    return fs, root, sandbox


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
    child = subprocess.Popen(
        [
            sys.executable,
            "-c",
            KILLED_WRITER,
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
