"""One job per output directory through the Python API: every runner claims the sink's output
(``StateHandler.bind_job``), as ``hdfs-region run`` does."""

from __future__ import annotations

from pathlib import Path

import pytest

from operators.fs.local import LocalFileSystem
from operators.scan import HDFS2DirectoryScan, ScanSettings
from operators.sink import HDFS2FileSink, SinkSettings
from operators.source import HDFS2FileSource, SourceSettings
from region.checkpoint import CheckpointStore
from region.errors import ConfigError
from region.runtime import Pipeline, PipelineRunner
from region.settings import RegionSettings


def runner(root: Path, landing: str, checkpoints: str) -> PipelineRunner:
    fs = LocalFileSystem()
    scan = HDFS2DirectoryScan(ScanSettings(directory=str(root / landing), sleep_time=0), fs)
    source = HDFS2FileSource(SourceSettings(), fs, files=scan)
    out = str(root / "out" / "part-%FILENUM.txt")
    sink = HDFS2FileSink(SinkSettings(file=out, tuples_per_file=1000), fs)
    store = CheckpointStore(fs, str(root / checkpoints))
    return PipelineRunner(Pipeline(source, sinks=[sink]), RegionSettings(period=60), store)


def test_a_second_api_job_on_the_same_output_directory_is_refused_before_it_writes(
    tmp_path: Path,
) -> None:
    for landing, prefix in (("in-a", "a"), ("in-b", "b")):
        (tmp_path / landing).mkdir()
        (tmp_path / landing / "f.txt").write_text("".join(f"{prefix}{i}\n" for i in range(50)))
    first = runner(tmp_path, "in-a", "ck-a")
    first.start()
    first.step()  # its file is open, in progress, not yet covered by a cut
    in_progress = [p for p in (tmp_path / "out").iterdir() if p.name.endswith(".inprogress")]
    assert in_progress
    second = runner(tmp_path, "in-b", "ck-b")
    with pytest.raises(ConfigError, match=r"is written by another job: .*/ck-a.*/ck-b"):
        second.start()
    assert all(p.exists() for p in in_progress)  # not taken for its own orphans
    first.run(available_now=True)
    published = sorted((tmp_path / "out").glob("part-*"))
    assert [line for p in published for line in p.read_text().split()] == [
        f"a{i}" for i in range(50)
    ]
    # The same job, run again (a new runner on its checkpoints), goes on.
    runner(tmp_path, "in-a", "ck-a").run(available_now=True)
