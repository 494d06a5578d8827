"""Shared fixtures: filesystem backends (local and the WebHDFS stand-in).

``any_fs`` runs a test once per backend and gives an :class:`FsHandle`: ``.fs`` (a
``region.fs.FileSystem``), ``.root`` (a fresh empty directory on it), ``.path("a", "b")`` (a path
under the root) and ``.name``::

    def test_roundtrip(any_fs):
        w = any_fs.fs.create(any_fs.path("f"))
        w.write(b"x")
        w.close()
        assert any_fs.fs.read(any_fs.path("f")) == b"x"

Backends: ``local``; ``webhdfs`` (the real ``hdfs`` client against
operators/testing/webhdfs_server.py, kept for faults a real cluster cannot produce quickly);
``hdfs`` (hdfs-native) and ``webhdfs-cluster`` on a real HDFS: the session's sandbox (Hadoop's
MiniDFSCluster, started once per session, needs Java and Maven), or the clusters named by
``HDFS_URI`` (``hdfs://nn:8020/tmp/tests``) and ``WEBHDFS_URL`` (``webhdfs://nn:9870/tmp/tests``).
``webhdfs_server`` is the stand-in; ``hdfs_sandbox`` the real cluster; ``local_fs`` a
LocalFileSystem.
"""

from __future__ import annotations

import contextlib
import fcntl
import itertools
import json
import os
import posixpath
import re
import shutil
import signal
import socket
import struct
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, settings

from operators.fs import FileSystemSettings, LocalFileSystem, open_path
from operators.sandbox import Sandbox, missing_tools
from operators.spark.standalone import StandaloneCluster
from operators.testing.webhdfs_server import WebHdfsServer
from region.fs import FileSystem

# The operators' landing and sink fixtures, for every test folder (tests/landing.py).
from tests.landing import any_landing, clock, landing, sink_env, sink_local  # noqa: F401

settings.register_profile("dev", max_examples=50, deadline=None)
settings.register_profile(
    "ci", max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "dev"))

#: An external cluster replaces the sandbox for a real backend when its variable is set.
CLUSTER_VARIABLES = {"hdfs": "HDFS_URI", "webhdfs-cluster": "WEBHDFS_URL"}
REAL_BACKENDS = ["hdfs", "webhdfs-cluster"]
BACKENDS = ["local", "webhdfs", *REAL_BACKENDS]
#: The user the tests act as on a real cluster: not its superuser, so permissions apply.
CLUSTER_USER = "tester"
_counter = itertools.count()
ROOT = Path(__file__).resolve().parent.parent

#: Spark's driver JVMs in the tests (every session in local mode, the drivers of `hdfs-region
#: run`, which inherit it) compile with C1 only and collect with the serial collector: the same
#: code runs, at half the CPU of a JVM's start on these 2 cores (a session, a first job and a
#: 200,000-line write: 33-35 s of JVM CPU, 17-18 s with these). Users and benchmarks run
#: outside the tests and keep Spark's defaults.
SPARK_TEST_JVM = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"
os.environ.setdefault("SPARK_SUBMIT_OPTS", SPARK_TEST_JVM)

_FS_IOC_GETFLAGS = 0x80086601
_FS_IOC_SETFLAGS = 0x40086602
_FS_IMMUTABLE_FL = 0x10


@dataclass
class FsHandle:
    """One backend for a test: a filesystem and a fresh empty directory on it."""

    name: str
    fs: FileSystem
    root: str
    server: WebHdfsServer | None = None

    def path(self, *parts: str) -> str:
        return posixpath.join(self.root, *parts)

    def set_mtime(self, path: str, mtime_ns: int) -> None:
        """Give ``path`` this mtime: ``os.utime`` on local disk (the stand-in's backing file),
        SETTIMES on a real cluster (which keeps milliseconds)."""
        ms = mtime_ns // 1_000_000
        client = getattr(self.fs, "client", None)
        if self.name == "hdfs":
            client.set_times(path, ms, ms)  # type: ignore[union-attr]
        elif self.name == "webhdfs-cluster":
            client.set_times(path, access_time=ms, modification_time=ms)  # type: ignore[union-attr]
        else:
            local = path if self.server is None else str(self.server.local_path(path))
            os.utime(local, ns=(mtime_ns, mtime_ns))

    @contextlib.contextmanager
    def read_only_dir(self, path: str) -> Iterator[None]:
        """Make the directory ``path`` refuse writes to this filesystem's user, or skip."""
        if self.name == "local":
            with _local_read_only(path):
                yield
            return
        set_permission = getattr(self.fs, "set_permission", None)
        if set_permission is None:
            pytest.skip(f"{self.name}: this backend cannot change permissions")
        set_permission(path, 0o555)
        try:
            yield
        finally:
            set_permission(path, 0o755)


