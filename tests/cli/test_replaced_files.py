"""``hdfs-region run --available-now`` again and again (cron) on files replaced under a name
already read (``mv new.tmp daily.csv``), appended to in place, reached through a symbolic
link, with the settings changed between runs, and across a kill -9: what the command prints
and publishes, record by record."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest

from tests.cli.conftest import PipelineDir, cli, cut_files, start_cli, wait_for

SETTINGS = """\
    engine = "local"
    [region]
    trigger = "periodic"
    period = "50ms"
    [scan]
    directory = "{directory}"
    {scan}
    [transform]
    function = "pace:shout"
    [sink]
    file = "out/part-%FILENUM.txt"
"""

#: 2023-11-14 22:13:20 UTC, in ns: files landed long before the runs.
T0 = 1_700_000_000_000_000_000
S = 1_000_000_000


def config(pdir: PipelineDir, scan: str = "", directory: str = "landing") -> Path:
    return pdir.write_config(SETTINGS.format(directory=directory, scan=scan))


def land(folder: Path, name: str, lines: list[str], mtime_ns: int | None = None) -> Path:
    """Write ``name`` as a writer that renames its finished file over the old one does."""
    folder.mkdir(parents=True, exist_ok=True)
    tmp = folder / f".{name}.tmp"
    tmp.write_text("".join(f"{line}\n" for line in lines), encoding="utf-8")
    if mtime_ns is not None:
        os.utime(tmp, ns=(mtime_ns, mtime_ns))
    os.replace(tmp, folder / name)
    return folder / name


def run(cfg: Path, **env: str) -> tuple[int, list[str]]:
    """One cron run: the records it read and its WARNING/ERROR lines (without the time)."""
    done = cli("run", str(cfg), "--available-now", "--no-progress", **env)
    assert done.returncode == 0, done.stderr
    warnings = [
        line.split(" ", 2)[2]
        for line in done.stderr.splitlines()
        if " WARNING " in line or " ERROR " in line
    ]
    summary = done.stdout.strip().splitlines()[-1]
    return int(summary.split("stopped: ", 1)[1].split(" records in", 1)[0]), warnings


def test_cron_runs_read_each_replacement_whole_once_whatever_its_size_and_mtime(
    pdir: PipelineDir,
) -> None:
    """``mv new.tmp daily.csv`` over a file read: the new file is read whole, once, with the
    default ``on_modified``, not counted as changed, also when it has the old one's size and
    mtime second, or the very same mtime (``touch -r``, ``cp -p``): another inode is another
    file."""
    cfg = config(pdir)
    land(pdir.landing, "daily.csv", ["d1 a", "d1 b"])
    assert run(cfg) == (2, [])
    land(pdir.landing, "daily.csv", ["d2 a", "d2 b", "d2 c"])
    assert run(cfg) == (3, [])
    assert run(cfg) == (0, [])
    # The same size, in the same mtime second (a new inode).
    old = (pdir.landing / "daily.csv").stat()
    land(pdir.landing, "daily.csv", ["d3 a", "d3 b", "d3 c"], old.st_mtime_ns // S * S + 1)
    assert run(cfg) == (3, [])
    # The very same mtime and size: only the inode tells the new file from the one read.
    old = (pdir.landing / "daily.csv").stat()
    land(pdir.landing, "daily.csv", ["d4 a", "d4 b", "d4 c"], old.st_mtime_ns)
    assert (pdir.landing / "daily.csv").stat().st_size == old.st_size
    assert run(cfg) == (3, [])
    assert run(cfg) == (0, [])
    assert pdir.output_lines() == [
        "D1 A", "D1 B", "D2 A", "D2 B", "D2 C", "D3 A", "D3 B", "D3 C", "D4 A", "D4 B", "D4 C"
    ]  # fmt: skip
