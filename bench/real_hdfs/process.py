"""Part 4: the whole process, ``hdfs-region run --engine local --available-now`` on the cluster,
against a Python process copying the same files through hdfs-native."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from bench.common import REPO, Comparison, make_text_files, print_table, upload
from bench.real_hdfs.cluster import Cluster
from bench.real_hdfs.files import published_bytes

PROCESS_CONFIG = """\
engine = "local"
[filesystem]
uri = "{uri}"
user = "{user}"
config_dir = "{conf_dir}"
[region]
trigger = "periodic"
period = "{period}s"
checkpoint_dir = "{root}/checkpoints"
[scan]
directory = "{landing}"
[sink]
file = "{root}/out/part-%FILENUM.txt"
"""

#: The baseline's process: every input read whole through hdfs-native, written into one output
#: file, hsync and close (``plain_copy`` run as its own Python process).
PLAIN_COPY_PROCESS = """\
import sys
import threading
from bench.real_hdfs.files import plain_copy
from operators.fs import open_path
fs, _ = open_path(sys.argv[1])
names = sorted(s.path for s in fs.list_dir(sys.argv[2]) if not s.is_dir)
plain_copy(fs, names, sys.argv[3])
"""


def measure(c: Cluster, root: str, work: Path, args: argparse.Namespace) -> dict[str, Any]:
    """Part 4, on hdfs://: ``hdfs-region run --engine local --available-now`` as a whole
    process (Python start, lock, stamps, cuts, unlock) against a Python process copying the same
    files through hdfs-native; alternating, ``args.repeat`` times each, fresh output each time."""
    local = work / "process-input"
    total_bytes, _ = make_text_files(local, args.mb, args.files)
    landing = f"{root}/process/input"
    fs = c.open("hdfs", root)
    upload(local, fs, landing)
    expected = b"".join(p.read_bytes() for p in sorted(local.iterdir()))
    env = {**os.environ, "HADOOP_USER_NAME": c.user, "HADOOP_CONF_DIR": c.conf_dir or ""}

    def ours(n: str) -> float:
        config = work / f"process-{n}.toml"
        config.write_text(
            PROCESS_CONFIG.format(
                uri=c.hdfs,
                user=c.user,
                conf_dir=c.conf_dir or "",
                period=args.period,
                root=f"{root}/process/run-{n}",
                landing=landing,
            )
        )
        command = [sys.executable, "-m", "operators.app", "run", str(config), "--available-now"]
        started = time.perf_counter()
        subprocess.run(command, check=True, env=env, capture_output=True)
        return time.perf_counter() - started

    def plain(n: str) -> float:
        out = f"{root}/process/copy-{n}"
        copy = [sys.executable, "-c", PLAIN_COPY_PROCESS, c.hdfs + "/", landing, out]
        started = time.perf_counter()
        subprocess.run(copy, check=True, env=env, capture_output=True, cwd=REPO)
        return time.perf_counter() - started

    def check(key: str, n: str) -> None:
        if key == "ours":
            got, _ = published_bytes(fs, f"{root}/process/run-{n}/out")
            if sorted(got.splitlines()) != sorted(expected.splitlines()):
                raise SystemExit(f"bench_hdfs: run {n}: the output is not the input, line for line")
            return
        out = f"{root}/process/copy-{n}"
        if fs.status(out).size != total_bytes:
            raise SystemExit(f"bench_hdfs: copy {n}: {out} is not {total_bytes} bytes")

    race = Comparison(total_bytes / 1e6)
    race.add("ours", "hdfs-region run", ours)
    race.add("plain_copy", "plain copy process", plain)
    race.race(args.repeat, check=check, warm=False)
    ours_s, plain_s = round(race.median("ours"), 2), round(race.median("plain_copy"), 2)
    return {
        "input_mb": round(race.mb, 1),
        "input_files": args.files,
        "ours_s": ours_s,
        "plain_copy_s": plain_s,
        # Of the rounded medians, as the table shows them.
        "ratio": round(plain_s / ours_s, 2),
        "samples": {
            key: [round(x, 2) for x in runs["seconds"]] for key, runs in race.samples.items()
        },
        "load_average_before": race.load_before,
        "load_average_after": race.load_after,
    }


def show(args: argparse.Namespace, result: dict[str, Any], where: str) -> None:
    """The part's table (``where``: the cluster, as the titles name it)."""
    print_table(
        f"Benchmark 6.4: whole process, hdfs-region run --engine local --available-now vs a "
        f"Python process copying through hdfs-native ({where}); {result['input_mb']:.0f} MB in "
        f"{result['input_files']} files, median of {args.repeat}",
        ["ours s", "plain copy s", "ratio"],
        [[result["ours_s"], result["plain_copy_s"], result["ratio"]]],
    )
