"""Benchmark 5: time from a restart after SIGKILL to the first new output (in-process engine).

The real command (``python -m operators.app run pipeline.toml --engine local``) moves a backlog
of files (paced to ``--records-per-s`` so it is still busy when killed); it is SIGKILLed at a
random point after a cut, then started again on the same checkpoint. Measured from the restart
(process start) to:

* recovered: the region is reset to the last cut (log line ``Region recovered``);
* first new cut: a new cut is durable (new records read, written and synced);
* first new file: a new output file is published (readers see new records).

Baseline, in the same run: a fresh start of the same command on a fresh copy of the input (no
checkpoint) to the same milestones. The published output is checked record by record at the end.

    python bench/bench_recovery.py                # 5 kills, 1 s period
    python bench/bench_recovery.py --trials 2     # a quick run
"""

from __future__ import annotations

import argparse
import contextlib
import random
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.campaign import Arrivals, Workspace, kill, kill_all, tally, wait_for
from bench.common import add_common_args, median, print_table, scratch, write_json
from region.settings import parse_duration

MILESTONES = ("recovered", "first_cut", "first_file")


def watch_milestones(
    ws: Workspace, proc: Any, started: float, timeout: float, *, poll: float = 0.005
) -> dict[str, float]:
    """Seconds from ``started`` until each milestone (polled every ``poll`` seconds)."""
    log_from = ws.log.stat().st_size
    cut_before = ws.progress()
    files_before = ws.output_names()
    seen: dict[str, float] = {}
    deadline = started + timeout
    while len(seen) < len(MILESTONES):
        now = time.perf_counter()
        if now > deadline or proc.poll() is not None:
            raise RuntimeError(f"milestones {sorted(set(MILESTONES) - set(seen))} not reached")
        if "recovered" not in seen:
            with open(ws.log, "rb") as f:
                f.seek(log_from)
                if b"Region recovered" in f.read():
                    seen["recovered"] = now - started
        if "first_cut" not in seen and ws.progress() > cut_before:
            seen["first_cut"] = now - started
        if "first_file" not in seen and ws.output_names() - files_before:
            seen["first_file"] = now - started
        time.sleep(poll)
    return seen


@contextlib.contextmanager
def _no_leftover_runs() -> Iterator[None]:
    try:
        yield
    finally:
        kill_all()


def _new_cut(ws: Workspace) -> Any:
    before = ws.progress()
    return lambda: ws.progress() > before


#: ``make_workspace(name, seconds)``: a pipeline with input for ``seconds`` of paced work.
MakeWorkspace = Callable[[str, float], tuple[Workspace, Arrivals]]


def local_workspace(work: Path, args: argparse.Namespace) -> MakeWorkspace:
    """Pipelines on the local disk, with the input placed before the start."""

    def make(name: str, seconds: float) -> tuple[Workspace, Arrivals]:
        ws = Workspace(
            work / name,
            records_per_s=args.records_per_s,
            period=args.period,
            bytes_per_file=1_000_000,
            max_resets=3,
        )
        return ws, place_input(ws, args, seconds)

    return make


def place_input(ws: Workspace, args: argparse.Namespace, seconds: float) -> Arrivals:
    """Input for ``seconds`` of work at ``args.records_per_s``, ``args.lines`` lines a file."""
    arrivals = Arrivals(ws.landing, random.Random(args.seed))
    for _ in range(max(1, int(args.records_per_s * seconds / args.lines) + 1)):
        arrivals.place(args.lines)
    return arrivals


def measure_recovery(
    make_workspace: MakeWorkspace, args: argparse.Namespace, *, poll: float = 0.005
) -> tuple[list[dict[str, float]], list[dict[str, float]], Workspace]:
    """``(after SIGKILL, fresh start, the killed pipeline's workspace)``: milestone seconds of
    ``args.trials`` restarts after a kill on one checkpoint, and of up to 3 fresh starts.
    Raises when the output after the kills is not every record exactly once. The caller keeps
    :func:`kill_all` for runs left over by an error."""
    rng = random.Random(args.seed)
    period_s = parse_duration(args.period)

    # Baseline: fresh starts of the same command (no checkpoint yet).
    baseline: list[dict[str, float]] = []
    for i in range(max(1, min(args.trials, 3))):
        ws, _ = make_workspace(f"fresh-{i}", 6 * period_s)
        started = time.perf_counter()
        proc = ws.start()
        baseline.append(watch_milestones(ws, proc, started, args.timeout, poll=poll))
        kill(proc)

    # Kills and restarts on one checkpoint.
    # Each kill costs a restart and a few periods of work; leave plenty to spare.
    ws, arrivals = make_workspace("killed", (args.trials + 2) * 6 * period_s)
    proc = ws.start()
    recoveries: list[dict[str, float]] = []
    for _ in range(args.trials):
        wait_for(_new_cut(ws), args.timeout, "a cut before the kill")
        time.sleep(rng.uniform(0.0, 0.8))
        kill(proc)
        started = time.perf_counter()
        proc = ws.start()
        recoveries.append(watch_milestones(ws, proc, started, args.timeout, poll=poll))
    kill(proc)
    code, _ = ws.run(timeout=args.timeout)
    result = tally(arrivals.expected, ws.output())
    if code != 0 or not result.exactly_once():
        raise RuntimeError(
            f"after the kills: exit {code}, lost {result.lost}, duplicated "
            f"{result.duplicated}, corrupt {result.corrupt} (see {ws.log})"
        )
    return recoveries, baseline, ws


def summarize(
    recoveries: list[dict[str, float]], baseline: list[dict[str, float]]
) -> tuple[dict[str, float], dict[str, float], dict[str, float | None]]:
    """Medians per milestone after SIGKILL and on a fresh start, and their ratios."""

    def summary(rows: list[dict[str, float]]) -> dict[str, float]:
        return {m: round(median([r[m] for r in rows]), 3) for m in MILESTONES}

    rec, base = summary(recoveries), summary(baseline)
    ratios = {m: round(rec[m] / base[m], 2) if base[m] else None for m in MILESTONES}
    return rec, base, ratios


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=5, help="kills and restarts (default 5)")
    parser.add_argument("--period", default="1s", help="cut period (default 1s)")
    parser.add_argument("--lines", type=int, default=5000, help="lines per file (default 5000)")
    parser.add_argument("--records-per-s", type=float, default=50_000, help="pace of the pipeline")
    parser.add_argument("--seed", type=int, default=5)
    parser.add_argument("--timeout", type=float, default=120.0)
    add_common_args(parser, "recovery")
    args = parser.parse_args(argv)

    with scratch(args.work, "bench-recovery-") as work, _no_leftover_runs():
        recoveries, baseline, _ = measure_recovery(local_workspace(work, args), args)

    rec, base, ratios = summarize(recoveries, baseline)
    out: dict[str, Any] = {
        "benchmark": "recovery",
        "trials": args.trials,
        "period": args.period,
        "records_per_s": args.records_per_s,
        "after_sigkill_s": rec,
        "fresh_start_s": base,
        "ratio_to_fresh_start": ratios,
        "samples": {"after_sigkill": recoveries, "fresh_start": baseline},
        "output_correct": True,
    }
    print_table(
        f"Benchmark 5: restart after SIGKILL (in-process engine, period {args.period}, "
        f"median of {args.trials} kills) vs a fresh start",
        ["seconds from process start to", "after SIGKILL", "fresh start", "ratio"],
        [[m.replace("_", " "), rec[m], base[m], ratios[m]] for m in MILESTONES],
    )
    print(f"output after {args.trials} kills: every record exactly once")
    write_json(args.json, out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
