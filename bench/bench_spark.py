"""Throughput on Spark, JVM started: hdfs_scan -> hdfs_sink as a streaming query, the same
pipeline in fused execution (what ``hdfs-region run`` does without a SQL transform), and fused
from a user's own code with a DataFrame transform (``start_fused``, ``upper(value)``), against
Spark's built-in text source -> text sink.

Same session, same input files, all available-now, after a warm-up run of each. Prints a table
and writes ``bench/results/spark.json``.

    python bench/bench_spark.py            # 200 MB
    python bench/bench_spark.py --mb 20    # a quick run
    python bench/bench_spark.py --mb 1000 --files 20   # 20 files of 50 MB
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import make_text_files, output_bytes
from operators.spark.session import build_session

RESULTS = Path(__file__).resolve().parent / "results" / "spark.json"


def run_ours(spark: Any, src: Path, work: Path, tag: str) -> float:
    out, ck = work / f"ours-{tag}", work / f"ours-{tag}-ck"
    started = time.perf_counter()
    query = (
        spark.readStream.format("hdfs_scan")
        .option("directory", str(src))
        .option("plan_dir", str(work / f"ours-{tag}-plans"))
        .load()
        .writeStream.format("hdfs_sink")
        .option("file", str(out / "part-%FILENUM.txt"))
        .option("checkpointLocation", str(ck))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    elapsed = time.perf_counter() - started
    if query.exception() is not None:
        raise RuntimeError(f"hdfs_scan -> hdfs_sink failed: {query.exception()}")
    return elapsed


def run_fused(spark: Any, src: Path, work: Path, tag: str) -> float:
    """Fused execution without a transform: what ``hdfs-region run`` does (``start_fused``)."""
    return _start_fused(spark, src, work, f"fused-{tag}", upper=False)


def run_api(spark: Any, src: Path, work: Path, tag: str) -> float:
    """``start_fused`` with a user's transform (ASCII input: the same bytes out)."""
    return _start_fused(spark, src, work, f"api-{tag}", upper=True)


def _start_fused(spark: Any, src: Path, work: Path, name: str, *, upper: bool) -> float:
    from operators.spark import start_fused

    out, ck = work / name, work / f"{name}-ck"
    started = time.perf_counter()
    start_fused(
        spark,
        (lambda frame: frame.selectExpr("upper(value) AS value")) if upper else None,
        scan={"directory": str(src)},
        sink={"file": str(out / "part-%FILENUM.txt")},
        checkpoint_location=str(ck),
        available_now=True,
    ).awaitTermination()
    return time.perf_counter() - started


