"""Benchmark 6: on a real HDFS (Hadoop's MiniDFSCluster): throughput, cut latency, recovery.

Every figure has a baseline measured in the same run, on the same cluster, through the same
client:

1. pipeline: the pipeline of bench_pipeline.py (scan -> source -> sink, exactly once, one output
   file, periodic cut) with its input, output and checkpoints on the cluster, once through
   ``hdfs://`` (hdfs-native) and once through ``webhdfs://``. Baseline: a plain copy loop through
   the same FileSystem object: each input file read whole (``fs.read``) and written into one
   output file (create, write, hsync, close). MB/s, and ours / plain. Both outputs are checked
   byte for byte against the input.
2. cuts: the measurement of bench_cut_latency.py with the sink's output and the checkpoints on
   ``hdfs://`` (input fed on the local disk at ``--rate-mb``): p50 / p99 of a cut (drain with
   hsync, checkpoint: create + write + hsync + rename, closed in the background, publish,
   retire). Baseline: one durable small write through the same client (create, write 300
   bytes, hsync, close), each step timed.
3. recovery: the kills of bench_recovery.py (the real ``operators.app.cli run`` command, SIGKILLed
   mid-file after a cut, then started again) with output and checkpoints on ``hdfs://`` (input
   on the local disk): seconds from the restart to recovered (the killed writer's lease ended
   by ``recover_lease``, its file cut back to the checkpoint), first new cut, first new
   published file. Baseline: a fresh start of the same command. The output after the kills must
   hold every record exactly once.

A sandbox cluster is started for the run (about 5 s; needs Java, and Maven the first time),
unless ``--hdfs`` names a running one (then also ``--webhdfs`` and ``--conf-dir``). A sandbox is
started for each ``--block-size`` (default 128 MiB, a production cluster's, then 1 MiB, the
tests': a 64 MB file is 64 blocks, an addBlock and a new DataNode pipeline every MiB); the
results record each cluster's block size.

    python bench/bench_hdfs.py                          # 64 MB in 8 files, 50 cuts, 3 kills
    python bench/bench_hdfs.py --mb 16 --cuts 10 --trials 1    # a quick run
    python bench/bench_hdfs.py --parts pipeline --backends hdfs --block-size 134217728
    python bench/bench_hdfs.py --parts process --mb 200 --files 10 --block-size 134217728
    python bench/bench_hdfs.py --parts steady --steady-s 120 --steady-rate-mb 20 --repeat 1
"""

from __future__ import annotations

import argparse
import concurrent.futures
import contextlib
import importlib.metadata
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import bench_cut_latency, bench_pipeline, bench_recovery
from bench.campaign import Arrivals, Workspace, kill_all
from bench.common import (
    REPO,
    Comparison,
    Timing,
    add_common_args,
    load_average,
    make_text_files,
    median,
    percentile,
    print_table,
    scratch,
    write_json,
)
from operators.fs import FileSystemSettings, LocalFileSystem, open_path
from operators.sandbox import Sandbox, SandboxSetupError
from region.fs import FileStatus, FileSystem

PARTS = ("pipeline", "cuts", "recovery", "process", "steady")
BACKENDS = ("hdfs", "webhdfs")


@dataclass(frozen=True)
class Cluster:
    """Where the cluster is and how to reach it."""

    hdfs: str
    webhdfs: str
    conf_dir: str | None
    user: str
    sandbox: dict[str, Any] | None  # the sandbox's ready line; None for a cluster named by flags
    #: Timeout of one request (listing a directory of a million files takes minutes).
    timeout: float = 60.0

    def settings(self, backend: str) -> FileSystemSettings:
        uri = self.hdfs if backend == "hdfs" else self.webhdfs
        values: dict[str, Any] = {"uri": uri, "user": self.user, "timeout": self.timeout}
        if backend == "hdfs" and self.conf_dir:
            values["config_dir"] = self.conf_dir
        return FileSystemSettings.model_validate(values)

    def open(self, backend: str, root: str) -> FileSystem:
        uri = self.hdfs if backend == "hdfs" else self.webhdfs
        fs, _ = open_path(uri + root, self.settings(backend))
        return fs


