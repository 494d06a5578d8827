"""The runs a scenario starts: every one tracked, killed with its process group, waited on."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Callable

__all__ = ["kill", "kill_all", "last_error", "track", "wait_for"]

#: Every run started, so that none outlives a scenario that failed half-way.
_STARTED: list[subprocess.Popen[bytes]] = []


def track(proc: subprocess.Popen[bytes]) -> None:
    """Remember a started run, so that :func:`kill_all` can end it."""
    _STARTED.append(proc)


def kill_all() -> None:
    """SIGKILL every run still going (after a scenario error, and at the end)."""
    while _STARTED:
        proc = _STARTED.pop()
        if proc.poll() is None:
            kill(proc)


def kill(proc: subprocess.Popen[bytes]) -> None:
    """SIGKILL the run and everything it started (no cleanup, no final cut)."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()


def wait_for(condition: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(0.02)


def last_error(text: str) -> str:
    """The command's own error line (``hdfs-region: error: ...``), else its last line."""
    lines = [ln for ln in text.splitlines() if ln.strip()]
    for line in reversed(lines):
        if line.startswith("hdfs-region: "):
            return line
    return lines[-1] if lines else ""
