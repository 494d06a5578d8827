"""On YARN (``yarn_sandbox``: Hadoop's MiniYARNCluster beside the sandbox's HDFS, 2 NodeManagers):
the sandbox's ResourceManager, and ``hdfs-region run --engine spark`` with ``master = "yarn"``,
landing, output and checkpoints on the sandbox's hdfs://.
"""

from __future__ import annotations

import contextlib
import os
import posixpath
import re
import signal
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from operators.app.config import PipelineConfig
from operators.app.spark_plan import plan_spark
from operators.common.faults import FAULT_DIR_ENV, FAULT_ENV
from operators.fs import open_path
from operators.sandbox import Sandbox
from region.errors import ConfigError
from region.fs import FileSystem
from tests.conftest import CLUSTER_USER, SPARK_TEST_JVM, cluster_settings
from tests.spark.drivers import (
    GATED_TRANSFORM,
    assert_published_once,
    driver,
    held_tasks,
    kill_after_wal_while_landing,
    land,
    start_driver,
    wait_until,
)


def _yarn_site(sandbox: Sandbox) -> dict[str, str]:
    root = ET.parse(Path(sandbox.info.conf_dir) / "yarn-site.xml").getroot()
    return {p.findtext("name", ""): p.findtext("value", "") for p in root.iter("property")}


def _active_nodes(sandbox: Sandbox) -> int:
    return int(sandbox.command("status")["nodemanagers_running"])


def test_the_sandbox_runs_yarn_whose_nodemanagers_stop_and_start(yarn_sandbox: Sandbox) -> None:
    """The ready line names the ResourceManager, conf_dir's yarn-site.xml points clients at it,
    and a NodeManager stopped leaves the cluster until started again."""
    info = yarn_sandbox.info
    assert info.yarn is not None and info.nodemanagers == 2
    assert _yarn_site(yarn_sandbox)["yarn.resourcemanager.address"] == info.yarn
    assert _active_nodes(yarn_sandbox) == 2
    yarn_sandbox.command("stop-nodemanager 1")
    try:
        assert _active_nodes(yarn_sandbox) == 1
    finally:
        yarn_sandbox.command("start-nodemanager 1")
    assert _active_nodes(yarn_sandbox) == 2
    with pytest.raises(Exception, match="nodemanager 1 is not stopped"):
        yarn_sandbox.command("start-nodemanager 1")


# -- hdfs-region run on YARN -----------------------------------------------------------------


@pytest.fixture
def on_yarn(yarn_sandbox: Sandbox, tmp_path: Path) -> YarnRun:
    uri = yarn_sandbox.info.hdfs
    fs, base = open_path(uri + "/yarn", cluster_settings(uri, yarn_sandbox))
    root = posixpath.join(base, f"run-{time.monotonic_ns()}")
    fs.mkdirs(root)
    return YarnRun(yarn_sandbox, fs, root, tmp_path)


YARN_CONFIG = """\
engine = "spark"
[filesystem]
uri = "{hdfs}"
user = "{user}"
config_dir = "{conf_dir}"
timeout = "20s"
[region]
checkpoint_dir = "{root}/ck"
[scan]
directory = "{root}/landing"
[transform]
function = "yarn_transform:upper"
[sink]
file = "{root}/out/part-%FILENUM.txt"
tuples_per_file = 25
[spark]
master = "yarn"
deploy_mode = "client"
max_files_per_trigger = 1
[spark.conf]
"spark.yarn.jars" = "local:{jars}/*"
"spark.executor.instances" = "2"
"spark.executor.cores" = "1"
"spark.executor.memory" = "512m"
"spark.yarn.am.memory" = "384m"
"spark.executor.extraJavaOptions" = "{jvm}"
"spark.yarn.am.extraJavaOptions" = "{jvm}"
"spark.yarn.submit.waitAppCompletion" = "true"
"spark.submit.pyFiles" = "{transform}"
"""


