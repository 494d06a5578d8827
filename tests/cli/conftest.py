"""Fixtures of the ``hdfs-region`` command tests: a pipeline folder with landing files, a
settings file writer, and the command run as a real process (or in this process)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

#: A per-record transform the settings files can name: upper-cases, drops "drop" records, and
#: sleeps PACE seconds per record so that a process can be killed in the middle of a run.
PACE_MODULE = """\
import os
import time

PACE = float(os.environ.get("PACE", "0"))


def shout(record):
    if PACE:
        time.sleep(PACE)
    if record.startswith("drop"):
        return None
    return record.upper()


def explode(record):
    if "boom" in record:
        raise ValueError("cannot transform " + repr(record))
    return record
"""


@dataclass
class PipelineDir:
    """A folder holding ``landing/``, settings files, and whatever the runs write."""

    root: Path
    records: list[str] = field(default_factory=list)
    _clock: int = 0

    @property
    def landing(self) -> Path:
        return self.root / "landing"

    @property
    def out(self) -> Path:
        return self.root / "out"

    def add_file(self, name: str, lines: Sequence[str], *, mtime_step: int = 1) -> Path:
        """A landing file; ``mtime_step=0`` gives it the same mtime as the previous one."""
        self.landing.mkdir(parents=True, exist_ok=True)
        path = self.landing / name
        path.write_text("".join(f"{line}\n" for line in lines), encoding="utf-8")
        self._clock += mtime_step
        mtime = 1_700_000_000_000_000_000 + self._clock * 1_000_000_000
        os.utime(path, ns=(mtime, mtime))
        self.records.extend(lines)
        return path

    def add_files(self, count: int, lines: int, *, prefix: str = "f") -> None:
        """``count`` files of ``lines`` unique records; every third file shares an mtime."""
        start = len(list(self.landing.glob("*"))) if self.landing.exists() else 0
        for i in range(start, start + count):
            rows = [f"{prefix}{i:03d}-{j:05d}" for j in range(lines)]
            self.add_file(f"{prefix}{i:03d}.txt", rows, mtime_step=0 if i % 3 == 2 else 1)

    def write_config(self, body: str, name: str = "pipeline.toml") -> Path:
        self.root.mkdir(parents=True, exist_ok=True)
        path = self.root / name
        path.write_text(textwrap.dedent(body), encoding="utf-8")
        (self.root / "pace.py").write_text(PACE_MODULE, encoding="utf-8")
        return path

    def output_lines(self, out: Path | None = None) -> list[str]:
        """Published records in file-number order (hidden in-progress files excluded)."""
        out = out or self.out
        if not out.exists():
            return []
        files = [p for p in out.iterdir() if p.is_file() and not p.name.startswith((".", "_"))]
        files.sort(key=lambda p: int("".join(c for c in p.stem if c.isdigit()) or -1))
        lines: list[str] = []
        for path in files:
            lines.extend(path.read_text(encoding="utf-8").splitlines())
        return lines


@pytest.fixture
def pdir(tmp_path: Path) -> PipelineDir:
    return PipelineDir(tmp_path / "pipe")


def cli_env(**extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    env.pop("HDFS_REGION_FAULT", None)
    env.update(extra)
    return env


def cli(
    *args: str, cwd: Path | None = None, timeout: float = 120, **env: str
) -> subprocess.CompletedProcess[str]:
    """``hdfs-region ARGS`` as a real process; output captured (standard error is a pipe)."""
    return subprocess.run(
        [sys.executable, "-m", "operators.app", *args],
        cwd=cwd,
        env=cli_env(**env),
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def start_cli(*args: str, cwd: Path | None = None, **env: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "operators.app", *args],
        cwd=cwd,
        env=cli_env(**env),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def wait_for(
    predicate: object,
    timeout: float = 60.0,
    what: str = "condition",
    alive: subprocess.Popen[str] | None = None,
) -> None:
    """Poll ``predicate()``; fail at once, with its output, if the process ``alive`` ended."""
    assert callable(predicate)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        if alive is not None and alive.poll() is not None:
            out, err = alive.communicate()
            msg = f"the process ended (exit {alive.returncode}) before {what}:\n{out}\n{err}"
            raise AssertionError(msg)
        time.sleep(0.02)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


def cut_files(checkpoints: Path) -> list[Path]:
    return sorted(checkpoints.glob("cut-*.json")) if checkpoints.exists() else []


def kill_at(point: str, faults: Path, *args: str) -> None:
    """Run ``hdfs-region ARGS`` stopped at the fault point ``point``
    (:mod:`operators.common.faults`)
    and SIGKILL it there; ``faults`` is the folder the point's marker goes in."""
    from operators.common.faults import FAULT_DIR_ENV, FAULT_ENV

    faults.mkdir(exist_ok=True)
    proc = start_cli(*args, **{FAULT_ENV: point, FAULT_DIR_ENV: str(faults)})
    try:
        wait_for(lambda: (faults / point).exists(), 120, f"the process to reach {point}", proc)
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        proc.communicate()
    assert proc.returncode == -signal.SIGKILL
    (faults / point).unlink()