@contextlib.contextmanager
def _local_read_only(path: str) -> Iterator[None]:
    if os.geteuid() != 0:
        os.chmod(path, 0o555)
        try:
            yield
        finally:
            os.chmod(path, 0o755)
        return
    # root ignores permission bits; the immutable attribute stops root too.
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        try:
            (flags,) = struct.unpack("i", fcntl.ioctl(fd, _FS_IOC_GETFLAGS, struct.pack("i", 0)))
            fcntl.ioctl(fd, _FS_IOC_SETFLAGS, struct.pack("i", flags | _FS_IMMUTABLE_FL))
        except OSError as err:
            pytest.skip(f"running as root and cannot set the immutable attribute: {err}")
        try:
            yield
        finally:
            fcntl.ioctl(fd, _FS_IOC_SETFLAGS, struct.pack("i", flags))
    finally:
        os.close(fd)


def _test_dir_name(request: pytest.FixtureRequest) -> str:
    name = re.sub(r"[^A-Za-z0-9_.-]+", "_", request.node.name)[:60]
    return f"{next(_counter):04d}-{os.getpid()}-{name}"


#: The longest process-level runs whose promise the default run already covers with another
#: test (named after each): they run in the integration tier, so that the README's command
#: stays short. Node ids, as ``pytest`` prints them (tests/test_tiers.py checks they exist).
INTEGRATION_TESTS = {
    # Spark kill -9 mid-write and between WAL and renames: [fused] stays in the default run.
    "tests/spark/test_spark_crash.py::"
    "test_sigkill_during_task_write_and_between_wal_and_renames[streaming]",
    # The Spark demo: the local demo and test_spark_crash[fused] stay.
    "tests/cli/test_spark.py::test_spark_demo_crashes_and_restarts_exactly_once",
    "tests/cli/test_spark.py::test_spark_reads_one_named_file",  # test_fused's one-file tests
    # Late files under SIGKILL on Spark: [local] and test_fused's late-file tests stay.
    "tests/cli/test_late_files.py::test_sigkill_while_files_land_late_publishes_every_record_once"
    "[spark-1]",
    "tests/cli/test_published_stream.py::"
    "test_every_published_file_is_in_the_manifest_once_and_announced[spark]",  # [local] stays
    # Cron-style re-land on Spark through the command: test_fused's cron tests stay.
    "tests/cli/test_landing_again.py::"
    "test_spark_cron_style_runs_read_a_name_landing_again_after_delete",
    # A DataNode stopped mid-write on hdfs:// (the longest, ~90 s): the webhdfs:// one stays.
    "tests/cli/test_real_hdfs.py::"
    "test_a_cluster_fault_mid_run_loses_and_repeats_nothing[hdfs-datanode-stopped-mid-write]",
    # A dead heartbeat on Spark: [local] and tests/region/test_lock.py stay.
    "tests/cli/test_lock_heartbeat.py::"
    "test_a_runner_whose_heartbeat_dies_stops_before_a_second_runner_takes_over[spark]",
    # Prometheus scraping a Spark job: the local job's scrape and the endpoint tests stay.
    "tests/cli/test_metrics.py::"
    "test_prometheus_reads_records_out_lag_batch_times_and_a_passed_over_file_of_a_spark_job",
    # The whole HDFS benchmark on the sandbox: the other benchmarks' tests stay.
    "tests/bench/test_benchmarks.py::test_hdfs_benchmark_runs_every_part_on_the_real_cluster",
    # More Spark command runs: test_spark_crash[fused] and tests/spark's data source tests stay.
    "tests/cli/test_spark.py::test_spark_run_available_now_then_inspect",
    "tests/cli/test_spark.py::test_spark_writes_the_files_records_name_and_a_returning_name_rolls",
    # A DataNode stopped under webhdfs://: the NameNode restarts on both schemes stay.
    "tests/cli/test_real_hdfs.py::test_a_cluster_fault_mid_run_loses_and_repeats_nothing"
    "[webhdfs-cluster-datanode-stopped-mid-write]",
    # Sandboxes of their own (HA, 128 MiB blocks): the session's sandbox tests stay.
    "tests/fs/test_real_hdfs.py::test_an_ha_name_service_through_hadoop_conf_dir",
    "tests/fs/test_real_hdfs.py::test_a_sandbox_started_with_a_block_size_writes_blocks_of_it",
    "tests/cli/test_ha_sandbox.py::test_a_webhdfs_job_across_a_namenode_restart_is_exactly_once",
    "tests/cli/test_ha_sandbox.py::test_after_the_standby_restarts_sigterm_still_stops_the_sandbox",
    "tests/cli/test_ha_sandbox.py::test_a_command_that_outlasts_its_bound_is_answered_with_an_error",
    # Landings read by content on Spark (260 s): the local engine's stay, on both filesystems.
    "tests/cli/test_landing_by_content.py::"
    "test_five_files_landing_five_ways_in_cron_runs_are_each_read_once[spark]",
    "tests/cli/test_landing_by_content.py::"
    "test_on_hdfs_five_files_landing_five_ways_in_cron_runs_are_each_read_once[spark]",
    "tests/cli/test_landing_by_content.py::"
    "test_on_spark_a_log_rotated_while_the_job_is_down_mid_file_is_read_once",
    # CSV rows on Spark under SIGKILL, through a streaming query, beside the local engine:
    # test_rows_spark's fused SQL run and schema, and test_rows_io's reading, stay.
    "tests/spark/test_rows_crash.py::"
    "test_sigkill_of_a_fused_csv_run_mid_way_then_a_rerun_publish_every_row_once",
    "tests/spark/test_rows_spark.py::test_hdfs_scan_reads_each_csv_row_once_whole_gzip_too",
    "tests/spark/test_rows_spark.py::"
    "test_a_streaming_run_of_csv_rows_writes_what_the_local_engine_writes",
    "tests/spark/test_rows_spark.py::"
    "test_a_per_record_function_gets_each_row_as_a_dict_and_both_engines_write_the_same",
}


