"""Fixtures of the security tests: sink output directories (local disk and every backend)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from operators.fs import LocalFileSystem
from tests.operators.conftest import SinkEnv


@pytest.fixture
def sink_local(tmp_path: Path) -> SinkEnv:
    return SinkEnv(LocalFileSystem(), str(tmp_path / "root"))


@pytest.fixture
def sink_env(any_fs: Any) -> SinkEnv:
    return SinkEnv(any_fs.fs, any_fs.root)


def files_under(root: Path) -> list[str]:
    """Every file below ``root`` (relative paths, hidden ones included), sorted."""
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())
