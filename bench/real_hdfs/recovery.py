"""Part 3: the kills of bench_recovery.py with output and checkpoints on the cluster: from a
restart after SIGKILL to recovered, first cut and first published file, against a fresh start."""

from __future__ import annotations

import argparse
import re
from pathlib import Path
from typing import Any

from bench import bench_recovery
from bench.campaign import Arrivals, Workspace, kill_all
from bench.common import median, print_table
from bench.real_hdfs.cluster import Cluster

_RESET = re.compile(rb"Region recovered to [^\n]*? at start in ([0-9.]+) s")
_LEASE = re.compile(rb"lease recovered in ([0-9.]+)s")


def restarts_from_log(log: Path, runs: range) -> list[dict[str, Any]]:
    """For each run in ``runs`` (1-based, as Workspace numbers them): the seconds the region's
    reset at start took and the seconds each lease recovery took, from the run's log."""
    text = log.read_bytes()
    parts = re.split(rb"\n===== run (\d+) ", text)
    by_run = {int(parts[i]): parts[i + 1] for i in range(1, len(parts) - 1, 2)}
    out = []
    for run in runs:
        segment = by_run.get(run, b"")
        reset = _RESET.search(segment)
        out.append(
            {
                "run": run,
                "reset_s": float(reset.group(1)) if reset else None,
                "lease_recovered_s": [float(m) for m in _LEASE.findall(segment)],
            }
        )
    return out


def measure(c: Cluster, root: str, work: Path, args: argparse.Namespace) -> dict[str, Any]:
    fs = c.open("hdfs", root)
    ns = argparse.Namespace(
        trials=args.trials,
        period=f"{args.period:g}s",
        lines=args.lines,
        records_per_s=args.records_per_s,
        seed=args.seed,
        timeout=args.timeout,
    )
    filesystem: dict[str, str | int] = {
        "user": c.user,
        "timeout": "20s",
        "retries": 4,
        "retry_backoff": "500ms",
        "lease_recovery_timeout": "60s",
    }
    if c.conf_dir:
        filesystem["config_dir"] = c.conf_dir

    def make(name: str, seconds: float) -> tuple[Workspace, Arrivals]:
        local = work / "recovery" / name
        ws = Workspace(
            local,
            fs_uri=c.hdfs,
            remote_root=f"{root}/recovery/{name}",
            remote_fs=fs,
            landing_uri=f"file://{local / 'landing'}",
            filesystem=filesystem,
            records_per_s=ns.records_per_s,
            period=ns.period,
            bytes_per_file=1_000_000,
            max_resets=3,
        )
        return ws, bench_recovery.place_input(ws, ns, seconds)

    try:
        # Listing the cluster every 5 ms would load the machine it measures: every 20 ms.
        recoveries, baseline, ws = bench_recovery.measure_recovery(make, ns, poll=0.02)
        # Run 1 was killed; runs 2 .. trials + 1 are the restarts after a kill.
        restarts = restarts_from_log(ws.log, range(2, args.trials + 2))
    finally:
        kill_all()
    rec, base, ratios = bench_recovery.summarize(recoveries, baseline)
    leases = [s for r in restarts for s in r["lease_recovered_s"]]
    resets = [r["reset_s"] for r in restarts if r["reset_s"] is not None]
    return {
        "uri": c.hdfs,
        "trials": args.trials,
        "period": ns.period,
        "records_per_s": ns.records_per_s,
        "after_sigkill_s": rec,
        "fresh_start_s": base,
        "ratio_to_fresh_start": ratios,
        "region_reset_at_restart_s": round(median(resets), 3) if resets else None,
        "lease_recovery_s": round(median(leases), 3) if leases else None,
        "restarts_with_lease_recovery": sum(1 for r in restarts if r["lease_recovered_s"]),
        "restarts": restarts,
        "samples": {"after_sigkill": recoveries, "fresh_start": baseline},
        "output_correct": True,
    }


def show(args: argparse.Namespace, result: dict[str, Any], where: str) -> None:
    """The part's table (``where``: the cluster, as the titles name it)."""
    rec, base = result["after_sigkill_s"], result["fresh_start_s"]
    ratios, trials = result["ratio_to_fresh_start"], result["trials"]
    print_table(
        f"Benchmark 6.3: restart after SIGKILL mid-file on hdfs:// (period {result['period']}, "
        f"median of {trials} kills) vs a fresh start",
        ["seconds from process start to", "after SIGKILL", "fresh start", "ratio"],
        [
            *([m.replace("_", " "), rec[m], base[m], ratios[m]] for m in rec),
            ["(region reset at restart)", result["region_reset_at_restart_s"], "-", "-"],
            ["(of which lease recovery)", result["lease_recovery_s"], "-", "-"],
        ],
    )
    print(
        f"lease recovered in {result['restarts_with_lease_recovery']} of {trials} restarts; "
        f"output after {trials} kills: every record exactly once"
    )