#: The session fixtures that start a heavy part, in the order their tests run. A test that
#: uses one belongs to the integration tier (``pytest -m integration``, run by .ci/run after the
#: README's command).
HEAVY_FIXTURES = (
    "yarn_sandbox",
    "secure_yarn_sandbox",
    "spark_cluster",
    "connect_server",
    "secure_sandbox",
)

#: The test modules that use them. When a run is spread over workers (``pytest -n 2``), these
#: modules are one unit of work: one worker runs the heavy parts one at a time, handed out
#: first, while the other takes the rest module by module. Two heavy parts at once (a YARN
#: cluster beside a Kerberized one) are more than 2 cores carry within their timeouts. The
#: collection checks the list (:func:`pytest_collection_modifyitems`).
HEAVY_MODULES = {
    "tests/spark/test_yarn.py",
    "tests/spark/test_yarn_secure.py",
    "tests/spark/test_cluster.py",
    "tests/bench/test_cluster_benchmark.py",
    "tests/spark/test_connect.py",
    "tests/security/test_kerberos.py",
}


#: The longest modules of the integration tier outside the heavy unit, longest first (seconds of
#: a CI run): handed out right after the heavy unit, longest first, so that the run does not end
#: with one worker on a long module while the other has nothing left. The others follow in
#: their collection order (tests/test_tiers.py checks these exist).
LONG_MODULES = (
    "tests/cli/test_landing_by_content.py",  # ~300
    "tests/spark/test_spark_tables.py",  # ~200
    "tests/cli/test_curated.py",  # ~175
    "tests/spark/test_rows_crash.py",  # ~130
    "tests/cli/test_spark.py",  # ~160
    "tests/campaign/test_fault_campaign.py",  # ~155
    "tests/cli/test_ha_sandbox.py",  # ~120
    "tests/spark/test_spark_crash.py",  # ~105
    "tests/test_docs.py",  # ~95
    "tests/cli/test_real_hdfs.py",  # ~85
    "tests/cli/test_late_files.py",  # ~55
)