@contextlib.contextmanager
def cluster(
    args: argparse.Namespace, work: Path, *, timeout: float = 60.0, block_size: int = 1 << 20
) -> Iterator[Cluster]:
    """The cluster named by the flags, else a sandbox started for this run with blocks of
    ``block_size`` bytes."""
    if args.hdfs:
        yield Cluster(args.hdfs, args.webhdfs, args.conf_dir, args.user, None, timeout)
        return
    started = time.perf_counter()
    sandbox = Sandbox.start(
        work / f"sandbox-{block_size}",
        datanodes=getattr(args, "datanodes", 1),
        block_size=block_size,
    )
    try:
        info = dict(sandbox.info.raw)
        info["python_start_seconds"] = round(time.perf_counter() - started, 2)
        yield Cluster(
            sandbox.info.hdfs, sandbox.info.webhdfs, sandbox.info.conf_dir, args.user, info, timeout
        )
    finally:
        sandbox.stop()


def block_layout(c: Cluster, root: str) -> dict[str, int | None]:
    """The block size and replication the cluster gives a new file (of its defaults)."""
    fs = c.open("hdfs", root)
    probe = f"{root}/.probe"
    write_file(fs, probe, [b"x"])
    try:
        client = getattr(fs, "client", None)  # NativeHdfsFileSystem's hdfs_native.Client
        info = client.get_file_info(probe) if client is not None else None
        return {
            "block_size": int(info.blocksize) if info is not None else None,
            "replication": int(info.replication) if info is not None else None,
        }
    finally:
        fs.delete(probe)


# -- 1. pipeline vs plain copy ---------------------------------------------------------------


def write_file(fs: FileSystem, path: str, chunks: Iterable[bytes], *, sync: bool = False) -> None:
    """Create ``path``, write ``chunks``, hsync if ``sync``, close. A failed write is raised as
    it is (the close that follows it fails too, later, and would hide it)."""
    writer = fs.create(path)
    try:
        for chunk in chunks:
            writer.write(chunk)
        if sync:
            writer.sync()
    except BaseException:
        with contextlib.suppress(OSError):
            writer.close()
        raise
    writer.close()


def upload(fs: FileSystem, local: Path, remote: str) -> None:
    """Every file of ``local`` into the directory ``remote``, in name order."""
    fs.mkdirs(remote)
    for path in sorted(local.iterdir()):
        write_file(fs, f"{remote}/{path.name}", [path.read_bytes()])


def visible_files(fs: FileSystem, directory: str) -> list[FileStatus]:
    """What a plain directory reader sees (hidden ``.``/``_`` names skipped)."""
    return [s for s in fs.list_dir(directory) if not s.is_dir and not s.name.startswith((".", "_"))]


def _filenum(name: str) -> int:
    digits = re.findall(r"\d+", name)
    return int(digits[-1]) if digits else -1


def published_bytes(fs: FileSystem, directory: str) -> tuple[bytes, int]:
    """The published output in file-number order, and how many files."""
    files = sorted(visible_files(fs, directory), key=lambda s: _filenum(s.name))
    return b"".join(fs.read(s.path) for s in files), len(files)


def plain_copy(fs: FileSystem, inputs: list[str], out: str) -> tuple[float, float]:
    """The baseline: each input read whole through ``fs``, written into one output file, hsync
    and close at the end. Returns (wall seconds, CPU seconds)."""
    started, cpu = time.perf_counter(), time.process_time()
    write_file(fs, out, (fs.read(path) for path in inputs), sync=True)
    return time.perf_counter() - started, time.process_time() - cpu


