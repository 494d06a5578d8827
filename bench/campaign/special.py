"""A named pipe in the landing directory among arriving files, with SIGKILLs (``--only
special``): it is left out and named, never opened (which would wait for a writer forever)."""

from __future__ import annotations

import argparse
import os
import random
import time
from pathlib import Path

from bench.campaign.arrivals import Arrivals, Feeder
from bench.campaign.outcome import Outcome, tally
from bench.campaign.processes import kill, last_error, wait_for
from bench.campaign.workspace import Workspace, progressed

__all__ = ["named_pipe"]

#: Its name matches the scan's pattern and sorts among the input files.
PIPE = "in-00003-pipe.txt"


def named_pipe(work: Path, args: argparse.Namespace) -> Outcome:
    """SIGKILLs while files arrive beside a named pipe nobody writes, then a final run: every
    record once, the pipe named in a WARNING, every run ends by itself."""
    rng = random.Random(args.seed + 60)
    ws = Workspace(work / "special", records_per_s=args.records_per_s)
    arrivals = Arrivals(ws.landing, rng)
    for _ in range(max(4, args.backlog // 2)):
        arrivals.place(args.lines, group=rng.randint(1, 3))
    os.mkfifo(ws.landing / PIPE)
    feeder = Feeder(arrivals, lines=args.lines, interval=args.arrival_interval)
    feeder.start()
    kills = min(args.kills, 2)  # the kills are the kill scenario's subject; here, the pipe
    try:
        for _ in range(kills):
            proc = ws.start()
            wait_for(progressed(ws, proc), args.timeout, "a cut of this run")
            if proc.poll() is not None:
                raise RuntimeError(f"run {ws.runs} ended by itself (see {ws.log})")
            time.sleep(rng.uniform(0.0, 0.4))
            kill(proc)
    finally:
        feeder.stop_event.set()
        feeder.join()
    code, text = ws.run(timeout=args.timeout)  # raises if it hangs on the pipe
    warnings = [ln for ln in text.splitlines() if PIPE in ln and "WARNING" in ln]
    result = tally(arrivals.expected, ws.output())
    named = len(warnings) == 1 and "named pipe" in warnings[0]
    return Outcome(
        fault="named pipe in the landing directory, SIGKILLs",
        engine="local",
        delivery="exactly_once",
        expected="the pipe left out and named once a run, no loss, no duplicate",
        outcome=(
            f"{kills} kills, final run exit {code}, pipe named: {'yes' if named else 'NO'}"
            if code == 0
            else f"final run FAILED (exit {code}): {last_error(text)}"
        ),
        lost=result.lost,
        duplicated=result.duplicated,
        corrupt=result.corrupt,
        ok=code == 0 and named and result.exactly_once(),
        message=warnings[0].split("WARNING", 1)[-1].strip() if warnings else "",
        details={"records": result.expected, "runs": ws.runs, "examples": result.examples},
    )
