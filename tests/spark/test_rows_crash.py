"""SIGKILL of ``hdfs-region run`` on Spark (fused execution) reading CSV rows with a schema,
gzip'd files among them, at chosen points, then a restart: every row is published once."""

from __future__ import annotations

import gzip
import os
import sys
from pathlib import Path

import pytest

from tests.spark.helpers import kill_at, leftovers, published_lines, start_worker, write_inputs

pytestmark = [pytest.mark.spark, pytest.mark.slow]

T0 = 1_700_000_000_000_000_000

SETTINGS = """\
engine = "spark"
[region]
checkpoint_dir = "ck"
[scan]
directory = "in"
[source]
format = "csv"
[source.schema]
id = "int64"
name = "string"
amount = "decimal(10,2)"
[transform]
sql = "SELECT concat_ws('|', id, replace(name, '\\\\n', '/'), amount + 1) AS value FROM input"
[sink]
file = "out/part-%FILENUM.txt"
[spark]
max_files_per_trigger = 1
"""


def csv_rows(first: int, count: int, *, bad: bool = False) -> bytes:
    """Rows ``first..first+count``; ``bad``: one more whose amount is no number."""
    rows = ["id,name,amount\n"]
    for i in range(first, first + count):
        name = f'"{i} with\nline end"' if i % 4 == 0 else f"n{i}"
        rows.append(f"{i},{name},{i}.50\n")
        if bad and i == first + 100:
            rows.append("-1,bad,many\n")
    return "".join(rows).encode()


def expected(first: int, count: int) -> list[str]:
    return [
        f"{i}|{f'{i} with/line end' if i % 4 == 0 else f'n{i}'}|{i + 1}.50"
        for i in range(first, first + count)
    ]


def test_sigkill_of_a_fused_csv_run_mid_way_then_a_rerun_publish_every_row_once(
    tmp_path: Path,
) -> None:
    inputs = {
        "a.csv": csv_rows(0, 300),
        "b.csv.gz": gzip.compress(csv_rows(300, 300)),
        "c.csv": csv_rows(600, 300, bad=True),
    }
    write_inputs(tmp_path / "in", inputs, T0)
    (tmp_path / "faults").mkdir()
    (tmp_path / "pipeline.toml").write_text(SETTINGS)
    out = tmp_path / "out"
    # 1. Killed while a task of batch 0 writes; 2. restarted, killed after batch 1's
    #    write-ahead entry, before its renames (its plan is durable: the rerun reads it).
    run = [sys.executable, "-m", "operators.app", "run", str(tmp_path / "pipeline.toml")]
    run.append("--available-now")
    kill_at(tmp_path, "task_write", run)
    kill_at(tmp_path, "after_wal:1", run)
    assert published_lines(out) == expected(0, 300)
    # 3. Restarted without faults: batch 1 is finished from its log entry, then batch 2 runs.
    proc = start_worker(tmp_path, None, run)
    code = proc.wait(timeout=300)
    log = (tmp_path / "worker.log").read_text()
    assert code == 0, log[-3000:]
    assert "batch 1 was already published" in log
    # The bad row: left out, named (by the task that read it) with file, offset, column, value.
    at = inputs["c.csv"].index(b"-1,bad")
    assert f"c.csv at byte {at}: column 'amount': 'many' is not a decimal(10,2)" in log
    assert published_lines(out) == expected(0, 900)
    assert leftovers(out) == []
    numbers = sorted(int(n[5:-4]) for n in os.listdir(out) if n.startswith("part-"))
    assert numbers == list(range(len(numbers)))