def run_pipeline_part(
    c: Cluster, root: str, work: Path, args: argparse.Namespace
) -> dict[str, Any]:
    """Part 1 for each backend: the input uploaded once, then plain copy and pipeline,
    alternating, ``args.repeat`` times each."""
    local = work / "input"
    total_bytes, total_lines = make_text_files(local, args.mb, args.files)
    data = {p.name: p.read_bytes() for p in local.iterdir()}
    remote_in = f"{root}/pipeline/input"
    started = time.perf_counter()
    upload(c.open("hdfs", root), local, remote_in)
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


# -- 2. cut latency vs one durable write -------------------------------------------------------


def durable_write_floor(fs: FileSystem, directory: str, count: int) -> dict[str, Any]:
    """The baseline: one durable small write through ``fs`` (create, write 300 bytes, hsync,
    close), ``count`` times; p50 / p99 of the whole and of each step (ms)."""
    fs.mkdirs(directory)
    steps: dict[str, list[float]] = {"create": [], "write": [], "hsync": [], "close": []}
    totals: list[float] = []
    for i in range(count):
        t0 = time.perf_counter()
        writer = fs.create(f"{directory}/f{i:05d}")
        t1 = time.perf_counter()
        try:
            writer.write(b"x" * 300)
            t2 = time.perf_counter()
            writer.sync()
            t3 = time.perf_counter()
        except BaseException:
            with contextlib.suppress(OSError):
                writer.close()
            raise
        writer.close()
        t4 = time.perf_counter()
        for name, a, b in (("create", t0, t1), ("write", t1, t2), ("hsync", t2, t3)):
            steps[name].append((b - a) * 1000)
        steps["close"].append((t4 - t3) * 1000)
        totals.append((t4 - t0) * 1000)
    fs.delete(directory, recursive=True)
    return {
        "writes": count,
        "p50_ms": round(percentile(totals, 50), 2),
        "p99_ms": round(percentile(totals, 99), 2),
        "max_ms": round(max(totals), 2),
        "step_p50_ms": {k: round(percentile(v, 50), 2) for k, v in steps.items()},
        "step_p99_ms": {k: round(percentile(v, 99), 2) for k, v in steps.items()},
        "samples_ms": [round(t, 3) for t in totals],
    }


def run_cuts_part(c: Cluster, root: str, work: Path, args: argparse.Namespace) -> dict[str, Any]:
    results: dict[str, Any] = {}
    for backend in args.cut_backends:
        fs = c.open(backend, root)
        floor = durable_write_floor(fs, f"{root}/cuts/{backend}-floor", args.durable_writes)
        landing = work / f"cuts-{backend}-landing"
        landing.mkdir(parents=True)
        measure_args = argparse.Namespace(
            cuts=args.cuts,
            period=args.period,
            rate_mb=args.rate_mb,
            file_kb=args.file_kb,
            roll_bytes=max(1, int(args.roll_mb * 1e6)),
        )
        cuts = bench_cut_latency.measure(
            fs,
            landing,
            str(landing),
            f"{root}/cuts/{backend}/out",
            f"{root}/cuts/{backend}/ck",
            measure_args,
            source_fs=LocalFileSystem(),
        )
        results[backend] = {
            "uri": c.hdfs if backend == "hdfs" else c.webhdfs,
            "cuts": cuts,
            "durable_write": floor,
            "p50_over_durable_write": round(cuts["p50_ms"] / max(floor["p50_ms"], 1e-3), 2),
            "p99_over_durable_write": round(cuts["p99_ms"] / max(floor["p99_ms"], 1e-3), 2),
        }
    return results


# -- 3. recovery after SIGKILL ----------------------------------------------------------------

_RESET = re.compile(rb"Region recovered to [^\n]*? at start in ([0-9.]+) s")
_LEASE = re.compile(rb"lease recovered in ([0-9.]+)s")


