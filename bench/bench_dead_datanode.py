"""Benchmark: how long a DataNode that dies stalls writes, before the NameNode notices.

A 3-DataNode sandbox (replication 3) whose NameNode counts a silent DataNode as live for
``--dead-after`` seconds (default 630, a production NameNode's default). Three writers run
through the native client, as a job does:

* **new files**: a small file written, synced and renamed every 0.25 s (a checkpoint cut or a
  lock generation);
* **lock**: a real :class:`~region.lock.CheckpointLock` (ttl 30 s, heartbeat every 10 s);
  its renewals' age is sampled every 0.1 s, and ``check()`` counts unsafe samples;
* **open stream**: one file written and synced every 0.25 s (a sink's part file); after a
  failure a new file is opened, as a sink does after its reset.

After ``--before`` seconds, DataNode 0 is stopped (its ports refuse). For each writer:
failures after the stop, the longest time without a success, and when the first success after
the stop's first failure came. The baseline is the same writers before the stop (no failure,
gaps of one interval). One fresh sandbox per repeat; medians.

``--job`` runs the whole job instead, once per repeat: ``hdfs-region run --available-now``,
``hdfs://`` to ``hdfs://`` with its checkpoints on the cluster, 3,200 records paced at 3 ms,
DataNode 0 stopped 5 s in; its exit code, wall time, resets, and whether the output holds
every record once.

    python bench/bench_dead_datanode.py                      # 3 repeats, 30 s after the stop
    python bench/bench_dead_datanode.py --repeat 1 --after 20
    python bench/bench_dead_datanode.py --job --hdfs-site \
        dfs.client.block.write.replace-datanode-on-failure.best-effort=true
"""

from __future__ import annotations

import argparse
import itertools
import os
import posixpath
import re
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from importlib.metadata import version

import hdfs_native

from bench.common import add_common_args, median, print_table, scratch, write_json
from operators.fs.native import NativeHdfsFileSystem
from operators.fs.settings import FileSystemSettings
from operators.sandbox import Sandbox
from region.atomic import write_atomically
from region.errors import LockUnsafeError
from region.lock import CheckpointLock

INTERVAL = 0.25


class Writer(threading.Thread):
    """Calls ``step`` every ``INTERVAL`` seconds, recording (start, ok) until stopped."""

    def __init__(self, name: str, step: Any) -> None:
        super().__init__(name=name, daemon=True)
        self.step = step
        self.events: list[tuple[float, bool]] = []
        self.stopped = threading.Event()

    def run(self) -> None:
        n = 0
        while not self.stopped.is_set():
            start = time.monotonic()
            try:
                self.step(n)
                self.events.append((time.monotonic(), True))
            except Exception:  # every failure is a data point here
                self.events.append((time.monotonic(), False))
            n += 1
            self.stopped.wait(max(0.0, INTERVAL - (time.monotonic() - start)))


def summary(events: list[tuple[float, bool]], stop: float, end: float) -> dict[str, Any]:
    """Failures after ``stop``, the longest stretch without a success from ``stop`` to
    ``end`` (a call still hanging at the end counts to the end), and the first success after
    the first failure (0: none failed; None: none succeeded again)."""
    after = [(t, ok) for t, ok in events if stop <= t <= end]
    failures = [t for t, ok in after if not ok]
    successes = [stop] + [t for t, ok in after if ok] + [end]
    gap = max(b - a for a, b in itertools.pairwise(successes))
    again: float | None = 0.0  # nothing failed: never stopped flowing
    if failures:
        later = [t for t, ok in after if ok and t > failures[0]]
        again = round(later[0] - stop, 2) if later else None
    return {"failures": len(failures), "longest_gap_s": round(gap, 2), "flowing_again_s": again}


def client_name() -> str:
    return f"hdfs-native {version('hdfs-native')} from {Path(hdfs_native.__file__).parent}"


def client_conf(source: str, target: Path, extra: list[str]) -> Path:
    """The sandbox's client configuration with ``extra`` (``key=value``) added to hdfs-site.xml."""
    shutil.copytree(source, target)
    site = target / "hdfs-site.xml"
    added = "".join(
        f"<property><name>{key}</name><value>{value}</value></property>"
        for key, _, value in (item.partition("=") for item in extra)
    )
    site.write_text(site.read_text().replace("</configuration>", added + "</configuration>"))
    return target


