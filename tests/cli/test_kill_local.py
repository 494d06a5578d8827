"""Real crashes of the local engine: SIGKILL at random points, the same command again, and the
output compared record by record with the input (exactly once, in scan order)."""

from __future__ import annotations

import random
import signal
import time
from pathlib import Path
from subprocess import Popen

import pytest

from tests.cli.conftest import PipelineDir, cli, cut_files, start_cli, wait_for

SETTINGS = """\
    engine = "local"
    [region]
    trigger = "{trigger}"
    period = "{period}"
    [scan]
    directory = "landing"
    [transform]
    function = "pace:shout"
    [sink]
    file = "out/part-%FILENUM.txt"
    tuples_per_file = 45
    publish = "{publish}"
"""


def newest_cut(checkpoints: Path) -> int:
    """The id of the newest cut file (old ones are retired, so counting them would not do)."""
    return max((int(p.stem.split("-")[1]) for p in cut_files(checkpoints)), default=0)


def scan_order(pdir: PipelineDir) -> list[str]:
    files = sorted(pdir.landing.iterdir(), key=lambda p: (p.stat().st_mtime_ns, p.name))
    return [line.upper() for f in files for line in f.read_text().splitlines()]


@pytest.mark.parametrize(
    ("trigger", "period", "publish", "seed"),
    [
        ("periodic", "60ms", "atomic", 1),
        ("operator_driven", "1s", "atomic", 2),
        ("periodic", "90ms", "visible", 3),
    ],
)
def test_sigkill_anywhere_then_the_same_command_resumes_exactly_once(
    pdir: PipelineDir, trigger: str, period: str, publish: str, seed: int
) -> None:
    rng = random.Random(seed)
    pdir.add_files(6, 60)
    config = pdir.write_config(SETTINGS.format(trigger=trigger, period=period, publish=publish))
    checkpoints = pdir.root / "checkpoints" / "pipeline"
    command = ("run", str(config), "--available-now", "--no-progress")
    kills = 0
    for attempt in range(4):
        running = start_cli(*command, PACE="0.002")
        try:
            # Let it make some progress (at least one cut of this run), then kill it anywhere.
            cuts_before = newest_cut(checkpoints)

            def progressed(proc: Popen[str] = running, before: int = cuts_before) -> bool:
                return proc.poll() is not None or newest_cut(checkpoints) > before

            wait_for(progressed, what="a cut")
            time.sleep(rng.uniform(0.0, 0.25))
            if running.poll() is None:
                running.send_signal(signal.SIGKILL)
                kills += 1
            running.communicate(timeout=60)
        finally:
            if running.poll() is None:
                running.kill()
                running.wait()
        if publish == "atomic":
            # A plain reader only ever sees complete files: a prefix of the input, once.
            seen = pdir.output_lines()
            assert seen == scan_order(pdir)[: len(seen)]
        if attempt == 1:
            # Files arrive while the pipeline is down, one sharing the newest mtime.
            pdir.add_file("late-a.txt", [f"late-a-{i}" for i in range(30)], mtime_step=0)
            pdir.add_file("late-b.txt", [f"late-b-{i}" for i in range(30)])
    assert kills >= 2  # the runs were killed mid-way, not only finished
    done = cli(*command)
    assert done.returncode == 0, done.stderr
    got = pdir.output_lines()
    expected = scan_order(pdir)
    assert len(got) == len(expected) == 420
    assert got == expected  # every record once, in the scan's order, across the file numbers
    assert not [p for p in pdir.out.iterdir() if p.name.startswith(".")]


def test_sigkill_of_a_streaming_run_then_resume_with_more_files(pdir: PipelineDir) -> None:
    """Without --available-now: killed while waiting for files, restarted, stopped by SIGTERM."""
    pdir.add_files(2, 40)
    config = pdir.write_config(
        SETTINGS.format(trigger="periodic", period="50ms", publish="atomic").replace(
            'directory = "landing"', 'directory = "landing"\nsleep_time = "50ms"'
        )
    )
    running = start_cli("run", str(config), PACE="0")
    try:
        wait_for(lambda: len(pdir.output_lines()) >= 45, what="the first file", alive=running)
        running.send_signal(signal.SIGKILL)
        running.wait(timeout=30)
        pdir.add_files(2, 40, prefix="g")
        running = start_cli("run", str(config), PACE="0")
        wait_for(
            lambda: len(pdir.output_lines()) >= 135, what="output of the new files", alive=running
        )
        running.send_signal(signal.SIGTERM)
        _, err = running.communicate(timeout=60)
    finally:
        if running.poll() is None:
            running.kill()
            running.wait()
    assert running.returncode == 0, err
    assert pdir.output_lines() == scan_order(pdir)
