"""Files a slow stream makes on Spark: ``hdfs-region run --engine spark`` (files span
micro-batches, ``bytes_per_file``) against Spark's built-in text sink, side by side on the same
landing directory.

A producer lands one file per second holding ``--rate`` records of ``--record-bytes`` bytes for
``--seconds``; both jobs trigger every ``--trigger`` seconds and are stopped gracefully at the end
(SIGTERM for ours, ``query.stop()`` for Spark's). Prints the number and sizes of the files a plain
reader sees, checks both published every record, and writes ``bench/results/slow_stream.json``.

    python bench/bench_slow_stream.py                  # 10 records/s for 10 minutes, 1 MB files
    python bench/bench_slow_stream.py --seconds 60     # a quick run
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import REPO, add_common_args, median, print_table, scratch, write_json

SETTINGS = """\
engine = "spark"
[region]
trigger = "periodic"
period = {trigger}
[scan]
directory = "{landing}"
[sink]
file = "{out}/part-%FILENUM.txt"
bytes_per_file = {bytes_per_file}
"""


def produce(
    landing: Path, rate: int, record_bytes: int, seconds: float, stop: threading.Event
) -> int:
    """One file per second, written under a hidden name and renamed; returns the records."""
    landing.mkdir(parents=True, exist_ok=True)
    count = 0
    started = time.monotonic()
    second = 0
    while time.monotonic() - started < seconds and not stop.is_set():
        lines = []
        for i in range(rate):
            head = f"s{second:06d}-r{i:03d} "
            lines.append(head + "x" * max(0, record_bytes - len(head) - 1))
        tmp = landing / f".f{second:06d}.tmp"
        tmp.write_text("\n".join(lines) + "\n")
        os.rename(tmp, landing / f"f{second:06d}.txt")
        count += rate
        second += 1
        time.sleep(max(0.0, started + second - time.monotonic()))
    return count


def files_of(directory: Path) -> list[Path]:
    if not directory.exists():
        return []
    return sorted(
        p
        for p in directory.iterdir()
        if p.is_file() and not p.name.startswith((".", "_")) and p.stat().st_size > 0
    )


def describe(name: str, files: list[Path]) -> dict[str, Any]:
    sizes = [p.stat().st_size for p in files]
    records = sum(p.read_bytes().count(b"\n") for p in files)
    return {
        "sink": name,
        "files": len(files),
        "median_bytes": median([float(s) for s in sizes]),
        "min_bytes": min(sizes, default=0),
        "max_bytes": max(sizes, default=0),
        "records": records,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=600.0)
    parser.add_argument("--rate", type=int, default=10, help="records per second")
    parser.add_argument("--record-bytes", type=int, default=500)
    parser.add_argument("--bytes-per-file", type=int, default=1_000_000)
    parser.add_argument("--trigger", type=float, default=5.0, help="seconds between batches")
    add_common_args(parser, "slow_stream")
    args = parser.parse_args()

    from operators.spark.session import build_session

    with scratch(args.work, "bench-slow-") as work:
        landing, ours_out, spark_out = work / "landing", work / "ours", work / "spark"
        landing.mkdir()
        config = work / "pipeline.toml"
        config.write_text(
            SETTINGS.format(
                trigger=args.trigger,
                landing=landing,
                out=ours_out,
                bytes_per_file=args.bytes_per_file,
            )
        )
        ours = subprocess.Popen(
            [sys.executable, "-m", "operators.app", "run", str(config), "--no-progress"],
            cwd=REPO,
            stdout=subprocess.DEVNULL,
            stderr=open(work / "ours.log", "w"),  # noqa: SIM115 - closed with the process
        )
        spark = build_session("bench-slow-stream", master="local[1]")
        query = (
            spark.readStream.format("text")
            .load(str(landing))
            .writeStream.format("text")
            .option("path", str(spark_out))
            .option("checkpointLocation", str(work / "spark-ck"))
            .trigger(processingTime=f"{args.trigger} seconds")
            .start()
        )
        stop = threading.Event()
        try:
            produced = produce(landing, args.rate, args.record_bytes, args.seconds, stop)
            time.sleep(3 * args.trigger)  # both take in the last files
        finally:
            stop.set()
            ours.send_signal(signal.SIGTERM)
            code = ours.wait(timeout=300)
            query.stop()
            spark.stop()
        if code != 0:
            print((work / "ours.log").read_text()[-3000:], file=sys.stderr)
            raise SystemExit(f"hdfs-region run exited {code}")
        rows = [
            describe("hdfs-region run (spark, files span batches)", files_of(ours_out)),
            describe("Spark built-in text sink", files_of(spark_out)),
        ]
        for row in rows:
            row["all_records"] = row["records"] == produced
        print_table(
            f"{args.rate} records/s of {args.record_bytes} B for {args.seconds:.0f} s, "
            f"trigger {args.trigger} s, bytes_per_file {args.bytes_per_file}",
            ["sink", "files", "median B", "min B", "max B", "records", "all"],
            [
                [
                    r["sink"],
                    r["files"],
                    r["median_bytes"],
                    r["min_bytes"],
                    r["max_bytes"],
                    r["records"],
                    r["all_records"],
                ]
                for r in rows
            ],
        )
        write_json(
            args.json,
            {
                "produced": produced,
                "settings": vars(args) | {"json": str(args.json), "work": str(args.work)},
                "rows": rows,
            },
        )


if __name__ == "__main__":
    main()
