"""Random SIGKILLs of ``hdfs-region run`` while files keep arriving (``--only kills,spark``)."""

from __future__ import annotations

import argparse
import random
import time
from pathlib import Path

from bench.campaign.arrivals import Arrivals, Feeder
from bench.campaign.outcome import Outcome, tally
from bench.campaign.processes import kill, last_error, wait_for
from bench.campaign.workspace import Workspace, progressed

__all__ = ["kill_campaign"]


def kill_campaign(
    work: Path,
    args: argparse.Namespace,
    *,
    engine: str,
    delivery: str,
    kills: int,
    after_read: str = "keep",
) -> Outcome:
    """Random SIGKILLs while files keep arriving, then a final run to completion. With
    ``after_read = "archive"`` the kills also land around the archive step: no file may be
    archived before all its records are published, and all are archived at the end."""
    rng = random.Random(args.seed + (0 if delivery == "exactly_once" else 1))
    spark = engine == "spark"
    archiving = after_read == "archive"
    ws = Workspace(
        work / (f"kills-{engine}-{delivery}" + ("-archive" if archiving else "")),
        engine=engine,
        delivery=delivery,
        records_per_s=args.records_per_s,
        period="1s" if spark else "250ms",
        bytes_per_file=60_000,
        after_read=after_read,
    )
    unread: list[str] = []
    arrivals = Arrivals(ws.landing, rng)
    # Spark pays seconds per batch whatever its size: fewer records keep its runs short.
    lines = max(10, args.lines // 10) if spark else args.lines
    for _ in range(args.backlog):
        arrivals.place(lines, group=rng.randint(1, 4))
    feeder = Feeder(arrivals, lines=lines, interval=args.arrival_interval * (3 if spark else 1))
    feeder.start()
    where: list[str] = []
    try:
        for _ in range(kills):
            proc = ws.start()
            if rng.random() < 0.25:
                time.sleep(rng.uniform(0.0, 3.0 if spark else 0.8))  # start-up and recovery
                where.append("start-up")
            else:
                wait_for(progressed(ws, proc), args.timeout, "a cut of this run")
                if proc.poll() is not None:
                    raise RuntimeError(f"run {ws.runs} ended by itself (see {ws.log})")
                time.sleep(rng.uniform(0.0, 1.6 if spark else 0.4))  # mid-batch or mid-cut
                where.append("running")
            kill(proc)
            if archiving:
                unread += archived_unread(ws)
    finally:
        feeder.stop_event.set()
        feeder.join()
    if arrivals.late == 0:  # a short campaign: arrive late once before the final run
        arrivals.place(lines, group=2, late=True)
    code, text = ws.run(timeout=args.timeout)
    result = tally(arrivals.expected, ws.output())
    good = result.exactly_once() if delivery == "exactly_once" else result.at_least_once()
    left: list[str] = []
    if archiving:
        unread += archived_unread(ws)
        left = sorted(p.name for p in ws.landing.iterdir() if not p.name.startswith((".", "_")))
        good = good and not unread and not left
    outcome = (
        f"{kills} kills, final run exit {code}"
        if code == 0
        else f"final run FAILED (exit {code}): {last_error(text)}"
    )
    if archiving:
        outcome += f", {len(unread)} archived unread, {len(left)} left unarchived"
    return Outcome(
        fault=("after_read = archive: " if archiving else "")
        + f"{kills} x SIGKILL while files arrive",
        engine=engine,
        delivery=delivery,
        expected="no loss" + (", no duplicate" if delivery == "exactly_once" else ""),
        outcome=outcome,
        lost=result.lost,
        duplicated=result.duplicated,
        corrupt=result.corrupt,
        ok=code == 0 and good,
        details={
            "records": result.expected,
            "files": len(arrivals.files),
            "late_files": arrivals.late,
            "kill_points": where,
            "archived_unread": unread[:5],
            "left_unarchived": left[:5],
            "runs": ws.runs,
            "examples": result.examples,
        },
    )


def archived_unread(ws: Workspace) -> list[str]:
    """Archived files with a record that no published file holds (each record line is unique)."""
    if not ws.archive.exists():
        return []
    published = set(ws.output())
    return [
        str(path)
        for path in sorted(ws.archive.rglob("*"))
        if path.is_file() and any(line not in published for line in path.read_text().splitlines())
    ]
