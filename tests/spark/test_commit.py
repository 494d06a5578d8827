"""The sink's commit protocol without Spark: crashes at every step, replays, orphans."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from operators.fs.local import LocalFileSystem
from operators.sink.owner import Owner
from operators.spark.batchlog import BatchLog
from operators.spark.commit import (
    IN_PROGRESS_PREFIX,
    SinkLog,
    WrittenFile,
    in_progress_name,
)
from region.errors import ConfigError
from tests.region.closes import LaterClosing


class Crash(BaseException):
    """The process died here (BaseException: nothing in the code under test may swallow it)."""


class CrashingFS(LocalFileSystem):
    """The real local filesystem, dying before its ``crash_at``-th mutating call."""

    def __init__(self, crash_at: int | None) -> None:
        self.crash_at = crash_at
        self.calls = 0

    def _step(self) -> None:
        self.calls += 1
        if self.crash_at is not None and self.calls == self.crash_at:
            raise Crash

    def create(self, path: str, *, overwrite: bool = False, permission: int | None = None) -> Any:
        self._step()
        return super().create(path, overwrite=overwrite, permission=permission)

    def rename(self, src: str, dst: str, *, overwrite: bool = False) -> None:
        self._step()
        super().rename(src, dst, overwrite=overwrite)

    def delete(self, path: str, *, recursive: bool = False) -> bool:
        self._step()
        return super().delete(path, recursive=recursive)


def write_task_files(out: Path, batch: list[list[str]]) -> list[WrittenFile]:
    """What Spark's tasks do: one in-progress file per task holding its records."""
    files = []
    for partition, records in enumerate(batch):
        path = out / in_progress_name(f"p{partition}", 0)
        data = "".join(r + "\n" for r in records).encode()
        path.write_bytes(data)
        files.append(WrittenFile(str(path), partition, 0, len(records), len(data), 0))
    return files


def make_log(fs: LocalFileSystem, out: Path, *, exactly_once: bool = True) -> SinkLog:
    return SinkLog(
        fs,
        str(out),
        str(out / "_hdfs_sink"),
        lambda f, n: str(out / f"part-{n:05d}.txt"),
        exactly_once=exactly_once,
        retain=3,
    )


def visible(out: Path) -> list[str]:
    """What a plain directory reader sees, in file-number order."""
    names = sorted(n for n in os.listdir(out) if not n.startswith((".", "_")))
    return [line for n in names for line in (out / n).read_text().splitlines()]


def leftovers(out: Path) -> list[str]:
    return [n for n in os.listdir(out) if n.startswith(IN_PROGRESS_PREFIX)]


def test_commit_publishes_in_partition_order_and_numbers_continue(tmp_path: Path) -> None:
    log = make_log(LocalFileSystem(), tmp_path)
    r0 = log.commit(0, write_task_files(tmp_path, [["a", "b"], ["c"]]))
    r1 = log.commit(1, write_task_files(tmp_path, [["d"], [], ["e"]]))
    assert [Path(p).name for p in r0.published] == ["part-00000.txt", "part-00001.txt"]
    assert [Path(p).name for p in r1.published] == [
        "part-00002.txt",
        "part-00003.txt",
        "part-00004.txt",
    ]
    assert visible(tmp_path) == ["a", "b", "c", "d", "e"]
    assert leftovers(tmp_path) == []


def test_replayed_batch_id_leaves_output_unchanged(tmp_path: Path) -> None:
    log = make_log(LocalFileSystem(), tmp_path)
    log.commit(0, write_task_files(tmp_path, [["a"], ["b"]]))
    before = {n: (tmp_path / n).read_bytes() for n in os.listdir(tmp_path) if n != "_hdfs_sink"}
    # Spark re-ran batch 0 after a crash: new task files, same batch id.
    again = log.commit(0, write_task_files(tmp_path, [["a", "b"]]))
    after = {n: (tmp_path / n).read_bytes() for n in os.listdir(tmp_path) if n != "_hdfs_sink"}
    assert again.replayed and again.published == ()
    assert after == before
    assert log.commit(1, write_task_files(tmp_path, [["c"]])).published == (
        str(tmp_path / "part-00002.txt"),
    )


def test_a_carried_file_a_task_hands_over_is_published_at_its_logged_size(
    tmp_path: Path,
) -> None:
    log = make_log(LocalFileSystem(), tmp_path)
    (carried,) = write_task_files(tmp_path, [["a", "b"]])
    log.commit(0, [], [carried])  # left open for the next batch
    # An attempt of batch 1 appended and died before the commit; the replay's task hands the
    # file over as batch 0 logged it (past time_per_file, or full already).
    with open(carried.path, "ab") as f:
        f.write(b"c\nd\n")
    log.commit(1, [carried])
    assert visible(tmp_path) == ["a", "b"]
    assert log.published() == [{"path": str(tmp_path / "part-00000.txt"), "rows": 2, "size": 4}]


