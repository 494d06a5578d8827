"""The Spark engine's rejects file without Spark: what the tasks of a fused batch write and the
sink's commit publishes, through a crash at every step and the batch run again."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from operators.sink.records import rejected_line
from operators.source.rows import Rejected
from operators.spark.commit import SinkLog, WrittenFile, in_progress_name
from operators.spark.rejects import TaskRejects, batch_rejects, delete_leftovers
from tests.spark.test_commit import Crash, CrashingFS


def bad(file: str, offset: int) -> Rejected:
    return Rejected(file, offset, f"column 'id': 'x{offset}' is not an int64", f"x{offset},b")


#: Batch -> the bad rows each partition of its plan meets (batch 1 has none).
BATCHES = [
    [[bad("/in/a.csv", 7), bad("/in/a.csv", 30)], [], [bad("/in/b.csv", 12)]],
    [[], []],
    [[bad("/in/c.csv", 3)]],
]


def log_of(fs: CrashingFS, out: Path) -> SinkLog:
    template = str(out / "_rejects" / "r-%FILENUM.jsonl")
    return SinkLog(
        fs,
        str(out),
        str(out / "_hdfs_sink"),
        lambda f, n: str(out / f"part-{n}.txt"),
        rejects_namer=lambda f, n: template.replace("%FILENUM", str(n)),
    )


def run_batch(fs: CrashingFS, out: Path, batch_id: int) -> None:
    """What a fused batch does: each task writes its records and its rejects, then the driver
    commits (skipping the tasks when the sink log already published the batch)."""
    template = str(out / "_rejects" / "r-%FILENUM.jsonl")
    log = log_of(fs, out)
    published = log.recover()["batch_id"]
    files: list[WrittenFile] = []
    rejects: list[WrittenFile] = []
    if published is None or published < batch_id:
        for partition, rows in enumerate(BATCHES[batch_id]):
            path = str(out / in_progress_name(f"p{partition}", 0))
            data = f"b{batch_id}p{partition}\n".encode()
            writer = fs.create(path)
            writer.write(data)
            writer.close()
            files.append(WrittenFile(path, partition, 0, 1, len(data), 0))
            task = TaskRejects(fs, template, batch_id, partition)
            for row in rows:
                task.add(row)
            task.finish()
        rejects = batch_rejects(fs, template, batch_id)
    log.commit(batch_id, files, rejects=rejects)
    delete_leftovers(fs, template)


def rejected(out: Path) -> list[dict[str, object]]:
    """The published rejects, as a reader of the directory sees them."""
    directory = out / "_rejects"
    names = sorted(n for n in os.listdir(directory) if not n.startswith((".", "_")))
    return [json.loads(line) for n in names for line in (directory / n).read_text().splitlines()]


def expected() -> list[dict[str, object]]:
    rows = [row for batch in BATCHES for partition in batch for row in partition]
    return [json.loads(rejected_line("sink", row)) for row in rows]


def test_each_batch_publishes_its_rejects_once_numbered_on_from_the_last(tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    fs = CrashingFS(None)
    for batch_id in range(len(BATCHES)):
        run_batch(fs, out, batch_id)
    run_batch(fs, out, 2)  # a replay of a published batch changes nothing
    # One file per partition that met bad rows, numbered by the rejects' own count.
    assert sorted(os.listdir(out / "_rejects")) == ["r-0.jsonl", "r-1.jsonl", "r-2.jsonl"]
    assert rejected(out) == expected()
    assert rejected(out)[0] == {
        "sink": "sink",
        "file": "/in/a.csv",
        "offset": 7,
        "reason": "column 'id': 'x7' is not an int64",
        "record": "x7,b",
    }
    # The output's numbers are the output's: the rejects take none of them.
    assert sorted(n for n in os.listdir(out) if n.startswith("part-")) == [
        f"part-{n}.txt" for n in range(6)
    ]


@pytest.mark.parametrize("crash_at", range(1, 34))  # every mutating call of the run
def test_a_crash_at_any_step_then_the_batches_again_keep_every_reject_once(
    tmp_path: Path, crash_at: int
) -> None:
    out = tmp_path / "out"
    out.mkdir()
    fs = CrashingFS(crash_at)
    done = 0
    try:
        for batch_id in range(len(BATCHES)):
            run_batch(fs, out, batch_id)
            done = batch_id + 1
    except Crash:
        pass
    fs.crash_at = None
    # The restart: the batch in flight again (same plan, same bad rows), then the rest.
    for batch_id in range(done, len(BATCHES)):
        run_batch(fs, out, batch_id)
    assert rejected(out) == expected()
    assert [n for n in os.listdir(out / "_rejects") if n.startswith(".")] == []