def _order(item: pytest.Item) -> tuple[int, int]:
    """Where ``item`` runs: by :func:`_heavy_rank`, then the place of its module in
    :data:`LONG_MODULES` (past its end for the others)."""
    module = item.nodeid.split("::", 1)[0]
    long = LONG_MODULES.index(module) if module in LONG_MODULES else len(LONG_MODULES)
    return _heavy_rank(item), long


def _heavy_rank(item: pytest.Item) -> int:
    """The first heavy fixture ``item`` uses, by its place in :data:`HEAVY_FIXTURES`; past
    its end for a test that uses none."""
    names = set(getattr(item, "fixturenames", ()))
    return next((i for i, f in enumerate(HEAVY_FIXTURES) if f in names), len(HEAVY_FIXTURES))


def _work_unit(nodeid: str) -> str:
    """The unit of work a test is handed out in: its module (whose fixtures it may share), or
    ``"heavy"`` for the modules of the heavy parts."""
    module = nodeid.split("::", 1)[0]
    return "heavy" if module in HEAVY_MODULES else module


@pytest.hookimpl(optionalhook=True)  # a hook of pytest-xdist
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """Units of work by :func:`_work_unit`, handed out in the order of the collection, which
    puts the heavy parts first. (A name known from the node id alone: the scheduler runs in
    the controlling process, which collects nothing.)"""
    from xdist.scheduler import LoadScopeScheduling

    class Scheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return _work_unit(nodeid)

    config.option.loadscopereorder = False  # the collection's order, not the units' sizes
    return Scheduling(config, log)


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark the integration tier before ``-m`` selects: the tests of the heavy fixtures
    (whatever module they are in) and :data:`INTEGRATION_TESTS`. The heavy parts' tests come
    first, in the order of :data:`HEAVY_FIXTURES`; each is in one of :data:`HEAVY_MODULES`. Then
    :data:`LONG_MODULES`, then the others."""
    items.sort(key=_order)  # stable: the order within each part and module stays
    for item in items:
        heavy = _heavy_rank(item) < len(HEAVY_FIXTURES)
        if heavy and _work_unit(item.nodeid) != "heavy":
            raise pytest.UsageError(
                f"{item.nodeid} uses a heavy fixture ({', '.join(HEAVY_FIXTURES)}): add its "
                "module to HEAVY_MODULES in tests/conftest.py, or two workers start that part"
            )
        if heavy or item.nodeid in INTEGRATION_TESTS:
            item.add_marker(pytest.mark.integration)
        if getattr(getattr(item, "obj", None), "is_hypothesis_test", False):
            # Property tests: sized by the profile (HYPOTHESIS_PROFILE); the tier runs them
            # again with the larger "ci" profile (pytest -m "integration or property").
            item.add_marker(pytest.mark.property)


def pytest_report_header() -> list[str]:
    named = [f"{n}={os.environ[v]}" for n, v in CLUSTER_VARIABLES.items() if os.environ.get(v)]
    if named:
        return [f"real clusters named: {', '.join(named)}"]
    problem = missing_tools()
    return [f"real HDFS tests skip: {problem}"] if problem else []


def require_java_and_maven() -> None:
    """Skip (fail under CI=true) when the real HDFS cannot start here, in one line."""
    problem = missing_tools()
    if problem is None:
        return
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(f"CI=true: {problem}", pytrace=False)
    pytest.skip(problem)


#: Sandboxes signalled (SIGTERM) at their fixture's teardown, waited for by
#: :func:`_sandboxes_stop_together` after the last: the shutdowns of a session's sandboxes (those
#: of YARN mostly waits: a NodeManager's for its applications, the ResourceManager's for its
#: nodes) overlap instead of following one another.
_STOPPING: list[Sandbox] = []


def _stop_soon(sandbox: Sandbox) -> None:
    if sandbox.process.poll() is None:
        sandbox.process.send_signal(signal.SIGTERM)
    _STOPPING.append(sandbox)


@pytest.fixture(scope="session", autouse=True)
def _sandboxes_stop_together() -> Iterator[None]:
    """Set up before any sandbox, so torn down after all: waits for what :func:`_stop_soon`
    signalled (:meth:`Sandbox.stop`: SIGKILL after its timeout)."""
    yield
    while _STOPPING:
        _STOPPING.pop().stop()


@pytest.fixture(scope="session")
def hdfs_sandbox(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Sandbox]:
    """The session's real HDFS: a NameNode and 2 DataNodes (Hadoop's MiniDFSCluster)."""
    require_java_and_maven()
    sandbox = Sandbox.start(tmp_path_factory.mktemp("hdfs-sandbox"), datanodes=2)
    try:
        yield sandbox
    finally:
        _stop_soon(sandbox)


@pytest.fixture(scope="session")
def yarn_sandbox(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Sandbox]:
    """A real HDFS with YARN beside it (``sandbox --yarn --nodemanagers 2``): a NameNode, a
    DataNode, a ResourceManager and 2 NodeManagers of 3 GiB; ``conf_dir`` has yarn-site.xml.
    Started only by the tests that ask for it."""
    require_java_and_maven()
    sandbox = Sandbox.start(
        tmp_path_factory.mktemp("yarn-sandbox"), datanodes=1, nodemanagers=2, timeout=400
    )
    try:
        yield sandbox
    finally:
        _stop_soon(sandbox)


def require_kerberos_client() -> None:
    """Skip (fail under CI=true) without MIT Kerberos's kinit and the python-gssapi client."""
    import shutil

    problem = None
    if shutil.which("kinit") is None:
        problem = (
            "the secured HDFS tests need MIT Kerberos: apt-get install krb5-user libkrb5-dev gcc, "
            "then pip install -e '.[test,kerberos]'"
        )
    else:
        try:
            import requests_gssapi  # noqa: F401
        except ImportError:
            problem = (
                "the secured HDFS tests need the kerberos extra: apt-get install libkrb5-dev gcc, "
                "then pip install -e '.[test,kerberos]'"
            )
    if problem is None:
        return
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(f"CI=true: {problem}", pytrace=False)
    pytest.skip(problem)