def test_orphans_of_killed_tasks_are_deleted_at_the_next_commit(tmp_path: Path) -> None:
    log = make_log(LocalFileSystem(), tmp_path)
    write_task_files(tmp_path, [["lost"]])  # a task killed before it reported its file
    log.commit(0, write_task_files(tmp_path, [["kept"]]))
    assert visible(tmp_path) == ["kept"]
    assert leftovers(tmp_path) == []


def test_abort_deletes_the_batch_files(tmp_path: Path) -> None:
    log = make_log(LocalFileSystem(), tmp_path)
    files = write_task_files(tmp_path, [["x"], ["y"]])
    log.abort(0, files)
    assert leftovers(tmp_path) == [] and visible(tmp_path) == []


def test_at_least_once_republishes_a_rerun_batch_without_reusing_numbers(tmp_path: Path) -> None:
    log = make_log(LocalFileSystem(), tmp_path, exactly_once=False)
    log.commit(0, write_task_files(tmp_path, [["a"]]))
    log.commit(0, write_task_files(tmp_path, [["a"]]))
    log.commit(1, write_task_files(tmp_path, [["b"]]))
    assert visible(tmp_path) == ["a", "a", "b"]
    names = sorted(n for n in os.listdir(tmp_path) if n.startswith("part-"))
    assert names == ["part-00000.txt", "part-00001.txt", "part-00002.txt"]


def test_a_missing_source_and_target_is_an_error_naming_both(tmp_path: Path) -> None:
    fs = CrashingFS(crash_at=None)
    log = make_log(fs, tmp_path)
    files = write_task_files(tmp_path, [["a"]])
    fs.crash_at = fs.calls + 3  # mkdirs is not counted: create tmp, rename entry, then die
    with pytest.raises(Crash):
        log.commit(0, files)
    os.unlink(files[0].path)
    with pytest.raises(FileNotFoundError, match=r"part-00000\.txt.*in-progress"):
        make_log(LocalFileSystem(), tmp_path).commit(0, [])


@given(
    batches=st.lists(
        st.lists(st.lists(st.sampled_from("abcdef"), max_size=3), min_size=1, max_size=3),
        min_size=1,
        max_size=4,
    ),
    crashes=st.lists(st.integers(min_value=1, max_value=14) | st.none(), min_size=4, max_size=4),
    replay_after_success=st.lists(st.booleans(), min_size=4, max_size=4),
)
def test_random_crash_points_publish_every_batch_exactly_once(
    tmp_path_factory: pytest.TempPathFactory,
    batches: list[list[list[str]]],
    crashes: list[int | None],
    replay_after_success: list[bool],
) -> None:
    out = tmp_path_factory.mktemp("out")
    expected: list[str] = []
    for batch_id, batch in enumerate(batches):
        # The first attempt may die at any mutating step of the commit (or of recovery).
        fs = CrashingFS(crashes[batch_id])
        try:
            make_log(fs, out).commit(batch_id, write_task_files(out, batch))
            crashed = False
        except Crash:
            crashed = True
        if crashed or replay_after_success[batch_id]:
            # Restart: Spark re-runs the batch (new task files, maybe split differently) and
            # commits it again, in a new process (a new SinkLog).
            regrouped = [[r for task in batch for r in task]]
            make_log(LocalFileSystem(), out).commit(batch_id, write_task_files(out, regrouped))
        expected.extend(r for task in batch for r in task)
        assert visible(out) == expected
        assert leftovers(out) == []
    names = sorted(n for n in os.listdir(out) if not n.startswith((".", "_")))
    assert names == [f"part-{i:05d}.txt" for i in range(len(names))]


def test_a_file_already_at_a_planned_name_is_skipped_never_overwritten(tmp_path: Path) -> None:
    (tmp_path / "part-00001.txt").write_text("someone else's\n")
    log = make_log(LocalFileSystem(), tmp_path)
    result = log.commit(0, write_task_files(tmp_path, [["a"], ["b"]]))
    assert [Path(p).name for p in result.published] == ["part-00000.txt", "part-00002.txt"]
    assert (tmp_path / "part-00001.txt").read_text() == "someone else's\n"
    # Appearing between the write-ahead entry and the renames: an error naming it, not a loss.
    files = write_task_files(tmp_path, [["c"]])
    (tmp_path / "part-00003.txt").write_text("raced\n")
    log2 = make_log(LocalFileSystem(), tmp_path)
    entry_renames = [[files[0].path, str(tmp_path / "part-00003.txt")]]
    with pytest.raises(FileExistsError, match=r"part-00003\.txt exists and is never overwritten"):
        log2._apply(1, entry_renames)
    assert (tmp_path / "part-00003.txt").read_text() == "raced\n"
    assert Path(files[0].path).exists()