def restarts_from_log(log: Path, runs: range) -> list[dict[str, Any]]:
    """For each run in ``runs`` (1-based, as Workspace numbers them): the seconds the region's
    reset at start took and the seconds each lease recovery took, from the run's log."""
    text = log.read_bytes()
    parts = re.split(rb"\n===== run (\d+) ", text)
    by_run = {int(parts[i]): parts[i + 1] for i in range(1, len(parts) - 1, 2)}
    out = []
    for run in runs:
        segment = by_run.get(run, b"")
        reset = _RESET.search(segment)
        out.append(
            {
                "run": run,
                "reset_s": float(reset.group(1)) if reset else None,
                "lease_recovered_s": [float(m) for m in _LEASE.findall(segment)],
            }
        )
    return out


def run_recovery_part(
    c: Cluster, root: str, work: Path, args: argparse.Namespace
) -> dict[str, Any]:
    fs = c.open("hdfs", root)
    ns = argparse.Namespace(
        trials=args.trials,
        period=f"{args.period:g}s",
        lines=args.lines,
        records_per_s=args.records_per_s,
        seed=args.seed,
        timeout=args.timeout,
    )
    filesystem: dict[str, str | int] = {
        "user": c.user,
        "timeout": "20s",
        "retries": 4,
        "retry_backoff": "500ms",
        "lease_recovery_timeout": "60s",
    }
    if c.conf_dir:
        filesystem["config_dir"] = c.conf_dir

    def make(name: str, seconds: float) -> tuple[Workspace, Arrivals]:
        local = work / "recovery" / name
        ws = Workspace(
            local,
            fs_uri=c.hdfs,
            remote_root=f"{root}/recovery/{name}",
            remote_fs=fs,
            landing_uri=f"file://{local / 'landing'}",
            filesystem=filesystem,
            records_per_s=ns.records_per_s,
            period=ns.period,
            bytes_per_file=1_000_000,
            max_resets=3,
        )
        return ws, bench_recovery.place_input(ws, ns, seconds)

    try:
        # Listing the cluster every 5 ms would load the machine it measures: every 20 ms.
        recoveries, baseline, ws = bench_recovery.measure_recovery(make, ns, poll=0.02)
        # Run 1 was killed; runs 2 .. trials + 1 are the restarts after a kill.
        restarts = restarts_from_log(ws.log, range(2, args.trials + 2))
    finally:
        kill_all()
    rec, base, ratios = bench_recovery.summarize(recoveries, baseline)
    leases = [s for r in restarts for s in r["lease_recovered_s"]]
    resets = [r["reset_s"] for r in restarts if r["reset_s"] is not None]
    return {
        "uri": c.hdfs,
        "trials": args.trials,
        "period": ns.period,
        "records_per_s": ns.records_per_s,
        "after_sigkill_s": rec,
        "fresh_start_s": base,
        "ratio_to_fresh_start": ratios,
        "region_reset_at_restart_s": round(median(resets), 3) if resets else None,
        "lease_recovery_s": round(median(leases), 3) if leases else None,
        "restarts_with_lease_recovery": sum(1 for r in restarts if r["lease_recovered_s"]),
        "restarts": restarts,
        "samples": {"after_sigkill": recoveries, "fresh_start": baseline},
        "output_correct": True,
    }


# -- 4. whole process vs a plain copy process -------------------------------------------------

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
from bench.bench_hdfs import plain_copy
from operators.fs import open_path
fs, _ = open_path(sys.argv[1])
names = sorted(s.path for s in fs.list_dir(sys.argv[2]) if not s.is_dir)
plain_copy(fs, names, sys.argv[3])
"""


def run_process_part(c: Cluster, root: str, work: Path, args: argparse.Namespace) -> dict[str, Any]:
    """Part 4, on hdfs://: ``hdfs-region run --engine local --available-now`` as a whole
    process (Python start, lock, stamps, cuts, unlock) against a Python process copying the same
    files through hdfs-native; alternating, ``args.repeat`` times each, fresh output each time."""
    local = work / "process-input"
    total_bytes, _ = make_text_files(local, args.mb, args.files)
    landing = f"{root}/process/input"
    fs = c.open("hdfs", root)
    upload(fs, local, landing)
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


# -- 5. steady throughput while files land ----------------------------------------------------

#: The baseline of part 5: a Python process that lists the landing directory every second and
#: copies each new file through hdfs-native into an output file of its own (read whole, write,
#: hsync, close), until SIGTERM.
PLAIN_STEADY_PROCESS = """\
import signal, sys, time
from bench.bench_hdfs import write_file
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


