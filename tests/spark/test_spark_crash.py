"""SIGKILL of a Spark pipeline process at chosen points, restart, exactly-once output: a
streaming query (scan -> SQL -> sink) and ``hdfs-region run`` in fused execution (a Python
transform)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from tests.spark.helpers import (
    kill_at,
    leftovers,
    lines_of,
    published_lines,
    start_worker,
    write_inputs,
)

pytestmark = [pytest.mark.spark, pytest.mark.slow]

T0 = 1_700_000_000_000_000_000
INPUTS = {
    f"f{i}.txt": "".join(f"file {i} line {j}\n" for j in range(400)).encode() for i in range(3)
}


FUSED_SETTINGS = """\
engine = "spark"
[region]
checkpoint_dir = "ck"
[scan]
directory = "in"
[transform]
function = "crash_transform:upper"
[sink]
file = "out/part-%FILENUM.txt"
[spark]
max_files_per_trigger = 1
"""


def command(tmp: Path, execution: str) -> list[str]:
    if execution == "streaming":
        dirs = (str(tmp / d) for d in ("in", "out", "ck"))
        return [sys.executable, "-m", "tests.spark.crash_worker", *dirs]
    config = tmp / "pipeline.toml"
    if not config.exists():
        config.write_text(FUSED_SETTINGS)
        (tmp / "crash_transform.py").write_text("def upper(value):\n    return value.upper()\n")
    return [sys.executable, "-m", "operators.app", "run", str(config), "--available-now"]


@pytest.mark.parametrize("execution", ["streaming", "fused"])
def test_sigkill_during_task_write_and_between_wal_and_renames(
    tmp_path: Path, execution: str
) -> None:
    write_inputs(tmp_path / "in", INPUTS, T0)
    (tmp_path / "faults").mkdir()
    out = tmp_path / "out"
    # 1. Killed while a task of batch 0 writes: its in-progress file is orphaned.
    kill_at(tmp_path, "task_write", command(tmp_path, execution))
    # 2. Restarted, batch 0 is replayed and published; killed after batch 1's write-ahead
    #    entry, before its renames.
    kill_at(tmp_path, "after_wal:1", command(tmp_path, execution))
    assert published_lines(out) == [line.upper() for line in lines_of(INPUTS["f0.txt"])]
    # 3. Restarted without faults: batch 1 is finished from its log entry (its recomputed
    #    files are orphans), then batch 2 runs.
    proc = start_worker(tmp_path, None, command(tmp_path, execution))
    code = proc.wait(timeout=300)
    log = (tmp_path / "worker.log").read_text()
    assert code == 0, log[-3000:]
    assert ("batch 1 was already published" in log) == (execution == "fused")
    expected = [line.upper() for data in INPUTS.values() for line in lines_of(data)]
    assert published_lines(out) == expected
    assert leftovers(out) == []
    # %FILENUM has no gap and no reuse across the crashes.
    numbers = sorted(int(n[5:-4]) for n in os.listdir(out) if n.startswith("part-"))
    assert numbers == list(range(len(numbers)))
