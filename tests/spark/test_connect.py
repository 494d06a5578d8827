"""The formats through Spark Connect: a server started with pyspark's shipped script (the
session's ``connect_server``), clients over ``sc://``, landing, output and checkpoints on the
session's real HDFS.

Over Connect the query runs in the server (its driver); the client only sends the plan. So a
client killed with SIGKILL leaves its query running in the server until a new client starts
the same query (same checkpoint): Spark then stops the old run
(``spark.sql.streaming.stopActiveRunOnRestart``). The driver crash is a SIGKILL of the server.
"""

from __future__ import annotations

import json
import os
import posixpath
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from operators.app.cli import main
from operators.app.config import load_pipeline
from operators.app.engine_spark import run_spark
from operators.app.spark_plan import SECRET_ENV
from operators.spark.commit import IN_PROGRESS_PREFIX
from operators.spark.connect import ConnectServer, connect_session
from region.errors import ConfigError
from region.fs import FileSystem
from tests.conftest import CLUSTER_USER, real_fs
from tests.spark import test_spark_real_hdfs as real_hdfs
from tests.spark.helpers import lines_of
from tests.spark.test_spark_real_hdfs import restored_process  # noqa: F401  (a fixture)

pytestmark = [pytest.mark.spark, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def classic_afterwards() -> Iterator[None]:
    """pyspark marks a process that opened a Spark Connect session
    (``SPARK_CONNECT_MODE_ENABLED``): from then on its DataFrame functions build Connect
    objects, which the classic session of the other Spark tests refuses. Undo that."""
    yield
    from pyspark.sql.connect.session import SparkSession as ConnectSession

    session = ConnectSession.getActiveSession()
    if session is not None:
        session.stop()
    os.environ.pop("SPARK_CONNECT_MODE_ENABLED", None)


def land(fs: FileSystem, landing: str, name: str, data: bytes) -> None:
    """One file, written under a hidden name and renamed (as uploads do)."""
    fs.mkdirs(landing)
    tmp = posixpath.join(landing, f".{name}.tmp")
    writer = fs.create(tmp)
    writer.write(data)
    writer.close()
    fs.rename(tmp, posixpath.join(landing, name))
    time.sleep(0.005)  # HDFS keeps milliseconds: distinct mtimes


def published(fs: FileSystem, out: str) -> list[str]:
    """What a plain directory reader sees, files in %FILENUM order (``_`` names skipped)."""
    names = [s.name for s in fs.list_dir(out) if not s.name.startswith("_")]
    assert not [n for n in names if n.startswith(IN_PROGRESS_PREFIX)], names
    names.sort(key=lambda n: int(n[len("part-") :].split(".")[0]))
    return [line for n in names for line in lines_of(fs.read(posixpath.join(out, n)))]


def wait_for(
    condition: Callable[[], bool],
    what: str,
    proc: Any = None,
    log: Path | None = None,
    timeout: float = 300.0,
) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if proc is not None and proc.poll() is not None:
            text = log.read_text()[-3000:] if log is not None else ""
            pytest.fail(f"client ended (rc={proc.returncode}) before {what}:\n{text}")
        if time.monotonic() > deadline:
            pytest.fail(f"no {what} within {timeout:.0f} s")
        time.sleep(0.2)


def start_client(
    url: str, options: dict[str, Any], mode: str, log: Path
) -> subprocess.Popen[bytes]:
    with log.open("ab") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "tests.spark.connect_worker", url, json.dumps(options), mode],
            cwd=ROOT,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )


def kill(proc: subprocess.Popen[bytes]) -> None:
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()


