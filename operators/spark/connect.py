"""Spark Connect: a server started with the script pyspark ships, and ``sc://`` sessions.

A Spark Connect server is a Spark driver that clients reach over gRPC (``sc://host:port``).
The data sources and the sink's driver side run *in the server's* Python processes, so the
server must import this project: its ``PYSPARK_PYTHON`` and ``PYTHONPATH`` when it starts
(:func:`server_environment`). Secrets reach those processes the same way, as
``HDFS_REGION_SECRET_*`` variables of the server (see ``operators.app.engine_spark``), never
as option values, which a client would send in the plan.

:class:`ConnectServer` starts ``$SPARK_HOME/sbin/start-connect-server.sh`` in the foreground
(``SPARK_NO_DAEMONIZE``) as a process group of its own, so the caller owns its PID; readiness is
the server's log line with its port. Tests and benchmarks use it; users run the script
themselves (README, "Through Spark Connect").
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from operators.spark.session import DEFAULT_CONF, find_java, worker_python

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = [
    "ConnectServer",
    "ConnectServerError",
    "connect_session",
    "server_environment",
    "spark_home",
]

logger = logging.getLogger(__name__)

#: The server logs this once its gRPC service listens (SparkConnectServer, Spark 4.x).
_READY = re.compile(r"Spark Connect server started at: .*:(\d+)")
_SCRIPT = Path("sbin") / "start-connect-server.sh"
#: Warnings to the console, and the ready line (INFO) of the server class.
_LOG4J2 = """\
rootLogger.level = warn
rootLogger.appenderRef.stdout.ref = console
appender.console.type = Console
appender.console.name = console
appender.console.target = SYSTEM_ERR
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = %d{yy/MM/dd HH:mm:ss} %p %c{1}: %m%n%ex
logger.connect.name = org.apache.spark.sql.connect.service.SparkConnectServer
logger.connect.level = info
"""


class ConnectServerError(RuntimeError):
    """The Spark Connect server did not start (the message names its log)."""


def spark_home() -> Path:
    """The installed pyspark package: pip's pyspark is a whole ``SPARK_HOME`` (jars, sbin)."""
    import pyspark

    return Path(pyspark.__file__).resolve().parent


