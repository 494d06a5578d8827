"""HDFS2FileCopy and ``hdfs-region copy`` on a real HDFS (the session's MiniDFSCluster), through
``hdfs://`` and ``webhdfs://``: both directions, an existing destination, and the command killed
with SIGKILL while writing its temporary on the cluster (the killed writer keeps its lease),
then run again."""

from __future__ import annotations

import os
import posixpath
import time
from pathlib import Path

import pytest

from operators.copy import CopySettings, HDFS2FileCopy
from operators.copy.transfer import is_temporary_of
from operators.sandbox import Sandbox
from region.fs import FileSystem
from tests.cli.conftest import cli, kill_at
from tests.conftest import CLUSTER_USER, real_fs

pytestmark = pytest.mark.slow

BACKENDS = ["hdfs", "webhdfs-cluster"]


def _root(request: pytest.FixtureRequest, backend: str) -> tuple[FileSystem, str, str]:
    """``(filesystem, a fresh directory on it, that directory as a URI)``."""
    fs, base, _ = real_fs(request, backend)
    root = posixpath.join(base, f"copy-{os.getpid()}-{time.monotonic_ns()}")
    fs.mkdirs(root)
    return fs, root, fs.display(root)


def _config(tmp_path: Path, request: pytest.FixtureRequest, backend: str) -> Path:
    fs, _, sandbox = real_fs(request, backend)
    lines = ["[filesystem]", f'uri = "{fs.display("/").rstrip("/")}"', f'user = "{CLUSTER_USER}"']
    if sandbox is not None and backend == "hdfs":
        lines.append(f'config_dir = "{sandbox.info.conf_dir}"')
    lines += ['timeout = "20s"', 'lease_recovery_timeout = "30s"']
    path = tmp_path / "fs.toml"
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.mark.parametrize("backend", BACKENDS)
def test_both_directions(request: pytest.FixtureRequest, tmp_path: Path, backend: str) -> None:
    fs, root, _ = _root(request, backend)
    data = os.urandom(3 << 20)  # three of the sandbox's 1 MiB blocks
    src = tmp_path / "up.bin"
    src.write_bytes(data)
    up = HDFS2FileCopy(
        CopySettings(
            local_file=str(src),
            hdfs_file=root + "/landing/",
            direction="copyFromLocalFile",
            chunk_size=1 << 20,
        ),
        fs,
    )
    result = up.copy()
    assert result.ok and result.result.endswith(f"to {fs.display(root + '/landing/up.bin')} .")
    assert fs.read(root + "/landing/up.bin") == data
    assert [e.name for e in fs.list_dir(root + "/landing")] == ["up.bin"]
    # A repeat finds the same content there: success, nothing written.
    assert up.copy().ok and up.files_already_there == 1
    down = HDFS2FileCopy(
        CopySettings.model_validate(
            {
                "localFile": str(tmp_path / "down") + "/",
                "hdfsFile": root + "/landing/up.bin",
                "direction": "copyToLocalFile",
                "deleteSourceFile": True,
            }
        ),
        fs,
    )
    assert down.copy().ok
    assert (tmp_path / "down" / "up.bin").read_bytes() == data
    assert not fs.exists(root + "/landing/up.bin")
    assert down.n_copied_files == 1


@pytest.mark.parametrize("backend", BACKENDS)
def test_existing_other_destination_on_the_cluster(
    request: pytest.FixtureRequest, tmp_path: Path, backend: str
) -> None:
    fs, root, _ = _root(request, backend)
    w = fs.create(root + "/f.txt")
    w.write(b"old\n")
    w.close()
    src = tmp_path / "f.txt"
    src.write_bytes(b"new!\n")
    settings = {"local_file": str(src), "hdfs_file": root + "/f.txt"}
    op = HDFS2FileCopy(CopySettings(direction="copyFromLocalFile", **settings), fs)
    with pytest.raises(FileExistsError, match=r"f\.txt"):
        op.copy()
    assert fs.read(root + "/f.txt") == b"old\n"
    replace = CopySettings(
        direction="copyFromLocalFile", overwrite_destination_file=True, **settings
    )
    assert HDFS2FileCopy(replace, fs).copy().ok
    assert fs.read(root + "/f.txt") == b"new!\n"
    assert [e.name for e in fs.list_dir(root)] == ["f.txt"]