def run_steady_part(c: Cluster, root: str, work: Path, args: argparse.Namespace) -> dict[str, Any]:
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


# -- main -------------------------------------------------------------------------------------


def _choices(value: str, known: tuple[str, ...], flag: str) -> list[str]:
    chosen = [v.strip() for v in value.split(",") if v.strip()]
    unknown = [v for v in chosen if v not in known]
    if unknown:
        raise argparse.ArgumentTypeError(f"{flag}: unknown {unknown} (known: {', '.join(known)})")
    return chosen


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--parts",
        default="pipeline,cuts,recovery",
        help="default pipeline,cuts,recovery (also: process)",
    )
    parser.add_argument("--period", type=float, default=1.0, help="cut period in s (default 1)")
    group = parser.add_argument_group("1. pipeline vs plain copy")
    group.add_argument("--mb", type=float, default=64.0, help="input size in MB (default 64)")
    group.add_argument("--files", type=int, default=8, help="input files (default 8)")
    group.add_argument("--repeat", type=int, default=3, help="timed runs of each (default 3)")
    group.add_argument("--batch-size", type=int, default=1024, help="records per batch")
    group.add_argument("--backends", default="hdfs,webhdfs", help="default hdfs,webhdfs")
    group = parser.add_argument_group("2. cut latency vs one durable write")
    group.add_argument("--cuts", type=int, default=50, help="cuts per backend (default 50)")
    group.add_argument("--rate-mb", type=float, default=2.0, help="input MB/s (default 2)")
    group.add_argument("--file-kb", type=int, default=256, help="input file size in kB")
    group.add_argument("--roll-mb", type=float, default=4.0, help="output file size in MB")
    group.add_argument(
        "--durable-writes", type=int, default=50, help="baseline writes timed (default 50)"
    )
    group.add_argument("--cut-backends", default="hdfs", help="default hdfs (also: webhdfs)")
    group = parser.add_argument_group("3. recovery after SIGKILL")
    group.add_argument("--trials", type=int, default=3, help="kills and restarts (default 3)")
    group.add_argument("--lines", type=int, default=5000, help="lines per file (default 5000)")
    group.add_argument(
        "--records-per-s", type=float, default=50_000, help="pace of the pipeline (default 50000)"
    )
    group.add_argument("--seed", type=int, default=5)
    group.add_argument("--timeout", type=float, default=180.0, help="per run, in s")
    group = parser.add_argument_group("5. steady throughput while files land")
    group.add_argument("--steady-s", type=float, default=120.0, help="landing time (default 120)")
    group.add_argument("--steady-rate-mb", type=float, default=20.0, help="MB/s (default 20)")
    group.add_argument("--steady-file-mb", type=float, default=4.0, help="MB per file (default 4)")
    group = parser.add_argument_group("cluster (default: a sandbox started for the run)")
    group.add_argument("--hdfs", help="a running cluster's hdfs:// URI")
    group.add_argument("--webhdfs", help="its webhdfs:// URI (with --hdfs)")
    group.add_argument("--conf-dir", help="its Hadoop client configuration directory")
    group.add_argument("--datanodes", type=int, default=1, help="DataNodes of the sandbox")
    group.add_argument(
        "--block-size",
        default=f"{128 << 20},{1 << 20}",
        help="the sandbox's block size in bytes, a comma list: one sandbox and one set of rows "
        "each (default 134217728,1048576; ignored with --hdfs)",
    )
    group.add_argument(
        "--user",
        default=os.environ.get("HADOOP_USER_NAME") or "bench",
        help="the user to act as (default $HADOOP_USER_NAME, else bench)",
    )
    add_common_args(parser, "hdfs")
    args = parser.parse_args(argv)
    try:
        parts = _choices(args.parts, PARTS, "--parts")
        args.backends = _choices(args.backends, BACKENDS, "--backends")
        args.cut_backends = _choices(args.cut_backends, BACKENDS, "--cut-backends")
        args.block_sizes = [int(v) for v in args.block_size.split(",")]
    except ValueError as err:
        parser.error(f"--block-size: {err}")
    except argparse.ArgumentTypeError as err:
        parser.error(str(err))
    if args.hdfs and not args.webhdfs:
        parser.error("--hdfs needs --webhdfs (the same cluster's WebHDFS)")

    load_before = load_average()
    print(f"load average before: {load_before}", flush=True)
    started = time.perf_counter()
    result: dict[str, Any] = {
        "benchmark": "hdfs",
        "parts": parts,
        "period_s": args.period,
        "hdfs_native": importlib.metadata.version("hdfs-native"),
    }
    result["runs"] = []
    try:
        for block_size in [None] if args.hdfs else args.block_sizes:
            one: dict[str, Any] = {}
            run(args, parts, one, block_size or 0)
            one["load_average_after"] = load_average()
            result["runs"].append(one)
    except SandboxSetupError as err:
        print(f"bench_hdfs: cannot start the HDFS sandbox: {err}", file=sys.stderr)
        return 2
    # The first block size's figures (a production cluster's) also at the top level.
    result.update({k: v for k, v in result["runs"][0].items() if k != "load_average_after"})
    load_after = load_average()
    result["seconds"] = round(time.perf_counter() - started, 1)
    result["load_average"] = {"before": load_before, "after": load_after}
    result["output_correct"] = True
    for one in result["runs"]:
        print_results(args, one)
        print(f"load average after these rows: {one['load_average_after']}")
    print(f"load average before: {load_before}, after: {load_after}")
    write_json(args.json, result)
    return 0


