"""The line ``hdfs-region run`` prints at the end counts each record once, however often a
reset made the source replay it."""

from __future__ import annotations

from typing import Any

import pytest

from operators.app.cli import main
from operators.sink import HDFS2FileSink
from region.state import Batch
from tests.cli.conftest import PipelineDir

SETTINGS = """\
    engine = "local"
    [region]
    period = "1h"
    [scan]
    directory = "landing"
    [sink]
    file = "out/part-%FILENUM.txt"
    tuples_per_file = 1000
"""


def test_the_summary_counts_replayed_records_once_and_says_how_many_were_replayed(
    pdir: PipelineDir, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    pdir.add_files(4, 50)
    config = pdir.write_config(SETTINGS)
    real_write = HDFS2FileSink.write
    writes = 0

    def write_failing_once(self: HDFS2FileSink, batch: Batch) -> Any:
        # The third batch fails once: the region resets to the start and the source replays
        # the three files it had read.
        nonlocal writes
        writes += 1
        if writes == 3:
            raise OSError("injected: the datanode went away")
        return real_write(self, batch)

    monkeypatch.setattr(HDFS2FileSink, "write", write_failing_once)
    assert main(["run", str(config), "--available-now", "--no-progress"]) == 0
    summary = capsys.readouterr().out.strip().splitlines()[-1]
    assert summary.startswith("stopped: 200 records in, 200 out, 150 replayed after resets,")
    assert "1 resets" in summary
    assert sorted(pdir.output_lines()) == sorted(pdir.records)


def test_a_spark_batch_run_again_after_a_restart_is_counted_once() -> None:
    from operators.app.engine_spark import _Totals
    from operators.app.progress import summary_line
    from operators.spark.supervisor import BatchProgress

    totals = _Totals(has_transform=False)
    for batch_id, attempt in [(0, 1), (1, 1), (1, 2), (2, 2)]:  # batch 1 ran again
        totals.on_batch(BatchProgress(batch_id, 100, 5, "", attempt))
    totals.status = "stopped"
    line = summary_line(totals.progress())
    assert line.startswith("stopped: 300 records in, 300 out, 100 replayed after resets,"), line
