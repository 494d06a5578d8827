"""Files that span micro-batches on Spark's sink, without Spark: the real task code
(:meth:`HdfsSinkStreamWriter.write_task`) and the real commit (:class:`SinkLog`) driven through
batches of any shape, failed and killed task attempts, crashes at every step of the commit and
replays, on the local filesystem. Every record is published exactly once, and files are as full
as the limit says, not one per batch and task."""

from __future__ import annotations

import contextlib
import os
import posixpath
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pyspark.sql.datasource import WriterCommitMessage
from pyspark.sql.types import StringType, StructField, StructType

from operators.fs.local import LocalFileSystem
from operators.sink.manifest import manifest_dir, read_manifests
from operators.spark import sink as sink_module
from operators.spark.commit import IN_PROGRESS_PREFIX, WrittenFile, cut_back
from operators.spark.options import sink_config
from operators.spark.sink import HdfsSinkStreamWriter, SinkTaskMessage, TaskIds
from region.errors import ConfigError
from region.fs import FileSystem
from tests.conftest import CLUSTER_USER, real_fs
from tests.spark.test_commit import Crash, CrashingFS

_SCHEMA = StructType([StructField("value", StringType())])


class Killed(BaseException):
    """The task's process died: nothing after this point runs, not even its clean-up."""


class KillableFS(LocalFileSystem):
    """The local filesystem of a task process that dies at its ``kill_at``-th write."""

    def __init__(self, kill_at: int | None = None) -> None:
        self.kill_at = kill_at
        self.writes = 0
        self.dead = False

    def _check(self) -> None:
        if self.dead:
            raise Killed

    def create(self, path: str, *, overwrite: bool = False, permission: int | None = None) -> Any:
        self._check()
        return _Writer(self, super().create(path, overwrite=overwrite, permission=permission))

    def append(self, path: str) -> Any:
        self._check()
        return _Writer(self, super().append(path))

    def delete(self, path: str, *, recursive: bool = False) -> bool:
        self._check()
        return super().delete(path, recursive=recursive)

    def truncate(self, path: str, length: int) -> None:
        self._check()
        super().truncate(path, length)