@pytest.mark.parametrize("backend", BACKENDS)
def test_command_both_directions(
    request: pytest.FixtureRequest, tmp_path: Path, backend: str
) -> None:
    fs, root, uri = _root(request, backend)
    config = _config(tmp_path, request, backend)
    data = os.urandom(200_000)
    src = tmp_path / "a.bin"
    src.write_bytes(data)
    up = cli("copy", str(src), uri + "/a.bin", "--config", str(config), "--delete-source")
    assert up.returncode == 0, up.stderr
    assert fs.read(root + "/a.bin") == data and not src.exists()
    down = cli("copy", uri + "/a.bin", str(tmp_path / "back") + "/", "--config", str(config))
    assert down.returncode == 0, down.stderr
    assert (tmp_path / "back" / "a.bin").read_bytes() == data
    assert fs.exists(root + "/a.bin")


@pytest.mark.parametrize("backend", BACKENDS)
def test_command_killed_mid_copy_to_the_cluster_then_again(
    request: pytest.FixtureRequest, tmp_path: Path, backend: str
) -> None:
    fs, root, uri = _root(request, backend)
    config = _config(tmp_path, request, backend)
    data = os.urandom(6 << 20)
    src = tmp_path / "big.bin"
    src.write_bytes(data)
    args = ["copy", str(src), uri + "/out/", "--config", str(config), "--delete-source"]
    args += ["--chunk-size", str(1 << 20)]
    kill_at("copy_write", tmp_path / "faults", *args)
    # A partial hidden temporary on the cluster (its writer's lease still held), no destination.
    names = [e.name for e in fs.list_dir(root + "/out")]
    assert len(names) == 1 and is_temporary_of(names[0], "big.bin"), names
    assert src.read_bytes() == data
    done = cli(*args[:-2])
    assert done.returncode == 0, done.stderr
    assert [e.name for e in fs.list_dir(root + "/out")] == ["big.bin"]
    assert fs.read(root + "/out/big.bin") == data
    assert not src.exists()


def _names_of_one_file(sandbox: Sandbox) -> dict[str, str]:
    """The cluster's root under three names: RPC by address, RPC by name, WebHDFS."""
    rpc, http = sandbox.info.hdfs, sandbox.info.webhdfs
    return {
        "hdfs-127": rpc,
        "hdfs-localhost": rpc.replace("127.0.0.1", "localhost"),
        "webhdfs-127": http,
    }


@pytest.mark.parametrize("with_conf", [True, False], ids=["fileIds", "no-fileIds"])
def test_the_same_file_under_another_uri_is_never_deleted(
    request: pytest.FixtureRequest, tmp_path: Path, with_conf: bool
) -> None:
    """``hdfs://127.0.0.1`` vs ``webhdfs://127.0.0.1`` vs ``hdfs://localhost``: one file. With
    the Hadoop configuration hdfs:// knows the WebHDFS address and so fileIds; without it the
    copy proves it by its own write (the source's identity changes with the rename)."""
    fs, root, _ = _root(request, "hdfs")
    sandbox = request.getfixturevalue("hdfs_sandbox")
    names = _names_of_one_file(sandbox)
    data = b"".join(b"line %d\n" % i for i in range(1000))
    w = fs.create(root + "/x")
    w.write(data)
    w.close()
    lines = ["[filesystem]", f'user = "{CLUSTER_USER}"', 'timeout = "20s"']
    if with_conf:
        lines.append(f'config_dir = "{sandbox.info.conf_dir}"')
    config = tmp_path / "fs.toml"
    config.write_text("\n".join(lines) + "\n")
    pairs = [
        ("hdfs-127", "webhdfs-127"),
        ("hdfs-127", "hdfs-localhost"),
        ("webhdfs-127", "hdfs-localhost"),
    ]
    for a, b in pairs:
        src, dst = names[a] + root + "/x", names[b] + root + "/x"
        for extra in ([], ["--overwrite"]):
            done = cli("copy", src, dst, "--delete-source", "--config", str(config), *extra)
            assert done.returncode == 3, (a, b, extra, done.stderr)
            assert "same file" in done.stderr and done.stdout == ""
            assert fs.read(root + "/x") == data, (a, b, extra)
            assert [e.name for e in fs.list_dir(root)] == ["x"], (a, b, extra)
    # Two files with the same content under those names: proven apart, the source deleted.
    w = fs.create(root + "/y")
    w.write(data)
    w.close()
    src, dst = names["hdfs-127"] + root + "/x", names["webhdfs-127"] + root + "/y"
    done = cli("copy", src, dst, "--delete-source", "--config", str(config))
    assert done.returncode == 0, done.stderr
    assert [e.name for e in fs.list_dir(root)] == ["y"] and fs.read(root + "/y") == data
