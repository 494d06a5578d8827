"""Part 5: files landing on the cluster at a steady rate while ``hdfs-region run`` cuts every
period, against a Python process polling the directory and copying each new file."""

from __future__ import annotations

import argparse
import concurrent.futures
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from bench.common import REPO, make_text_files, median, print_table
from bench.real_hdfs.cluster import Cluster
from bench.real_hdfs.files import visible_files, write_file
from bench.real_hdfs.process import PROCESS_CONFIG
from region.fs import FileSystem

#: The baseline of part 5: a Python process that lists the landing directory every second and
#: copies each new file through hdfs-native into an output file of its own (read whole, write,
#: hsync, close), until SIGTERM.
PLAIN_STEADY_PROCESS = """\
import signal, sys, time
from bench.real_hdfs.files import write_file
from operators.fs import open_path
stopping = []
signal.signal(signal.SIGTERM, lambda *_: stopping.append(1))
fs, _ = open_path(sys.argv[1])
landing, out, seen, n = sys.argv[2], sys.argv[3], set(), 0
fs.mkdirs(out)
while not stopping:
    new = sorted(
        (s.mtime_ns, s.path) for s in fs.list_dir(landing)
        if not s.is_dir and not s.name.startswith(".") and s.path not in seen
    )
    for _, path in new:
        write_file(fs, f"{out}/part-{n}.txt", [fs.read(path)], sync=True)
        seen.add(path)
        n += 1
    if not new:
        time.sleep(1.0)
"""


def _published_size(fs: FileSystem, directory: str) -> int:
    try:
        return sum(s.size for s in visible_files(fs, directory))
    except FileNotFoundError:
        return 0


def _steady_run(
    c: Cluster,
    fs: FileSystem,
    command: list[str],
    landing: str,
    out: str,
    pool: list[bytes],
    args: argparse.Namespace,
    env: dict[str, str],
    out_log: Path,
) -> dict[str, Any]:
    """Land ``pool``'s files in turn into ``landing`` at ``args.steady_rate_mb`` MB/s for
    ``args.steady_s`` seconds (each written under a hidden name, then renamed), while
    ``command`` runs; sample the backlog (landed minus published bytes) twice a second; once
    landing ends, wait until every byte is published, then SIGTERM the command."""
    fs.mkdirs(landing)
    log = open(out_log, "wb")  # noqa: SIM115 (closed below; a pipe would fill and block it)
    process = subprocess.Popen(command, env=env, cwd=REPO, stdout=log, stderr=subprocess.STDOUT)
    landed = 0
    backlog: list[int] = []
    lock = threading.Lock()
    done_landing = threading.Event()

    landing_ended = 0.0

    def land_one(n: int) -> None:
        nonlocal landed, landing_ended
        data = pool[n % len(pool)]
        tmp, name = f"{landing}/.f{n:06d}.tmp", f"{landing}/f{n:06d}.txt"
        write_file(fs, tmp, [data])
        fs.rename(tmp, name)
        with lock:
            landed += len(data)
            landing_ended = time.perf_counter()

    def land() -> None:
        # Each file on a thread of a pool, on schedule: one writer's close waits until the
        # DataNode reports the block (500 ms on one DataNode), and must not slow the landing.
        interval = len(pool[0]) / (args.steady_rate_mb * 1e6)
        due = time.perf_counter()
        end = due + args.steady_s
        with concurrent.futures.ThreadPoolExecutor(16) as landers:
            landings = []
            n = 0
            while due < end:
                landings.append(landers.submit(land_one, n))
                n += 1
                due += interval
                time.sleep(max(0.0, due - time.perf_counter()))
            for landing_done in landings:
                landing_done.result()
        done_landing.set()

    started = time.perf_counter()
    lander = threading.Thread(target=land, daemon=True)
    lander.start()
    try:
        while True:
            time.sleep(0.5)
            published = _published_size(fs, out)
            with lock:
                now_landed = landed
            backlog.append(max(0, now_landed - published))
            if done_landing.is_set() and published >= now_landed:
                break
            if process.poll() is not None:
                tail = out_log.read_bytes()[-2000:].decode(errors="replace")
                raise SystemExit(f"bench_hdfs: {command[2]} ended early: {tail}")
            if time.perf_counter() - started > args.steady_s + args.timeout:
                raise SystemExit("bench_hdfs: steady: the output did not catch up in time")
        finished = time.perf_counter()
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=120)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        log.close()
    published = _published_size(fs, out)
    if published != landed:
        raise SystemExit(f"bench_hdfs: steady: published {published} bytes of {landed} landed")
    rate = args.steady_rate_mb * 1e6
    return {
        "landed_mb": round(landed / 1e6, 1),
        "mb_per_s": round(landed / 1e6 / (finished - started), 2),
        "catch_up_s": round(max(0.0, finished - landing_ended), 2),
        "mean_backlog_mb": round(sum(backlog) / len(backlog) / 1e6, 2),
        "mean_latency_s": round(sum(backlog) / len(backlog) / rate, 2),  # Little's law
    }


