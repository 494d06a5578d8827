"""``hdfs-region run --engine spark --available-now`` with landing, output and checkpoints all on
the session's real HDFS, through ``hdfs://`` and through ``webhdfs://``; then Spark's own
built-in reader (``spark.read.text`` through Spark's bundled Hadoop client) reads the output.

The command runs in this process on the shared SparkSession (a second JVM would cost ~15 s per
case); ``tests/spark/test_jvm_hadoop.py`` covers what a fresh JVM inherits (user, Hadoop
configuration). Spark's bundled client cannot speak ``webhdfs://`` (see
``operators.app.spark_plan._spark_checkpoint``), so the webhdfs case keeps Spark's checkpoint in
the same directory of the cluster through ``hdfs://``, and the output is read back through
``hdfs://`` in both cases.
"""

from __future__ import annotations

import logging
import os
import posixpath
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from operators.app.cli import main
from operators.spark.commit import IN_PROGRESS_PREFIX, IN_PROGRESS_SUFFIX
from region.fs import FileSystem
from tests.conftest import CLUSTER_USER, real_fs

pytestmark = [pytest.mark.spark, pytest.mark.slow]

CONFIG = """\
engine = "spark"
[filesystem]
uri = "{uri}"
user = "{user}"
config_dir = "{conf_dir}"
timeout = "20s"
[region]
checkpoint_dir = "{uri}{root}/checkpoints"
[scan]
directory = "{root}/landing"
[sink]
file = "{root}/out/part-%FILENUM.txt"
tuples_per_file = 30
[spark]
max_files_per_trigger = 2
"""

#: Landing files: several batches (two files each), files rolled inside a batch, CRLF and a
#: last line without a newline, an empty file, non-ASCII text.
INPUTS = {
    "a.txt": "".join(f"a line {i}\n" for i in range(70)).encode(),
    "b.txt": "".join(f"b crlf {i}\r\n" for i in range(40)).encode(),
    "empty.txt": b"",
    "c.txt": "\n".join(f"c \u00e9t\u00e9 {i}" for i in range(25)).encode(),
    "d.txt": b"d only line\n",
}
EXPECTED = (
    [f"a line {i}" for i in range(70)]
    + [f"b crlf {i}" for i in range(40)]
    + [f"c \u00e9t\u00e9 {i}" for i in range(25)]
    + ["d only line"]
)


@pytest.fixture
def restored_process() -> Iterator[None]:
    """The command changes this process's logging and environment (it is meant to own its
    process): put both back afterwards, except ``HADOOP_USER_NAME``, which hdfs-native reads
    at each reconnect and keeps set for the whole process (``operators.fs.native``)."""
    environ = dict(os.environ)
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    try:
        yield
    finally:
        for handler in list(root.handlers):
            if handler not in handlers:
                root.removeHandler(handler)
        root.setLevel(level)
        user = os.environ.get("HADOOP_USER_NAME")
        os.environ.clear()
        os.environ.update(environ)
        if user is not None:
            os.environ["HADOOP_USER_NAME"] = user


def land(fs: FileSystem, landing: str) -> None:
    """Each file written under a hidden name, then renamed (as uploads do), in order."""
    fs.mkdirs(landing)
    for name, data in INPUTS.items():
        tmp = posixpath.join(landing, f".{name}.tmp")
        writer = fs.create(tmp)
        writer.write(data)
        writer.close()
        fs.rename(tmp, posixpath.join(landing, name))
        time.sleep(0.005)  # HDFS keeps milliseconds: distinct mtimes