@pytest.fixture(scope="session")
def secure_sandbox(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Sandbox]:
    """A Kerberized real HDFS (``sandbox --secure``): a KDC, Kerberos RPC, SASL data transfer,
    WebHDFS over HTTPS only. Started only by the tests that ask for it. This process's Kerberos
    library reads the sandbox's krb5.conf and a ticket cache of its own (``KRB5_CONFIG``,
    ``KRB5CCNAME``), never the machine's."""
    require_java_and_maven()
    require_kerberos_client()
    base = tmp_path_factory.mktemp("hdfs-secure")
    # A KDC, keystores made by keytool, then the cluster: on a loaded machine well over a minute.
    sandbox = Sandbox.start(base, datanodes=1, secure=True, timeout=400)
    saved = {k: os.environ.get(k) for k in ("KRB5_CONFIG", "KRB5CCNAME")}
    assert sandbox.info.krb5_conf is not None
    os.environ["KRB5_CONFIG"] = sandbox.info.krb5_conf
    os.environ["KRB5CCNAME"] = f"FILE:{base / 'ccache-none'}"
    try:
        yield sandbox
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        _stop_soon(sandbox)


#: The delegation tokens' lifetime on ``secure_yarn_sandbox`` (seconds): hdfs-native passes over
#: a token in its last minute, so the tasks' token is replaced every 15 s.
SECURE_YARN_TOKEN_LIFETIME = 90.0


