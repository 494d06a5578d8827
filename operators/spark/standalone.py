"""A Spark standalone cluster on this machine: a master and workers started with the installed
pyspark's own ``bin/spark-class``, for tests and benchmarks (and anything that needs a
``spark://`` master: a Spark Connect server can point at one too)::

    cluster = StandaloneCluster.start(workdir, workers=2)
    cluster.master_url          # "spark://127.0.0.1:PORT"
    cluster.session_conf()      # executor memory and Python for a driver of this cluster
    cluster.kill_worker(0)      # SIGKILL a worker and its executors; restart_worker(0)
    cluster.stop()

Each daemon is one JVM (``spark-class`` execs ``java``) with its log in ``workdir``; executors
log under each worker's ``work-N/`` directory. Readiness is read from the logs: the master's
``Starting Spark master at spark://…`` and ``New state: ALIVE``, each worker's ``Successfully
registered with master``. The workers run with an environment that lacks this project: no
``PYTHONPATH`` and, for their Python workers, :func:`bare_python` (the installed packages without
this project), so executors import only what a job ships to them.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import signal
import subprocess
import sys
import sysconfig
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["SparkClusterError", "StandaloneCluster", "bare_python", "children", "spark_home"]

logger = logging.getLogger(__name__)

_MASTER = "org.apache.spark.deploy.master.Master"
_WORKER = "org.apache.spark.deploy.worker.Worker"
_MASTER_URL = re.compile(r"Starting Spark master at (spark://[\w.-]+:\d+)")
_NOT_INHERITED = ("PYTHONPATH", "PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON", "HADOOP_USER_NAME")
_EXECUTOR = "org.apache.spark.executor.CoarseGrainedExecutorBackend"


class SparkClusterError(RuntimeError):
    """A daemon did not start (the message quotes the end of its log)."""


def spark_home() -> Path:
    """The installed pyspark, whose ``bin/spark-class`` starts the daemons."""
    import pyspark

    home = Path(pyspark.__file__).parent
    if not (home / "bin" / "spark-class").is_file():
        msg = f"{home}: this pyspark has no bin/spark-class (install pyspark from its wheel)"
        raise SparkClusterError(msg)
    return home


_BARE = """#!/bin/sh
# Python for Spark's Python workers without this project: {python} without site processing
# (no .pth file, so no editable install), the installed packages on PYTHONPATH after whatever
# Spark puts first (pyspark's zips and the job's shipped files).
PYTHONPATH="${{PYTHONPATH:+$PYTHONPATH:}}{packages}"
export PYTHONPATH
exec '{python}' -S "$@"
"""


def bare_python(directory: Path) -> str:
    """A Python for executors that has this environment's packages (pyspark, pyarrow, …) but not
    this project unless a job ships it: written as ``directory/bare-python``."""
    packages = sorted({sysconfig.get_path("purelib"), sysconfig.get_path("platlib")})
    wrapper = directory / "bare-python"
    wrapper.write_text(_BARE.format(python=sys.executable, packages=":".join(packages)))
    wrapper.chmod(0o755)
    return str(wrapper)


def _tail(path: Path, chars: int = 3000) -> str:
    try:
        return path.read_text(errors="replace")[-chars:]
    except OSError as exc:
        return f"(no log: {exc})"


@dataclass
class _Daemon:
    name: str
    log: Path
    process: subprocess.Popen[bytes]

    def alive(self) -> bool:
        return self.process.poll() is None


@dataclass
class StandaloneCluster:
    """A running master and workers (see the module docstring)."""

    root: Path
    master_url: str
    python: str
    cores: int
    memory: str
    env: dict[str, str]
    master: _Daemon
    workers: list[_Daemon] = field(default_factory=list)
    timeout: float = 180.0
    #: Extra options of every JVM of the cluster: its daemons and its drivers' executors.
    java_options: str | None = None

    @classmethod
    def start(
        cls,
        root: Path,
        *,
        workers: int = 2,
        cores: int = 1,
        memory: str = "768m",
        worker_env: Mapping[str, str] | None = None,
        timeout: float = 180.0,
        java_options: str | None = None,
    ) -> StandaloneCluster:
        """Start a master and ``workers`` workers of ``cores`` cores and ``memory`` each; return
        once every worker is registered (SparkClusterError quoting the log otherwise).
        ``java_options``: extra JVM options of the daemons and, through :meth:`session_conf`,
        of the executors (a test cluster: ``-XX:TieredStopAtLevel=1`` starts faster)."""
        from operators.spark.session import find_java

        find_java()
        root.mkdir(parents=True, exist_ok=True)
        home = spark_home()
        env = {
            k: v
            for k, v in os.environ.items()
            # A cluster's hosts do not share this process's Python path or HDFS user.
            if k
            not in ("PYTHONPATH", "PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON", "HADOOP_USER_NAME")
            and not k.startswith("SPARK_")
        }
        python = bare_python(root)
        env.update(
            SPARK_HOME=str(home),
            SPARK_LOCAL_IP="127.0.0.1",
            SPARK_DAEMON_MEMORY="256m",
            SPARK_LOG_DIR=str(root),
            SPARK_PID_DIR=str(root),
            PYSPARK_PYTHON=python,
            # The master's REST submission server binds a fixed port (6066): not needed.
            SPARK_MASTER_OPTS="-Dspark.master.rest.enabled=false",
        )
        if java_options:
            env["SPARK_DAEMON_JAVA_OPTS"] = java_options
        env.update(worker_env or {})
        log = root / "master.log"
        master = _Daemon("master", log, _spawn(home, env, log, _MASTER, "--port", "0"))
        cluster = cls(
            root, "", python, cores, memory, env, master, timeout=timeout, java_options=java_options
        )
        try:
            cluster._wait(master, lambda text: _MASTER_URL.search(text), "master URL")
            found = _MASTER_URL.search(log.read_text(errors="replace"))
            assert found is not None
            cluster.master_url = found.group(1)
            cluster._wait(master, lambda text: "New state: ALIVE" in text, "master ALIVE")
            for i in range(workers):
                cluster.workers.append(cluster._start_worker(i))
            for worker in cluster.workers:
                cluster._wait_registered(worker)
        except BaseException:
            cluster.stop()
            raise
        logger.info("Spark standalone cluster %s: %d workers", cluster.master_url, workers)
        return cluster

    def __enter__(self) -> StandaloneCluster:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def session_conf(self) -> dict[str, str]:
        """Spark settings for a driver of this cluster: small executors, one per worker, and the
        workers' Python (which lacks this project: ship it, see README)."""
        conf = {
            "spark.executor.memory": "512m",
            "spark.executor.cores": "1",
            "spark.cores.max": str(self.cores * len(self.workers)),
            "spark.pyspark.python": self.python,
        }
        if self.java_options:
            conf["spark.executor.extraJavaOptions"] = self.java_options
        return conf

    def work_dir(self, index: int) -> Path:
        return self.root / f"work-{index}"

    def log_files(self) -> list[Path]:
        """Every file under the cluster's directory: daemon logs, executor logs and work dirs."""
        return sorted(p for p in self.root.rglob("*") if p.is_file())

    def worker_pids(self, index: int) -> list[int]:
        """The worker JVM's PID and those of its executor JVMs (its children)."""
        pid = self.workers[index].process.pid
        executors = [k for k in children(pid) if _EXECUTOR in _cmdline(k)]
        return [pid, *executors]

    def kill_worker(self, index: int) -> list[int]:
        """SIGKILL worker ``index`` and its executors (a lost host); return the PIDs killed."""
        pids = self.worker_pids(index)
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        self.workers[index].process.wait()
        for pid in pids[1:]:
            _wait_gone(pid)
        return pids

    def restart_worker(self, index: int) -> None:
        """Start worker ``index`` again (after :meth:`kill_worker`) and wait for its
        registration."""
        if self.workers[index].alive():
            return
        self.workers[index] = self._start_worker(index)
        self._wait_registered(self.workers[index])

    def stop(self) -> None:
        """Stop the workers (their executors with them) and the master."""
        for daemon in [*self.workers, self.master]:
            if not daemon.alive():
                continue
            pids = self.worker_pids(self.workers.index(daemon)) if daemon in self.workers else []
            daemon.process.terminate()
            try:
                daemon.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                daemon.process.kill()
                daemon.process.wait()
            for pid in pids[1:]:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)

    def _start_worker(self, index: int) -> _Daemon:
        work = self.work_dir(index)
        work.mkdir(exist_ok=True)
        log = self.root / f"worker-{index}.log"
        with log.open("ab") as out:
            out.write(f"--- start {time.strftime('%H:%M:%S')}\n".encode())
        args = ["--port", "0", "--cores", str(self.cores), "--memory", self.memory]
        args += ["--work-dir", str(work), self.master_url]
        return _Daemon(f"worker {index}", log, _spawn(spark_home(), self.env, log, _WORKER, *args))

    def _wait_registered(self, worker: _Daemon) -> None:
        def registered(text: str) -> bool:
            last = text.rsplit("--- start ", 1)[-1]
            return "Successfully registered with master" in last

        self._wait(worker, registered, "registration with the master")

    def _wait(self, daemon: _Daemon, ready: Callable[[str], object], what: str) -> object:
        deadline = time.monotonic() + self.timeout
        while True:
            text = daemon.log.read_text(errors="replace") if daemon.log.exists() else ""
            found = ready(text)
            if found:
                return found
            if not daemon.alive():
                msg = f"Spark {daemon.name} ended before {what}; {daemon.log}:\n{_tail(daemon.log)}"
                raise SparkClusterError(msg)
            if time.monotonic() > deadline:
                msg = (
                    f"Spark {daemon.name}: no {what} within {self.timeout:.0f} s; "
                    f"{daemon.log}:\n{_tail(daemon.log)}"
                )
                raise SparkClusterError(msg)
            time.sleep(0.2)


def _spawn(
    home: Path, env: Mapping[str, str], log: Path, main: str, *args: str
) -> subprocess.Popen[bytes]:
    command = [str(home / "bin" / "spark-class"), main, "--host", "127.0.0.1"]
    command += ["--webui-port", "0", *args]
    with log.open("ab") as out:
        # Its own session: a Ctrl-C of the test run reaches the daemons only through stop().
        return subprocess.Popen(
            command, env=dict(env), stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )


def children(pid: int) -> list[int]:
    """The child processes of ``pid`` (forked by any of its threads)."""
    found = []
    for task in Path(f"/proc/{pid}/task").glob("*/children"):
        with contextlib.suppress(OSError):
            found += [int(p) for p in task.read_text().split()]
    return found


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


def _wait_gone(pid: int, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while Path(f"/proc/{pid}").exists() and time.monotonic() < deadline:
        # A killed child of a dead worker is reaped by init; until then it is a zombie.
        status = Path(f"/proc/{pid}/stat")
        with contextlib.suppress(OSError):
            if status.read_text().split(")")[-1].split()[0] == "Z":
                return
        time.sleep(0.05)
