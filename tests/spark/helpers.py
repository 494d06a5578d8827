"""Input files and output checks shared by the Spark tests (and the crash worker)."""

from __future__ import annotations

import os
from pathlib import Path

from operators.spark.commit import IN_PROGRESS_PREFIX


def write_inputs(directory: Path, files: dict[str, bytes], first_mtime_ns: int) -> None:
    """Files with strictly increasing mtimes, in the order given (the scan order)."""
    directory.mkdir(parents=True, exist_ok=True)
    for i, (name, data) in enumerate(files.items()):
        path = directory / name
        path.write_bytes(data)
        mtime = first_mtime_ns + i * 1_000_000_000
        os.utime(path, ns=(mtime, mtime))


def lines_of(data: bytes) -> list[str]:
    """The records a line reader yields: LF or CRLF ends, a last line without LF counts."""
    text = data.decode()
    lines = text.split("\n")
    if lines[-1] == "":
        lines.pop()
    return [line.removesuffix("\r") for line in lines]


def published_lines(directory: Path, prefix: str = "part-") -> list[str]:
    """What a plain directory reader sees, files in %FILENUM order."""
    names = [n for n in os.listdir(directory) if n.startswith(prefix)]
    names.sort(key=lambda n: int(n[len(prefix) :].split(".")[0]))
    return [line for n in names for line in lines_of((directory / n).read_bytes())]


def leftovers(directory: Path) -> list[str]:
    """In-progress and temporary files left in the output and its sink log."""
    found = [n for n in os.listdir(directory) if n.startswith(IN_PROGRESS_PREFIX)]
    log = directory / "_hdfs_sink"
    if log.exists():
        found += [n for n in os.listdir(log) if n.endswith(".tmp")]
    return found
