"""The campaign's command line: which scenarios run and in what order (the registry), then the
table and ``bench/results/campaign.json``. ``bench/fault_campaign.py`` runs :func:`main`."""

from __future__ import annotations

import argparse
import random
import shutil
import time
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path

from bench.campaign.carried import carried_file_killed
from bench.campaign.checkpoint import corrupt_checkpoint
from bench.campaign.cron import cron
from bench.campaign.curated import curated_campaign
from bench.campaign.datanode import datanode_dies
from bench.campaign.decode import undecodable
from bench.campaign.disk import disk_full
from bench.campaign.heartbeat import heartbeat_dies
from bench.campaign.kills import kill_campaign
from bench.campaign.operations import operations
from bench.campaign.outcome import Outcome
from bench.campaign.permission import permission_denied
from bench.campaign.processes import kill_all
from bench.campaign.special import named_pipe
from bench.campaign.vanish import vanished
from bench.campaign.webhdfs import webhdfs_server_killed
from bench.common import add_common_args, print_table, scratch, write_json

__all__ = ["SCENARIOS", "Step", "main", "plan"]

DESCRIPTION = (
    "The fault campaign: crash and break the real ``hdfs-region run`` command, count every record."
)

#: The ``--only`` names, in the order their scenarios run.
SCENARIOS = (
    "kills",
    "spark",
    "carried",
    "checkpoint",
    "webhdfs",
    "datanode",
    "decode",
    "vanish",
    "special",
    "heartbeat",
    "permission",
    "disk",
    "operations",
    "archive",
    "cron",
    "curated",
)

#: A scenario name and the call that runs it: one row of the table, or several.
Step = tuple[str, Callable[[], Outcome | list[Outcome]]]


def parse_args(argv: list[str] | None) -> tuple[argparse.Namespace, list[str]]:
    """The options, and the scenario names ``--only`` selects."""
    parser = argparse.ArgumentParser(description=DESCRIPTION)
    parser.add_argument("--kills", type=int, default=10, help="SIGKILLs per delivery, local")
    parser.add_argument("--spark-kills", type=int, default=2, help="SIGKILLs of the Spark run")
    parser.add_argument("--backlog", type=int, default=20, help="files present at the start")
    parser.add_argument("--lines", type=int, default=400, help="lines per input file")
    parser.add_argument(
        "--arrival-interval", type=float, default=0.15, help="seconds between arrivals"
    )
    parser.add_argument(
        "--records-per-s",
        type=float,
        default=20_000,
        help="pace of the local pipeline, so faults land mid-run (0: full speed)",
    )
    parser.add_argument("--seed", type=int, default=None, help="random seed (default: random)")
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds per run at most")
    parser.add_argument(
        "--only",
        default=",".join(SCENARIOS),
        help=f"scenarios (default all: {','.join(SCENARIOS)})",
    )
    parser.add_argument("--keep", action="store_true", help="keep the work directory")
    add_common_args(parser, "campaign")
    args = parser.parse_args(argv)
    if args.seed is None:
        args.seed = random.randrange(1 << 30)
    only = [s.strip() for s in args.only.split(",") if s.strip()]
    unknown = sorted(set(only) - set(SCENARIOS))
    if unknown:
        parser.error(f"--only: unknown scenario(s) {unknown} (known: {', '.join(SCENARIOS)})")
    return args, only


