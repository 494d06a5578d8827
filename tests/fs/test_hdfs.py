"""ArrowHdfsFileSystem's own logic, run over pyarrow's local filesystem.

libhdfs cannot run here, so the adapter is given ``pyarrow.fs.LocalFileSystem`` (the same
pyarrow API as ``HadoopFileSystem``); on a real cluster the contract suite covers it (HDFS_URI).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from pyarrow import fs as pafs

from operators.fs import ArrowHdfsFileSystem, UnsupportedOperationError


@pytest.fixture
def fs() -> ArrowHdfsFileSystem:
    return ArrowHdfsFileSystem("hdfs://nn:8020", filesystem=pafs.LocalFileSystem())


def put(fs: ArrowHdfsFileSystem, path: str, data: bytes, overwrite: bool = False) -> None:
    w = fs.create(path, overwrite=overwrite)
    w.write(data)
    w.close()


def test_write_append_read_list(fs: ArrowHdfsFileSystem, tmp_path: Path) -> None:
    path = str(tmp_path / "d" / "f")
    put(fs, path, b"hello")
    w = fs.append(path)
    w.write(b" world")
    w.flush()
    w.sync()
    w.close()
    w.close()
    assert fs.read(path) == b"hello world"
    assert fs.read(path, 6, 3) == b"wor"
    assert fs.read(path, 100) == b""
    [entry] = fs.list_dir(str(tmp_path / "d"))
    assert (entry.path, entry.size, entry.is_dir) == (path, 11, False)
    assert entry.mtime_ns == fs.status(path).mtime_ns > 0


def test_refusals_name_the_path_as_a_uri(fs: ArrowHdfsFileSystem, tmp_path: Path) -> None:
    a, b = str(tmp_path / "a"), str(tmp_path / "b")
    put(fs, a, b"A")
    put(fs, b, b"B")
    with pytest.raises(FileExistsError) as info:
        fs.create(a)
    assert f"hdfs://nn:8020{a}" in str(info.value)
    with pytest.raises(FileExistsError):
        fs.rename(a, b)
    fs.rename(a, b, overwrite=True)
    assert fs.read(b) == b"A"
    missing = str(tmp_path / "missing")
    for call in (lambda: fs.status(missing), lambda: fs.read(missing), lambda: fs.append(missing)):
        with pytest.raises(FileNotFoundError) as err:
            call()
        assert missing in str(err.value)
    assert fs.delete(missing) is False
    with pytest.raises(UnsupportedOperationError) as unsupported:
        fs.truncate(b, 0)
    assert isinstance(unsupported.value, OSError)
    assert not fs.supports_truncate


def test_one_writer_per_path_and_directories(fs: ArrowHdfsFileSystem, tmp_path: Path) -> None:
    path = str(tmp_path / "f")
    w = fs.create(path)
    with pytest.raises(BlockingIOError):
        fs.append(path)
    w.close()
    put(fs, path, b"again", overwrite=True)
    d = str(tmp_path / "x" / "y")
    fs.mkdirs(d)
    put(fs, d + "/g", b"")
    with pytest.raises(OSError):
        fs.delete(str(tmp_path / "x"))
    assert fs.delete(str(tmp_path / "x"), recursive=True)
    with pytest.raises(FileExistsError):
        fs.mkdirs(path)