@pytest.fixture(scope="session")
def secure_yarn_sandbox(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Sandbox]:
    """A Kerberized HDFS with a Kerberized YARN beside it (``sandbox --secure --yarn``, one
    NodeManager) whose delegation tokens live :data:`SECURE_YARN_TOKEN_LIFETIME` seconds. Its
    KDC is not ``secure_sandbox``'s (the same realm): a test points ``KRB5_CONFIG`` at the
    sandbox's krb5.conf for its own duration only."""
    require_java_and_maven()
    require_kerberos_client()
    sandbox = Sandbox.start(
        tmp_path_factory.mktemp("secure-yarn"),
        secure=True,
        nodemanagers=1,
        token_lifetime=SECURE_YARN_TOKEN_LIFETIME,
        timeout=400,
    )
    try:
        yield sandbox
    finally:
        _stop_soon(sandbox)


def cluster_settings(uri: str, sandbox: Sandbox | None, **overrides: object) -> FileSystemSettings:
    """Settings for the real cluster: the test user, its configuration, short waits."""
    values: dict[str, object] = {
        "uri": uri,
        "user": CLUSTER_USER,
        "timeout": 20.0,
        "lease_recovery_timeout": 30.0,
        "retries": 3,
        "retry_backoff": 0.2,
    }
    if sandbox is not None and uri.startswith("hdfs://"):
        values["config_dir"] = sandbox.info.conf_dir
    values.update(overrides)
    return FileSystemSettings.model_validate(values)


def real_fs(
    request: pytest.FixtureRequest, name: str, **overrides: object
) -> tuple[FileSystem, str, Sandbox | None]:
    """``(filesystem, base path, sandbox or None)`` for the real backend ``name``."""
    external = os.environ.get(CLUSTER_VARIABLES[name])
    sandbox: Sandbox | None = None
    if external:
        uri = external
    else:
        sandbox = request.getfixturevalue("hdfs_sandbox")
        assert sandbox is not None
        uri = (sandbox.info.hdfs if name == "hdfs" else sandbox.info.webhdfs) + "/tests"
    fs, base = open_path(uri, cluster_settings(uri, sandbox, **overrides))
    return fs, base, sandbox


@pytest.fixture(scope="session")
def webhdfs_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[WebHdfsServer]:
    """The session's WebHDFS stand-in (leases of cut-off writers recover after 0.5 s)."""
    server = WebHdfsServer(tmp_path_factory.mktemp("webhdfs"), soft_limit=0.5)
    server.start()
    yield server
    server.stop()


def webhdfs_settings(uri: str, **overrides: object) -> FileSystemSettings:
    """Settings for test servers: short waits so failures surface quickly."""
    values: dict[str, object] = {
        "uri": uri,
        "user": "tester",
        "timeout": 10.0,
        "lease_recovery_timeout": 5.0,
        "retries": 2,
        "retry_backoff": 0.01,
    }
    values.update(overrides)
    return FileSystemSettings.model_validate(values)


@pytest.fixture
def local_fs() -> LocalFileSystem:
    return LocalFileSystem()


@pytest.fixture(params=BACKENDS)
def any_fs(request: pytest.FixtureRequest, tmp_path: os.PathLike[str]) -> Iterator[FsHandle]:
    """The test's backend (see the module docstring) with a fresh empty root directory."""
    name: str = request.param
    if name == "local":
        handle = FsHandle(name, LocalFileSystem(), os.path.join(os.fspath(tmp_path), "root"))
    elif name == "webhdfs":
        server: WebHdfsServer = request.getfixturevalue("webhdfs_server")
        fs, _ = open_path("/", webhdfs_settings(server.uri))
        root = "/tests/" + _test_dir_name(request)
        handle = FsHandle(name, fs, root, server)
    else:
        fs, base_path, _ = real_fs(request, name, lease_recovery_timeout=3.0)
        handle = FsHandle(name, fs, posixpath.join(base_path, _test_dir_name(request)))
    handle.fs.mkdirs(handle.root)
    try:
        yield handle
    finally:
        with contextlib.suppress(OSError):
            handle.fs.delete(handle.root, recursive=True)


