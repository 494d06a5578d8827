"""A real HDFS on this machine: Hadoop's MiniDFSCluster (NameNode and DataNodes in one JVM).

``hdfs-region sandbox`` runs one for users; tests and benchmarks start one per session::

    with Sandbox.start(workdir, datanodes=2) as sb:
        sb.info.hdfs        # "hdfs://127.0.0.1:PORT"
        sb.info.webhdfs     # "webhdfs://127.0.0.1:PORT"
        sb.command("stop-datanode 1")

    with Sandbox.start(workdir, nodemanagers=2) as sb:   # and YARN (MiniYARNCluster)
        sb.info.yarn        # "localhost:PORT", the ResourceManager; yarn-site.xml in conf_dir
        sb.command("stop-nodemanager 0")

Steps of a start:

1. Resolve the launcher's classpath with Maven once (``pom.xml`` beside this file), cached
   under ``$XDG_CACHE_HOME/hdfs-region/sandbox/<digest>/`` with the compiled launcher class.
2. Start ``java -cp`` (no Maven on later starts); Hadoop logs to ``<dir>/sandbox.log``.
3. Read the first stdout line: one JSON object with the URIs and the client configuration
   directory (``core-site.xml``, ``hdfs-site.xml``) it wrote.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import logging
import os
import shutil
import signal
import subprocess
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

__all__ = [
    "MIN_BLOCK_SIZE",
    "Sandbox",
    "SandboxError",
    "SandboxInfo",
    "SandboxSetupError",
    "launcher_command",
    "missing_tools",
]

logger = logging.getLogger(__name__)

_JAVA_DIR = Path(__file__).with_name("java")
_SOURCE = _JAVA_DIR / "src" / "main" / "java" / "hdfsregion" / "Sandbox.java"
_POM = _JAVA_DIR / "pom.xml"
_MAIN = "hdfsregion.Sandbox"
#: HDFS's smallest block, the sandbox's default: truncates and appends cross block boundaries
#: at test sizes.
MIN_BLOCK_SIZE = 1 << 20
_OPENS = (
    "java.lang",
    "java.lang.reflect",
    "java.util",
    "java.io",
    "java.nio",
    "sun.nio.ch",
    "java.net",
)
_LOG4J = """\
log4j.rootLogger=INFO,file
log4j.appender.file=org.apache.log4j.FileAppender
log4j.appender.file.File={log}
log4j.appender.file.Append=true
log4j.appender.file.layout=org.apache.log4j.PatternLayout
log4j.appender.file.layout.ConversionPattern=%d{{ISO8601}} %-5p %c{{2}}: %m%n
log4j.logger.org.apache.hadoop.hdfs.StateChange=WARN
log4j.logger.BlockStateChange=WARN
"""


class SandboxError(RuntimeError):
    """The sandbox failed to start or to carry out a command."""


class SandboxSetupError(SandboxError):
    """Java or Maven is missing (the message says what to install)."""


def missing_tools(*, need_maven: bool = True) -> str | None:
    """One line naming what to install, or ``None`` when Java (and Maven) are there."""
    missing = [tool for tool in ("java", "javac") if shutil.which(tool) is None]
    if need_maven and shutil.which("mvn") is None:
        missing.append("mvn")
    if not missing:
        return None
    return (
        f"the HDFS sandbox needs {', '.join(missing)} on PATH: install a JDK (17 or newer) and "
        "Apache Maven (Debian: apt-get install openjdk-17-jdk-headless maven)"
    )


def cache_dir() -> Path:
    """Where the resolved classpath and the compiled launcher live, per launcher version."""
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    digest = hashlib.sha256(_POM.read_bytes() + _SOURCE.read_bytes()).hexdigest()[:16]
    return base / "hdfs-region" / "sandbox" / digest


def _prepare() -> tuple[Path, str]:
    """``(classes dir, classpath)``: resolved and compiled once, then read from the cache."""
    cache = cache_dir()
    cp_file = cache / "classpath.txt"
    classes = cache / "classes"
    if cp_file.exists() and (classes / "hdfsregion" / "Sandbox.class").exists():
        return classes, cp_file.read_text().strip()
    problem = missing_tools(need_maven=not cp_file.exists())
    if problem:
        raise SandboxSetupError(problem)
    cache.mkdir(parents=True, exist_ok=True)
    # One process builds at a time (test workers start their sandboxes together on a clean
    # machine): two Mavens filling one local repository, or a launcher class replaced while
    # another JVM loads it, fail now and then. The second waits, then finds the first's work.
    with open(cache / "build.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if cp_file.exists() and (classes / "hdfsregion" / "Sandbox.class").exists():
            return classes, cp_file.read_text().strip()
        return _build(cache, cp_file, classes)


def _build(cache: Path, cp_file: Path, classes: Path) -> tuple[Path, str]:
    """Steps 1 and 2 of :func:`_prepare`, under its lock."""
    if not cp_file.exists():
        # 1. Resolve with Maven, in the cache (the package directory may be read-only).
        shutil.copyfile(_POM, cache / "pom.xml")
        tmp = cache / f"classpath.{os.getpid()}.tmp"
        logger.info("resolving the HDFS sandbox's classpath with Maven (once)")
        done = subprocess.run(
            ["mvn", "-q", "-B", "dependency:build-classpath", f"-Dmdep.outputFile={tmp}"],
            cwd=cache,
            capture_output=True,
            text=True,
            check=False,
        )
        if done.returncode != 0 or not tmp.exists():
            tail = (done.stdout + done.stderr).strip().splitlines()[-15:]
            raise SandboxError("Maven could not resolve the sandbox classpath:\n" + "\n".join(tail))
        os.replace(tmp, cp_file)
    classpath = cp_file.read_text().strip()
    # 2. Compile the launcher's one class against it.
    tmp_classes = cache / f"classes.{os.getpid()}.tmp"
    shutil.rmtree(tmp_classes, ignore_errors=True)
    done = subprocess.run(
        ["javac", "-nowarn", "-cp", classpath, "-d", str(tmp_classes), str(_SOURCE)],
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        raise SandboxError(f"javac failed on {_SOURCE}:\n{done.stderr.strip()}")
    shutil.rmtree(classes, ignore_errors=True)
    os.replace(tmp_classes, classes)
    return classes, classpath


def launcher_command(
    base_dir: str | os.PathLike[str],
    *,
    datanodes: int = 1,
    ha: bool = False,
    secure: bool = False,
    token_lifetime: float | None = None,
    command_timeout: float = 90.0,
    heap: str = "768m",
    block_size: int = MIN_BLOCK_SIZE,
    nodemanagers: int = 0,
    dead_after: float = 16.0,
) -> list[str]:
    """The ``java`` command line that runs a sandbox in ``base_dir`` (resolving it if needed).

    ``secure``: a Kerberos KDC and a Kerberized cluster with HTTPS WebHDFS (its ready line adds
    the realm, ``krb5_conf``, ``principal``, ``keytab`` and ``ca_file``); ``token_lifetime``:
    the longest life of its delegation tokens, in seconds; ``command_timeout``: the longest a
    command may take before it is answered with an error, in seconds; ``block_size``: the
    cluster's and its clients' ``dfs.blocksize`` in bytes (a multiple of 512, at least 1 MiB);
    ``nodemanagers``: with 1 or more, YARN too (a ResourceManager and that many NodeManagers,
    its address in the ready line's ``yarn``, its client settings in ``conf_dir/yarn-site.xml``;
    with ``secure`` they are Kerberized, logged in as the NameNode's principal, which
    ``yarn-site.xml`` names as ``yarn.resourcemanager.principal``); ``dead_after``: how long the
    NameNode counts a silent DataNode as live, in seconds (at least 12; a production
    NameNode's default is 630).
    """
    if dead_after < 12:
        raise ValueError(f"dead_after: {dead_after:g}s is under 12 seconds")
    if nodemanagers and ha:
        raise ValueError("nodemanagers: YARN runs beside a single NameNode only (not --ha)")
    if nodemanagers < 0:
        raise ValueError(f"nodemanagers: {nodemanagers} is negative")
    if block_size < MIN_BLOCK_SIZE or block_size % 512:
        msg = f"block_size: {block_size} is not a multiple of 512 of at least {MIN_BLOCK_SIZE}"
        raise ValueError(msg)
    classes, classpath = _prepare()
    base = Path(base_dir).resolve()
    base.mkdir(parents=True, exist_ok=True)
    # Hadoop finds ssl-server.xml / ssl-client.xml on the classpath: the launcher writes them here.
    ssl_conf = base / "sslconf"
    ssl_conf.mkdir(exist_ok=True)
    log4j = base / "log4j.properties"
    log4j.write_text(_LOG4J.format(log=base / "sandbox.log"))
    if nodemanagers and heap == "768m":
        heap = "1536m"  # a ResourceManager and NodeManagers share the JVM
    cmd = [
        "java",
        f"-Xmx{heap}",
        "-XX:+UseSerialGC",
        "-XX:TieredStopAtLevel=1",  # a test cluster: start fast rather than peak speed
        f"-Dlog4j.configuration=file:{log4j}",
        # Hadoop 3.4's WebHDFS (Jersey, JAXB) reflects into the JDK: Java 17 must allow it.
        *(f"--add-opens=java.base/{pkg}=ALL-UNNAMED" for pkg in _OPENS),
        "-cp",
        os.pathsep.join([str(ssl_conf), str(classes), classpath]),
        _MAIN,
        str(base),
        "--datanodes",
        str(datanodes),
        "--command-timeout",
        str(command_timeout),
        "--block-size",
        str(block_size),
        "--dead-after",
        str(dead_after),
    ]
    if ha:
        cmd.append("--ha")
    if secure:
        cmd.append("--secure")
    if token_lifetime is not None:
        cmd += ["--token-lifetime", str(token_lifetime)]
    if nodemanagers:
        cmd += ["--yarn", "--nodemanagers", str(nodemanagers)]
    return cmd


@dataclass(frozen=True)
class SandboxInfo:
    """The ready line of a sandbox."""

    hdfs: str
    webhdfs: str
    conf_dir: str
    base_dir: str
    datanodes: int
    ha: bool
    pid: int
    start_seconds: float
    raw: dict[str, Any]
    #: ``--secure`` only: the Kerberos realm, the client krb5.conf, the user's principal and
    #: keytab, and the PEM file of the CA that signed the HTTPS certificates.
    realm: str | None = None
    krb5_conf: str | None = None
    principal: str | None = None
    keytab: str | None = None
    ca_file: str | None = None
    #: ``nodemanagers`` only: the ResourceManager's address (``host:port``) and how many
    #: NodeManagers run.
    yarn: str | None = None
    nodemanagers: int = 0

    @property
    def secure(self) -> bool:
        return self.realm is not None

    @classmethod
    def from_line(cls, line: str) -> SandboxInfo:
        data = json.loads(line)
        return cls(
            hdfs=data["hdfs"],
            webhdfs=data["webhdfs"],
            conf_dir=data["conf_dir"],
            base_dir=data["base_dir"],
            datanodes=int(data["datanodes"]),
            ha=bool(data["ha"]),
            pid=int(data["pid"]),
            start_seconds=float(data["start_seconds"]),
            raw=data,
            realm=data.get("realm"),
            krb5_conf=data.get("krb5_conf"),
            principal=data.get("principal"),
            keytab=data.get("keytab"),
            ca_file=data.get("ca_file"),
            yarn=data.get("yarn"),
            nodemanagers=int(data.get("nodemanagers", 0)),
        )


class Sandbox:
    """A running sandbox process; :meth:`command` sends fault commands."""

    def __init__(
        self,
        process: subprocess.Popen[str],
        info: SandboxInfo,
        log: Path,
        command_timeout: float = 90.0,
    ) -> None:
        self.process = process
        self.info = info
        self.log = log
        self.command_timeout = command_timeout
        self._lock = threading.Lock()

    @classmethod
    def start(
        cls,
        base_dir: str | os.PathLike[str],
        *,
        datanodes: int = 1,
        ha: bool = False,
        secure: bool = False,
        token_lifetime: float | None = None,
        command_timeout: float = 90.0,
        timeout: float = 180.0,
        block_size: int = MIN_BLOCK_SIZE,
        nodemanagers: int = 0,
        dead_after: float = 16.0,
    ) -> Sandbox:
        """Start a sandbox and wait for its ready line (``SandboxError`` with the log's tail).
        Each later command is answered within ``command_timeout`` seconds."""
        cmd = launcher_command(
            base_dir,
            datanodes=datanodes,
            ha=ha,
            secure=secure,
            token_lifetime=token_lifetime,
            command_timeout=command_timeout,
            block_size=block_size,
            nodemanagers=nodemanagers,
            dead_after=dead_after,
        )
        base = Path(base_dir).resolve()
        log = base / "sandbox.log"
        stderr = (base / "sandbox.stderr").open("ab")
        process = subprocess.Popen(
            cmd,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=stderr,
            text=True,
            start_new_session=True,  # a Ctrl-C meant for the tests does not hit the cluster
            cwd=base,
        )
        stderr.close()
        line = _read_line(process, timeout)
        if not line:
            process.kill()
            process.wait()
            raise SandboxError(f"the HDFS sandbox did not start: {_tail(base)}")
        return cls(process, SandboxInfo.from_line(line), log, command_timeout)

    def command(self, text: str, timeout: float | None = None) -> dict[str, Any]:
        """Send one command (``stop-datanode 1``, ``restart-namenode``, ``stop-nodemanager 0``,
        ...) and return its
        answer; ``SandboxError`` when it failed, or took longer than the sandbox's command
        timeout (the sandbox answers then), or when no answer came within ``timeout``."""
        if timeout is None:
            timeout = self.command_timeout + 30.0
        with self._lock:
            stdin = self.process.stdin
            assert stdin is not None
            stdin.write(text + "\n")
            stdin.flush()
            line = _read_line(self.process, timeout)
        if not line:
            raise SandboxError(f"sandbox: no answer to {text!r}: {_tail(Path(self.info.base_dir))}")
        answer: dict[str, Any] = json.loads(line)
        if not answer.get("ok"):
            raise SandboxError(f"sandbox: {text!r} failed: {answer.get('error')}")
        return answer

    def stop(self, timeout: float = 60.0) -> None:
        """SIGTERM (the JVM shuts the cluster down, or halts after 30 s when it cannot), then
        SIGKILL after ``timeout``."""
        if self.process.poll() is not None:
            return
        self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        for stream in (self.process.stdin, self.process.stdout):
            if stream is not None:
                with contextlib.suppress(OSError):
                    stream.close()

    def __enter__(self) -> Sandbox:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _read_line(process: subprocess.Popen[str], timeout: float) -> str:
    """One stdout line, or ``""`` when the process ends or ``timeout`` passes."""
    stdout: IO[str] | None = process.stdout
    assert stdout is not None
    result: list[str] = []
    reader = threading.Thread(target=lambda: result.append(stdout.readline()), daemon=True)
    reader.start()
    deadline = time.monotonic() + timeout
    while reader.is_alive() and time.monotonic() < deadline:
        reader.join(0.1)
        if process.poll() is not None:
            reader.join(1.0)
            break
    return result[0].strip() if result else ""


def _tail(base: Path, lines: int = 20) -> str:
    for name in ("sandbox.stderr", "sandbox.log"):
        path = base / name
        if path.exists():
            text = path.read_text(errors="replace").strip().splitlines()
            if text:
                return f"last lines of {path}:\n" + "\n".join(text[-lines:])
    return "(no log)"
