"""Part 2: the cut latency of bench_cut_latency.py with the sink's output and the checkpoints on
the cluster, against one durable small write through the same client."""

from __future__ import annotations

import argparse
import contextlib
import time
from pathlib import Path
from typing import Any

from bench import bench_cut_latency
from bench.common import percentile, print_table
from bench.real_hdfs.cluster import Cluster
from operators.fs import LocalFileSystem
from region.fs import FileSystem


def durable_write_floor(fs: FileSystem, directory: str, count: int) -> dict[str, Any]:
    """The baseline: one durable small write through ``fs`` (create, write 300 bytes, hsync,
    close), ``count`` times; p50 / p99 of the whole and of each step (ms)."""
    fs.mkdirs(directory)
    steps: dict[str, list[float]] = {"create": [], "write": [], "hsync": [], "close": []}
    totals: list[float] = []
    for i in range(count):
        t0 = time.perf_counter()
        writer = fs.create(f"{directory}/f{i:05d}")
        t1 = time.perf_counter()
        try:
            writer.write(b"x" * 300)
            t2 = time.perf_counter()
            writer.sync()
            t3 = time.perf_counter()
        except BaseException:
            with contextlib.suppress(OSError):
                writer.close()
            raise
        writer.close()
        t4 = time.perf_counter()
        for name, a, b in (("create", t0, t1), ("write", t1, t2), ("hsync", t2, t3)):
            steps[name].append((b - a) * 1000)
        steps["close"].append((t4 - t3) * 1000)
        totals.append((t4 - t0) * 1000)
    fs.delete(directory, recursive=True)
    return {
        "writes": count,
        "p50_ms": round(percentile(totals, 50), 2),
        "p99_ms": round(percentile(totals, 99), 2),
        "max_ms": round(max(totals), 2),
        "step_p50_ms": {k: round(percentile(v, 50), 2) for k, v in steps.items()},
        "step_p99_ms": {k: round(percentile(v, 99), 2) for k, v in steps.items()},
        "samples_ms": [round(t, 3) for t in totals],
    }


def measure(c: Cluster, root: str, work: Path, args: argparse.Namespace) -> dict[str, Any]:
    results: dict[str, Any] = {}
    for backend in args.cut_backends:
        fs = c.open(backend, root)
        floor = durable_write_floor(fs, f"{root}/cuts/{backend}-floor", args.durable_writes)
        landing = work / f"cuts-{backend}-landing"
        landing.mkdir(parents=True)
        measure_args = argparse.Namespace(
            cuts=args.cuts,
            period=args.period,
            rate_mb=args.rate_mb,
            file_kb=args.file_kb,
            roll_bytes=max(1, int(args.roll_mb * 1e6)),
        )
        cuts = bench_cut_latency.measure(
            fs,
            landing,
            str(landing),
            f"{root}/cuts/{backend}/out",
            f"{root}/cuts/{backend}/ck",
            measure_args,
            source_fs=LocalFileSystem(),
        )
        results[backend] = {
            "uri": c.hdfs if backend == "hdfs" else c.webhdfs,
            "cuts": cuts,
            "durable_write": floor,
            "p50_over_durable_write": round(cuts["p50_ms"] / max(floor["p50_ms"], 1e-3), 2),
            "p99_over_durable_write": round(cuts["p99_ms"] / max(floor["p99_ms"], 1e-3), 2),
        }
    return results


def show(args: argparse.Namespace, result: dict[str, Any], where: str) -> None:
    """The part's table (``where``: the cluster, as the titles name it)."""
    rows = []
    for name, r in result.items():
        cuts, floor = r["cuts"], r["durable_write"]
        steps = ", ".join(f"{k} {v:g}" for k, v in floor["step_p50_ms"].items())
        rows += [
            [f"{name}:// cut", cuts["cuts"], cuts["p50_ms"], cuts["p99_ms"], cuts["max_ms"]],
            [
                f"{name}:// one durable write (p50 ms: {steps})",
                floor["writes"],
                floor["p50_ms"],
                floor["p99_ms"],
                floor["max_ms"],
            ],
        ]
    print_table(
        f"Benchmark 6.2: cut latency (drain + checkpoint + commit), output and checkpoints "
        f"on the cluster, period {args.period:g} s, input {args.rate_mb:g} MB/s",
        ["what", "samples", "p50 ms", "p99 ms", "max ms"],
        rows,
    )
    for name, r in result.items():
        print(
            f"{name}:// cut / durable write: p50 {r['p50_over_durable_write']:g}, "
            f"p99 {r['p99_over_durable_write']:g}"
        )
