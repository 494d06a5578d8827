"""Fixtures for the operator tests."""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from operators.fs import LocalFileSystem
from region.fs import FileSystem


class FakeClock:
    """A clock the test moves by hand (seconds since the epoch)."""

    def __init__(self, now: float = 1_000_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@dataclass
class Landing:
    """A landing directory on a filesystem backend, with files placed at chosen mtimes.

    ``local_path`` maps a backend path to the local file behind it, so mtimes can be set with
    ``os.utime(ns=...)`` (for the WebHDFS stand-in, its backing directory).
    """

    fs: FileSystem
    root: str
    local_path: Callable[[str], str]

    @property
    def dir(self) -> str:
        return self.root.rstrip("/") + "/in"

    def path(self, name: str) -> str:
        return self.dir + "/" + name

    def put(self, name: str, data: bytes | str = b"", mtime_ns: int | None = None) -> str:
        path = self.path(name)
        writer = self.fs.create(path, overwrite=True)
        writer.write(data.encode() if isinstance(data, str) else data)
        writer.close()
        if mtime_ns is not None:
            self.set_mtime(path, mtime_ns)
        return path

    def set_mtime(self, path: str, mtime_ns: int) -> None:
        os.utime(self.local_path(path), ns=(mtime_ns, mtime_ns))

    def remove(self, name: str) -> None:
        self.fs.delete(self.path(name))


@pytest.fixture
def landing(tmp_path: Path) -> Landing:
    """An empty landing directory ``<root>/in`` on the local disk."""
    fs = LocalFileSystem()
    land = Landing(fs, str(tmp_path), lambda p: p)
    fs.mkdirs(land.dir)
    return land
