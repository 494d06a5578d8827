"""gzip'd CSV landing into Parquet partitioned by month, through kill -9 at random moments, on
the local disk and on HDFS: every row once with its declared types in its partition, every bad
row once in the rejects, and a reader polling the output never meets a partial file."""

from __future__ import annotations

import csv
import datetime
import decimal
import gzip
import io
import json
import posixpath
import random
import signal
import threading
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from operators.fs.local import LocalFileSystem
from region.fs import FileSystem
from tests.cli.conftest import cli, start_cli
from tests.conftest import CLUSTER_USER, real_fs

pytestmark = pytest.mark.slow

CONFIG = """\
engine = "local"
{filesystem}
[region]
period = "100ms"
checkpoint_dir = "{root}/checkpoints"
[scan]
directory = "{root}/landing"
[source]
format = "csv"
[source.schema]
id = "int64"
name = "string"
day = "date"
amount = "decimal(12,2)"
[transform]
function = "pace:pace"
[sink]
file = "{root}/out/part-%FILENUM.parquet"
format = "parquet"
compression = "zstd"
tuples_per_file = 15
rejects_file = "_rejects/r-%FILENUM.jsonl"
partition_by = ["month"]
[sink.derived]
month = {{ column = "day", strftime = "%Y-%m" }}
[sink.schema]
id = "int64"
name = "string"
day = "date"
amount = "decimal(12,2)"
"""
PACE = """\
import os, time
PACE = float(os.environ.get("PACE", "0"))
def pace(record):
    if PACE:
        time.sleep(PACE)
    return record
"""


class Curated:
    def __init__(self, fs: FileSystem, root: str) -> None:
        self.fs, self.root = fs, root
        self.rows: list[dict[str, Any]] = []
        self.bad: list[str] = []
        self._n = 0

    def land(self, rows: int) -> None:
        """A CSV file: values with line ends, commas and quotes; a bad row now and then."""
        out = io.StringIO()
        writer = csv.writer(out, lineterminator="\n")
        writer.writerow(["id", "name", "day", "amount"])
        for _ in range(rows):
            i = len(self.rows) + len(self.bad)
            if i % 37 == 5:
                writer.writerow([f"x{i}", "bad", "2026-11-28", "1"])
                self.bad.append(f"x{i},bad,2026-11-28,1")
                continue
            name = f'row {i}, "quoted"\nsecond line' if i % 3 == 0 else f"row {i}"
            day = datetime.date(2026, 10 + i % 3, 1 + i % 28)
            writer.writerow([i, name, day.isoformat(), f"{i}.25"])
            self.rows.append({"id": i, "name": name, "day": day, "amount": f"{i}.25"})
        data = out.getvalue().encode()
        name = f"f{self._n:03d}.csv"
        if self._n % 2 == 0:  # every other file gzip'd, in two members as `cat a.gz b.gz`
            half = len(data) // 2
            data = gzip.compress(data[:half], mtime=0) + gzip.compress(data[half:], mtime=0)
            name += ".gz"
        self._n += 1
        tmp = posixpath.join(self.root, "landing", f".{name}.tmp")
        w = self.fs.create(tmp)
        w.write(data)
        w.close()
        self.fs.rename(tmp, posixpath.join(self.root, "landing", name))
        time.sleep(0.005)

    def published(self) -> list[dict[str, Any]]:
        """Every row of the published files (each read whole by a plain Parquet reader), with
        its month from the directory name, in file-number order."""
        files: list[tuple[int, str, str]] = []
        todo = [posixpath.join(self.root, "out")]
        while todo:
            directory = todo.pop()
            if not self.fs.exists(directory):
                continue
            for s in self.fs.list_dir(directory):
                if s.name[0] in "._":
                    continue
                if s.is_dir:
                    todo.append(s.path)
                else:
                    number = int("".join(c for c in s.name if c.isdigit()))
                    month = posixpath.basename(directory).removeprefix("month=")
                    files.append((number, s.path, month))
        rows: list[dict[str, Any]] = []
        for _, path, month in sorted(files):
            table = pq.read_table(pa.BufferReader(self.fs.read(path)))
            rows += [{**r, "month": month} for r in table.to_pylist()]
        return rows

    def rejected(self) -> list[str]:
        directory = posixpath.join(self.root, "out", "_rejects")
        if not self.fs.exists(directory):
            return []
        names = sorted(s.name for s in self.fs.list_dir(directory) if s.name[0] not in "._")
        return [
            json.loads(line)["record"]
            for n in names
            for line in self.fs.read(posixpath.join(directory, n)).decode().splitlines()
        ]


@pytest.fixture(params=["local", "hdfs"])
def curated(request: pytest.FixtureRequest, tmp_path: Path) -> tuple[Curated, Path]:
    if request.param == "local":
        fs: FileSystem = LocalFileSystem()
        root = str(tmp_path / "data")
        filesystem = ""
    else:
        fs, base, sandbox = real_fs(request, "hdfs")
        if sandbox is None:
            pytest.skip("needs the sandbox (HDFS_URI names another cluster)")
        root = posixpath.join(base, f"curated-{time.monotonic_ns()}")
        filesystem = (
            f'[filesystem]\nuri = "{sandbox.info.hdfs}"\nuser = "{CLUSTER_USER}"\n'
            f'config_dir = "{sandbox.info.conf_dir}"\nlease_recovery_timeout = "60s"\n'
        )
    fs.mkdirs(posixpath.join(root, "landing"))
    (tmp_path / "pace.py").write_text(PACE)
    config = tmp_path / "job.toml"
    config.write_text(CONFIG.format(filesystem=filesystem, root=root))
    return Curated(fs, root), config


