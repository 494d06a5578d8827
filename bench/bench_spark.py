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
import functools
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import Comparison, make_text_files, output_bytes, write_json
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


def run_split(spark: Any, src: Path, work: Path, tag: str, *, source: str, sink: str) -> float:
    """One side of the streaming query against Spark's own other side (``text`` or ``noop``):
    where the time of ``hdfs_scan -> hdfs_sink`` goes."""
    name = f"{source}-{sink}-{tag}"
    out, ck = work / name, work / f"{name}-ck"
    if source == "text":
        reader = spark.readStream.format("text").option("path", str(src))
    else:
        reader = spark.readStream.format("hdfs_scan").option("directory", str(src))
        reader = reader.option("plan_dir", str(work / f"{name}-plans"))
    writer = reader.load().writeStream.format(sink).option("checkpointLocation", str(ck))
    if sink == "text":
        writer = writer.option("path", str(out))
    elif sink == "hdfs_sink":
        writer = writer.option("file", str(out / "part-%FILENUM.txt"))
    started = time.perf_counter()
    query = writer.trigger(availableNow=True).start()
    query.awaitTermination()
    elapsed = time.perf_counter() - started
    if query.exception() is not None:
        raise RuntimeError(f"{source} -> {sink} failed: {query.exception()}")
    return elapsed


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


#: Each pipeline: its run, its name in the JSON, its label in the table. The order is the
#: order of each round (alternating: no side always on a warmer page cache).
RUNS: dict[str, tuple[Callable[..., float], str, str]] = {
    "spark": (run_builtin, "spark_text_to_text", "Spark text -> text"),
    "fused": (run_fused, "fused", "fused (hdfs-region run)"),
    "api": (run_api, "start_fused", "start_fused + upper(value)"),
    "spark-upper": (
        functools.partial(run_builtin, upper=True),
        "spark_text_upper_to_text",
        "Spark text -> upper -> text",
    ),
    "ours": (run_ours, "hdfs_scan_to_hdfs_sink", "hdfs_scan -> hdfs_sink"),
    # Each side apart (not run by default): what the source costs, what the sink costs.
    "text-noop": (
        functools.partial(run_split, source="text", sink="noop"),
        "spark_text_to_noop",
        "Spark text -> noop",
    ),
    "hdfs_scan-noop": (
        functools.partial(run_split, source="hdfs_scan", sink="noop"),
        "hdfs_scan_to_noop",
        "hdfs_scan -> noop",
    ),
    "text-hdfs_sink": (
        functools.partial(run_split, source="text", sink="hdfs_sink"),
        "spark_text_to_hdfs_sink",
        "Spark text -> hdfs_sink",
    ),
}
#: Run unless ``--only`` names others.
DEFAULT_RUNS = ("spark", "fused", "api", "spark-upper", "ours")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=float, default=200.0, help="input size in MB (default 200)")
    parser.add_argument("--files", type=int, default=8, help="number of input files (default 8)")
    parser.add_argument("--repeat", type=int, default=3, help="timed runs of each (default 3)")
    parser.add_argument("--work", type=Path, default=None, help="scratch directory")
    parser.add_argument("--json", type=Path, default=RESULTS, help="where to write the results")
    parser.add_argument(
        "--only",
        default=",".join(DEFAULT_RUNS),
        help=f"the pipelines to run, of {','.join(RUNS)} (default {','.join(DEFAULT_RUNS)})",
    )
    parser.add_argument(
        "--conf", action="append", default=[], metavar="KEY=VALUE", help="a session setting"
    )
    args = parser.parse_args(argv)
    conf = dict(item.split("=", 1) for item in args.conf)
    runs = {tag: RUNS[tag] for tag in args.only.split(",") if tag}

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
        race = Comparison(total_bytes / 1e6)
        for tag, (run, _, label) in runs.items():
            run(spark, warm, work, "warm")
            race.add(tag, label, functools.partial(run, spark, src, work))

        def check(tag: str, i: str) -> None:
            if tag.endswith("noop"):
                return  # nothing written
            written = output_bytes(work / f"{tag}-{i}")
            if written != total_bytes:
                raise RuntimeError(f"{tag} run {i} wrote {written} bytes, read {total_bytes}")
            shutil.rmtree(work / f"{tag}-{i}")  # a large input would fill the disk

        race.race(args.repeat, check=check, warm=False)
        spark.stop()
    finally:
        shutil.rmtree(work, ignore_errors=True)

    mb = race.mb
    result = {
        "input_mb": round(mb, 1),
        "input_lines": total_lines,
        "input_files": args.files,
        "repeat": args.repeat,
        "conf": conf,
        "work": str(args.work or tempfile.gettempdir()),
        **race.figures({tag: json_name for tag, (_, json_name, _) in runs.items()}),
    }
    ratios = {
        "ratio": ("spark", "ours", "streaming"),
        "fused_ratio": ("spark", "fused", "fused"),
        "start_fused_ratio": ("spark", "api", "start_fused"),
        "start_fused_ratio_same_transform": ("spark-upper", "api", "start_fused to the same"),
    }
    shown = []
    for name, (baseline, tag, label) in ratios.items():
        if baseline in runs and tag in runs:
            result[name] = race.ratio(baseline, tag)
            shown.append(f"{label} {result[name]:.2f}")
    race.print(f"Spark, local disk ({mb:.0f} MB in {args.files} files, median of {args.repeat})")
    print("ratio to built-in: " + ", ".join(shown))
    write_json(args.json, result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
