"""The command on a real HDFS (the session's MiniDFSCluster), for hdfs:// and webhdfs://:
SIGKILL mid-run then the same command again, a DataNode stopped mid-write, the NameNode
restarted mid-run. Each ends with every record published exactly once, in scan order."""

from __future__ import annotations

import posixpath
import signal
import time
from collections.abc import Callable
from pathlib import Path
from subprocess import Popen

import pytest

from operators.sandbox import Sandbox
from region.fs import FileSystem
from tests.cli.conftest import cli, start_cli, wait_for
from tests.conftest import CLUSTER_USER, real_fs

pytestmark = pytest.mark.slow

CONFIG = """\
engine = "local"
[filesystem]
uri = "{uri}"
user = "{user}"
{conf_dir}
timeout = "20s"
retries = 4
retry_backoff = "500ms"
lease_recovery_timeout = "60s"
[region]
trigger = "periodic"
period = "{period}"
checkpoint_dir = "{root}/checkpoints"
max_consecutive_reset_attempts = 20
[scan]
directory = "{root}/landing"
[transform]
function = "pace:shout"
[sink]
file = "{root}/out/part-%FILENUM.txt"
tuples_per_file = {per_file}
"""


class ClusterPipeline:
    """A pipeline whose landing, output and checkpoints all live on the real cluster."""

    def __init__(self, fs: FileSystem, root: str, config: Path) -> None:
        self.fs = fs
        self.root = root
        self.config = config
        self._n = 0

    def add_file(self, lines: int) -> None:
        name = f"f{self._n:03d}.txt"
        self._n += 1
        data = "".join(f"{name}-{i}\n" for i in range(lines)).encode()
        tmp = posixpath.join(self.root, "landing", f".{name}.tmp")
        w = self.fs.create(tmp)
        w.write(data)
        w.close()
        self.fs.rename(tmp, posixpath.join(self.root, "landing", name))
        time.sleep(0.005)  # HDFS keeps milliseconds: distinct mtimes keep the order obvious

    def expected(self) -> list[str]:
        entries = [
            s for s in self.fs.list_dir(posixpath.join(self.root, "landing")) if not s.is_dir
        ]
        entries = [s for s in entries if not s.name.startswith((".", "_"))]
        entries.sort(key=lambda s: (s.mtime_ns, s.name))
        return [
            line.upper() for s in entries for line in self.fs.read(s.path).decode().splitlines()
        ]

    def published(self) -> list[str]:
        out = posixpath.join(self.root, "out")
        if not self.fs.exists(out):
            return []
        files = [s for s in self.fs.list_dir(out) if not s.name.startswith((".", "_"))]
        files.sort(key=lambda s: int("".join(c for c in s.name if c.isdigit()) or -1))
        return [line for s in files for line in self.fs.read(s.path).decode().splitlines()]

    def hidden_outputs(self) -> list[str]:
        out = posixpath.join(self.root, "out")
        return [s.name for s in self.fs.list_dir(out) if s.name.startswith(".")]


@pytest.fixture(params=["hdfs", "webhdfs-cluster"])
def pipeline(
    request: pytest.FixtureRequest, tmp_path: Path
) -> tuple[ClusterPipeline, Sandbox, Callable[..., Path]]:
    fs, base, sandbox = real_fs(request, request.param)
    if sandbox is None:
        pytest.skip("fault tests need the sandbox (HDFS_URI / WEBHDFS_URL name another cluster)")
    name = request.node.name.replace("[", "-").replace("]", "")
    root = posixpath.join(base, f"cli-{name}-{time.monotonic_ns()}")
    fs.mkdirs(posixpath.join(root, "landing"))
    uri = sandbox.info.hdfs if request.param == "hdfs" else sandbox.info.webhdfs
    conf_dir = f'config_dir = "{sandbox.info.conf_dir}"' if request.param == "hdfs" else ""

    def write_config(period: str = "100ms", per_file: int = 40) -> Path:
        body = CONFIG.format(
            uri=uri,
            user=CLUSTER_USER,
            conf_dir=conf_dir,
            root=root,
            period=period,
            per_file=per_file,
        )
        (tmp_path / "pace.py").write_text(
            "import os, time\n"
            "PACE = float(os.environ.get('PACE', '0'))\n"
            "def shout(record):\n"
            "    if PACE:\n"
            "        time.sleep(PACE)\n"
            "    return record.upper()\n"
        )
        path = tmp_path / "pipeline.toml"
        path.write_text(body)
        return path

    pipe = ClusterPipeline(fs, root, tmp_path / "pipeline.toml")
    return pipe, sandbox, write_config


def _run_until(running: Popen[str], pipe: ClusterPipeline, records: int) -> None:
    wait_for(
        lambda: len(pipe.published()) >= records,
        timeout=120,
        what=f"{records} published records",
        alive=running,
    )


def _finish(pipe: ClusterPipeline, config: Path) -> str:
    """Run to the end; check the output; return the run's log."""
    done = cli("run", str(config), "--available-now", "--no-progress", timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    expected = pipe.expected()
    assert pipe.published() == expected  # every record once, in the scan's order
    assert pipe.hidden_outputs() == []
    return done.stderr


def test_sigkill_mid_file_then_the_same_command_resumes_exactly_once(
    pipeline: tuple[ClusterPipeline, Sandbox, Callable[..., Path]],
) -> None:
    """The writer dies holding its in-progress file open (an HDFS lease): the restart recovers
    the lease (hdfs://) or waits for it, cuts the file back to the checkpoint and goes on."""
    pipe, _, write_config = pipeline
    for _ in range(4):
        pipe.add_file(50)
    config = write_config()
    hdfs = pipe.fs.display("/").startswith("hdfs://")
    command = ("run", str(config), "--available-now", "--no-progress")
    running = start_cli(*command, PACE="0.004")
    try:
        _run_until(running, pipe, 40)
        time.sleep(0.15)  # in the middle of the next file
        running.send_signal(signal.SIGKILL)
        running.wait(timeout=30)
    finally:
        if running.poll() is None:
            running.kill()
            running.wait()
    assert pipe.published() == pipe.expected()[: len(pipe.published())]
    pipe.add_file(30)  # a file lands while the job is down
    log = _finish(pipe, config)
    if hdfs:
        # The killed writer's lease was ended at once, not after the 60 s soft limit.
        assert "lease recovered in" in log, log[-3000:]


@pytest.mark.parametrize(
    ("fault", "repair"),
    [("stop-datanode 1", "start-datanode 1"), ("restart-namenode", None)],
    ids=["datanode-stopped-mid-write", "namenode-restarted-mid-run"],
)
def test_a_cluster_fault_mid_run_loses_and_repeats_nothing(
    pipeline: tuple[ClusterPipeline, Sandbox, Callable[..., Path]],
    fault: str,
    repair: str | None,
) -> None:
    """The running command meets the fault and finishes by itself (exit 0); the output is
    every record once."""
    pipe, sandbox, write_config = pipeline
    for _ in range(4):
        pipe.add_file(50)
    config = write_config()
    running = start_cli("run", str(config), "--available-now", "--no-progress", PACE="0.003")
    faulted = False
    try:
        _run_until(running, pipe, 40)
        sandbox.command(fault)
        faulted = True
        _, err = running.communicate(timeout=300)
        assert running.returncode == 0, err[-3000:]
    finally:
        if running.poll() is None:
            running.kill()
            running.wait()
        if faulted and repair is not None:
            sandbox.command(repair)  # the session's cluster is shared: 2 DataNodes again
    _finish(pipe, config)
