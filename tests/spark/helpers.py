"""Input files and output checks shared by the Spark tests (and the crash worker)."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from operators.spark.commit import IN_PROGRESS_PREFIX
from operators.spark.sink import FAULT_ENV

ROOT = Path(__file__).resolve().parents[2]


def write_inputs(directory: Path, files: dict[str, bytes], first_mtime_ns: int) -> None:
    """Files with strictly increasing mtimes, in the order given (the scan order)."""
    directory.mkdir(parents=True, exist_ok=True)
    for i, (name, data) in enumerate(files.items()):
        path = directory / name
        path.write_bytes(data)
        mtime = first_mtime_ns + i * 1_000_000_000
        os.utime(path, ns=(mtime, mtime))


def lines_of(data: bytes) -> list[str]:
    """The records a line reader yields: LF or CRLF ends, a last line without LF counts."""
    text = data.decode()
    lines = text.split("\n")
    if lines[-1] == "":
        lines.pop()
    return [line.removesuffix("\r") for line in lines]


def published_lines(directory: Path, prefix: str = "part-") -> list[str]:
    """What a plain directory reader sees, files in %FILENUM order."""
    names = [n for n in os.listdir(directory) if n.startswith(prefix)]
    names.sort(key=lambda n: int(n[len(prefix) :].split(".")[0]))
    return [line for n in names for line in lines_of((directory / n).read_bytes())]


def leftovers(directory: Path) -> list[str]:
    """In-progress and temporary files left in the output and its sink log."""
    found = [n for n in os.listdir(directory) if n.startswith(IN_PROGRESS_PREFIX)]
    log = directory / "_hdfs_sink"
    if log.exists():
        found += [n for n in os.listdir(log) if n.endswith(".tmp")]
    return found


def start_worker(tmp: Path, fault: str | None, command: list[str]) -> subprocess.Popen[bytes]:
    """``command`` in its own process group, stopping at the fault point ``fault`` (a marker
    file in ``tmp/faults`` says it got there); its output goes to ``tmp/worker.log``."""
    env = dict(os.environ, HDFS_REGION_FAULT_DIR=str(tmp / "faults"))
    env.pop(FAULT_ENV, None)
    if fault is not None:
        env[FAULT_ENV] = fault
    log = (tmp / "worker.log").open("ab")
    return subprocess.Popen(
        command,
        cwd=ROOT,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,  # one process group: the driver, its JVM and their workers
    )


def kill_at(tmp: Path, fault: str, command: list[str], timeout: float = 240.0) -> None:
    """Run ``command`` until it reaches ``fault``, then SIGKILL its whole process group."""
    marker = tmp / "faults" / fault.split(":")[0]
    proc = start_worker(tmp, fault, command)
    deadline = time.monotonic() + timeout
    try:
        while not marker.exists():
            if proc.poll() is not None:
                log = (tmp / "worker.log").read_text()[-3000:]
                pytest.fail(f"worker ended (rc={proc.returncode}) before {fault}:\n{log}")
            if time.monotonic() > deadline:
                pytest.fail(f"worker did not reach {fault} within {timeout} s")
            time.sleep(0.2)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        marker.unlink(missing_ok=True)
