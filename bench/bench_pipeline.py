"""Benchmark 1: the in-process pipeline against a plain Python copy loop.

Pipeline: HDFS2DirectoryScan -> HDFS2FileSource (lines) -> HDFS2FileSink (exactly_once, atomic
publish, one output file), periodic cut every second, on the local disk. Baseline: a Python loop
reading the same files line by line (text mode) and writing every line into one output file,
fsynced at the end. Both outputs are checked byte for byte against the input.

    python bench/bench_pipeline.py               # 200 MB in 20 files, 3 runs of each
    python bench/bench_pipeline.py --mb 20       # a quick run
    python bench/bench_pipeline.py --profile     # also a cProfile of one pipeline run

Metrics cost: the same job run as ``hdfs-region run --engine local`` does (``run_local``), with
metrics off and with ``[metrics] port`` on and ``/metrics`` scraped every second, side by side
(alternating); their throughputs should be within 2% of each other.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import os
import pstats
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import (
    Comparison,
    Timing,
    add_common_args,
    concat_files,
    make_text_files,
    published_files,
    scratch,
    write_json,
)
from operators.app.config import load_pipeline
from operators.app.engine_local import build_local, run_local
from operators.app.metrics_server import MetricsServer
from operators.fs.local import LocalFileSystem
from operators.scan import HDFS2DirectoryScan, ScanSettings
from operators.sink import HDFS2FileSink, SinkSettings
from operators.source import HDFS2FileSource, SourceSettings
from region.checkpoint import CheckpointStore
from region.fs import FileSystem
from region.runtime import Pipeline, PipelineRunner
from region.settings import RegionSettings

TARGET = 0.7
#: GET the URL every second, print a line per answered scrape (Prometheus' part, in its own
#: process).
SCRAPER = """
import sys, time, urllib.request
while True:
    time.sleep(1)
    try:
        urllib.request.urlopen(sys.argv[1], timeout=5).read()
        print(1, flush=True)
    except OSError:
        pass