def test_formats_through_connect_exactly_once_across_kill_9_of_client_and_server(
    connect_server: ConnectServer, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    fs, base, sandbox = real_fs(request, "hdfs")
    assert sandbox is not None
    root = posixpath.join(base, f"connect-{time.monotonic_ns()}")
    landing, out, ck = (posixpath.join(root, d) for d in ("landing", "out", "ck"))
    uri = sandbox.info.hdfs
    common = {"uri": uri, "user": CLUSTER_USER, "config_dir": sandbox.info.conf_dir}
    options = {
        "source": {
            **common,
            "directory": landing,
            "plan_dir": uri + ck + "/plans",
            "max_files_per_trigger": "1",
        },
        "sink": {
            **common,
            "file": out + "/part-%FILENUM.txt",
            "checkpointLocation": uri + ck + "/spark",
        },
    }
    inputs = {
        f"f{i}.txt": "".join(f"file {i} line {j}\n" for j in range(200)).encode() for i in range(6)
    }
    names = list(inputs)
    for name in names[:2]:
        land(fs, landing, name, inputs[name])
    commits = posixpath.join(ck, "spark", "commits")

    def committed(batch: int) -> Callable[[], bool]:
        return lambda: fs.exists(posixpath.join(commits, str(batch)))

    def client(number: int, mode: str) -> tuple[subprocess.Popen[bytes], Path]:
        log = tmp_path / f"client{number}.log"
        return start_client(connect_server.url, options, mode, log), log

    def started(log: Path) -> Callable[[], bool]:
        return lambda: log.exists() and "started" in log.read_text()

    # 1. A client runs the query until its first batch is committed; files keep arriving;
    #    SIGKILL of the client (its query runs on in the server).
    proc, log = client(1, "continuous")
    try:
        wait_for(committed(0), "commit of batch 0", proc, log)
        land(fs, landing, names[2], inputs[names[2]])
    finally:
        kill(proc)
    # 2. A new client starts the same query (the server stops the orphaned run); SIGKILL of
    #    the server (the driver) once the new run committed a batch, while files arrive.
    proc, log = client(2, "continuous")
    try:
        wait_for(started(log), "query start", proc, log)
        batch = 1 + max(int(s.name) for s in fs.list_dir(commits) if s.name.isdigit())
        land(fs, landing, names[3], inputs[names[3]])
        wait_for(committed(batch), f"commit of batch {batch}", proc, log)
        land(fs, landing, names[4], inputs[names[4]])
        os.killpg(connect_server.process.pid, signal.SIGKILL)
        connect_server.process.wait()
    finally:
        kill(proc)
    land(fs, landing, names[5], inputs[names[5]])
    # 3. The server restarts; a client runs what is there to the end.
    connect_server.restart()
    proc, log = client(3, "available-now")
    code = proc.wait(timeout=600)
    assert code == 0, log.read_text()[-3000:]

    expected = [line.upper() for name in names for line in lines_of(inputs[name])]
    assert published(fs, out) == expected
    numbers = sorted(int(s.name[5:-4]) for s in fs.list_dir(out) if s.name.startswith("part-"))
    assert numbers == list(range(len(numbers)))  # %FILENUM: no gap, no reuse


def test_a_password_reaches_the_servers_tasks_by_reference_only(
    connect_server: ConnectServer, request: pytest.FixtureRequest
) -> None:
    """On webhdfs:// the sources authenticate with the password the server holds in
    ``HDFS_REGION_SECRET_PASSWORD``; the options name the variable; nothing logs the value.
    A variable the server lacks fails the query with an error naming it."""
    fs, base, sandbox = real_fs(request, "webhdfs-cluster")
    assert sandbox is not None
    secret = connect_server.environment[SECRET_ENV["password"]]
    root = posixpath.join(base, f"connect-secret-{time.monotonic_ns()}")
    landing, out, ck = (posixpath.join(root, d) for d in ("landing", "out", "ck"))
    data = "".join(f"secret test {i}\n" for i in range(50)).encode()
    land(fs, landing, "a.txt", data)
    common = {"uri": sandbox.info.webhdfs, "user": CLUSTER_USER}
    spark = connect_session(connect_server.url)

    def run(reference: str, ck: str) -> None:
        query = (
            spark.readStream.format("hdfs_scan")
            .options(**common, password_env=reference)
            .option("directory", landing)
            .option("plan_dir", sandbox.info.webhdfs + ck + "/plans")
            .load()
            .writeStream.format("hdfs_sink")
            .options(**common, password_env=reference)
            .option("file", out + "/part-%FILENUM.txt")
            # Spark's own client cannot use webhdfs:// (spark_plan._spark_checkpoint).
            .option("checkpointLocation", sandbox.info.hdfs + ck + "/spark")
            .trigger(availableNow=True)
            .start()
        )
        query.awaitTermination()

    with pytest.raises(Exception, match="HDFS_REGION_SECRET_ABSENT' is not set"):
        run("HDFS_REGION_SECRET_ABSENT", ck + "-refused")
    run(SECRET_ENV["password"], ck)

    assert published(fs, out) == lines_of(data)
    logs = connect_server.logs()
    assert secret not in logs


@pytest.mark.usefixtures("restored_process")
@pytest.mark.parametrize("transform", ["none", "sql"])
def test_hdfs_region_run_through_connect_fused_on_the_cluster(
    transform: str,
    connect_server: ConnectServer,
    request: pytest.FixtureRequest,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """``hdfs-region run`` with ``[spark] remote``: fused execution (each batch one job of the
    server, the commit from this client) with checkpoints and output on the cluster; a SQL
    transform runs as a streaming query there (the server would not report a fused batch's
    input count), with the same output."""
    fs, base, sandbox = real_fs(request, "hdfs")
    assert sandbox is not None
    uri = sandbox.info.hdfs
    root = posixpath.join(base, f"connect-run-{transform}-{time.monotonic_ns()}")
    real_hdfs.land(fs, posixpath.join(root, "landing"))
    text = real_hdfs.CONFIG.format(
        uri=uri, user=CLUSTER_USER, conf_dir=sandbox.info.conf_dir, root=root
    )
    text += f'remote = "{connect_server.url}"\n'
    if transform == "sql":
        text += '[transform]\nsql = "SELECT upper(value) AS value FROM input"\n'
    config = tmp_path / "pipeline.toml"
    config.write_text(text)

    code = main(["run", str(config), "--available-now", "--no-progress"])

    captured = capsys.readouterr()
    assert code == 0, captured.err[-3000:]
    streaming = "over Spark Connect the input count of a fused batch is not observable"
    assert (streaming in captured.err) == (transform == "sql")
    expected = real_hdfs.EXPECTED
    assert f"stopped: {len(expected)} records in" in captured.out
    assert fs.exists(posixpath.join(root, "checkpoints", "spark", "commits", "0"))
    got = published(fs, posixpath.join(root, "out"))
    want = [line.upper() for line in expected] if transform == "sql" else expected
    # Each line once, each file's lines in its order. c.txt ends without a newline: its last
    # line is held for it (hold_partial_line: on HDFS every such line waits once) and comes
    # after the files read meanwhile.
    assert sorted(got) == sorted(want)
    for tag in ("a ", "b ", "c ", "d "):
        mine = [line for line in got if line.lower().startswith(tag)]
        assert mine == [line for line in want if line.lower().startswith(tag)]


def test_a_secret_given_inline_is_refused_with_remote(tmp_path: Path) -> None:
    """A password written in the settings would reach the server only as an option value
    (sent in the plan): refused before anything starts, naming the way forward."""
    config = tmp_path / "pipeline.toml"
    config.write_text(
        'engine = "spark"\n[filesystem]\nuri = "webhdfs://127.0.0.1:9"\nuser = "u"\n'
        'password = "s3cret-value"\n[scan]\ndirectory = "/in"\n[sink]\nfile = "/out/p-%FILENUM"\n'
        f'[region]\ncheckpoint_dir = "file://{tmp_path}/ck"\n[spark]\nremote = "sc://127.0.0.1:9"\n'
    )
    with pytest.raises(ConfigError) as caught:
        run_spark(load_pipeline(config))
    message = str(caught.value)
    assert "[filesystem] password: with [spark] remote" in message
    assert "HDFS_REGION_SECRET_PASSWORD in its environment" in message
    assert "password_env" in message
    assert "s3cret-value" not in message
    assert not (tmp_path / "ck").exists()


@pytest.mark.usefixtures("restored_process")
def test_a_static_spark_conf_key_is_refused_over_connect_naming_it(
    connect_server: ConnectServer,
    request: pytest.FixtureRequest,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The server's own settings (memory, master...) are fixed when it starts: a client cannot
    set them, and says which key."""
    fs, base, sandbox = real_fs(request, "hdfs")
    assert sandbox is not None
    root = posixpath.join(base, f"connect-conf-{time.monotonic_ns()}")
    fs.mkdirs(posixpath.join(root, "landing"))
    text = real_hdfs.CONFIG.format(
        uri=sandbox.info.hdfs, user=CLUSTER_USER, conf_dir=sandbox.info.conf_dir, root=root
    )
    text += f'remote = "{connect_server.url}"\nconf = {{"spark.driver.memory" = "2g"}}\n'
    config = tmp_path / "pipeline.toml"
    config.write_text(text)

    code = main(["run", str(config), "--available-now", "--no-progress"])

    err = capsys.readouterr().err
    assert code == 2, err[-3000:]
    assert "[spark] conf: spark.driver.memory = '2g' cannot be set over Spark Connect" in err