def one_run(
    base: Path, dead_after: float, before: float, after: float, extra: list[str]
) -> dict[str, Any]:
    with Sandbox.start(base / "sandbox", datanodes=3, dead_after=dead_after) as sandbox:
        conf = client_conf(sandbox.info.conf_dir, base / "conf", extra)
        fs = NativeHdfsFileSystem(FileSystemSettings(uri=sandbox.info.hdfs, config_dir=str(conf)))
        fs.mkdirs("/bench/cuts")
        fs.mkdirs("/bench/out")
        fs.mkdirs("/bench/lock")
        lock = CheckpointLock(fs, "/bench/lock", ttl=30.0)
        lock.acquire()
        streams: list[Any] = [fs.create("/bench/out/part-0")]

        def new_file(n: int) -> None:
            write_atomically(fs, f"/bench/cuts/cut-{n}", b"x" * 200, close_later=True)

        def stream(n: int) -> None:
            try:
                streams[-1].write(b"y" * 1023 + b"\n")
                streams[-1].sync()
            except Exception:
                streams.append(fs.create(f"/bench/out/part-{len(streams)}"))
                raise

        lock_ages: list[tuple[float, float, bool]] = []
        writers = [Writer("new files", new_file), Writer("open stream", stream)]
        for w in writers:
            w.start()
        stop_at = time.monotonic() + before
        end = stop_at + after
        stopped = False
        while time.monotonic() < end:
            if not stopped and time.monotonic() >= stop_at:
                sandbox.command("stop-datanode 0")
                stop_at = time.monotonic()
                end = stop_at + after
                stopped = True
            renewed = lock.renewed_at
            try:
                lock.check()
                safe = True
            except LockUnsafeError:
                safe = False
            lock_ages.append((time.monotonic(), time.time() - (renewed or 0.0), safe))
            time.sleep(0.1)
        for w in writers:
            w.stopped.set()
        result = {w.name: summary(w.events, stop_at, end) for w in writers}
        result["lock"] = {
            "oldest_renewal_s": round(max(age for t, age, _ in lock_ages if t >= stop_at), 2),
            "unsafe_samples": sum(1 for t, _, safe in lock_ages if t >= stop_at and not safe),
        }
        baseline = {w.name: summary(w.events, stop_at - before + 1.0, stop_at) for w in writers}
        result["before"] = baseline
        return result


PACE = """\
import os
import time


def shout(record):
    time.sleep(float(os.environ["PACE"]))
    return record.upper()
"""

JOB = """\
engine = "local"
[filesystem]
uri = "{uri}"
config_dir = "{conf}"
timeout = "{timeout}s"
[region]
trigger = "periodic"
period = "200ms"
checkpoint_dir = "/job/checkpoints"
[scan]
directory = "/job/landing"
[transform]
function = "pace:shout"
[sink]
file = "/job/out/part-%FILENUM.txt"
tuples_per_file = 1000
"""


