"""The rejects file of ``hdfs-region run`` on Spark (fused execution): CSV rows landing into
Parquet, the rows that do not fit their types kept in ``[sink] rejects_file`` as the local
engine keeps them, each once through SIGKILLs before and inside a batch's commit."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from tests.cli.conftest import cli
from tests.spark.helpers import kill_at, leftovers, start_worker, write_inputs

pytestmark = [pytest.mark.spark, pytest.mark.slow]

T0 = 1_700_000_000_000_000_000

SETTINGS = """\
engine = "{engine}"
[region]
checkpoint_dir = "{ck}"
[scan]
directory = "in"
[source]
format = "csv"
[source.schema]
id = "int64"
name = "string"
amount = "decimal(10,2)"
[sink]
file = "{out}/part-%FILENUM.parquet"
format = "parquet"
rejects_file = "_rejects/r-%FILENUM.jsonl"
[spark]
max_files_per_trigger = 1
"""

#: Each file's rows: good ones (``id,name,amount``) and bad ones, in the order written.
FILES = {
    "a.csv": ["1,one,1.50", "x2,two,2.50", '3,"three\nlines",3.50', "4,four", "5,five,many"],
    "b.csv": ["6,six,6.50", "7,seven,7.5.0", "8,eight,8.50"],
    "c.csv": ["9,nine,9.50", "10,ten,", "y11,eleven,11.50", "12,twelve,12.50,extra"],
}
#: The bad rows, with the column and value each reject names (``None``: a row with another
#: number of fields, which names no column).
BAD = {
    "x2,two,2.50": ("id", "x2"),
    "4,four": None,
    "5,five,many": ("amount", "many"),
    "7,seven,7.5.0": ("amount", "7.5.0"),
    "y11,eleven,11.50": ("id", "y11"),
    "12,twelve,12.50,extra": None,
}


def inputs() -> dict[str, bytes]:
    return {
        name: ("id,name,amount\n" + "".join(row + "\n" for row in rows)).encode()
        for name, rows in FILES.items()
    }


def rejects(out: Path) -> list[dict[str, Any]]:
    """The published rejects, as a directory reader sees them (hidden files skipped)."""
    directory = out / "_rejects"
    names = sorted(n for n in os.listdir(directory) if not n.startswith((".", "_")))
    return [json.loads(line) for n in names for line in (directory / n).read_text().splitlines()]


def published_ids(out: Path) -> list[int]:
    names = [n for n in os.listdir(out) if n.startswith("part-")]
    return sorted(i for n in names for i in pq.read_table(out / n).column("id").to_pylist())


def test_a_fused_spark_run_keeps_each_bad_row_once_in_the_rejects_through_sigkills(
    tmp_path: Path,
) -> None:
    data = inputs()
    write_inputs(tmp_path / "in", data, T0)
    (tmp_path / "faults").mkdir()
    config = tmp_path / "pipeline.toml"
    config.write_text(SETTINGS.format(engine="spark", ck="ck", out="out"))
    out = tmp_path / "out"
    run = [sys.executable, "-m", "operators.app", "run", str(config), "--available-now"]
    # 1. Killed when batch 0's task has written its rejects, before the batch's commit: they
    #    wait under a hidden name, nothing of them published.
    kill_at(tmp_path, "before_wal:0", run)
    hidden = os.listdir(out / "_rejects")
    assert len(hidden) == 1 and hidden[0].startswith("."), hidden
    assert rejects(out) == []
    # 2. Restarted: batch 0 runs again (its task writes the same rejects again), then killed
    #    after batch 1's write-ahead entry, before its renames.
    kill_at(tmp_path, "after_wal:1", run)
    # 3. Restarted without faults: batch 1 is finished from its entry, then batch 2 runs.
    proc = start_worker(tmp_path, None, run)
    code = proc.wait(timeout=300)
    log = (tmp_path / "worker.log").read_text()
    assert code == 0, log[-3000:]
    assert "batch 1 was already published" in log
    # The rejects this run published (batch 2's), counted where the local engine counts them.
    assert "2 rejected (in the rejects file)" in log

    # Every good row once in the output, every bad row once in the rejects.
    good = [int(r.split(",")[0]) for rows in FILES.values() for r in rows if r not in BAD]
    assert published_ids(out) == sorted(good)
    got = rejects(out)
    assert [r["record"] for r in got] == [r for rows in FILES.values() for r in rows if r in BAD]
    for reject in got:
        name = os.path.basename(reject["file"])
        assert reject["file"] == f"file://{tmp_path / 'in' / name}"
        # The byte offset of the row in its file.
        assert data[name][reject["offset"] :].startswith(reject["record"].encode())
        named = BAD[reject["record"]]
        if named is not None:
            column, value = named
            assert f"column {column!r}: {value!r}" in reject["reason"]
    assert sorted(os.listdir(out / "_rejects")) == ["r-0.jsonl", "r-1.jsonl", "r-2.jsonl"]
    assert leftovers(out) == []

    # The local engine keeps the same rejects for the same files, line for line.
    (tmp_path / "local.toml").write_text(SETTINGS.format(engine="local", ck="ck-l", out="out-l"))
    done = cli("run", str(tmp_path / "local.toml"), "--available-now", cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    assert rejects(tmp_path / "out-l") == got
