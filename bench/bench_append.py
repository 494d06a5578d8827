"""Benchmark: what an append to a large file costs the default rule (``on_modified =
"continue"``), against the size of the file.

A log of ``--sizes`` MB is read whole once by the in-process pipeline (scan -> source ->
sink, local disk); then ``--append`` lines are appended to it, and the next run reads them.
Timed and counted for that second run: the bytes read from the landing directory (through a
counting filesystem) and the wall time, against the same run of the plain copy loop that reads
only the appended bytes (open, seek to the old end, read, write, fsync). The rule compares two
windows of 4 KiB: the bytes it reads should stay the appended bytes plus about 8 KiB, whatever
the file's size.

    python bench/bench_append.py                   # 10, 100 and 1000 MB, 1000 lines appended
    python bench/bench_append.py --sizes 10,100    # a quick run
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import add_common_args, machine, median, print_table, scratch, write_json
from operators.fs.local import LocalFileSystem
from operators.scan import HDFS2DirectoryScan, ScanSettings
from operators.sink import HDFS2FileSink, SinkSettings
from operators.source import HDFS2FileSource, SourceSettings
from region.checkpoint import CheckpointStore
from region.runtime import Pipeline, PipelineRunner, StepOutcome
from region.settings import RegionSettings, Trigger

LINE = b"x" * 99 + b"\n"


class CountingFS(LocalFileSystem):
    """The local filesystem, counting the bytes read under ``prefix``."""

    def __init__(self, prefix: str) -> None:
        super().__init__()
        self.prefix = prefix
        self.read_bytes = 0

    def read(self, path: str, offset: int = 0, length: int = -1) -> bytes:
        data = super().read(path, offset, length)
        if path.startswith(self.prefix):
            self.read_bytes += len(data)
        return data


def run_to_end(root: Path, fs: CountingFS) -> None:
    scan = HDFS2DirectoryScan(ScanSettings(directory=str(root / "in"), sleep_time=0), fs)
    source = HDFS2FileSource(SourceSettings(), fs, files=scan)
    sink = HDFS2FileSink(SinkSettings(directory=str(root / "out"), file="part-%FILENUM.txt"), fs)
    region = RegionSettings(trigger=Trigger.PERIODIC, period=1e9)
    runner = PipelineRunner(
        Pipeline(source, sinks=[sink], batch_size=8192),
        region,
        CheckpointStore(fs, str(root / "ck")),
        lock=False,
    )
    runner.start()
    while runner.step() is not StepOutcome.IDLE:
        pass
    with runner.controller.permits.hold():
        sink.finish()
    assert runner.controller.cut(final=True)
    runner.controller.stop(graceful=False)


def plain_append_copy(src: Path, old_size: int, dst: Path) -> int:
    """The baseline: read what was appended, write it, fsync."""
    with src.open("rb") as f, dst.open("ab") as out:
        f.seek(old_size)
        data = f.read()
        out.write(data)
        out.flush()
        os.fsync(out.fileno())
    return len(data)


def one(parent: Path | None, size_mb: int, appended: int) -> dict[str, Any]:
    with scratch(parent, "append") as root:
        (root / "in").mkdir()
        log = root / "in" / "app.log"
        with log.open("wb") as f:
            block = LINE * 10_000
            for _ in range(size_mb * 1_000_000 // len(block)):
                f.write(block)
        old = log.stat().st_size
        run_to_end(root, CountingFS(str(root / "in")))
        with log.open("ab") as f:
            f.write(LINE * appended)
        os.utime(log, None)
        fs = CountingFS(str(root / "in"))
        started = time.perf_counter()
        run_to_end(root, fs)
        ours = time.perf_counter() - started
        started = time.perf_counter()
        copied = plain_append_copy(log, old, root / "copy.out")
        plain = time.perf_counter() - started
        return {
            "file_mb": size_mb,
            "appended_bytes": copied,
            "read_bytes": fs.read_bytes,
            "overhead_bytes": fs.read_bytes - copied,
            "seconds": ours,
            "plain_seconds": plain,
        }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="10,100,1000", help="file sizes, MB")
    parser.add_argument("--append", type=int, default=1000, help="lines appended (100 B each)")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--dir", type=Path, default=None, help="scratch directory's parent")
    add_common_args(parser, "bench_append")
    args = parser.parse_args()
    rows, results = [], []
    for size in (int(s) for s in args.sizes.split(",")):
        runs = [one(args.dir, size, args.append) for _ in range(args.repeat)]
        result = {
            "file_mb": size,
            "appended_bytes": runs[0]["appended_bytes"],
            "read_bytes": median([r["read_bytes"] for r in runs]),
            "seconds_median": median([r["seconds"] for r in runs]),
            "plain_seconds_median": median([r["plain_seconds"] for r in runs]),
        }
        results.append(result)
        rows.append(
            [
                f"{size} MB",
                result["appended_bytes"],
                int(result["read_bytes"]),
                int(result["read_bytes"] - result["appended_bytes"]),
                f"{result['seconds_median'] * 1000:.1f} ms",
                f"{result['plain_seconds_median'] * 1000:.2f} ms",
            ]
        )
    print_table(
        "the run after an append (in-process pipeline, local disk, median of "
        f"{args.repeat}; load {machine()['load_average']})",
        ["file", "appended B", "read B", "read beyond it", "our run", "plain copy of it"],
        rows,
    )
    write_json(args.json, {"machine": machine(), "results": results})


if __name__ == "__main__":
    main()
