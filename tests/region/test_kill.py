"""Real crashes: the runtime in a subprocess, SIGKILLed at random points and restarted on the same
checkpoint directory; the output is then checked record by record."""

from __future__ import annotations

import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from operators.fs.local import LocalFileSystem
from region.checkpoint import CheckpointStore
from tests.region._kill_worker import records
from tests.region._participants import expected_lines, wait_until

pytestmark = pytest.mark.slow

WORKER = Path(__file__).with_name("_kill_worker.py")
COUNT = 6000


class Worker:
    def __init__(self, tmp: Path, *extra: str) -> None:
        self.checkpoints = tmp / "checkpoints"
        self.out = tmp / "out.txt"
        self.stderr = tmp / "worker.log"
        command = [
            sys.executable,
            str(WORKER),
            "--checkpoints",
            str(self.checkpoints),
            "--out",
            str(self.out),
            "--records",
            str(COUNT),
            *extra,
        ]
        with open(self.stderr, "ab") as log:
            self.proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=log, text=True)

    def wait_ready(self) -> None:
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        assert line == "ready\n", f"worker did not start: {self.stderr.read_text()[-2000:]}"

    def finish(self) -> int:
        code = self.proc.wait(timeout=120)
        if self.proc.stdout is not None:
            self.proc.stdout.close()
        return code


def newest_cut(checkpoints: Path) -> tuple[int, int]:
    """(cut id, committed source index) a fresh reader sees; (-1, 0) before the first cut."""
    latest = CheckpointStore(LocalFileSystem(), str(checkpoints)).latest()
    if latest is None:
        return -1, 0
    return latest.cut_id, int(latest.operators["source"]["index"])


def test_sigkill_at_random_points_then_restart_delivers_every_record_once_in_order(
    tmp_path: Path,
):
    seed = random.randrange(1 << 32)
    rng = random.Random(seed)
    progress: list[int] = []
    checkpoints = tmp_path / "checkpoints"
    for kill in range(6):
        worker = Worker(tmp_path, "--pause", "0.002", "--batch-size", "4")
        if kill == 0:
            time.sleep(rng.uniform(0.0, 0.3))  # anywhere in start-up and recovery
        else:
            worker.wait_ready()
            before, _ = newest_cut(checkpoints)
            wait_until(lambda b=before: newest_cut(checkpoints)[0] > b, "a cut of this run")
            time.sleep(rng.uniform(0.0, 0.12))  # mid-batch, mid-write or mid-cut
        worker.proc.send_signal(signal.SIGKILL)
        assert worker.finish() == -signal.SIGKILL
        progress.append(newest_cut(worker.checkpoints)[1])

    assert progress == sorted(progress), f"committed progress went back (seed {seed})"
    assert 0 < progress[-1] < COUNT, f"the kills did not land mid-stream (seed {seed})"

    final = Worker(tmp_path, "--available-now")
    assert final.finish() == 0, final.stderr.read_text()[-2000:]
    data = final.out.read_bytes()
    lines = data.decode().splitlines()
    expected = records(COUNT)
    for number, (got, want) in enumerate(zip(lines, expected, strict=False)):
        assert got == want, f"line {number}: {got!r}, expected {want!r} (seed {seed})"
    assert len(lines) == COUNT, f"{len(lines)} lines, expected {COUNT} (seed {seed})"
    assert data == expected_lines(expected)
    assert newest_cut(final.checkpoints)[1] == COUNT


def test_sigterm_stops_gracefully_with_a_final_cut_covering_all_output(tmp_path: Path):
    worker = Worker(tmp_path, "--pause", "0.002", "--batch-size", "4")
    worker.wait_ready()
    wait_until(lambda: newest_cut(worker.checkpoints)[0] >= 0, "a first cut")
    worker.proc.send_signal(signal.SIGTERM)
    assert worker.finish() == 0, worker.stderr.read_text()[-2000:]
    _, index = newest_cut(worker.checkpoints)
    assert 0 < index < COUNT
    # Nothing was written past the final cut, and nothing before it is missing.
    assert worker.out.read_bytes() == expected_lines(records(COUNT)[:index])