def job_run(
    base: Path, dead_after: float, extra: list[str], limit: float, *, rerun: bool = False
) -> dict[str, Any]:
    """One job through a DataNode stopped 5 s in; ``rerun``: a run that failed is run again
    (the DataNode still stopped), as an operator or a scheduler does."""
    with Sandbox.start(base / "sandbox", datanodes=3, dead_after=dead_after) as sandbox:
        conf = client_conf(sandbox.info.conf_dir, base / "conf", extra)
        fs = NativeHdfsFileSystem(FileSystemSettings(uri=sandbox.info.hdfs, config_dir=str(conf)))
        fs.mkdirs("/job/landing")
        expected = []
        for i in range(8):
            lines = [f"f{i}-line-{j:05d}" for j in range(400)]
            expected += [line.upper() for line in lines]
            with fs.create(f"/job/landing/f{i}.txt") as w:
                w.write(("\n".join(lines) + "\n").encode())
        (base / "pace.py").write_text(PACE)
        config = base / "pipeline.toml"
        config.write_text(JOB.format(uri=sandbox.info.hdfs, conf=conf, timeout=30))
        env = dict(os.environ, PACE="0.003", PYTHONPATH=os.pathsep.join([str(base), *sys.path]))
        command = [sys.executable, "-m", "operators.app", "run", str(config), "--available-now"]
        start = time.monotonic()
        with (base / "job.log").open("w") as log:
            job = subprocess.Popen(command, cwd=base, env=env, stderr=log, stdout=log)
            time.sleep(5)
            sandbox.command("stop-datanode 0")
            try:
                rc: int | str = job.wait(limit)
            except subprocess.TimeoutExpired:
                job.kill()
                job.wait()
                rc = f"killed after {limit:g} s"
        took = time.monotonic() - start
        text = (base / "job.log").read_text()
        first = rc
        errors = [line for line in text.splitlines() if "hdfs-region: error:" in line]
        if rerun and rc != 0:
            again = subprocess.run(
                command, cwd=base, env=env, capture_output=True, text=True, timeout=limit
            )
            rc = again.returncode
            text += again.stdout + again.stderr
        resets = re.findall(r"(\d+) resets", text)
        out: list[str] = []
        for status in sorted(fs.list_dir("/job/out"), key=lambda s: s.path):
            if not status.is_dir and not posixpath.basename(status.path).startswith("."):
                out += fs.read(status.path).decode().splitlines()
        return {
            "exit": rc,
            "first_exit": first,
            "error": errors[-1] if errors else "",
            "took_s": round(took, 1),
            "resets": int(resets[-1]) if resets else None,
            "records": len(out),
            "lost": len(set(expected) - set(out)),
            "twice": len(out) - len(set(out)),  # a failed run publishes part, never twice
            "every_record_once": sorted(out) == sorted(expected),
        }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--dead-after", type=float, default=630.0)
    parser.add_argument("--before", type=float, default=5.0)
    parser.add_argument("--after", type=float, default=30.0)
    parser.add_argument(
        "--hdfs-site",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a client setting added to the sandbox's hdfs-site.xml, e.g. "
        "dfs.client.block.write.replace-datanode-on-failure.best-effort=true",
    )
    parser.add_argument("--job", action="store_true", help="run the whole job (see above)")
    parser.add_argument("--job-limit", type=float, default=300.0, metavar="SECONDS")
    add_common_args(parser, "dead_datanode")
    args = parser.parse_args()
    if args.job:
        jobs = []
        for i in range(args.repeat):
            with scratch(args.work, "bench-dead-dn-job-") as base:
                jobs.append(job_run(base, args.dead_after, args.hdfs_site, args.job_limit))
            print(f"job {i + 1}: {jobs[-1]}", flush=True)
        print_table(
            f"the job, DataNode 0 of 3 stopped 5 s in, NameNode notices after "
            f"{args.dead_after:g} s, {client_name()}, client settings "
            f"{args.hdfs_site or 'of the sandbox'}",
            ["exit", "took s", "resets", "records", "twice", "every record once"],
            [list(j.values()) for j in jobs],
        )
        write_json(args.json, {"client": client_name(), "hdfs_site": args.hdfs_site, "jobs": jobs})
        return
    runs = []
    for i in range(args.repeat):
        with scratch(args.work, "bench-dead-dn-") as base:
            runs.append(one_run(base, args.dead_after, args.before, args.after, args.hdfs_site))
        print(f"run {i + 1}: {runs[-1]}", flush=True)

    def med(kind: str, key: str) -> Any:
        values = [r[kind][key] for r in runs]
        known = [v for v in values if v is not None]
        return median(known) if len(known) == len(values) else f"{len(values) - len(known)} never"

    rows = []
    for kind in ("new files", "open stream"):
        rows.append(
            [
                kind,
                med(kind, "failures"),
                med(kind, "longest_gap_s"),
                med(kind, "flowing_again_s"),
                median([r["before"][kind]["longest_gap_s"] for r in runs]),
            ]
        )
    rows.append(
        [
            "lock renewal",
            med("lock", "unsafe_samples"),
            med("lock", "oldest_renewal_s"),
            "-",
            "-",
        ]
    )
    client = client_name()
    print_table(
        f"DataNode 0 of 3 stopped, NameNode notices after {args.dead_after:g} s, {client}, "
        f"client settings {args.hdfs_site or 'of the sandbox'}, median of {args.repeat}",
        ["writer", "failures (lock: unsafe)", "longest gap s", "flowing again s", "gap before s"],
        rows,
    )
    write_json(
        args.json,
        {
            "client": client,
            "hdfs_site": args.hdfs_site,
            "dead_after": args.dead_after,
            "after": args.after,
            "runs": runs,
        },
    )


if __name__ == "__main__":
    main()
