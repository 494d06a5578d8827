"""Files and directories a run creates get the configured permissions (default: files 0640,
directories 0750, nothing world-writable), whatever the process's umask: output, rejects,
checkpoints, the identity file, the lock, the Spark sink log; on the local disk and WebHDFS."""

from __future__ import annotations

import os
import stat
import textwrap
from pathlib import Path

import pytest

from operators.fs import FileSystemSettings, LocalFileSystem, open_filesystem
from operators.spark.commit import SinkLog, WrittenFile, in_progress_name
from operators.testing.webhdfs_server import ServerProcess

from .conftest import run_cli

TRANSFORM = "def shape(record):\n    return 42 if record == 'bad' else record\n"


def settings_file(folder: Path, *, landing: str, out: str, extra: str = "", fs: str = "") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "shape.py").write_text(TRANSFORM)
    path = folder / "p.toml"
    path.write_text(
        textwrap.dedent(f"""\
        engine = "local"
        [scan]
        directory = "{landing}"
        [transform]
        function = "shape:shape"
        [sink]
        file = "{out}/day/part-%FILENUM.txt"
        rejects_file = "_rejects/rejects-%FILENUM.jsonl"
        """)
        + textwrap.dedent(extra)
        + textwrap.dedent(fs)
    )
    return path


def modes(root: Path) -> dict[str, int]:
    """Permission bits of every file and directory below ``root`` (relative paths)."""
    return {
        str(p.relative_to(root)): stat.S_IMODE(p.stat().st_mode)
        for p in [root, *root.rglob("*")]
        if p != root
    }


def local_landing(folder: Path) -> None:
    (folder / "landing").mkdir(parents=True)
    (folder / "landing" / "a.txt").write_text("one\nbad\ntwo\n")


@pytest.mark.parametrize(
    ("extra", "file_mode", "dir_mode"),
    [
        ("", 0o640, 0o750),
        ('permission = "0600"\n[region]\ncheckpoint_permission = "600"\n', 0o600, 0o700),
    ],
    ids=["default", "0600"],
)
def test_local_run_under_umask_0_creates_nothing_world_writable(
    tmp_path: Path, extra: str, file_mode: int, dir_mode: int
) -> None:
    folder = tmp_path / "pipe"
    local_landing(folder)
    config = settings_file(folder, landing="landing", out="out", extra=extra)
    done = run_cli("run", str(config), "--available-now", "--no-progress", umask=0)
    assert done.returncode == 0, done.stderr
    created = {
        k: v
        for k, v in modes(folder).items()
        if k.startswith(("out", "checkpoints")) and not k.endswith(".pyc")
    }
    expected_files = {
        "out/day/part-0.txt",
        "out/day/_rejects/rejects-0.jsonl",
        "checkpoints/p/pipeline.json",
        "checkpoints/p/cut-000000000001.json",
    }
    assert expected_files <= set(created), sorted(created)
    assert any(".lock-" in k for k in created)  # the lock's newest generation stays
    for path, mode in created.items():
        is_dir = (folder / path).is_dir()
        assert mode == (dir_mode if is_dir else file_mode), f"{path}: {oct(mode)}"
        assert not mode & 0o002
    assert (folder / "out/day/part-0.txt").read_text() == "one\ntwo\n"


def test_webhdfs_run_sets_the_permissions_on_the_server(
    webhdfs_process: ServerProcess, tmp_path: Path
) -> None:
    server = webhdfs_process
    fs = open_filesystem(FileSystemSettings(uri=server.uri, user="etl"))
    writer = fs.create("/perm/landing/a.txt")
    writer.write(b"one\nbad\n")
    writer.close()
    config = settings_file(
        tmp_path / "pipe",
        landing="/perm/landing",
        out="/perm/out",
        fs=f'[filesystem]\nuri = "{server.uri}"\nuser = "etl"\n',
    )
    done = run_cli("run", str(config), "--available-now", "--no-progress")
    assert done.returncode == 0, done.stderr
    client = fs.client  # type: ignore[attr-defined]
    expected = {
        "/perm/out": "750",
        "/perm/out/day": "750",
        "/perm/out/day/part-0.txt": "640",
        "/perm/out/day/_rejects": "750",
        "/perm/out/day/_rejects/rejects-0.jsonl": "640",
    }
    assert {path: client.status(path)["permission"] for path in expected} == expected


def test_spark_sink_log_entries_and_directory_under_umask_0(tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    task_file = out / in_progress_name("p0", 0)
    task_file.write_bytes(b"a\n")
    log = SinkLog(
        LocalFileSystem(),
        str(out),
        str(out / "_hdfs_sink"),
        lambda f, n: str(out / f"part-{n:05d}.txt"),
    )
    previous = os.umask(0)
    try:
        log.commit(0, [WrittenFile(str(task_file), 0, 0, 1, 2, 0)])
    finally:
        os.umask(previous)
    log_modes = modes(out / "_hdfs_sink")
    assert log_modes and set(log_modes.values()) == {0o640}
    assert stat.S_IMODE((out / "_hdfs_sink").stat().st_mode) == 0o750