@pytest.mark.parametrize("scheme", ["hdfs", "webhdfs-cluster"])
def test_spark_run_on_the_cluster_then_sparks_reader_sees_each_record_once(
    scheme: str,
    request: pytest.FixtureRequest,
    spark: Any,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    restored_process: None,
) -> None:
    fs, base, sandbox = real_fs(request, scheme)
    if sandbox is None:
        pytest.skip("needs the sandbox's Hadoop configuration (HDFS_URI / WEBHDFS_URL are set)")
    uri = sandbox.info.hdfs if scheme == "hdfs" else sandbox.info.webhdfs
    root = posixpath.join(base, f"spark-{scheme}-{time.monotonic_ns()}")
    land(fs, posixpath.join(root, "landing"))
    config = tmp_path / "pipeline.toml"
    config.write_text(
        CONFIG.format(uri=uri, user=CLUSTER_USER, conf_dir=sandbox.info.conf_dir, root=root)
    )

    code = main(["run", str(config), "--available-now", "--no-progress"])

    captured = capsys.readouterr()
    assert code == 0, captured.err[-3000:]
    assert f"stopped: {len(EXPECTED)} records in" in captured.out
    # Spark's checkpoint is in the configured directory, on the cluster (read through `fs`).
    checkpoints = posixpath.join(root, "checkpoints")
    assert fs.exists(posixpath.join(checkpoints, "spark", "commits", "0"))
    assert fs.exists(posixpath.join(checkpoints, "plans"))
    out = posixpath.join(root, "out")
    names = [s.name for s in fs.list_dir(out)]
    assert not [n for n in names if n.startswith(IN_PROGRESS_PREFIX)], names
    # A task killed mid-write would leave such a file: a plain reader must not see it.
    decoy = posixpath.join(out, f"{IN_PROGRESS_PREFIX}p00000-t9-a0-decoy-0{IN_PROGRESS_SUFFIX}")
    writer = fs.create(decoy)
    writer.write(b"in progress, never published\n")
    writer.close()

    read = spark.read.text(f"{sandbox.info.hdfs}{out}").collect()

    got = [row.value for row in read]
    assert sorted(got) == sorted(EXPECTED)  # each input line once, nothing else
    assert len(got) == len(EXPECTED)


TABLE_CONFIG = """\
engine = "spark"
[filesystem]
uri = "{uri}"
user = "{user}"
config_dir = "{conf_dir}"
timeout = "20s"
[region]
checkpoint_dir = "{uri}{root}/checkpoints"
[scan]
directory = "{root}/landing"
[transform]
sql = "SELECT value AS line, substr(value, 1, 1) AS letter FROM input"
[sink]
file = "{root}/out/part-%FILENUM.parquet"
format = "parquet"
compression = "zstd"
partition_by = ["letter"]
tuples_per_file = 30
[sink.schema]
line = "string"
letter = "string"
[spark]
max_files_per_trigger = 2
"""


@pytest.mark.integration
def test_spark_run_on_hdfs_writes_partitioned_parquet_that_sparks_reader_reads_whole(
    request: pytest.FixtureRequest,
    spark: Any,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    restored_process: None,
) -> None:
    fs, base, sandbox = real_fs(request, "hdfs")
    if sandbox is None:
        pytest.skip("needs the sandbox's Hadoop configuration (HDFS_URI / WEBHDFS_URL are set)")
    uri = sandbox.info.hdfs
    root = posixpath.join(base, f"spark-parquet-{time.monotonic_ns()}")
    land(fs, posixpath.join(root, "landing"))
    config = tmp_path / "pipeline.toml"
    config.write_text(
        TABLE_CONFIG.format(uri=uri, user=CLUSTER_USER, conf_dir=sandbox.info.conf_dir, root=root)
    )

    code = main(["run", str(config), "--available-now", "--no-progress"])

    captured = capsys.readouterr()
    assert code == 0, captured.err[-3000:]
    out = posixpath.join(root, "out")
    partitions = sorted(s.name for s in fs.list_dir(out) if not s.name.startswith(("_", ".")))
    assert partitions == ["letter=a", "letter=b", "letter=c", "letter=d"]
    for part in partitions:
        names = [s.name for s in fs.list_dir(posixpath.join(out, part))]
        assert names and all(n.endswith(".parquet") for n in names), names
    read = spark.read.parquet(f"{uri}{out}").collect()
    assert sorted(row.line for row in read) == sorted(EXPECTED)
    assert all(row.letter == row.line[0] for row in read)