class _Writer:
    def __init__(self, fs: KillableFS, inner: Any) -> None:
        self._fs, self._inner = fs, inner
        self.path = inner.path

    def write(self, data: bytes) -> None:
        self._fs._check()
        self._fs.writes += 1
        if self._fs.kill_at is not None and self._fs.writes >= self._fs.kill_at:
            # Half the bytes reach the file, then the process is gone.
            self._inner.write(data[: len(data) // 2])
            self._inner.flush()
            self._fs.dead = True
            raise Killed
        self._inner.write(data)

    def flush(self) -> None:
        self._inner.flush()

    def sync(self) -> None:
        self._fs._check()
        self._inner.sync()

    def close(self) -> None:
        self._inner.close()


def make_writer(out: Path | str, fs: FileSystem, **limits: str) -> HdfsSinkStreamWriter:
    options = {
        "file": posixpath.join(str(out), "part-%FILENUM.txt"),
        "span_batches": "true",
        "manifest": "true",
        **limits,
    }
    writer = HdfsSinkStreamWriter(sink_config(options), _SCHEMA)
    writer._fs = fs
    return writer


def batches_of(records: list[str], size: int = 2) -> Iterator[pa.RecordBatch]:
    for i in range(0, len(records), size):
        yield pa.RecordBatch.from_pydict({"value": records[i : i + size]})


def published(out: Path) -> list[list[str]]:
    """The records of each file a plain reader sees, in file-number order."""
    names = sorted(n for n in os.listdir(out) if not n.startswith((".", "_")))
    return [(out / n).read_text().splitlines() for n in names]


def in_progress(out: Path) -> list[str]:
    return [n for n in os.listdir(out) if n.startswith(IN_PROGRESS_PREFIX)]


def run_task(
    writer: HdfsSinkStreamWriter, records: list[str], partition: int, batch: int, attempt: int
) -> SinkTaskMessage:
    ids = TaskIds(partition, attempt, 1000 * batch + 10 * partition + attempt, batch)
    return writer.write_task(batches_of(records), ids)


def test_a_slow_stream_fills_files_across_batches_and_the_stop_publishes_the_rest(
    tmp_path: Path,
) -> None:
    fs = LocalFileSystem()
    writer = make_writer(tmp_path, fs, tuples_per_file="5")
    for batch in range(12):  # 12 batches of 2 records: 24 records
        records = [f"b{batch}-{i}" for i in range(2)]
        message = run_task(writer, records, 0, batch, 0)
        writer.commit([message], batch)
    # Not one file per batch: 4 full files of 5, 4 records still open (unpublished).
    assert [len(f) for f in published(tmp_path)] == [5, 5, 5, 5]
    assert len(in_progress(tmp_path)) == 1
    assert writer.close_open() == [str(tmp_path / "part-4.txt")]
    files = published(tmp_path)
    assert [len(f) for f in files] == [5, 5, 5, 5, 4]
    assert [r for f in files for r in f] == [f"b{b}-{i}" for b in range(12) for i in range(2)]
    assert in_progress(tmp_path) == []
    # Stopping again publishes nothing; a later batch starts a fresh file.
    assert writer.close_open() == []
    writer.commit([run_task(writer, ["late"], 0, 12, 0)], 12)
    assert writer.close_open() == [str(tmp_path / "part-5.txt")]


def test_time_per_file_publishes_an_idle_open_file_at_the_next_commit(tmp_path: Path) -> None:
    fs = LocalFileSystem()
    writer = make_writer(tmp_path, fs, time_per_file="1h")
    writer.commit([run_task(writer, ["a", "b"], 0, 0, 0)], 0)
    writer.commit([run_task(writer, ["c"], 0, 1, 0)], 1)
    assert published(tmp_path) == [] and len(in_progress(tmp_path)) == 1
    # An hour later: a batch with no task for slot 0 still publishes it.
    log = writer._log()
    log._clock = lambda: 1e12
    log.commit(2, [])
    assert published(tmp_path) == [["a", "b", "c"]]
    assert in_progress(tmp_path) == []


def test_a_failed_attempt_that_appended_is_cut_back_by_the_retry(tmp_path: Path) -> None:
    fs = LocalFileSystem()
    writer = make_writer(tmp_path, fs, bytes_per_file="1000")
    writer.commit([run_task(writer, ["a", "b"], 0, 0, 0)], 0)

    def failing() -> Iterator[pa.RecordBatch]:
        yield pa.RecordBatch.from_pydict({"value": ["c", "d"]})
        raise OSError("connection reset")  # after the records reached the open file

    with pytest.raises(OSError, match="connection reset"):
        writer.write_task(failing(), TaskIds(0, 0, 7, 1))
    # The carried file stays (it holds batch 0's records), with what the attempt appended.
    assert fs.read(str(tmp_path / in_progress(tmp_path)[0])) == b"a\nb\nc\nd\n"
    writer.commit([run_task(writer, ["c", "d"], 0, 1, 1)], 1)
    writer.close_open()
    assert published(tmp_path) == [["a", "b", "c", "d"]]


def test_a_carried_file_cut_short_outside_the_sink_is_a_clear_error(tmp_path: Path) -> None:
    fs = LocalFileSystem()
    writer = make_writer(tmp_path, fs, tuples_per_file="10")
    writer.commit([run_task(writer, ["a", "b"], 0, 0, 0)], 0)
    path = tmp_path / in_progress(tmp_path)[0]
    path.write_bytes(b"a\n")
    with pytest.raises(OSError, match=r"has 2 bytes, fewer than the 4 an earlier batch left"):
        run_task(writer, ["c"], 0, 1, 0)
    path.unlink()
    with pytest.raises(FileNotFoundError, match="left open by an earlier batch with 4 bytes"):
        run_task(writer, ["c"], 0, 1, 1)


class _Later:
    """The sink tasks' clock, ``seconds`` ahead of the real one."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds

    def time(self) -> float:
        return time.time() + self.seconds

    def time_ns(self) -> int:
        return time.time_ns() + int(self.seconds * 1e9)


def replay_past_time_per_file(
    fs: FileSystem, out: str, monkeypatch: pytest.MonkeyPatch
) -> list[tuple[list[str], int, int]]:
    """Batch 1's task appends to the file batch 0 left open; the process dies before the commit
    writes batch 1's entry; the restart takes longer than ``time_per_file``, and batch 1 runs
    again. ``(records, size the manifest gives, size) `` of each published file."""
    writer = make_writer(out, fs, time_per_file="1h")
    writer.commit([run_task(writer, ["a", "b"], 0, 0, 0)], 0)
    # 1. The dead attempt: its records reach the carried file, its message goes with the driver.
    run_task(writer, ["c", "d"], 0, 1, 0)
    (carried,) = [s for s in fs.list_dir(out) if s.name.startswith(IN_PROGRESS_PREFIX)]
    assert fs.read(carried.path) == b"a\nb\nc\nd\n"
    # 2. Two hours later (a short time_per_file and a slow restart alike): the replay finds the
    # carried file past its age and publishes it; its own records go to a new file.
    with monkeypatch.context() as later:
        later.setattr(sink_module, "time", _Later(2 * 3600))
        again = make_writer(out, fs, time_per_file="1h")
        again.commit([run_task(again, ["c", "d"], 0, 1, 1)], 1)
    again.close_open()
    announced = {
        f.path: f.size for _, files in read_manifests(fs, manifest_dir(out)) for f in files
    }
    names = sorted(s.name for s in fs.list_dir(out) if not s.name.startswith((".", "_")))
    paths = [posixpath.join(out, n) for n in names]
    return [(fs.read(p).decode().splitlines(), announced[p], fs.status(p).size) for p in paths]


def test_a_replay_past_time_per_file_cuts_the_carried_file_back_before_publishing_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    files = replay_past_time_per_file(LocalFileSystem(), str(tmp_path), monkeypatch)
    assert files == [(["a", "b"], 4, 4), (["c", "d"], 4, 4)]
    assert in_progress(tmp_path) == []


@pytest.mark.parametrize("cut", ["truncate", "rewrite"])
def test_a_replay_past_time_per_file_cuts_the_carried_file_back_on_hdfs(
    request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch, cut: str
) -> None:
    # hdfs-native truncates through the cluster's WebHDFS, whose address the Hadoop
    # configuration gives; without it the sink rewrites the file's first bytes instead.
    overrides = {} if cut == "truncate" else {"config_dir": None}
    fs, base, _ = real_fs(request, "hdfs", **overrides)
    assert fs.supports_truncate is (cut == "truncate")
    out = posixpath.join(base, f"carried-{cut}-{time.monotonic_ns()}")
    fs.mkdirs(out)
    files = replay_past_time_per_file(fs, out, monkeypatch)
    assert files == [(["a", "b"], 4, 4), (["c", "d"], 4, 4)]


DEAD_APPENDER = """\
import sys, time
from operators.fs import FileSystemSettings, open_path
settings = FileSystemSettings(uri=sys.argv[1], user=sys.argv[3], config_dir=sys.argv[4])
fs, _ = open_path(sys.argv[1], settings)
w = fs.append(sys.argv[2])
w.write(b"c\\nd\\n")
w.sync()
print("ready", flush=True)
time.sleep(600)
"""


def test_a_task_killed_while_appending_on_hdfs_leaves_nothing_in_the_carried_file(
    request: pytest.FixtureRequest,
) -> None:
    # A task process killed while appending keeps HDFS's lease on the carried file, and the
    # NameNode's length leaves out the bytes it wrote: the next attempt ends the lease first.
    fs, base, sandbox = real_fs(request, "hdfs", lease_recovery_timeout=10.0)
    if sandbox is None:
        pytest.skip("needs the sandbox (HDFS_URI names another cluster)")
    out = posixpath.join(base, f"carried-lease-{time.monotonic_ns()}")
    fs.mkdirs(out)
    writer = make_writer(out, fs, time_per_file="1h")
    writer.commit([run_task(writer, ["a", "b"], 0, 0, 0)], 0)
    (carried,) = [s.path for s in fs.list_dir(out) if s.name.startswith(IN_PROGRESS_PREFIX)]
    args = [sandbox.info.hdfs, carried, CLUSTER_USER, sandbox.info.conf_dir]
    child = subprocess.Popen(
        [sys.executable, "-c", DEAD_APPENDER, *args], stdout=subprocess.PIPE, text=True
    )
    try:
        assert child.stdout is not None
        assert child.stdout.readline().strip() == "ready"
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait(30)
    again = make_writer(out, fs, time_per_file="1h")
    again.commit([run_task(again, ["c", "d"], 0, 1, 1)], 1)
    again.close_open()
    names = sorted(s.name for s in fs.list_dir(out) if not s.name.startswith((".", "_")))
    assert [fs.read(posixpath.join(out, n)) for n in names] == [b"a\nb\nc\nd\n"]
    # A carried file that is gone is still named as such (not as a lease to recover).
    gone = WrittenFile(posixpath.join(out, ".gone.inprogress"), 0, 0, 2, 4, 0)
    with pytest.raises(FileNotFoundError, match="left open by an earlier batch with 4 bytes"):
        cut_back(fs, gone, None)


_RECORDS = st.lists(st.integers(min_value=0, max_value=4), min_size=1, max_size=3)


@settings(max_examples=60, deadline=None)
@given(
    shape=st.lists(_RECORDS, min_size=1, max_size=6),
    limit=st.sampled_from([("tuples_per_file", "3"), ("bytes_per_file", "20")]),
    task_kills=st.lists(st.integers(min_value=1, max_value=4) | st.none(), min_size=6, max_size=6),
    commit_crashes=st.lists(
        st.integers(min_value=1, max_value=12) | st.none(), min_size=6, max_size=6
    ),
)
def test_every_record_lands_once_in_files_as_full_as_the_limit(
    tmp_path_factory: pytest.TempPathFactory,
    shape: list[list[int]],
    limit: tuple[str, str],
    task_kills: list[int | None],
    commit_crashes: list[int | None],
) -> None:
    out = tmp_path_factory.mktemp("out")
    sent: list[str] = []
    for batch, partitions in enumerate(shape):
        records = [
            [f"r{batch}.{p}.{i}-{'x' * (i % 3)}" for i in range(n)]
            for p, n in enumerate(partitions)
        ]
        # A first attempt of partition 0 is killed mid-write (nothing cleans up after it), or
        # finishes and its result is lost with its executor.
        if task_kills[batch] is not None:
            lost = make_writer(out, KillableFS(task_kills[batch]), **dict([limit]))
            with contextlib.suppress(Killed):
                run_task(lost, records[0], 0, batch, 0)
        writer = make_writer(out, LocalFileSystem(), **dict([limit]))
        messages: list[WriterCommitMessage | None] = [
            run_task(writer, r, p, batch, 1) for p, r in enumerate(records)
        ]
        # The driver may die at any step of the commit; Spark then runs the batch again in a
        # new process, with its records in one task.
        crashing = make_writer(out, CrashingFS(commit_crashes[batch]), **dict([limit]))
        try:
            crashing.commit(messages, batch)
        except Crash:
            again = make_writer(out, LocalFileSystem(), **dict([limit]))
            merged = [r for rs in records for r in rs]
            again.commit([run_task(again, merged, 0, batch, 2)], batch)
        sent.extend(r for rs in records for r in rs)
        files = published(out)
        assert not Counter(r for f in files for r in f) - Counter(sent)  # nothing twice
    final = make_writer(out, LocalFileSystem(), **dict([limit]))
    final.close_open()
    files = published(out)
    assert Counter(r for f in files for r in f) == Counter(sent)
    assert in_progress(out) == []
    # The manifest names every published file once, in publication (file number) order.
    listed = [
        f.path for _, fs in read_manifests(LocalFileSystem(), manifest_dir(str(out))) for f in fs
    ]
    names = sorted(n for n in os.listdir(out) if not n.startswith((".", "_")))
    assert listed == [str(out / n) for n in sorted(names, key=lambda n: int(n[5:].split(".")[0]))]
    # Files are full but for the ones the stop published (at most one per slot).
    name, value = limit
    full = [
        len(f) == int(value)
        if name == "tuples_per_file"
        else len("".join(x + "\n" for x in f)) >= int(value)
        for f in files
    ]
    slots = max(len(p) for p in shape)
    assert full.count(False) <= slots


def named_writer(out: Path) -> HdfsSinkStreamWriter:
    options = {"directory": str(out), "file_attribute_name": "name", "manifest": "true"}
    schema = StructType([StructField("name", StringType()), StructField("value", StringType())])
    writer = HdfsSinkStreamWriter(sink_config(options), schema)
    writer._fs = LocalFileSystem()
    return writer


def named(pairs: list[tuple[str, str]]) -> Iterator[pa.RecordBatch]:
    yield pa.RecordBatch.from_pydict(
        {"name": [n for n, _ in pairs], "value": [v for _, v in pairs]}
    )


def test_file_names_from_records_on_spark_never_drop_a_returning_name(tmp_path: Path) -> None:
    writer = named_writer(tmp_path)
    first = [("a.csv", "1"), ("b.csv", "2"), ("a.csv", "3"), ("sub/c.csv", "4")]
    m0 = writer.write_task(named(first[:2]), TaskIds(0, 0, 1, 0))
    m1 = writer.write_task(named(first[2:]), TaskIds(1, 0, 2, 0))
    writer.commit([m0, m1], 0)
    # Two tasks named a.csv in one batch: the second file gets the next numbered name.
    assert (tmp_path / "a.csv").read_text() == "1\n"
    assert (tmp_path / "a-1.csv").read_text() == "3\n"
    assert (tmp_path / "sub" / "c.csv").read_text() == "4\n"
    # A later batch returning to a.csv and b.csv: numbered files, nothing overwritten or lost.
    writer.commit(
        [writer.write_task(named([("a.csv", "5"), ("b.csv", "6")]), TaskIds(0, 0, 3, 1))], 1
    )
    assert (tmp_path / "a-2.csv").read_text() == "5\n"
    assert (tmp_path / "b-1.csv").read_text() == "6\n"
    assert (tmp_path / "b.csv").read_text() == "2\n"
    assert in_progress(tmp_path) == []
    listed = [
        f.path
        for _, fs in read_manifests(LocalFileSystem(), manifest_dir(str(tmp_path)))
        for f in fs
    ]
    assert len(listed) == len(set(listed)) == 6
    # A name that leaves the directory fails the batch, naming it; nothing is published.
    with pytest.raises(ValueError, match=r"file name '\.\./x' in 'name'"):
        writer.write_task(named([("ok.csv", "7"), ("../x", "8")]), TaskIds(0, 0, 4, 2))
    assert not (tmp_path / "ok.csv").exists() and in_progress(tmp_path) == []


@pytest.mark.parametrize(
    "name", ["_hidden.csv", "day/_tmp.csv", "_hdfs_sink/published/00000000000000000001.json"]
)
def test_a_name_readers_skip_or_inside_the_sinks_own_folder_fails_the_batch(
    tmp_path: Path, name: str
) -> None:
    writer = named_writer(tmp_path)
    with pytest.raises(ValueError, match=f"file name '{name}' in 'name' has a component starting"):
        writer.write_task(named([("ok.csv", "7"), (name, "8")]), TaskIds(0, 0, 4, 2))
    assert in_progress(tmp_path) == [] and not (tmp_path / "_hdfs_sink").exists()


@pytest.mark.parametrize("file", ["out/data.txt", "out/f-%TIME.txt"])
def test_a_template_without_filenum_is_refused_at_start_on_spark(file: str) -> None:
    """Every micro-batch and task writes files of its own: the second would need the name of
    the first (it used to fail at that commit, 'exists (never overwritten)')."""
    with pytest.raises(ConfigError, match=rf"file='{file}' has no %FILENUM.*add %FILENUM"):
        sink_config({"file": file})
    sink_config({"file": file.replace(".txt", "-%FILENUM.txt")})


@pytest.mark.parametrize(
    ("max_open", "expected"),
    [
        (None, {"a.csv": "1\n4\n", "b.csv": "2\n", "c.csv": "3\n"}),
        ("2", {"a.csv": "1\n", "b.csv": "2\n", "c.csv": "3\n", "a-1.csv": "4\n"}),
    ],
)
def test_a_task_keeps_a_bounded_number_of_named_files_open(
    tmp_path: Path, max_open: str | None, expected: dict[str, str]
) -> None:
    options = {"directory": str(tmp_path), "file_attribute_name": "name"}
    if max_open is not None:
        options["max_open_files"] = max_open
    schema = StructType([StructField("name", StringType()), StructField("value", StringType())])
    writer = HdfsSinkStreamWriter(sink_config(options), schema)
    writer._fs = LocalFileSystem()
    pairs = [("a.csv", "1"), ("b.csv", "2"), ("c.csv", "3"), ("a.csv", "4")]
    batches = [b for pair in pairs for b in named([pair])]  # one Arrow batch per record
    writer.commit([writer.write_task(iter(batches), TaskIds(0, 0, 1, 0))], 0)
    files = {p.name: p.read_text() for p in tmp_path.iterdir() if p.is_file()}
    assert files == expected