"""
#: Metrics on (scraped every second) against metrics off: within 2%.
METRICS_TARGET = 0.98


def run_plain(inputs: list[Path], out: Path) -> tuple[float, float]:
    """The baseline: every line of every file, in order, into one file; fsync at the end.
    Returns (wall seconds, CPU seconds)."""
    started, cpu = time.perf_counter(), time.process_time()
    with open(out, "w", encoding="utf-8") as dst:
        for path in inputs:
            with open(path, encoding="utf-8") as src:
                for line in src:
                    dst.write(line)
        dst.flush()
        os.fsync(dst.fileno())
    return time.perf_counter() - started, time.process_time() - cpu


def build_runner(
    src: Path | str,
    out: Path | str,
    checkpoints: Path | str,
    *,
    period: float,
    batch_size: int,
    fs: FileSystem | None = None,
) -> PipelineRunner:
    """The pipeline on ``fs`` (default the local disk): input, output and checkpoints."""
    fs = LocalFileSystem() if fs is None else fs
    scan = HDFS2DirectoryScan(ScanSettings(directory=str(src), sleep_time=0.1), fs)
    source = HDFS2FileSource(SourceSettings(), fs, files=scan)
    sink = HDFS2FileSink(SinkSettings(file=f"{out}/out-%FILENUM.txt"), fs)
    settings = RegionSettings(period=period, checkpoint_dir=str(checkpoints))
    store = CheckpointStore(fs, str(checkpoints), retain=settings.retain)
    pipeline = Pipeline(source, sinks=[sink], batch_size=batch_size)
    return PipelineRunner(pipeline, settings, store)


def run_pipeline(
    src: Path | str,
    out: Path | str,
    checkpoints: Path | str,
    *,
    period: float,
    batch_size: int,
    fs: FileSystem | None = None,
) -> tuple[float, float, int]:
    """(wall seconds, CPU seconds) from start to the final cut (everything published), cuts."""
    started, cpu = time.perf_counter(), time.process_time()
    runner = build_runner(src, out, checkpoints, period=period, batch_size=batch_size, fs=fs)
    stats = runner.run(available_now=True)
    return time.perf_counter() - started, time.process_time() - cpu, stats.region.cuts


def run_job(
    src: Path, out: Path, checkpoints: Path, *, period: float, metrics: bool
) -> tuple[float, float, int]:
    """(wall seconds, CPU seconds, scrapes) of the job as the command runs it (``run_local``,
    available now); with ``metrics``, ``/metrics`` is served and fetched every second."""
    port = None
    if metrics:
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            port = int(sock.getsockname()[1])
    settings = out.parent / f"{out.name}.toml"
    settings.write_text(
        f'engine = "local"\nname = "bench"\n[region]\nperiod = {period}\n'
        f'checkpoint_dir = "{checkpoints}"\n[scan]\ndirectory = "{src}"\nsleep_time = 0.1\n'
        f'[sink]\nfile = "{out}/out-%FILENUM.txt"\n'
        + (f'[metrics]\nport = {port}\nhost = "127.0.0.1"\n' if port is not None else ""),
        encoding="utf-8",
    )
    config = load_pipeline(settings, engine="local")
    # The scraper is a process of its own, as Prometheus is: this process's CPU time is then
    # the job's and its metrics server's only.
    scraper = (
        subprocess.Popen(
            [sys.executable, "-c", SCRAPER, f"http://127.0.0.1:{port}/metrics"],
            stdout=subprocess.PIPE,
            text=True,
        )
        if port is not None
        else None
    )
    started, cpu = time.perf_counter(), time.process_time()
    try:
        run_local(config, available_now=True)
        seconds, cpu = time.perf_counter() - started, time.process_time() - cpu
    finally:
        scrapes = 0
        if scraper is not None:
            scraper.terminate()
            printed, _ = scraper.communicate()
            scrapes = len(printed.split())
    return seconds, cpu, scrapes


def scrape_cost(work: Path, src: Path, *, period: float, scrapes: int = 500) -> float:
    """CPU seconds of one ``/metrics`` answer (the view taken from a built job, formatted by
    ``prometheus_client``): measured over many, which the job-level timing cannot resolve."""
    settings = work / "scrape-cost.toml"
    settings.write_text(
        f'engine = "local"\nname = "bench"\n[region]\nperiod = {period}\n'
        f'checkpoint_dir = "{work / "scrape-cost-ck"}"\n[scan]\ndirectory = "{src}"\n'
        f'[sink]\nfile = "{work / "scrape-cost-out"}/out-%FILENUM.txt"\n',
        encoding="utf-8",
    )
    run = build_local(load_pipeline(settings, engine="local"))
    server = MetricsServer(run.view, port=0, host="127.0.0.1", labels={"pipeline": "bench"})
    try:
        cpu = time.process_time()
        for _ in range(scrapes):
            server.respond("/metrics")
        return (time.process_time() - cpu) / scrapes
    finally:
        server.stop()


def compare_metrics(
    src: Path, work: Path, expected: bytes, *, period: float, repeat: int
) -> Comparison:
    """The job with metrics off and on, alternating, ``repeat`` runs of each; outputs checked."""

    def job(name: str) -> Callable[[str], Timing]:
        def run(tag: str) -> Timing:
            out, ck = work / f"job-{name}-{tag}", work / f"job-{name}-{tag}-ck"
            out.mkdir()
            seconds, cpu, scrapes = run_job(src, out, ck, period=period, metrics=name == "on")
            return {"seconds": seconds, "cpu_seconds": cpu, "scrapes": scrapes}

        return run

    def check(name: str, tag: str) -> None:
        out = work / f"job-{name}-{tag}"
        if concat_files(published_files(out)) != expected:
            raise RuntimeError(f"job run {tag} (metrics {name}): output differs from the input")
        shutil.rmtree(out)

    race = Comparison(len(expected) / 1e6)
    race.add("off", "metrics off", job("off"))
    race.add("on", "metrics on, /metrics scraped every 1 s", job("on"))
    race.race(repeat, check=check, warm=False)
    return race


def profile_pipeline(src: Path, work: Path, *, period: float, batch_size: int) -> str:
    out, ck = work / "profile-out", work / "profile-ck"
    out.mkdir()
    profiler = cProfile.Profile()
    profiler.enable()
    run_pipeline(src, out, ck, period=period, batch_size=batch_size)
    profiler.disable()
    text = io.StringIO()
    stats = pstats.Stats(profiler, stream=text)
    stats.sort_stats("tottime").print_stats(15)
    return text.getvalue()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=float, default=200.0, help="input size in MB (default 200)")
    parser.add_argument("--files", type=int, default=20, help="input files (default 20)")
    parser.add_argument("--repeat", type=int, default=3, help="timed runs of each (default 3)")
    parser.add_argument("--period", type=float, default=1.0, help="cut period in s (default 1)")
    parser.add_argument("--batch-size", type=int, default=1024, help="records per batch")
    parser.add_argument("--profile", action="store_true", help="print a cProfile of one run")
    parser.add_argument(
        "--no-metrics", action="store_true", help="skip the metrics on / off comparison"
    )
    parser.add_argument(
        "--metrics-repeat", type=int, default=9, help="runs of each, metrics on / off (default 9)"
    )
    add_common_args(parser, "pipeline")
    args = parser.parse_args(argv)

    with scratch(args.work, "bench-pipeline-") as work:
        src = work / "input"
        total_bytes, total_lines = make_text_files(src, args.mb, args.files)
        inputs = sorted(src.iterdir())
        expected = concat_files(inputs)

        def plain(tag: str) -> Timing:
            seconds, cpu = run_plain(inputs, work / f"plain-{tag}.txt")
            return {"seconds": seconds, "cpu_seconds": cpu}

        def pipeline(tag: str) -> Timing:
            out = work / f"out-{tag}"
            out.mkdir()
            seconds, cpu, cuts = run_pipeline(
                src, out, work / f"ck-{tag}", period=args.period, batch_size=args.batch_size
            )
            return {"seconds": seconds, "cpu_seconds": cpu, "cuts": cuts}

        def check(key: str, tag: str) -> None:
            if key == "plain_loop":
                copied = work / f"plain-{tag}.txt"
                if copied.read_bytes() != expected:
                    raise RuntimeError(f"plain loop run {tag}: output differs from the input")
                copied.unlink()
                return
            published = published_files(work / f"out-{tag}")
            if concat_files(published) != expected:
                raise RuntimeError(
                    f"pipeline run {tag}: published output ({len(published)} files) differs "
                    "from the input"
                )
            shutil.rmtree(work / f"out-{tag}")  # the files and the sink's own folder: disk back

        race = Comparison(total_bytes / 1e6)
        race.add("plain_loop", "plain Python loop + fsync", plain)
        race.add("pipeline", "scan -> source -> sink (exactly once)", pipeline)
        # No warm-up: nothing to start (no JVM, no workers), the input was just written (in the
        # page cache), and the figures stay comparable with those measured before.
        race.race(args.repeat, check=check, warm=False)
        per_scrape = None if args.no_metrics else scrape_cost(work, src, period=args.period)
        job = (
            None
            if args.no_metrics
            else compare_metrics(
                src, work, expected, period=args.period, repeat=args.metrics_repeat
            )
        )
        profile = (
            profile_pipeline(src, work, period=args.period, batch_size=args.batch_size)
            if args.profile
            else None
        )

    mb = race.mb
    ratio = race.median("plain_loop") / race.median("pipeline")
    result: dict[str, Any] = {
        "benchmark": "pipeline",
        "input_mb": round(mb, 1),
        "input_lines": total_lines,
        "input_files": args.files,
        "repeat": args.repeat,
        "period_s": args.period,
        "batch_size": args.batch_size,
        **race.figures(),
        "ratio": round(ratio, 3),
        # CPU time is less disturbed by other processes on a shared machine than wall time.
        "cpu_ratio": race.ratio("plain_loop", "pipeline", figure="cpu_seconds", digits=3),
        "target": f"ratio >= {TARGET}",
        "target_met": ratio >= TARGET,
        "output_correct": True,
    }
    race.print(
        f"Benchmark 1: in-process pipeline vs plain loop ({mb:.0f} MB, {total_lines} lines, "
        f"{args.files} files, median of {args.repeat})",
        columns={"CPU seconds": "cpu_seconds", "cuts": "cuts"},
    )
    print(
        f"ratio pipeline / plain: {ratio:.2f} (target >= {TARGET}); by CPU time: "
        f"{result['cpu_ratio']:.2f}"
    )
    if job is not None:
        metrics_ratio = job.median("off") / job.median("on")
        # The fastest run of each: what is left when the other processes on a shared machine
        # happened to leave it alone (the median moves with them by more than 2%).
        best_ratio = min(job.samples["off"]["seconds"]) / min(job.samples["on"]["seconds"])
        figures = job.figures()
        figures["on"]["scrape_interval_s"] = 1.0
        result["metrics"] = {
            **figures,
            "ratio": round(metrics_ratio, 3),
            "cpu_ratio": job.ratio("off", "on", figure="cpu_seconds", digits=3),
            "best_ratio": round(best_ratio, 3),
            "scrape_cpu_ms": round((per_scrape or 0.0) * 1000, 3),
            # One scrape a second against the CPU the job spends in a second.
            "scrape_cpu_share": round(
                (per_scrape or 0.0) * job.median("on") / job.median("on", "cpu_seconds"), 5
            ),
            "target": f"ratio >= {METRICS_TARGET}",
            "target_met": metrics_ratio >= METRICS_TARGET,
        }
        job.print(
            f"Metrics cost: the job as `hdfs-region run --engine local` runs it ({mb:.0f} MB, "
            f"median of {args.metrics_repeat}, alternating)",
            columns={"CPU seconds": "cpu_seconds", "scrapes": "scrapes"},
        )
        print(
            f"ratio on / off: {metrics_ratio:.3f} (target >= {METRICS_TARGET}); "
            f"by CPU time: {result['metrics']['cpu_ratio']:.3f}; fastest run of each: "
            f"{best_ratio:.3f}"
        )
        print(
            f"one /metrics answer: {result['metrics']['scrape_cpu_ms']:.3f} ms of CPU; at one "
            f"scrape a second, {100 * result['metrics']['scrape_cpu_share']:.3f} % of the job's CPU"
        )
    if profile is not None:
        print("\ncProfile of one pipeline run (by own time):")
        print(profile)
        result["profile_top"] = profile
    write_json(args.json, result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