def plan(work: Path, args: argparse.Namespace, only: list[str]) -> list[Step]:
    """The steps of the scenarios named in ``only``, in the order of :data:`SCENARIOS`."""
    steps: list[Step] = []
    if "kills" in only and args.kills > 0:
        for delivery in ("exactly_once", "at_least_once"):
            steps.append(
                (
                    "kills",
                    lambda d=delivery: kill_campaign(
                        work, args, engine="local", delivery=d, kills=args.kills
                    ),
                )
            )
    if "spark" in only and args.spark_kills > 0:
        steps.append(
            (
                "spark",
                lambda: kill_campaign(
                    work, args, engine="spark", delivery="exactly_once", kills=args.spark_kills
                ),
            )
        )
    if "archive" in only and args.kills > 0:
        steps.append(
            (
                "archive",
                lambda: kill_campaign(
                    work,
                    args,
                    engine="local",
                    delivery="exactly_once",
                    kills=args.kills,
                    after_read="archive",
                ),
            )
        )
    for name, func in (
        ("carried", lambda: carried_file_killed(work, args)),
        ("checkpoint", lambda: corrupt_checkpoint(work, args, rolling=False)),
        ("checkpoint", lambda: corrupt_checkpoint(work, args, rolling=True)),
        ("webhdfs", lambda: webhdfs_server_killed(work, args)),
        ("datanode", lambda: datanode_dies(work, args)),
        ("decode", lambda: undecodable(work, args)),
        ("vanish", lambda: vanished(work, args)),
        ("special", lambda: named_pipe(work, args)),
        ("heartbeat", lambda: heartbeat_dies(work, args)),
        ("permission", lambda: permission_denied(work, args)),
        ("disk", lambda: disk_full(work, args)),
        ("operations", lambda: operations(work, args)),
        ("cron", lambda: cron(work, args)),
        ("curated", lambda: curated_campaign(work, args)),
    ):
        if name in only:
            steps.append((name, func))
    return steps


def run_steps(steps: list[Step]) -> list[Outcome]:
    """Run each step, printing its rows as they come."""
    rows: list[Outcome] = []
    for name, func in steps:
        begun = time.perf_counter()
        try:
            produced = func()
        except Exception as exc:  # a scenario that could not run is a failed row, not a crash
            kill_all()
            produced = Outcome(
                fault=name,
                engine="-",
                delivery="-",
                expected="-",
                outcome=f"scenario error: {type(exc).__name__}: {exc}",
            )
        for row in produced if isinstance(produced, list) else [produced]:
            row.details["seconds"] = round(time.perf_counter() - begun, 1)
            rows.append(row)
            print(
                f"[{'ok' if row.ok else 'FAIL'}] {row.fault} ({row.engine}, {row.delivery}): "
                f"{row.outcome}",
                flush=True,
            )
    return rows


def report(rows: list[Outcome], args: argparse.Namespace, started: float) -> bool:
    """Print the table and what the user was told, write the JSON; whether every row is ok."""
    print_table(
        f"Fault campaign (seed {args.seed}, {time.perf_counter() - started:.0f} s)",
        ["fault", "engine", "delivery", "outcome", "lost", "dup", "corrupt", "ok"],
        [
            [r.fault, r.engine, r.delivery, r.outcome, r.lost, r.duplicated, r.corrupt, r.ok]
            for r in rows
        ],
    )
    messages = [(r.fault, r.message) for r in rows if r.message]
    if messages:
        print("\nWhat the user was told:")
        for fault, message in messages:
            print(f"  {fault}: {message}")
    all_ok = all(r.ok for r in rows)
    write_json(
        args.json,
        {
            "benchmark": "fault_campaign",
            "seed": args.seed,
            "kills": args.kills,
            "spark_kills": args.spark_kills,
            "seconds": round(time.perf_counter() - started, 1),
            "all_ok": all_ok,
            "total_lost": sum(r.lost for r in rows),
            "total_duplicated": sum(r.duplicated for r in rows if r.delivery != "at_least_once"),
            "rows": [asdict(r) for r in rows],
        },
    )
    return all_ok


def main(argv: list[str] | None = None) -> int:
    args, only = parse_args(argv)
    started = time.perf_counter()
    with scratch(args.work, "fault-campaign-") as work:
        rows = run_steps(plan(work, args, only))
        kill_all()
        if args.keep:
            kept = Path(str(work) + "-kept")
            shutil.copytree(work, kept, symlinks=True)
            print(f"work directory kept in {kept}")
    return 0 if report(rows, args, started) else 1