def run_builtin(spark: Any, src: Path, work: Path, tag: str, *, upper: bool = False) -> float:
    """Spark's text -> text; ``upper``: with ``start_fused``'s transform."""
    out, ck = work / f"{'spark-upper' if upper else 'spark'}-{tag}", work / f"spark-{tag}-ck{upper}"
    started = time.perf_counter()
    frame = spark.readStream.format("text").load(str(src))
    if upper:
        frame = frame.selectExpr("upper(value) AS value")
    query = (
        frame.writeStream.format("text")
        .option("path", str(out))
        .option("checkpointLocation", str(ck))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    elapsed = time.perf_counter() - started
    if query.exception() is not None:
        raise RuntimeError(f"text -> text failed: {query.exception()}")
    return elapsed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=float, default=200.0, help="input size in MB (default 200)")
    parser.add_argument("--files", type=int, default=8, help="number of input files (default 8)")
    parser.add_argument("--repeat", type=int, default=3, help="timed runs of each (default 3)")
    parser.add_argument("--work", type=Path, default=None, help="scratch directory")
    parser.add_argument("--json", type=Path, default=RESULTS, help="where to write the results")
    parser.add_argument(
        "--conf", action="append", default=[], metavar="KEY=VALUE", help="a session setting"
    )
    args = parser.parse_args(argv)
    conf = dict(item.split("=", 1) for item in args.conf)

    load_before = os.getloadavg()
    work = Path(tempfile.mkdtemp(prefix="bench-spark-", dir=args.work))
    try:
        src = work / "input"
        total_bytes, total_lines = make_text_files(src, args.mb, args.files)
        # Two files: both pipelines run two tasks in the warm-up, as in the timed runs, so
        # every Python worker process the timed runs use is already started; enough data
        # (a tenth of the input, 4..20 MB) that the JVM has compiled the hot paths of both.
        warm = work / "warm"
        make_text_files(warm, max(4.0, min(20.0, args.mb / 10)), 2, seed=1)
        spark = build_session("bench-spark", conf=conf)
        run_ours(spark, warm, work, "warm")
        run_fused(spark, warm, work, "warm")
        run_api(spark, warm, work, "warm")
        run_builtin(spark, warm, work, "warm")
        run_builtin(spark, warm, work, "warm", upper=True)
        ours: list[float] = []
        fused: list[float] = []
        api: list[float] = []
        builtin: list[float] = []
        builtin_upper: list[float] = []
        for i in range(args.repeat):
            # Alternate so that no side always runs on a warmer page cache.
            builtin.append(run_builtin(spark, src, work, str(i)))
            fused.append(run_fused(spark, src, work, str(i)))
            api.append(run_api(spark, src, work, str(i)))
            builtin_upper.append(run_builtin(spark, src, work, str(i), upper=True))
            ours.append(run_ours(spark, src, work, str(i)))
            for tag in ("ours", "fused", "api", "spark", "spark-upper"):
                written = output_bytes(work / f"{tag}-{i}")
                if written != total_bytes:
                    raise RuntimeError(f"{tag} run {i} wrote {written} bytes, read {total_bytes}")
                shutil.rmtree(work / f"{tag}-{i}")  # a large input would fill the disk
        spark.stop()
    finally:
        shutil.rmtree(work, ignore_errors=True)

    load_after = os.getloadavg()
    mb = total_bytes / 1e6
    ours_s, builtin_s = statistics.median(ours), statistics.median(builtin)
    fused_s, api_s = statistics.median(fused), statistics.median(api)
    upper_s = statistics.median(builtin_upper)
    result = {
        "input_mb": round(mb, 1),
        "input_lines": total_lines,
        "input_files": args.files,
        "repeat": args.repeat,
        "conf": conf,
        "work": str(args.work or tempfile.gettempdir()),
        "hdfs_scan_to_hdfs_sink": {"seconds": ours, "mb_per_s": round(mb / ours_s, 1)},
        "fused": {"seconds": fused, "mb_per_s": round(mb / fused_s, 1)},
        "start_fused": {"seconds": api, "mb_per_s": round(mb / api_s, 1)},
        "spark_text_to_text": {"seconds": builtin, "mb_per_s": round(mb / builtin_s, 1)},
        "spark_text_upper_to_text": {
            "seconds": builtin_upper,
            "mb_per_s": round(mb / upper_s, 1),
        },
        "ratio": round(builtin_s / ours_s, 2),
        "fused_ratio": round(builtin_s / fused_s, 2),
        "start_fused_ratio": round(builtin_s / api_s, 2),
        "start_fused_ratio_same_transform": round(upper_s / api_s, 2),
        "machine": {
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            # Other work on the machine skews the figures: compare runs at similar loads.
            "load_average_before": [round(x, 2) for x in load_before],
            "load_average_after": [round(x, 2) for x in load_after],
        },
    }
    print(f"{'pipeline':<28} {'MB/s':>8} {'seconds (median)':>18}")
    print(f"{'hdfs_scan -> hdfs_sink':<28} {mb / ours_s:>8.1f} {ours_s:>18.2f}")
    print(f"{'fused (hdfs-region run)':<28} {mb / fused_s:>8.1f} {fused_s:>18.2f}")
    print(f"{'start_fused + upper(value)':<28} {mb / api_s:>8.1f} {api_s:>18.2f}")
    print(f"{'Spark text -> text':<28} {mb / builtin_s:>8.1f} {builtin_s:>18.2f}")
    print(f"{'Spark text -> upper -> text':<28} {mb / upper_s:>8.1f} {upper_s:>18.2f}")
    print(
        f"ratio to built-in: streaming {result['ratio']:.2f}, fused {result['fused_ratio']:.2f}, "
        f"start_fused {result['start_fused_ratio']:.2f} (to the same upper(value): "
        f"{result['start_fused_ratio_same_transform']:.2f})   ({mb:.0f} MB, {total_lines} lines)"
    )
    before, after = (" ".join(f"{x:.2f}" for x in load) for load in (load_before, load_after))
    print(f"load average (1, 5, 15 min) before: {before}, after: {after}")
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
