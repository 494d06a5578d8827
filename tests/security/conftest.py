"""Fixtures of the security tests: sink output directories, the WebHDFS stand-in as a process,
the command run as a process."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from operators.fs import LocalFileSystem
from operators.testing.webhdfs_server import ServerProcess, start_process
from tests.cli.conftest import cli_env
from tests.landing import SinkEnv


@pytest.fixture
def sink_local(tmp_path: Path) -> SinkEnv:
    return SinkEnv(LocalFileSystem(), str(tmp_path / "root"))


@pytest.fixture
def sink_env(any_fs: Any) -> SinkEnv:
    return SinkEnv(any_fs.fs, any_fs.root)


def files_under(root: Path) -> list[str]:
    """Every file below ``root`` (relative paths, hidden ones included), sorted."""
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())


@pytest.fixture(scope="module")
def webhdfs_process(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    """The WebHDFS stand-in in its own process: its request log (which quotes tokens, as a
    namenode's may) is not this process's."""
    process = start_process(tmp_path_factory.mktemp("webhdfs"))
    yield process
    process.stop()


def run_cli(*args: str, umask: int | None = None) -> subprocess.CompletedProcess[str]:
    """``hdfs-region ARGS`` as a real process, optionally under another umask."""
    return subprocess.run(
        [sys.executable, "-m", "operators.app", *args],
        env=cli_env(),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        preexec_fn=None if umask is None else (lambda: os.umask(umask)),
    )