def run(
    args: argparse.Namespace, parts: list[str], result: dict[str, Any], block_size: int
) -> None:
    """The parts asked for, on one cluster (a sandbox with blocks of ``block_size``); their
    results into ``result``."""
    with (
        scratch(args.work, "bench-hdfs-") as work,
        cluster(args, work, block_size=block_size) as c,
    ):
        result["cluster"] = {
            "hdfs": c.hdfs,
            "webhdfs": c.webhdfs,
            "sandbox": c.sandbox,
            "datanodes": c.sandbox["datanodes"] if c.sandbox else None,
        }
        root = f"/bench-hdfs-{os.getpid()}-{time.time_ns()}"
        try:
            result["cluster"].update(block_layout(c, root))
            if "pipeline" in parts:
                result["pipeline"] = run_pipeline_part(c, root, work, args)
            if "cuts" in parts:
                result["cut_latency"] = run_cuts_part(c, root, work, args)
            if "recovery" in parts:
                result["recovery"] = run_recovery_part(c, root, work, args)
            if "process" in parts:
                result["process"] = run_process_part(c, root, work, args)
            if "steady" in parts:
                result["steady"] = run_steady_part(c, root, work, args)
        finally:
            with contextlib.suppress(OSError):
                c.open("hdfs", root).delete(root, recursive=True)


