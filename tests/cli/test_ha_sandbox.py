"""The HA sandbox (``sandbox --ha``: two NameNodes of one name service): a ``webhdfs://`` job
writing while the active NameNode restarts is exactly-once, and the sandbox stays under
control after either NameNode restarts (each command answers within its bound, SIGTERM stops
it)."""

from __future__ import annotations

import posixpath
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from operators.fs import open_path
from operators.sandbox import Sandbox, SandboxError
from tests.cli.conftest import start_cli
from tests.cli.test_real_hdfs import CONFIG, ClusterPipeline, _finish, _run_until
from tests.conftest import CLUSTER_USER, cluster_settings, require_java_and_maven

pytestmark = pytest.mark.slow

PACE = (
    "import os, time\n"
    "PACE = float(os.environ.get('PACE', '0'))\n"
    "def shout(record):\n"
    "    if PACE:\n"
    "        time.sleep(PACE)\n"
    "    return record.upper()\n"
)


@pytest.fixture(scope="module")
def ha_sandbox(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Sandbox]:
    require_java_and_maven()
    sandbox = Sandbox.start(tmp_path_factory.mktemp("ha"), datanodes=1, ha=True, timeout=300)
    try:
        yield sandbox
    finally:
        sandbox.stop()


def test_a_webhdfs_job_across_a_namenode_restart_is_exactly_once(
    ha_sandbox: Sandbox, tmp_path: Path
) -> None:
    """Output and checkpoints through ``webhdfs://`` (both NameNodes' addresses); the active
    NameNode restarts mid-run. Its WebHDFS then redirects writes naming the name service, which
    the DataNodes must resolve: the run finishes by itself (exit 0), every record once."""
    uri = ha_sandbox.info.webhdfs
    fs, base = open_path(uri + "/tests", cluster_settings(uri, ha_sandbox))
    root = posixpath.join(base, f"ha-failover-{time.monotonic_ns()}")
    fs.mkdirs(posixpath.join(root, "landing"))
    (tmp_path / "pace.py").write_text(PACE)
    config = tmp_path / "pipeline.toml"
    config.write_text(
        CONFIG.format(
            uri=uri, user=CLUSTER_USER, conf_dir="", root=root, period="100ms", per_file=40
        )
    )
    pipe = ClusterPipeline(fs, root, config)
    for _ in range(4):
        pipe.add_file(50)
    running = start_cli("run", str(config), "--available-now", "--no-progress", PACE="0.003")
    try:
        _run_until(running, pipe, 40)
        ha_sandbox.command("restart-namenode 0")
        _, err = running.communicate(timeout=300)
        assert running.returncode == 0, err[-3000:]
    finally:
        if running.poll() is None:
            running.kill()
            running.wait()
    pipe.add_file(30)  # written after the restart, through the restarted NameNode's redirect
    _finish(pipe, config)


def test_after_the_standby_restarts_sigterm_still_stops_the_sandbox(ha_sandbox: Sandbox) -> None:
    """Restarting the standby NameNode leaves the active one active (never two), the cluster
    still takes writes, and SIGTERM stops the sandbox by itself (no SIGKILL needed)."""
    ha_sandbox.command("restart-namenode 1")
    uri = ha_sandbox.info.webhdfs
    fs, base = open_path(uri + "/tests", cluster_settings(uri, ha_sandbox))
    path = posixpath.join(base, f"after-standby-{time.monotonic_ns()}.txt")
    writer = fs.create(path)
    writer.write(b"still writable\n")
    writer.close()
    assert fs.read(path) == b"still writable\n"
    ha_sandbox.stop()  # SIGTERM, then SIGKILL only if it is still running 60 s later
    assert ha_sandbox.process.returncode == 0


def test_a_command_that_outlasts_its_bound_is_answered_with_an_error(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    """A command still running after the sandbox's command timeout is answered with an error
    naming it; later commands are refused as busy until it ends, then served; SIGTERM stops
    the sandbox."""
    require_java_and_maven()
    base = tmp_path_factory.mktemp("bounded")
    with Sandbox.start(base, datanodes=1, command_timeout=1.0, timeout=300) as sandbox:
        with pytest.raises(SandboxError, match="did not finish within"):
            sandbox.command("restart-namenode 0")
        for _ in range(600):  # the restart goes on in the background; "busy" until it ends
            try:
                answer = sandbox.command("status")
                break
            except SandboxError as exc:
                assert "busy:" in str(exc) or "did not finish" in str(exc), exc
                time.sleep(0.5)
        else:
            raise AssertionError("the restart never ended")
        assert answer["datanodes"] == 1
        sandbox.stop()
        assert sandbox.process.returncode == 0
