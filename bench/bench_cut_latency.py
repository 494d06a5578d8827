"""Benchmark 4: how long a consistent cut takes while data flows, on local disk and on WebHDFS.

Pipeline: HDFS2DirectoryScan -> HDFS2FileSource -> HDFS2FileSink (exactly once, rolling every
``--bytes-per-file``), periodic cut every ``--period`` seconds, checkpoints on the same
filesystem. A feeder thread keeps placing new files into the landing directory (written under a
hidden name, then renamed) at ``--rate-mb`` MB/s. Each cut's duration is the controller's
``last_cut_seconds``: block permits, wait for the batch in flight, drain (the sink syncs),
checkpoint every operator, write the region checkpoint (temp, sync, rename), publish, retire,
resume.
The WebHDFS figures run against operators/testing/webhdfs_server.py in its own process.

Afterwards the pipeline is restarted on the same checkpoints to finish the input; the published
output must equal the input in (mtime, name) order.

    python bench/bench_cut_latency.py                       # 100 cuts per backend, 1 s period
    python bench/bench_cut_latency.py --cuts 10             # a quick run
    python bench/bench_cut_latency.py --backends local
"""

from __future__ import annotations

import argparse
import os
import sys
import threading
import time
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import (
    add_common_args,
    median,
    percentile,
    print_table,
    scratch,
    write_json,
)
from operators.fs import FileSystemSettings, LocalFileSystem, open_filesystem
from operators.scan import HDFS2DirectoryScan, ScanSettings
from operators.sink import HDFS2FileSink, SinkSettings
from operators.source import HDFS2FileSource, SourceSettings
from region.checkpoint import CheckpointStore
from region.fs import FileSystem
from region.runtime import Pipeline, PipelineRunner
from region.settings import RegionSettings

TARGET_P99_LOCAL_MS = 20.0


class Feeder(threading.Thread):
    """Places files of lines into ``directory`` at ``rate`` bytes/s until stopped."""

    def __init__(self, directory: Path, rate: float, file_bytes: int) -> None:
        super().__init__(name="feeder", daemon=True)
        self.directory = directory
        self.rate = rate
        self.file_bytes = file_bytes
        self.stop_event = threading.Event()
        self.files = 0

    def run(self) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        interval = self.file_bytes / self.rate
        next_at = time.monotonic()
        while not self.stop_event.is_set():
            name = f"in-{self.files:06d}.txt"
            lines: list[str] = []
            size = 0
            while size < self.file_bytes:
                line = f"{name}:{len(lines):06d} " + "x" * 90
                lines.append(line)
                size += len(line) + 1
            hidden = self.directory / f".{name}.tmp"
            hidden.write_text("\n".join(lines) + "\n")
            os.rename(hidden, self.directory / name)
            self.files += 1
            next_at += interval
            self.stop_event.wait(max(0.0, next_at - time.monotonic()))


def build_runner(
    fs: FileSystem,
    landing: str,
    out: str,
    checkpoints: str,
    *,
    period: float,
    roll: int,
    source_fs: FileSystem | None = None,
) -> PipelineRunner:
    """Output and checkpoints on ``fs``; the landing directory on ``source_fs`` (default
    ``fs``)."""
    in_fs = fs if source_fs is None else source_fs
    scan = HDFS2DirectoryScan(ScanSettings(directory=landing, sleep_time=0.05), in_fs)
    source = HDFS2FileSource(SourceSettings(), in_fs, files=scan)
    sink = HDFS2FileSink(
        SinkSettings(file=out + "/part-%FILENUM.txt", bytes_per_file=roll), fs, name="sink"
    )
    settings = RegionSettings(period=period, checkpoint_dir=checkpoints)
    store = CheckpointStore(fs, checkpoints, retain=settings.retain)
    return PipelineRunner(Pipeline(source, sinks=[sink]), settings, store)


def measure(
    fs: FileSystem,
    landing_local: Path,
    landing: str,
    out: str,
    checkpoints: str,
    args: argparse.Namespace,
    *,
    source_fs: FileSystem | None = None,
) -> dict[str, Any]:
    """Cut durations (seconds) of one run of ``args.cuts`` cuts, then a check of the output.
    ``source_fs``: the filesystem of ``landing`` when it is not ``fs``."""
    feeder = Feeder(landing_local, args.rate_mb * 1e6, args.file_kb * 1000)
    runner = build_runner(
        fs, landing, out, checkpoints, period=args.period, roll=args.roll_bytes, source_fs=source_fs
    )
    samples: list[float] = []
    done = threading.Event()

    def watch() -> None:
        seen = 0
        while not done.is_set():
            region = runner.stats().region
            if region.cuts > seen and region.last_cut_seconds is not None:
                seen = region.cuts
                samples.append(region.last_cut_seconds)
                if len(samples) >= args.cuts:
                    runner.request_stop()
                    return
            time.sleep(0.01)

    watcher = threading.Thread(target=watch, name="watch", daemon=True)
    feeder.start()
    watcher.start()
    started = time.perf_counter()
    try:
        stats = runner.run()
    finally:
        done.set()
        feeder.stop_event.set()
        feeder.join()
        watcher.join()
    elapsed = time.perf_counter() - started

    # Finish the input from the last cut, then compare the published output with the input.
    final = build_runner(
        fs, landing, out, checkpoints, period=args.period, roll=args.roll_bytes, source_fs=source_fs
    )
    final.run(available_now=True)
    inputs = sorted(
        (p for p in landing_local.iterdir() if not p.name.startswith(".")),
        key=lambda p: (p.stat().st_mtime_ns, p.name),
    )
    expected = b"".join(p.read_bytes() for p in inputs)
    published = sorted(
        s.path for s in fs.list_dir(out) if not s.is_dir and not s.name.startswith((".", "_"))
    )
    got = b"".join(fs.read(p) for p in sorted(published, key=_filenum))
    if got != expected:
        raise RuntimeError(
            f"published output ({len(got)} bytes in {len(published)} files) differs from the "
            f"input ({len(expected)} bytes in {len(inputs)} files)"
        )
    ms = [s * 1000 for s in samples]
    return {
        "cuts": len(ms),
        "p50_ms": round(percentile(ms, 50), 2),
        "p99_ms": round(percentile(ms, 99), 2),
        "max_ms": round(max(ms), 2),
        "median_ms": round(median(ms), 2),
        "samples_ms": [round(m, 3) for m in ms],
        "records": stats.records_out,
        "input_files": len(inputs),
        "seconds": round(elapsed, 1),
        "output_correct": True,
    }


