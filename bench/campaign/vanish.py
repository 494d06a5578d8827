"""A listed file deleted before the source reads it (``--only vanish``)."""

from __future__ import annotations

import argparse
import random
from pathlib import Path

from bench.campaign.arrivals import Arrivals
from bench.campaign.outcome import Outcome, tally
from bench.campaign.processes import wait_for
from bench.campaign.workspace import Workspace

__all__ = ["vanished"]


def vanished(work: Path, args: argparse.Namespace) -> Outcome:
    """Delete a listed file before the source reaches it: a warning names it, nothing else is
    lost."""
    rng = random.Random(args.seed + 40)
    # Slow enough that the last file is still unread when the first cut completes.
    ws = Workspace(work / "vanish", records_per_s=4000, sleep_time="60s")
    arrivals = Arrivals(ws.landing, rng)
    for _ in range(12):
        arrivals.place(400)
    victim = ws.landing / arrivals.files[-1]
    victim_records = {r for r in arrivals.expected if r.startswith(victim.name + ":")}
    proc = ws.start(available_now=True)
    # The one listing happens at start (sleep_time 60 s); the last file is read last.
    wait_for(lambda: ws.progress() >= 1 or proc.poll() is not None, args.timeout, "a first cut")
    victim.unlink()
    code = proc.wait(timeout=args.timeout)
    text = ws.log.read_text(errors="replace")
    warning = next((ln for ln in text.splitlines() if "vanished" in ln), "")
    result = tally(arrivals.expected - victim_records, ws.output())
    named = victim.name in warning
    return Outcome(
        fault="file deleted between scan and read",
        engine="local",
        delivery="exactly_once",
        expected="warning naming the file, nothing else lost",
        outcome=f"exit {code}, warning names the file: {'yes' if named else 'NO'}",
        lost=result.lost,
        duplicated=result.duplicated,
        corrupt=result.corrupt,
        ok=code == 0 and named and result.exactly_once(),
        message=warning.split("WARNING", 1)[-1].strip(),
        details={"deleted_records": len(victim_records)},
    )
