"""Fixtures of the region tests: a checkpoint store on real local files, a flaky filesystem."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from operators.fs.local import LocalFileSystem
from region.checkpoint import CheckpointStore
from region.fs import FileWriter


class FlakyFileSystem(LocalFileSystem):
    """Local files whose ``rename`` or ``create`` fails while armed (a full disk, a lost
    connection): ``fail_renames`` counts the renames left to fail."""

    def __init__(self) -> None:
        self.fail_renames = 0
        self.fail_creates = 0

    def rename(self, src: str, dst: str, *, overwrite: bool = False) -> None:
        if self.fail_renames:
            self.fail_renames -= 1
            raise OSError(28, "No space left on device", dst)
        super().rename(src, dst, overwrite=overwrite)

    def create(
        self, path: str, *, overwrite: bool = False, permission: int | None = None
    ) -> FileWriter:
        if self.fail_creates:
            self.fail_creates -= 1
            raise ConnectionError(f"{path}: connection reset while creating")
        return super().create(path, overwrite=overwrite, permission=permission)


@pytest.fixture
def flaky_fs() -> FlakyFileSystem:
    return FlakyFileSystem()


@pytest.fixture
def checkpoint_dir(tmp_path: Path) -> str:
    return str(tmp_path / "checkpoints")


@pytest.fixture
def make_store(checkpoint_dir: str, flaky_fs: FlakyFileSystem) -> Callable[..., CheckpointStore]:
    def make(**kwargs: Any) -> CheckpointStore:
        return CheckpointStore(flaky_fs, checkpoint_dir, **kwargs)

    return make
