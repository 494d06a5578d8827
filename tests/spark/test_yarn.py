"""On YARN (``yarn_sandbox``: Hadoop's MiniYARNCluster beside the sandbox's HDFS, 2 NodeManagers):
the sandbox's ResourceManager, and ``hdfs-region run --engine spark`` with ``master = "yarn"``,
landing, output and checkpoints on the sandbox's hdfs://.
"""

from __future__ import annotations

import os
import posixpath
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from operators.faults import FAULT_ENV
from operators.fs import open_path
from operators.sandbox import Sandbox
from region.fs import FileSystem
from tests.conftest import CLUSTER_USER, cluster_settings
from tests.spark.test_cluster import land, orphans, published


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
            )
        )
        self.files: dict[str, list[str]] = {}

    def land(self, count: int, lines: int = 40) -> None:
        for i in range(len(self.files), len(self.files) + count):
            name = f"f{i:02d}.txt"
            self.files[name] = [f"file {i} line {j}" for j in range(lines)]
            land(self.fs, posixpath.join(self.root, "landing"), name, self.files[name])

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
        out = posixpath.join(self.root, "out")
        expected = [line.upper() for lines in self.files.values() for line in lines]
        got = published(self.fs, out)
        assert sorted(got) == sorted(expected)
        assert len(got) == len(set(got)) == len(expected)
        assert orphans(self.fs, out) == []


@pytest.mark.spark
@pytest.mark.slow
def test_run_on_yarn_in_client_mode_publishes_every_record_once(on_yarn: YarnRun) -> None:
    """``hdfs-region run`` with ``master = "yarn"``: the executors are YARN containers that
    import the project from the packed environment (no PYTHONPATH reaches them), landing,
    output and checkpoints on hdfs://."""
    on_yarn.land(3)
    run = subprocess.run(
        on_yarn.command("--available-now"),
        env=on_yarn.env(),
        cwd=on_yarn.work,
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    on_yarn.check_exactly_once()