class YarnRun:
    """A pipeline of ``hdfs-region run`` on the sandbox's YARN, under ``root`` on its HDFS."""

    def __init__(self, sandbox: Sandbox, fs: FileSystem, root: str, work: Path) -> None:
        import pyspark

        self.sandbox, self.fs, self.root, self.work = sandbox, fs, root, work
        transform = work / "yarn_transform.py"
        transform.write_text("def upper(value):\n    return value.upper()\n")
        self.config = work / "pipeline.toml"
        self.config.write_text(
            YARN_CONFIG.format(
                hdfs=sandbox.info.hdfs,
                user=CLUSTER_USER,
                conf_dir=sandbox.info.conf_dir,
                root=root,
                jars=Path(pyspark.__file__).parent / "jars",
                transform=transform,
                jvm=SPARK_TEST_JVM,
            )
        )
        self.files: dict[str, list[str]] = {}

    def land(self, count: int, lines: int = 40) -> None:
        for name in self.more_files(count, lines):
            land(self.fs, posixpath.join(self.root, "landing"), name, self.files[name])

    def more_files(self, count: int, lines: int = 40) -> list[str]:
        """Names (and lines, in ``files``) of ``count`` more files, not landed yet."""
        names = []
        for i in range(len(self.files), len(self.files) + count):
            name = f"f{i:02d}.txt"
            self.files[name] = [f"file {i} line {j}" for j in range(lines)]
            names.append(name)
        return names

    def command(self, *extra: str) -> list[str]:
        return [
            sys.executable,
            "-m",
            "operators.app",
            "run",
            str(self.config),
            "--no-progress",
            *extra,
        ]

    def run_available_now(
        self, env: dict[str, str] | None = None
    ) -> subprocess.CompletedProcess[str]:
        """The command with ``--available-now``, run to its end (the driver's environment by
        default)."""
        return subprocess.run(
            self.command("--available-now"),
            env=self.env() if env is None else env,
            cwd=self.work,
            capture_output=True,
            text=True,
            timeout=900,
            check=False,
        )

    def env(self, **extra: str) -> dict[str, str]:
        """The driver's: no PYTHONPATH (YARN's client would pass it on to the containers,
        which must import the project from the packed environment)."""
        env = {
            k: v
            for k, v in os.environ.items()
            if k not in (FAULT_ENV, "PYSPARK_PYTHON", "PYTHONPATH", "PYSPARK_ARCHIVES_PATH")
        }
        env.update(
            HADOOP_CONF_DIR=self.sandbox.info.conf_dir,
            HADOOP_USER_NAME=CLUSTER_USER,
            SPARK_LOCAL_IP="127.0.0.1",
        )
        env.update(extra)
        return env

    def check_exactly_once(self) -> None:
        assert_published_once(self.fs, posixpath.join(self.root, "out"), self.files)

    def gated(self) -> Path:
        """The transform made to hold the first batch's task (:data:`GATED_TRANSFORM`); its gate."""
        gate = self.work / "gate"
        gate.mkdir()
        (self.work / "yarn_transform.py").write_text(GATED_TRANSFORM.format(gate=str(gate)))
        return gate


def _executor_of(worker: int) -> tuple[str, int]:
    """``(YARN container id, executor JVM pid)`` of the Python worker ``worker``: its container
    id from its environment, the JVM among its ancestors whose command line names it."""
    environ = Path(f"/proc/{worker}/environ").read_bytes().split(b"\0")
    container = next(v for k, _, v in (e.partition(b"=") for e in environ) if k == b"CONTAINER_ID")
    pid = worker
    while pid > 1:
        pid = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        if b"CoarseGrainedExecutorBackend" in cmdline and container in cmdline:
            return container.decode(), pid
    raise AssertionError(f"no executor JVM of container {container!r} above {worker}")


def _descends_from(pid: int, ancestor: int) -> bool:
    while pid > 1:
        if pid == ancestor:
            return True
        pid = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    return False


@pytest.mark.spark
@pytest.mark.slow
def test_run_on_yarn_survives_kill_9_of_the_driver_then_a_nodemanager_stopped_mid_batch(
    on_yarn: YarnRun,
) -> None:
    """``hdfs-region run`` with ``master = "yarn"`` in client mode: the executors are YARN
    containers that import the project from the packed environment (no PYTHONPATH reaches
    them), landing, output and checkpoints on hdfs://.

    1. The driver (the ``hdfs-region run`` process and its JVM) is SIGKILLed after a batch's
       write-ahead entry, before its renames, while files keep landing.
    2. The same command started again with ``--available-now`` has the NodeManager whose
       container runs its first batch's task stopped while the task holds: the executor's
       container dies with it. The task runs again on the other NodeManager, and the driver's
       commit publishes the batch once and removes the dead attempt's in-progress file; when
       the application master was on the stopped NodeManager too, the run ends with an error
       and the same command run again finishes the job.

    Either way every record is published once."""
    gate = on_yarn.gated()
    (gate / "go").touch()  # 1 holds no task
    on_yarn.land(2)
    more = on_yarn.more_files(3)
    faults = on_yarn.work / "faults"
    faults.mkdir()
    env = on_yarn.env(**{FAULT_ENV: "after_wal:1", FAULT_DIR_ENV: str(faults)})
    log = on_yarn.work / "driver.log"
    process = start_driver(on_yarn.command(), env, on_yarn.work, log)
    landing = posixpath.join(on_yarn.root, "landing")
    kill_after_wal_while_landing(
        process, log, faults, on_yarn.fs, landing, on_yarn.files, iter(more), every=3.0
    )
    # 2: the gate closed again; the markers of 1's tasks went with their containers.
    for marker in gate.iterdir():
        marker.unlink()
    log = on_yarn.work / "rerun.log"
    stopped = None
    try:
        with driver(on_yarn.command("--available-now"), on_yarn.env(), on_yarn.work, log) as run:
            worker = min(wait_until(lambda: held_tasks(gate), run, log))
            # The container's working directory is under its NodeManager's local directory.
            found = re.search(r"localDir-nm-(\d+)_", os.readlink(f"/proc/{worker}/cwd"))
            assert found is not None
            stopped = int(found.group(1))
            on_yarn.sandbox.command(f"stop-nodemanager {stopped}")
            (gate / "go").touch()
            code = run.wait(timeout=900)
    finally:
        if stopped is not None:
            on_yarn.sandbox.command(f"start-nodemanager {stopped}")
    if code != 0:
        rerun = on_yarn.run_available_now()
        assert rerun.returncode == 0, rerun.stderr[-3000:]
    on_yarn.check_exactly_once()