def kill_after_a_publish(
    data: Curated, config: Path, delay: float, timeout: float, **env: str
) -> bool:
    """Run the job until it publishes a file, then ``delay`` seconds more, then SIGKILL it;
    whether it was killed (it may have ended first)."""
    running = start_cli(
        "run", str(config), "--available-now", "--no-progress", cwd=config.parent, **env
    )
    try:
        before = len(data.published())
        deadline = time.monotonic() + timeout
        while len(data.published()) == before and running.poll() is None:
            assert time.monotonic() < deadline, f"no file published in {timeout} s"
            time.sleep(0.02)
        time.sleep(delay)
        running.send_signal(signal.SIGKILL)  # (a no-op if it finished)
        return bool(running.wait(timeout=30) == -signal.SIGKILL)
    finally:
        if running.poll() is None:
            running.kill()
            running.wait()


def test_csv_landing_into_parquet_through_kill_9_is_every_row_once_typed(
    curated: tuple[Curated, Path],
) -> None:
    data, config = curated
    for _ in range(4):
        data.land(60)
    failures: list[BaseException] = []
    polling = threading.Event()

    def poll() -> None:  # a reader of the output while it is written
        while not polling.is_set():
            try:
                data.published()
            except BaseException as exc:
                failures.append(exc)
                return
            time.sleep(0.05)

    reader = threading.Thread(target=poll, daemon=True)
    reader.start()
    rng = random.Random(7)
    killed = 0
    try:
        for kill in range(3):
            killed += kill_after_a_publish(data, config, rng.uniform(0.05, 0.6), 120, PACE="0.01")
            if kill == 1:
                data.land(50)  # a file lands while the job is down
        done = cli(
            "run", str(config), "--available-now", "--no-progress", timeout=300, cwd=config.parent
        )
        assert done.returncode == 0, done.stderr[-3000:]
    finally:
        polling.set()
        reader.join(timeout=30)
    assert not failures, failures
    assert killed >= 2  # killed mid-run, not after the end
    got = sorted(data.published(), key=lambda r: r["id"])
    expected = [
        {**r, "amount": decimal.Decimal(r["amount"]), "month": r["day"].strftime("%Y-%m")}
        for r in data.rows
    ]
    assert [r["id"] for r in got] == [r["id"] for r in expected]
    assert got == expected
    assert sorted(data.rejected()) == sorted(data.bad)


def test_after_read_deletes_a_compressed_file_once_its_rows_are_published(
    tmp_path: Path,
) -> None:
    landing = tmp_path / "landing"
    landing.mkdir()
    (landing / "a.csv.gz").write_bytes(gzip.compress(b"id\n1\n2\n", mtime=0))
    config = tmp_path / "job.toml"
    config.write_text(
        f'engine = "local"\n[region]\ncheckpoint_dir = "{tmp_path}/ckpt"\n'
        f'[scan]\ndirectory = "{landing}"\nafter_read = "delete"\n'
        '[source]\nformat = "csv"\nschema = { id = "int64" }\n'
        f'[sink]\nfile = "{tmp_path}/out/part-%FILENUM.jsonl"\nformat = "jsonl"\n'
    )
    done = cli("run", str(config), "--available-now", "--no-progress")
    assert done.returncode == 0, done.stderr[-3000:]
    assert (tmp_path / "out" / "part-0.jsonl").read_text() == '{"id":1}\n{"id":2}\n'
    assert list(landing.iterdir()) == []  # the compressed file, read whole, is gone


SPARK_CONFIG = """\
engine = "spark"
{filesystem}
[region]
checkpoint_dir = "{root}/checkpoints"
[scan]
directory = "{root}/landing"
[source]
format = "csv"
[source.schema]
id = "int64"
name = "string"
day = "date"
amount = "decimal(12,2)"
[sink]
file = "{root}/out/part-%FILENUM.parquet"
format = "parquet"
compression = "zstd"
partition_by = ["month"]
rejects_file = "_rejects/r-%FILENUM.jsonl"
[sink.derived]
month = {{ column = "day", strftime = "%Y-%m" }}
[spark]
max_files_per_trigger = 1
"""


@pytest.mark.integration  # four Spark runs
def test_on_spark_csv_landing_into_parquet_without_a_transform_through_kill_9_is_every_row_once(
    curated: tuple[Curated, Path],
) -> None:
    """The Spark engine reads the rows and writes their columns (no transform between): killed
    after a published batch, twice, a file landing while it is down, every row is published
    once with its types, and every bad row once in the rejects, as on the local engine."""
    data, config = curated
    text = config.read_text()
    filesystem = text.split("[region]")[0].removeprefix('engine = "local"\n')
    config.write_text(SPARK_CONFIG.format(filesystem=filesystem, root=data.root))
    for _ in range(4):
        data.land(60)
    rng = random.Random(11)
    killed = 0
    for kill in range(2):
        killed += kill_after_a_publish(data, config, rng.uniform(0.0, 1.0), 300)
        if kill == 0:
            data.land(50)  # a file lands while the job is down
    done = cli(
        "run", str(config), "--available-now", "--no-progress", timeout=600, cwd=config.parent
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert killed >= 1  # killed mid-run at least once, not after the end
    got = sorted(data.published(), key=lambda r: r["id"])
    expected = [
        {**r, "amount": decimal.Decimal(r["amount"]), "month": r["day"].strftime("%Y-%m")}
        for r in data.rows
    ]
    assert [r["id"] for r in got] == [r["id"] for r in expected]
    assert got == expected  # the bad rows are not among them
    assert sorted(data.rejected()) == sorted(data.bad)
