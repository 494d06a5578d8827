"""``on_published`` announces each published file once, across restarts too (the region records
each finished completion next to its cut)."""

from __future__ import annotations

import logging
import os
from pathlib import Path

import pytest

from operators.fs.local import LocalFileSystem
from operators.scan import HDFS2DirectoryScan, ScanSettings
from operators.sink import HDFS2FileSink, SinkSettings
from operators.source import HDFS2FileSource, SourceSettings
from region.checkpoint import CheckpointStore
from region.runtime import Pipeline, PipelineRunner
from region.settings import RegionSettings

T0 = 1_700_000_000


def land(landing: Path, prefix: str, files: int, lines: int, start: int) -> list[str]:
    landing.mkdir(exist_ok=True)
    records = []
    for i in range(files):
        rows = [f"{prefix}{i}-{j}" for j in range(lines)]
        path = landing / f"{prefix}{i}.txt"
        path.write_text("".join(f"{r}\n" for r in rows))
        os.utime(path, (T0 + start + i, T0 + start + i))
        records += rows
    return records


def run_once(tmp: Path, announced: list[str], *, publish: str = "atomic") -> None:
    """One ``available_now`` run, built as the README's Python API example builds it."""
    fs = LocalFileSystem()
    scan = HDFS2DirectoryScan(ScanSettings(directory=str(tmp / "landing"), sleep_time=0), fs)
    source = HDFS2FileSource(SourceSettings(), fs, files=scan)
    sink = HDFS2FileSink(
        SinkSettings(
            file=str(tmp / "out" / "part-%FILENUM.txt"), tuples_per_file=3, publish=publish
        ),
        fs,
        on_published=lambda path, size: announced.append(os.path.basename(path)),
    )
    runner = PipelineRunner(
        Pipeline(source, sinks=[sink], batch_size=2),
        RegionSettings(period=3600),  # one cut: the final one, which publishes everything
        CheckpointStore(fs, str(tmp / "ck")),
    )
    runner.run(available_now=True)


@pytest.mark.parametrize("publish", ["atomic", "visible"])
def test_a_restart_announces_no_file_twice_even_when_one_was_moved_away(
    tmp_path: Path, publish: str, caplog: pytest.LogCaptureFixture
) -> None:
    land(tmp_path / "landing", "a", 3, 4, 0)
    first: list[str] = []
    run_once(tmp_path, first, publish=publish)
    out = tmp_path / "out"
    assert sorted(first) == sorted(
        p.name for p in out.iterdir() if p.is_file() and not p.name.startswith(".")
    )
    assert len(first) == len(set(first)) == 4
    # A consumer takes the first file away; the job restarts with nothing new.
    (out / first[0]).rename(tmp_path / "consumed.txt")
    again: list[str] = []
    with caplog.at_level(logging.WARNING):
        run_once(tmp_path, again, publish=publish)
    assert again == []
    assert "cannot publish" not in caplog.text
    # New input: only its files are announced, each once.
    land(tmp_path / "landing", "b", 2, 3, 100)
    later: list[str] = []
    run_once(tmp_path, later, publish=publish)
    assert len(later) == len(set(later)) == 2
    assert not set(later) & set(first)