def _processes_below(ancestor: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError, ValueError):
                if _descends_from(int(entry.name), ancestor):
                    found.append(int(entry.name))
    return found


@pytest.mark.spark
@pytest.mark.slow
def test_cluster_mode_survives_the_application_master_killed_and_hands_back_errors(
    on_yarn: YarnRun,
) -> None:
    """``deploy_mode = "cluster"``: the command submits itself, the settings file travels with
    the application and the pipeline runs in the application master. With
    ``spark.yarn.maxAppAttempts = 2``, the master's container (its JVM and the driver in it) is
    SIGKILLed while the first batch's task holds; YARN starts attempt 2, which resumes from the
    checkpoint: every record once, and the submitting command ends with exit code 0. A run
    refused there afterwards (its checkpoints belong to another pipeline) ends the submitting
    command with the same exit code and one-line error as a run in place."""
    gate = on_yarn.gated()
    text = on_yarn.config.read_text().replace('deploy_mode = "client"', 'deploy_mode = "cluster"')
    on_yarn.config.write_text(text + '"spark.yarn.maxAppAttempts" = "2"\n')
    on_yarn.land(3)
    log = on_yarn.work / "submit.log"
    with driver(on_yarn.command("--available-now"), on_yarn.env(), on_yarn.work, log) as run:
        worker = min(wait_until(lambda: held_tasks(gate), run, log))
        executor_container, _ = _executor_of(worker)
        # container_<cluster>_<app>_<attempt>_<n>: the first attempt's master is container 1.
        master_container = executor_container.rsplit("_", 1)[0] + "_000001"
        # The container's launch script and JVM (the driver's Python below it): one group.
        (group,) = {
            os.getpgid(pid)
            for pid in _processes_below(on_yarn.sandbox.process.pid)
            if b"ApplicationMaster" in Path(f"/proc/{pid}/cmdline").read_bytes()
            and master_container.encode() in Path(f"/proc/{pid}/cmdline").read_bytes()
        }
        os.killpg(group, signal.SIGKILL)
        (gate / "go").touch()
        assert run.wait(timeout=900) == 0, log.read_text()[-3000:]
    # Attempt 2's master ran (its container's log directory, kept by the NodeManager).
    _, stamp, app, _, _ = master_container.split("_")
    second = f"application_{stamp}_{app}/container_{stamp}_{app}_02_000001"
    assert list(Path(on_yarn.sandbox.info.base_dir, "yarn").glob(f"*/*/*logDir*/{second}"))
    on_yarn.check_exactly_once()

    on_yarn.config.write_text('name = "another"\n' + text)
    refused = on_yarn.run_available_now()
    assert refused.returncode == 1, refused.stderr[-3000:]
    errors = [line for line in refused.stderr.splitlines() if line.startswith("hdfs-region: ")]
    assert len(errors) == 1, refused.stderr[-3000:]
    assert "belongs to pipeline" in errors[0] and "another" in errors[0]


def test_a_streaming_query_on_yarn_is_refused_at_start() -> None:
    """Spark would plan the Python source beside the driver with the containers' Python."""
    config = PipelineConfig.model_validate(
        {
            "region": {"checkpoint_dir": "hdfs://127.0.0.1:8020/ck"},
            "scan": {"directory": "hdfs://127.0.0.1:8020/landing"},
            "sink": {"file": "hdfs://127.0.0.1:8020/out/part-%FILENUM.txt"},
            "spark": {"master": "yarn", "execution": "streaming"},
        }
    )
    with pytest.raises(ConfigError, match=r"execution = 'streaming' on YARN.*environment/bin"):
        plan_spark(config)


def test_packing_refuses_installed_metadata_older_than_the_source_tree(tmp_path: Path) -> None:
    """An editable install keeps the requirements of the day it was made: a requirement added
    to pyproject.toml since would be missing from the containers (they fail to import it in
    the first batch). Packing names it and how to refresh the install instead."""
    from importlib.metadata import distribution

    from operators.spark.yarn import _check_installed_metadata

    own = distribution("hdfs-region")
    source = Path(__file__).resolve().parents[2]
    _check_installed_metadata(own, source)  # this checkout's install is current
    newer = (
        (source / "pyproject.toml")
        .read_text()
        .replace("dependencies = [\n", 'dependencies = [\n    "left-pad>=1",\n', 1)
    )
    (tmp_path / "pyproject.toml").write_text(newer)
    with pytest.raises(RuntimeError, match=r"requires left-pad, which the installed metadata"):
        _check_installed_metadata(own, tmp_path)
    (tmp_path / "pyproject.toml").write_text(newer.replace('name = "hdfs-region"', 'name = "x"'))
    _check_installed_metadata(own, tmp_path)  # another project's tree: not ours to compare