def print_results(args: argparse.Namespace, result: dict[str, Any]) -> None:
    info = result["cluster"]
    where = f"{info['datanodes']} DataNode sandbox" if info["sandbox"] else info["hdfs"]
    if info.get("block_size"):
        where += f", {info['block_size'] / 2**20:g} MB blocks, replication {info['replication']}"
    if "pipeline" in result:
        p = result["pipeline"]
        print_table(
            f"Benchmark 6.1: pipeline (exactly once, period {args.period:g} s) vs a plain copy "
            f"through the same client, on a real HDFS ({where}); {p['input_mb']:.0f} MB in "
            f"{p['input_files']} files, median of {args.repeat}",
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
                for r in p["backends"].values()
            ],
        )
    if "cut_latency" in result:
        rows = []
        for name, r in result["cut_latency"].items():
            cuts, floor = r["cuts"], r["durable_write"]
            steps = ", ".join(f"{k} {v:g}" for k, v in floor["step_p50_ms"].items())
            rows += [
                [f"{name}:// cut", cuts["cuts"], cuts["p50_ms"], cuts["p99_ms"], cuts["max_ms"]],
                [
                    f"{name}:// one durable write (p50 ms: {steps})",
                    floor["writes"],
                    floor["p50_ms"],
                    floor["p99_ms"],
                    floor["max_ms"],
                ],
            ]
        print_table(
            f"Benchmark 6.2: cut latency (drain + checkpoint + commit), output and checkpoints "
            f"on the cluster, period {args.period:g} s, input {args.rate_mb:g} MB/s",
            ["what", "samples", "p50 ms", "p99 ms", "max ms"],
            rows,
        )
        for name, r in result["cut_latency"].items():
            print(
                f"{name}:// cut / durable write: p50 {r['p50_over_durable_write']:g}, "
                f"p99 {r['p99_over_durable_write']:g}"
            )
    if "recovery" in result:
        r = result["recovery"]
        rec, base, ratios = r["after_sigkill_s"], r["fresh_start_s"], r["ratio_to_fresh_start"]
        print_table(
            f"Benchmark 6.3: restart after SIGKILL mid-file on hdfs:// (period {r['period']}, "
            f"median of {r['trials']} kills) vs a fresh start",
            ["seconds from process start to", "after SIGKILL", "fresh start", "ratio"],
            [
                *([m.replace("_", " "), rec[m], base[m], ratios[m]] for m in rec),
                ["(region reset at restart)", r["region_reset_at_restart_s"], "-", "-"],
                ["(of which lease recovery)", r["lease_recovery_s"], "-", "-"],
            ],
        )
        print(
            f"lease recovered in {r['restarts_with_lease_recovery']} of {r['trials']} restarts; "
            f"output after {r['trials']} kills: every record exactly once"
        )
    if "process" in result:
        r = result["process"]
        print_table(
            f"Benchmark 6.4: whole process, hdfs-region run --engine local --available-now vs a "
            f"Python process copying through hdfs-native ({where}); {r['input_mb']:.0f} MB in "
            f"{r['input_files']} files, median of {args.repeat}",
            ["ours s", "plain copy s", "ratio"],
            [[r["ours_s"], r["plain_copy_s"], r["ratio"]]],
        )

    if "steady" in result:
        r = result["steady"]
        print_table(
            f"Benchmark 6.5: steady throughput, files of {r['file_mb']:g} MB landing at "
            f"{r['rate_mb_per_s']:g} MB/s for {r['seconds']:g} s on hdfs:// ({where}): "
            f"hdfs-region run (cuts every {r['period_s']:g} s) vs a process polling every second "
            f"and copying each new file through hdfs-native; median of {args.repeat}",
            ["who", "landed MB", "MB/s", "mean backlog MB", "mean latency s", "catch-up s"],
            [
                [
                    who,
                    r[who]["landed_mb"],
                    r[who]["mb_per_s"],
                    r[who]["mean_backlog_mb"],
                    r[who]["mean_latency_s"],
                    r[who]["catch_up_s"],
                ]
                for who in ("ours", "plain_copy")
            ],
        )


if __name__ == "__main__":
    sys.exit(main())
