"""The newest checkpoint damaged after a kill (``--only checkpoint``)."""

from __future__ import annotations

import argparse
import random
import time
from pathlib import Path

from bench.campaign.arrivals import Arrivals
from bench.campaign.outcome import Outcome, tally
from bench.campaign.processes import kill, last_error, wait_for
from bench.campaign.workspace import Workspace

__all__ = ["corrupt_checkpoint"]


def corrupt_checkpoint(work: Path, args: argparse.Namespace, *, rolling: bool) -> Outcome:
    """Damage the newest cut file of a killed run: the next run must fall back to the one
    before it and say so.

    Without rolling, nothing was published under the damaged cut: the fallback truncates the
    open file and every record arrives once. With rolling, the damaged cut has usually
    published a file the previous cut still had open: that output cannot be taken back, so
    the run must stop with an error naming the file rather than duplicate records.
    """
    rng = random.Random(args.seed + (11 if rolling else 10))
    ws = Workspace(
        work / f"checkpoint-{'rolling' if rolling else 'one-file'}",
        records_per_s=args.records_per_s,
        bytes_per_file=20_000 if rolling else 10**9,
    )
    arrivals = Arrivals(ws.landing, rng)
    for _ in range(args.backlog):
        arrivals.place(args.lines, group=rng.randint(1, 3))
    proc = ws.start()
    wait_for(lambda: ws.progress() >= 3 or proc.poll() is not None, args.timeout, "3 cuts")
    time.sleep(0.3 if rolling else 0.0)  # let the newest cut complete (and publish)
    kill(proc)
    newest = ws.newest_cut()
    assert newest is not None
    data = bytearray(newest.read_bytes())
    middle = len(data) // 2
    data[middle : middle + 8] = b"\x00garbage"
    newest.write_bytes(bytes(data))
    code, text = ws.run(timeout=args.timeout)
    got = ws.output()
    result = tally(arrivals.expected, got)
    said = newest.name in text and "Skipping checkpoint" in text
    skipped = next((ln for ln in text.splitlines() if "Skipping checkpoint" in ln), "")
    message = skipped.split("WARNING", 1)[-1].strip()
    fault = "newest checkpoint corrupted" + (" (rolling output)" if rolling else "")
    if code == 0:
        return Outcome(
            fault=fault,
            engine="local",
            delivery="exactly_once",
            expected="falls back to the previous cut, says so",
            outcome=f"recovered from the previous cut (exit 0), says so: {'yes' if said else 'NO'}",
            lost=result.lost,
            duplicated=result.duplicated,
            corrupt=result.corrupt,
            ok=said and result.exactly_once(),
            message=message,
            details={"damaged": newest.name, "examples": result.examples},
        )
    # Stopped: what is published so far must hold no duplicate and no torn record; the rest
    # of the input is still in the landing directory (not delivered, not lost).
    error = last_error(text)
    published = tally(arrivals.expected, got, allowed_missing=arrivals.expected)
    return Outcome(
        fault=fault,
        engine="local",
        delivery="exactly_once",
        expected="falls back and says so; or stops naming the file",
        outcome=f"stopped (exit {code}) naming the file the newer cut published",
        lost=0,
        duplicated=published.duplicated,
        corrupt=published.corrupt,
        ok=code == 1 and said and "is missing" in error and published.exactly_once(),
        message=error,
        details={
            "damaged": newest.name,
            "undelivered": result.lost,
            "skipped_message": message,
        },
    )
