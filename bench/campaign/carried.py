"""A SIGKILL in the window of files spanning Spark batches (``--only carried``).

``hdfs-region run --engine spark`` with ``time_per_file`` keeps a file open from one batch to
the next. The run is killed when batch 1's task has appended to the file batch 0 left open and
the commit has not yet written its entry; the restart comes after ``time_per_file``, so the
replayed batch finds the carried file past its age and publishes it. Every record must be
published once: the dead attempt's records are cut off the carried file first.
"""

from __future__ import annotations

import argparse
import json
import random
import time
from pathlib import Path

from bench.campaign.arrivals import Arrivals
from bench.campaign.outcome import Outcome, tally
from bench.campaign.processes import kill, last_error, wait_for
from bench.campaign.workspace import Workspace
from operators.common.faults import FAULT_DIR_ENV, FAULT_ENV

__all__ = ["carried_file_killed"]

#: ``time_per_file``: long enough for batch 1 to continue batch 0's file on a loaded machine.
_AGE_S = 10.0
#: Where the run stops to be killed: batch 1's tasks are done, its commit has not begun.
_POINT = "before_wal"


def carried_file_killed(work: Path, args: argparse.Namespace) -> Outcome:
    rng = random.Random(args.seed + 60)
    ws = Workspace(
        work / "spark-carried",
        engine="spark",
        period="1s",
        bytes_per_file=None,
        time_per_file=f"{_AGE_S:g}s",
    )
    faults = ws.root / "faults"
    faults.mkdir(exist_ok=True)
    arrivals = Arrivals(ws.landing, rng)
    lines = max(10, args.lines // 10)  # Spark pays per batch, not per record
    arrivals.place(lines, group=2)
    # 1. Batch 0 reads the first files and leaves its file open.
    env = {FAULT_ENV: f"{_POINT}:1", FAULT_DIR_ENV: str(faults)}
    proc = ws.start(env=env)
    wait_for(lambda: ws.progress() >= 1 or proc.poll() is not None, args.timeout, "batch 0")
    # 2. Batch 1 appends the next files to it; the run stops before batch 1's entry.
    arrivals.place(lines, group=2)
    marker = faults / _POINT
    wait_for(lambda: marker.exists() or proc.poll() is not None, args.timeout, "batch 1's commit")
    if proc.poll() is not None:
        raise RuntimeError(f"run {ws.runs} ended before batch 1's commit (see {ws.log})")
    appended = _appended_after_log(ws)
    kill(proc)
    # 3. The restart comes after time_per_file (Spark's start alone is about as long).
    time.sleep(max(0.0, marker.stat().st_mtime + _AGE_S - time.time()))
    code, text = ws.run(timeout=args.timeout)
    result = tally(arrivals.expected, ws.output())
    outcome = (
        f"killed before batch 1's entry, {appended} bytes appended to the carried file, "
        f"final run exit {code}"
        if code == 0
        else f"final run FAILED (exit {code}): {last_error(text)}"
    )
    return Outcome(
        fault="SIGKILL after a task appended to a file carried across batches, restart past "
        "time_per_file",
        engine="spark",
        delivery="exactly_once",
        expected="no loss, no duplicate",
        outcome=outcome,
        lost=result.lost,
        duplicated=result.duplicated,
        corrupt=result.corrupt,
        # The window was hit (the dead attempt's bytes were in the carried file), and counted.
        ok=code == 0 and appended > 0 and result.exactly_once(),
        details={
            "records": result.expected,
            "appended_after_log": appended,
            "runs": ws.runs,
            "examples": result.examples,
        },
    )


def _appended_after_log(ws: Workspace) -> int:
    """Bytes the carried files hold beyond the sizes batch 0's sink log entry records."""
    entry = json.loads((ws.out / "_hdfs_sink" / f"{0:020d}.json").read_text())
    open_files = entry["state"].get("open", [])
    return sum(Path(f["path"]).stat().st_size - int(f["size"]) for f in open_files)