@pytest.fixture(scope="session")
def spark_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StandaloneCluster]:
    """A Spark standalone cluster for the session: a master and 2 workers of 1 core, whose
    executors lack this project unless a job ships it (operators.spark.standalone). Drivers of
    it run in their own processes (a process has one SparkContext, the local ``spark``)."""
    require_java_and_maven()
    cluster = StandaloneCluster.start(
        tmp_path_factory.mktemp("spark-cluster"), workers=2, java_options=SPARK_TEST_JVM
    )
    try:
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture(scope="session")
def project_zip(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """This project's wheel (``pip wheel --no-deps .``) under a ``.zip`` name, which is how
    ``spark.submit.pyFiles`` puts a package on the executors' path (it ignores ``.whl``)."""
    return build_zip(ROOT, tmp_path_factory.mktemp("wheel"))


def build_zip(source: Path, out: Path) -> Path:
    command = [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(out), str(source)]
    run = subprocess.run(command, capture_output=True, text=True, check=False)
    assert run.returncode == 0, run.stderr[-3000:]
    (wheel,) = out.glob("*.whl")
    return wheel.rename(wheel.with_suffix(".zip"))


class Prometheus:
    """A real Prometheus server scraping, every second, the targets a test names
    (file_sd_configs: the targets file is re-read every second); queried through its HTTP API."""

    def __init__(self, url: str, targets: Path) -> None:
        self.url = url
        self._targets = targets

    def watch(self, *addresses: str) -> None:
        """Scrape these ``host:port`` targets (and no others) from now on."""
        body = json.dumps([{"targets": list(addresses)}])
        tmp = self._targets.with_suffix(".tmp")
        tmp.write_text(body, encoding="utf-8")
        tmp.rename(self._targets)  # whole, never half written when Prometheus reads it

    def query(self, expr: str) -> list[float]:
        """The values of an instant query (one per series; empty when none matches)."""
        url = f"{self.url}/api/v1/query?{urllib.parse.urlencode({'query': expr})}"
        with urllib.request.urlopen(url, timeout=10) as response:
            answer = json.load(response)
        assert answer["status"] == "success", answer
        return [float(item["value"][1]) for item in answer["data"]["result"]]


def require_prometheus() -> str:
    """The prometheus binary; skip (fail under CI=true) without it, in one line."""
    binary = shutil.which("prometheus")
    if binary is not None:
        return binary
    problem = "no prometheus binary on PATH (Debian: apt-get install prometheus)"
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(f"CI=true: {problem}", pytrace=False)
    pytest.skip(problem)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture(scope="session")
def prometheus(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Prometheus]:
    """The session's Prometheus server, on 127.0.0.1, scraping every second what tests name,
    with the alert rules of conf/ evaluated every second."""
    binary = require_prometheus()
    work = tmp_path_factory.mktemp("prometheus")
    targets = work / "targets.json"
    targets.write_text("[]", encoding="utf-8")
    (work / "prometheus.yml").write_text(
        "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n  evaluation_interval: 1s\n"
        f"rule_files: ['{ROOT / 'conf' / 'prometheus-alerts.yml'}']\n"
        "scrape_configs:\n  - job_name: hdfs-region\n    file_sd_configs:\n"
        f"      - files: ['{targets}']\n        refresh_interval: 1s\n",
        encoding="utf-8",
    )
    port = free_port()
    process = subprocess.Popen(
        [
            binary,
            f"--config.file={work / 'prometheus.yml'}",
            f"--storage.tsdb.path={work / 'data'}",
            f"--web.listen-address=127.0.0.1:{port}",
        ],
        stdout=subprocess.DEVNULL,
        stderr=(work / "prometheus.log").open("wb"),
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                with urllib.request.urlopen(f"{url}/-/ready", timeout=2) as response:
                    if response.status == 200:
                        break
            except OSError:
                pass
            log = (work / "prometheus.log").read_text(errors="replace")[-2000:]
            assert process.poll() is None, f"prometheus ended:\n{log}"
            assert time.monotonic() < deadline, f"prometheus not ready after 60 s:\n{log}"
            time.sleep(0.2)
        yield Prometheus(url, targets)
    finally:
        process.terminate()
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