def test_a_second_job_on_the_same_sink_log_is_refused_and_takes_nothing(tmp_path: Path) -> None:
    # Two jobs writing one output directory: before the owner record, the second took the
    # first one's entry for batch 0 as its own and dropped its records (exit 0).
    fs = LocalFileSystem()
    out, log_dir = tmp_path / "out", tmp_path / "out" / "_hdfs_sink"
    out.mkdir()

    def log(owner: Owner) -> SinkLog:
        return SinkLog(
            fs, str(out), str(log_dir), lambda f, n: str(out / f"part-{n}.txt"), owner=owner
        )

    first = Owner("/ckpt/a", "id-a")
    log(first).commit(0, write_task_files(out, [["a1", "a2"]]))
    pending = write_task_files(out, [["a3"]])  # the first job's next batch, being written
    theirs = write_task_files(out, [["b1"]])
    with pytest.raises(ConfigError) as refused:
        log(Owner("/ckpt/b", "id-b")).commit(0, theirs)
    message = str(refused.value)
    assert "/ckpt/a (id id-a)" in message and "/ckpt/b (id id-b)" in message
    assert "give this job its own output directory" in message
    # Nothing of either job was deleted or taken: the first job's in-progress file is there to
    # be published, the second job's records are still in theirs.
    assert all(os.path.exists(f.path) for f in pending + theirs)
    assert visible(out) == ["a1", "a2"]
    # The same job (same id, whatever the location is called now) goes on.
    log(Owner("/elsewhere/a", "id-a")).commit(1, pending)
    assert visible(out) == ["a1", "a2", "a3"]
    # Checkpoints made afresh in the same place carry a new id: another job.
    with pytest.raises(ConfigError, match="checkpoints were deleted to start over"):
        log(Owner("/ckpt/a", "id-a2")).commit(0, theirs)
    # Without ids (a query that names only its checkpointLocation) the location decides.
    (log_dir / "owner.json").unlink()
    log(Owner("/ckpt/q")).commit(2, [])
    theirs = write_task_files(out, [["q1"]])
    with pytest.raises(ConfigError):
        log(Owner("/ckpt/other")).commit(3, theirs)
    log(Owner("/ckpt/q/")).commit(3, theirs)
    assert visible(out) == ["a1", "a2", "a3", "q1"]


def test_the_owner_a_query_names_in_its_options() -> None:
    assert Owner.of_options({"checkpointlocation": "/c", "file": "x"}) == Owner("/c", None)
    assert Owner.of_options({"queryname": "q"}) == Owner("query q", None)
    assert Owner.of_options({"checkpointLocation": "/c", "job_id": "j"}) == Owner("/c", "j")
    assert Owner.of_options({"file": "x"}) is None


def test_a_commit_waits_for_no_close_of_its_log_entry(tmp_path: Path) -> None:
    """The write-ahead entry is renamed into place once synced and closed in the background
    (on one DataNode a foreground close costs 500 ms a batch): a commit closes in the
    foreground only the empty done mark, which no DataNode has to report. A restart reads
    the entry whole (``read_whole``)."""
    fs = LaterClosing()
    log = make_log(fs, tmp_path)
    log.commit(0, write_task_files(tmp_path, [["a", "b"], ["c"]]))
    sink_log = str(tmp_path / "_hdfs_sink")
    closes = [(how, Path(p).name) for how, p in fs.closes() if p.startswith(sink_log)]
    entry = [how for how, name in closes if name.startswith(".")]  # its hidden temporary name
    assert entry == ["close_later"], closes
    log.commit(1, write_task_files(tmp_path, [["d"]]))
    assert make_log(LocalFileSystem(), tmp_path).entry(1) == {
        "state": {"next_filenum": 3, "open": [], "open_since": {}},
        "renames": 1,
        "done": True,
    }
    assert visible(tmp_path) == ["a", "b", "c", "d"]


def test_a_batch_log_entry_is_renamed_into_place_synced_and_closed_in_the_background(
    tmp_path: Path,
) -> None:
    """Fused execution's ``offsets/N`` and ``commits/N`` wait for no close (on HDFS each would
    cost 500 ms a batch); what they record reads back, from this process and a restarted one."""
    fs = LaterClosing()
    log = BatchLog(fs, str(tmp_path / "spark"))
    log.write_offset(0, {"seq": 3}, {})
    log.write_commit(0)
    log.write_offset(1, {"seq": 5}, {})
    entries = [
        (how, Path(path).parent.name)
        for how, path in fs.closes()
        if Path(path).parent.name in ("offsets", "commits")
    ]
    assert entries == [
        ("close_later", "offsets"),
        ("close_later", "commits"),
        ("close_later", "offsets"),
    ]
    assert log.offset(0) == {"seq": 3}
    restarted = BatchLog(LocalFileSystem(), str(tmp_path / "spark"))
    assert restarted.newest() == (1, 0)
    assert restarted.offset(1) == {"seq": 5}
    restarted.seal()  # nothing to close on a local disk
    assert restarted.offset(0) == {"seq": 3}