def measure(c: Cluster, root: str, work: Path, args: argparse.Namespace) -> dict[str, Any]:
    """Part 5, on hdfs://: files landing at a steady rate for ``--steady-s`` seconds while
    ``hdfs-region run`` (periodic cuts every ``--period`` s, not available-now) runs, against
    a Python process that polls the directory every second and copies each new file through
    hdfs-native; alternating, ``args.repeat`` times each."""
    local = work / "steady-pool"
    make_text_files(local, args.steady_file_mb * 4, 4)
    pool = [p.read_bytes() for p in sorted(local.iterdir())]
    fs = c.open("hdfs", root)
    env = {**os.environ, "HADOOP_USER_NAME": c.user, "HADOOP_CONF_DIR": c.conf_dir or ""}
    runs: dict[str, list[dict[str, Any]]] = {"ours": [], "plain_copy": []}
    for n in range(args.repeat):
        run_root = f"{root}/steady/run-{n}"
        config = work / f"steady-{n}.toml"
        # One output file per input file, published at the cut after it, as the copy does.
        config.write_text(
            PROCESS_CONFIG.format(
                uri=c.hdfs,
                user=c.user,
                conf_dir=c.conf_dir or "",
                period=args.period,
                root=run_root,
                landing=f"{run_root}/landing",
            )
            + "close_on_punct = true\n"
        )
        ours = [sys.executable, "-m", "operators.app", "run", str(config), "--no-progress"]
        runs["ours"].append(
            _steady_run(
                c,
                fs,
                ours,
                f"{run_root}/landing",
                f"{run_root}/out",
                pool,
                args,
                env,
                work / f"steady-ours-{n}.log",
            )
        )
        copy_root = f"{root}/steady/copy-{n}"
        plain = [
            sys.executable,
            "-c",
            PLAIN_STEADY_PROCESS,
            c.hdfs + "/",
            f"{copy_root}/landing",
            f"{copy_root}/out",
        ]
        runs["plain_copy"].append(
            _steady_run(
                c,
                fs,
                plain,
                f"{copy_root}/landing",
                f"{copy_root}/out",
                pool,
                args,
                env,
                work / f"steady-copy-{n}.log",
            )
        )
        fs.delete(f"{root}/steady", recursive=True)
    summary = {who: {k: median([r[k] for r in rs]) for k in rs[0]} for who, rs in runs.items()}
    return {
        "seconds": args.steady_s,
        "rate_mb_per_s": args.steady_rate_mb,
        "file_mb": round(len(pool[0]) / 1e6, 2),
        "period_s": args.period,
        **summary,
        "latency_ratio": round(
            summary["plain_copy"]["mean_latency_s"] / max(summary["ours"]["mean_latency_s"], 1e-3),
            2,
        ),
        "runs": runs,
    }


def show(args: argparse.Namespace, result: dict[str, Any], where: str) -> None:
    """The part's table (``where``: the cluster, as the titles name it)."""
    print_table(
        f"Benchmark 6.5: steady throughput, files of {result['file_mb']:g} MB landing at "
        f"{result['rate_mb_per_s']:g} MB/s for {result['seconds']:g} s on hdfs:// ({where}): "
        f"hdfs-region run (cuts every {result['period_s']:g} s) vs a process polling every second "
        f"and copying each new file through hdfs-native; median of {args.repeat}",
        ["who", "landed MB", "MB/s", "mean backlog MB", "mean latency s", "catch-up s"],
        [
            [
                who,
                result[who]["landed_mb"],
                result[who]["mb_per_s"],
                result[who]["mean_backlog_mb"],
                result[who]["mean_latency_s"],
                result[who]["catch_up_s"],
            ]
            for who in ("ours", "plain_copy")
        ],
    )