def server_environment(extra_paths: tuple[str, ...] = ()) -> dict[str, str]:
    """Environment variables a server needs so its Python workers import this project: this
    interpreter as ``PYSPARK_PYTHON`` and the project (and ``extra_paths``, e.g. the folder of
    user transforms) on ``PYTHONPATH``."""
    root = str(Path(__file__).resolve().parents[2])
    paths = [root, *extra_paths]
    paths += [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    return {
        "PYSPARK_PYTHON": worker_python(),
        "PYTHONPATH": os.pathsep.join(dict.fromkeys(paths)),
    }


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@dataclass
class ConnectServer:
    """A Spark Connect server (``local[2]`` by default) in its own process group.

    ``start(workdir)`` returns once it accepts clients; ``url`` is its ``sc://`` address;
    ``log`` the file its output goes to; ``stop()`` ends the process group it started.
    """

    workdir: Path
    port: int
    process: subprocess.Popen[bytes]
    log: Path
    #: The command and environment it was started with (for :meth:`restart`).
    command: list[str] = field(default_factory=list, repr=False)
    environment: dict[str, str] = field(default_factory=dict, repr=False)

    @property
    def url(self) -> str:
        return f"sc://127.0.0.1:{self.port}"

    @classmethod
    def start(
        cls,
        workdir: Path,
        *,
        master: str = "local[2]",
        conf: Mapping[str, str] | None = None,
        env: Mapping[str, str] | None = None,
        driver_memory: str = "768m",
        timeout: float = 240.0,
    ) -> ConnectServer:
        """Start the server with the script pyspark ships and wait for its ready line.

        ``env``: extra environment of the server (e.g. ``HDFS_REGION_SECRET_*``,
        ``HADOOP_CONF_DIR``); raises ConnectServerError naming the log when it fails.
        """
        find_java()
        home = spark_home()
        workdir.mkdir(parents=True, exist_ok=True)
        port = _free_port()
        # The server's log configuration is its conf dir's (the ready line is INFO).
        base = {k: v for k, v in DEFAULT_CONF.items() if k != "spark.driver.extraJavaOptions"}
        settings = {
            **base,
            "spark.connect.grpc.binding.address": "127.0.0.1",
            "spark.connect.grpc.binding.port": str(port),
            **(conf or {}),
        }
        command = [
            "bash",
            str(home / _SCRIPT),
            "--master",
            master,
            "--driver-memory",
            driver_memory,
        ]
        for key, value in settings.items():
            command += ["--conf", f"{key}={value}"]
        server_env = {
            **os.environ,
            "SPARK_HOME": str(home),
            "SPARK_LOG_DIR": str(workdir / "logs"),
            "SPARK_PID_DIR": str(workdir / "pid"),
            "SPARK_CONF_DIR": str(workdir / "conf"),
            "SPARK_NO_DAEMONIZE": "1",  # the foreground process is ours, and its group
            "SPARK_LOCAL_IP": "127.0.0.1",
            **server_environment(),
            **(env or {}),
        }
        (workdir / "conf").mkdir(exist_ok=True)
        (workdir / "conf" / "log4j2.properties").write_text(_LOG4J2)
        log = workdir / "server.log"
        offset = log.stat().st_size if log.exists() else 0
        process = _launch(command, server_env, log)
        server = cls(workdir, port, process, log, command, server_env)
        server._wait_ready(offset, timeout)
        return server

    def restart(self, timeout: float = 240.0) -> None:
        """Start the server again (same port, settings and log) after it stopped or was
        killed; a running one is stopped first."""
        self.stop()
        offset = self.log.stat().st_size
        self.process = _launch(self.command, self.environment, self.log)
        self._wait_ready(offset, timeout)

    def _wait_ready(self, offset: int, timeout: float) -> None:
        """Return once this process logged its ready line (after ``offset`` of the log);
        stop it and raise ConnectServerError if it ends or stays silent."""
        try:
            self._await_line(offset, timeout)
        except BaseException:
            self.stop()
            raise
        logger.info(
            "Spark Connect server at %s (pid %s, log %s)", self.url, self.process.pid, self.log
        )

    def _await_line(self, offset: int, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while True:
            with self.log.open("rb") as f:
                f.seek(offset)
                text = f.read().decode(errors="replace")
            if _READY.search(text):
                return
            if self.process.poll() is not None:
                msg = (
                    f"Spark Connect server ended (exit {self.process.returncode}) before it "
                    f"listened; see {self.log}: {text.strip().splitlines()[-1:]}"
                )
                raise ConnectServerError(msg)
            if time.monotonic() > deadline:
                msg = f"Spark Connect server did not listen within {timeout:.0f} s; see {self.log}"
                raise ConnectServerError(msg)
            time.sleep(0.2)

    def logs(self) -> str:
        """Everything the server wrote: its output and any log files under its log dir."""
        parts = [self.log.read_text(errors="replace")]
        logs = self.workdir / "logs"
        if logs.is_dir():
            parts += [p.read_text(errors="replace") for p in sorted(logs.iterdir()) if p.is_file()]
        return "\n".join(parts)

    def stop(self, timeout: float = 30.0) -> None:
        """SIGTERM the server's process group (Spark stops its context), SIGKILL if it stays."""
        if self.process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait()
        # Python workers of the group may outlive the JVM by a moment.
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.process.pid, signal.SIGKILL)

    def __enter__(self) -> ConnectServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _launch(command: list[str], env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    with log.open("ab") as out:
        return subprocess.Popen(
            command,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,  # its own group: stop() ends the JVM and its workers
        )


def connect_session(url: str, *, data_sources: bool = True) -> SparkSession:
    """A Spark Connect session to ``url`` (``sc://host:port``), with ``hdfs_scan`` /
    ``hdfs_sink`` registered in it unless ``data_sources`` is false.

    The server's Python workers must import this project (see :func:`server_environment`):
    the registration pickles the data source classes by reference.
    """
    from pyspark.sql import SparkSession

    from operators.spark.registration import register

    spark = SparkSession.builder.remote(url).getOrCreate()
    if data_sources:
        register(spark)
    logger.info("Spark Connect session to %s (python %s)", url, sys.version.split()[0])
    return spark