def fsync_floor(directory: Path, count: int) -> dict[str, Any]:
    """The baseline: one durable small write (write, fsync, rename, directory fsync), the
    least a checkpoint costs on this disk; a cut makes about three of these."""
    directory.mkdir(parents=True, exist_ok=True)
    ms = []
    for i in range(max(count, 10)):
        tmp, final = directory / f".f{i}.tmp", directory / f"f{i}"
        started = time.perf_counter()
        fd = os.open(tmp, os.O_CREAT | os.O_WRONLY | os.O_EXCL, 0o640)
        try:
            os.write(fd, b"x" * 300)
            os.fsync(fd)
        finally:
            os.close(fd)
        os.rename(tmp, final)
        dfd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)
        ms.append((time.perf_counter() - started) * 1000)
    return {"p50_ms": round(percentile(ms, 50), 2), "p99_ms": round(percentile(ms, 99), 2)}


def _filenum(path: str) -> int:
    return int(path.rsplit("part-", 1)[1].split(".", 1)[0])


def run_local(work: Path, args: argparse.Namespace) -> dict[str, Any]:
    root = work / "local"
    landing = root / "landing"
    landing.mkdir(parents=True)
    return measure(
        LocalFileSystem(), landing, str(landing), str(root / "out"), str(root / "ck"), args
    )


def run_webhdfs(work: Path, args: argparse.Namespace) -> dict[str, Any]:
    from operators.testing.webhdfs_server import start_process

    root = work / "webhdfs"
    (root / "landing").mkdir(parents=True)
    server = start_process(root)
    try:
        fs = open_filesystem(FileSystemSettings(uri=server.uri, user="bench"))
        return measure(fs, root / "landing", "/landing", "/out", "/ck", args)
    finally:
        server.stop()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cuts", type=int, default=100, help="cuts per backend (default 100)")
    parser.add_argument("--period", type=float, default=1.0, help="cut period in s (default 1)")
    parser.add_argument("--rate-mb", type=float, default=2.0, help="input MB/s (default 2)")
    parser.add_argument("--file-kb", type=int, default=256, help="input file size in kB")
    parser.add_argument(
        "--roll-mb", type=float, default=4.0, help="output file size in MB (default 4)"
    )
    parser.add_argument("--backends", default="local,webhdfs", help="default local,webhdfs")
    add_common_args(parser, "cut_latency")
    args = parser.parse_args(argv)
    args.roll_bytes = max(1, int(args.roll_mb * 1e6))

    results: dict[str, Any] = {}
    with scratch(args.work, "bench-cuts-") as work:
        floor = fsync_floor(work / "fsync", args.cuts)
        for backend in args.backends.split(","):
            backend = backend.strip()
            if backend == "local":
                results[backend] = run_local(work, args)
            elif backend == "webhdfs":
                results[backend] = run_webhdfs(work, args)
            else:
                parser.error(f"--backends: unknown backend {backend!r} (local, webhdfs)")

    local = results.get("local")
    result: dict[str, Any] = {
        "benchmark": "cut_latency",
        "period_s": args.period,
        "input_mb_per_s": args.rate_mb,
        "input_file_kb": args.file_kb,
        "output_file_bytes": args.roll_bytes,
        "backends": results,
        "fsync_floor": floor,
        "p50_over_fsync_floor": None
        if local is None
        else round(local["p50_ms"] / max(floor["p50_ms"], 1e-3), 2),
        "target": f"local p99 < {TARGET_P99_LOCAL_MS} ms",
        "target_met": None if local is None else local["p99_ms"] < TARGET_P99_LOCAL_MS,
        "output_correct": True,
    }
    print_table(
        f"Benchmark 4: cut latency (drain + checkpoint + commit), period {args.period:g} s, "
        f"input {args.rate_mb:g} MB/s",
        ["backend", "cuts", "p50 ms", "p99 ms", "max ms", "records"],
        [
            *(
                [name, r["cuts"], r["p50_ms"], r["p99_ms"], r["max_ms"], r["records"]]
                for name, r in results.items()
            ),
            ["baseline: one small durable write", "-", floor["p50_ms"], floor["p99_ms"], "-", "-"],
        ],
    )
    if local is not None:
        print(f"local p99 {local['p99_ms']:.1f} ms (target < {TARGET_P99_LOCAL_MS:g} ms)")
    write_json(args.json, result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
