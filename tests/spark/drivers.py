"""Driver processes on a cluster, and what kills them at odd moments: shared by the tests on the
standalone cluster (test_cluster.py), on YARN (test_yarn.py) and on a Kerberized YARN
(test_yarn_secure.py). Landing, output and checkpoints are on the session's real HDFS."""

from __future__ import annotations

import contextlib
import os
import posixpath
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from operators.spark.commit import IN_PROGRESS_PREFIX
from region.fs import FileSystem

#: A transform whose first batch's task holds until the test has done its harm: it marks
#: ``started-<pid>`` in the gate folder, then waits for ``go``.
GATED_TRANSFORM = """\
import os
import time

GATE = {gate!r}


def upper(value):
    # The first batch's task holds here until the test has killed what runs it.
    marker = os.path.join(GATE, "started-%d" % os.getpid())
    if not os.path.exists(marker):
        open(marker, "w").close()
    while not os.path.exists(os.path.join(GATE, "go")):
        time.sleep(0.05)
    return value.upper()
"""


def land(fs: FileSystem, landing: str, name: str, lines: list[str]) -> None:
    """One file written under a hidden name, then renamed (as uploads do)."""
    fs.mkdirs(landing)
    tmp = posixpath.join(landing, f".{name}.tmp")
    writer = fs.create(tmp)
    writer.write("".join(f"{line}\n" for line in lines).encode())
    writer.close()
    fs.rename(tmp, posixpath.join(landing, name))
    time.sleep(0.005)  # HDFS keeps milliseconds: distinct mtimes


def published(fs: FileSystem, out: str) -> list[str]:
    """What a plain directory reader sees (``_``-names are the sink's own)."""
    names = sorted(
        (s.name for s in fs.list_dir(out) if not s.name.startswith(("_", "."))),
        key=lambda n: int(n.split("-")[1].split(".")[0]),
    )
    return [line for n in names for line in fs.read(posixpath.join(out, n)).decode().splitlines()]


def orphans(fs: FileSystem, out: str) -> list[str]:
    return [s.name for s in fs.list_dir(out) if s.name.startswith(IN_PROGRESS_PREFIX)]


def assert_published_once(fs: FileSystem, out: str, files: dict[str, list[str]]) -> None:
    """Every line of ``files``, upper-cased by the transform, published once in ``out``, and
    no in-progress file left."""
    expected = [line.upper() for lines in files.values() for line in lines]
    got = published(fs, out)
    assert sorted(got) == sorted(expected)
    assert len(got) == len(set(got)) == len(expected)
    assert orphans(fs, out) == []


def start_driver(command: list[str], env: dict[str, str], cwd: Path, log: Path) -> Any:
    """A driver process in its own session (a kill takes its JVM too), output to ``log``."""
    with log.open("ab") as out:
        return subprocess.Popen(
            command, env=env, cwd=cwd, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )


@contextlib.contextmanager
def driver(command: list[str], env: dict[str, str], cwd: Path, log: Path) -> Iterator[Any]:
    """:func:`start_driver`, its process group SIGKILLed on the way out if it still runs."""
    process = start_driver(command, env, cwd, log)
    try:
        yield process
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()


def wait_until(found: Callable[[], Any], process: Any, log: Path, *, timeout: float = 600) -> Any:
    """Poll ``found()`` until it gives something true, and return it; fail with the driver's
    log when the driver ends first or ``timeout`` passes."""
    deadline = time.monotonic() + timeout
    while not (result := found()):
        assert process.poll() is None, log.read_text()[-3000:]
        assert time.monotonic() < deadline, log.read_text()[-3000:]
        time.sleep(0.1)
    return result


def held_tasks(gate: Path) -> set[int]:
    """The pids of the Python workers whose task holds at ``gate`` (:data:`GATED_TRANSFORM`)."""
    return {int(p.name.split("-")[1]) for p in gate.glob("started-*")}


def kill_after_wal_while_landing(
    process: Any,
    log: Path,
    faults: Path,
    fs: FileSystem,
    landing: str,
    files: dict[str, list[str]],
    names: Iterator[str],
    *,
    every: float,
) -> None:
    """Land the files left in ``names`` one per ``every`` seconds while the driver runs; SIGKILL
    it once it stopped after a batch's write-ahead entry, then land what is left."""
    stop_landing = threading.Event()

    def keep_landing() -> None:
        for name in names:
            if stop_landing.wait(every):
                return
            land(fs, landing, name, files[name])

    lander = threading.Thread(target=keep_landing)
    lander.start()
    try:
        wait_until(lambda: (faults / "after_wal").exists(), process, log, timeout=400)
    finally:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()
        stop_landing.set()
        lander.join()
    for name in names:  # what did not land before the kill lands now
        land(fs, landing, name, files[name])
