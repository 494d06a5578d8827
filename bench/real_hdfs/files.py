"""Plain file operations through a FileSystem: the baselines' copies and the checks of outputs.
The baselines' own processes import them from here."""

from __future__ import annotations

import contextlib
import re
import time
from collections.abc import Iterable

from region.fs import FileStatus, FileSystem


def write_file(fs: FileSystem, path: str, chunks: Iterable[bytes], *, sync: bool = False) -> None:
    """Create ``path``, write ``chunks``, hsync if ``sync``, close. A failed write is raised as
    it is (the close that follows it fails too, later, and would hide it)."""
    writer = fs.create(path)
    try:
        for chunk in chunks:
            writer.write(chunk)
        if sync:
            writer.sync()
    except BaseException:
        with contextlib.suppress(OSError):
            writer.close()
        raise
    writer.close()


def visible_files(fs: FileSystem, directory: str) -> list[FileStatus]:
    """What a plain directory reader sees (hidden ``.``/``_`` names skipped)."""
    return [s for s in fs.list_dir(directory) if not s.is_dir and not s.name.startswith((".", "_"))]


def _filenum(name: str) -> int:
    digits = re.findall(r"\d+", name)
    return int(digits[-1]) if digits else -1


def published_bytes(fs: FileSystem, directory: str) -> tuple[bytes, int]:
    """The published output in file-number order, and how many files."""
    files = sorted(visible_files(fs, directory), key=lambda s: _filenum(s.name))
    return b"".join(fs.read(s.path) for s in files), len(files)


def plain_copy(fs: FileSystem, inputs: list[str], out: str) -> tuple[float, float]:
    """The baseline: each input read whole through ``fs``, written into one output file, hsync
    and close at the end. Returns (wall seconds, CPU seconds)."""
    started, cpu = time.perf_counter(), time.process_time()
    write_file(fs, out, (fs.read(path) for path in inputs), sync=True)
    return time.perf_counter() - started, time.process_time() - cpu
