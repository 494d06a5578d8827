"""Part 1: the pipeline of bench_pipeline.py on the cluster against a plain copy loop through the
same FileSystem object, through each backend (``hdfs://``, ``webhdfs://``)."""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import Any

from bench import bench_pipeline
from bench.common import Comparison, Timing, make_text_files, print_table, upload
from bench.real_hdfs.cluster import Cluster
from bench.real_hdfs.files import plain_copy, published_bytes, visible_files


def measure(c: Cluster, root: str, work: Path, args: argparse.Namespace) -> dict[str, Any]:
    """For each backend: the input uploaded once, then plain copy and pipeline, alternating,
    ``args.repeat`` times each."""
    local = work / "input"
    total_bytes, total_lines = make_text_files(local, args.mb, args.files)
    data = {p.name: p.read_bytes() for p in local.iterdir()}
    remote_in = f"{root}/pipeline/input"
    started = time.perf_counter()
    upload(local, c.open("hdfs", root), remote_in)
    upload_s = time.perf_counter() - started
    return {
        "input_mb": round(total_bytes / 1e6, 1),
        "input_files": args.files,
        "input_lines": total_lines,
        "upload_seconds": round(upload_s, 2),
        "backends": {
            backend: _pipeline_race(c, backend, root, remote_in, data, args)
            for backend in args.backends
        },
    }


def _pipeline_race(
    c: Cluster,
    backend: str,
    root: str,
    remote_in: str,
    data: dict[str, bytes],
    args: argparse.Namespace,
) -> dict[str, Any]:
    """Plain copy and pipeline through one backend; each output checked against the input."""
    fs = c.open(backend, root)
    # The scan's order: (mtime, name).
    statuses = sorted(visible_files(fs, remote_in), key=lambda s: (s.mtime_ns, s.name))
    inputs = [s.path for s in statuses]
    expected = b"".join(data[s.name] for s in statuses)

    def plain(tag: str) -> Timing:
        seconds, cpu = plain_copy(fs, inputs, f"{root}/pipeline/{backend}-plain-{tag}")
        return {"seconds": seconds, "cpu_seconds": cpu}

    def pipeline(tag: str) -> Timing:
        out, ck = f"{root}/pipeline/{backend}-{tag}/out", f"{root}/pipeline/{backend}-{tag}/ck"
        fs.mkdirs(out)
        seconds, cpu, cuts = bench_pipeline.run_pipeline(
            remote_in, out, ck, period=args.period, batch_size=args.batch_size, fs=fs
        )
        files = len(visible_files(fs, out))
        return {"seconds": seconds, "cpu_seconds": cpu, "cuts": cuts, "output_files": files}

    def check(key: str, tag: str) -> None:
        if key == "plain_copy":
            copied = f"{root}/pipeline/{backend}-plain-{tag}"
            if fs.read(copied) != expected:
                raise RuntimeError(
                    f"{backend}: plain copy run {tag}: output differs from the input"
                )
            fs.delete(copied)
            return
        base = f"{root}/pipeline/{backend}-{tag}"
        got, files = published_bytes(fs, f"{base}/out")
        if got != expected:
            raise RuntimeError(
                f"{backend}: pipeline run {tag}: published output ({files} files, {len(got)} "
                f"bytes) differs from the input ({len(expected)} bytes)"
            )
        fs.delete(base, recursive=True)

    race = Comparison(len(expected) / 1e6)
    race.add("plain_copy", "plain copy", plain)
    race.add("pipeline", "pipeline", pipeline)
    race.race(args.repeat, check=check, warm=False)
    return {
        "uri": c.hdfs if backend == "hdfs" else c.webhdfs,
        **race.figures(),
        "ratio": race.ratio("plain_copy", "pipeline", digits=3),
        "cpu_ratio": race.ratio("plain_copy", "pipeline", figure="cpu_seconds", digits=3),
        "output_correct": True,
    }


def show(args: argparse.Namespace, result: dict[str, Any], where: str) -> None:
    """The part's table (``where``: the cluster, as the titles name it)."""
    print_table(
        f"Benchmark 6.1: pipeline (exactly once, period {args.period:g} s) vs a plain copy "
        f"through the same client, on a real HDFS ({where}); {result['input_mb']:.0f} MB in "
        f"{result['input_files']} files, median of {args.repeat}",
        ["client", "pipeline MB/s", "plain copy MB/s", "ratio", "CPU ratio", "cuts"],
        [
            [
                r["uri"].split(":")[0] + "://",
                r["pipeline"]["mb_per_s"],
                r["plain_copy"]["mb_per_s"],
                r["ratio"],
                r["cpu_ratio"],
                max(r["pipeline"]["cuts"]),
            ]
            for r in result["backends"].values()
        ],
    )
