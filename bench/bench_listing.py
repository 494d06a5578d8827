"""Benchmark 7: the cost of ONE scan of a landing directory of N files, against a plain listing.

A landing directory only grows, and every scan lists all of it. Timed, for N files:

- ``first scan``: a fresh HDFS2DirectoryScan's first listing and the cursor's decision that all
  N files are new (``next_file()``: the listing, the order, the cursor, one file emitted);
- ``steady scan``: the same scan once every file was read, ``--new`` files landed since: one
  ``next_batch()`` lists the directory and the cursor picks the new ones out of N (what every
  ``sleep_time`` costs a running job);
- ``Spark plan``: the Spark source's planning of that steady batch (``latestOffset``: the same
  listing and cursor, and the batch's plan written), local disk and ``hdfs://``;

against the plain listing of the same directory through the same client, measured in the same
run, alternating with ours: ``os.scandir`` + ``stat`` of each entry (local), hdfs-native's
``list_status`` (``hdfs://``; also with each child's path, mtime, length and kind read), the
``hdfs`` package's ``list(status=True)``, one LISTSTATUS response (``webhdfs://``), and
LISTSTATUS_BATCH pages through the same client session.

Peak memory is Python's heap as ``tracemalloc`` counts it (peak during the call, minus what was
allocated before it), in separate runs (tracing slows the code down): the figure that blows up
when a listing of a huge directory is held several times over.

``steady state with archive``: files land in rounds, each round is read and then moved out of
the directory by this benchmark (standing in for a job that archives what it read), until
``--archive-files`` were processed: the scan's time and peak memory per round, and the memory
the scan keeps between rounds, must stay flat however many files went through.

Files are empty; on the local disk their mtimes are set one per 10 ms (100 files/s landing); on
HDFS the NameNode stamps them as they are created (hdfs-native, ``--create-concurrency``
threads).

    python bench/bench_listing.py                       # local 10k,100k,1M; HDFS 10k,100k
    python bench/bench_listing.py --hdfs-files 10000,100000,1000000   # also 1M on HDFS (slow)
    python bench/bench_listing.py --local-files 10000 --no-hdfs        # a quick run
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import importlib.metadata
import os
import shutil
import sys
import time
import tracemalloc
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import add_common_args, machine, median, print_table, scratch, write_json
from bench.real_hdfs.cluster import cluster
from operators.fs import LocalFileSystem
from operators.fs.webhdfs import _list_batch_request
from operators.sandbox import SandboxSetupError
from operators.scan import HDFS2DirectoryScan, ScanSettings
from region.fs import FileSystem

TARGET_RATIO = 1.2
_STEP_NS = 10_000_000  # local files land 100 per second
_MB = 1 << 20


# -- directories of N files -------------------------------------------------------------------


class Landing:
    """A landing directory on one backend: create files, move them out, list it plainly."""

    backend = "local"

    def __init__(self, fs: FileSystem, directory: str) -> None:
        self.fs = fs
        self.directory = directory
        self.created = 0

    def names(self, start: int, count: int) -> list[str]:
        return [f"f-{i:08d}.dat" for i in range(start, start + count)]

    def land(self, count: int) -> float:
        """``count`` more empty files; the seconds it took."""
        started = time.perf_counter()
        self._create(self.names(self.created, count))
        self.created += count
        return time.perf_counter() - started

    def _create(self, names: list[str]) -> None:
        os.makedirs(self.directory, exist_ok=True)
        base_ns = (int(time.time()) - 86_400) * 1_000_000_000
        flags = os.O_CREAT | os.O_WRONLY | os.O_EXCL
        for name in names:
            path = os.path.join(self.directory, name)
            os.close(os.open(path, flags, 0o644))
            mtime = base_ns + int(name[2:10]) * _STEP_NS
            os.utime(path, ns=(mtime, mtime))

    def move_out(self, paths: list[str], archive: str) -> None:
        for path in paths:
            os.rename(path, os.path.join(archive, os.path.basename(path)))

    def plain(self) -> dict[str, Callable[[], int]]:
        """The plain listings of the directory (name -> a call that lists it, returns count)."""
        directory = self.directory

        def scandir_stat() -> int:
            out = []
            with os.scandir(directory) as entries:
                for entry in entries:
                    st = entry.stat(follow_symlinks=False)
                    out.append((st.st_mtime_ns, entry.name, st.st_size))
            return len(out)

        return {"os.scandir + stat": scandir_stat}


class HdfsLanding(Landing):
    """Files created through hdfs-native, many at once (the client releases the GIL in a call:
    threads overlap the round trips)."""

    backend = "hdfs"

    def __init__(self, fs: FileSystem, directory: str, creator: Any, concurrency: int) -> None:
        super().__init__(fs, directory)
        self.creator = creator  # an hdfs_native.Client
        self.concurrency = concurrency

    def _create(self, names: list[str]) -> None:
        self.creator.mkdirs(self.directory, 0o755, True)
        directory, client = self.directory, self.creator

        def one(name: str) -> None:
            client.create(f"{directory}/{name}").close()

        with ThreadPoolExecutor(self.concurrency) as pool:
            for _ in pool.map(one, names, chunksize=64):
                pass

    def move_out(self, paths: list[str], archive: str) -> None:
        for path in paths:
            self.fs.rename(path, f"{archive}/{path.rpartition('/')[2]}")

    def plain(self) -> dict[str, Callable[[], int]]:
        client: Any = getattr(self.fs, "client")  # noqa: B009 - hdfs_native.Client
        directory = self.directory

        def read_fields() -> int:
            # What any user of the listing reads of each child: the floor of a scan's cost.
            return len(
                [
                    (i.path, i.modification_time, i.length, i.isdir)
                    for i in client.list_status(directory, False)
                ]
            )

        return {
            "hdfs-native list_status": lambda: len(list(client.list_status(directory, False))),
            "list_status + 4 fields read": read_fields,
        }


class WebHdfsLanding(HdfsLanding):
    backend = "webhdfs"

    def plain(self) -> dict[str, Callable[[], int]]:
        client: Any = getattr(self.fs, "client")  # noqa: B009 - the hdfs package's client
        directory = self.directory

        def batches() -> int:
            count, after = 0, ""
            while True:
                params = {"startAfter": after} if after else {}
                page = _list_batch_request(client, directory, **params).json()["DirectoryListing"]
                statuses = page["partialListing"]["FileStatuses"]["FileStatus"]
                count += len(statuses)
                if not page["remainingEntries"] or not statuses:
                    return count
                after = statuses[-1]["pathSuffix"]

        return {
            "hdfs list(status=True): LISTSTATUS": lambda: len(client.list(directory, status=True)),
            "LISTSTATUS_BATCH pages": batches,
        }


# -- what is measured -------------------------------------------------------------------------


def peak_bytes(call: Callable[[], object]) -> int:
    """Peak Python heap (tracemalloc) during ``call`` above what was allocated before it."""
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        tracemalloc.reset_peak()
        call()
        return tracemalloc.get_traced_memory()[1] - before
    finally:
        tracemalloc.stop()


def timed(call: Callable[[], object]) -> float:
    started = time.perf_counter()
    call()
    return time.perf_counter() - started


class Clock:
    """The scan's clock: one ``sleep_time`` passes before each read, so that each lists once."""

    def __init__(self) -> None:
        self.now = time.time()

    def __call__(self) -> float:
        return self.now


def new_scan(landing: Landing) -> HDFS2DirectoryScan:
    settings = ScanSettings(directory=landing.directory, sleep_time=60)
    scan = HDFS2DirectoryScan(settings, landing.fs, name="bench", clock=Clock())
    scan.reset_to_initial_state()
    return scan


def read_all(scan: HDFS2DirectoryScan) -> list[str]:
    """One listing and every new file of it (as a job does every ``sleep_time``)."""
    clock = getattr(scan, "_clock")  # noqa: B009 - the Clock given to new_scan
    clock.now += 60
    listings = scan.listings
    batch = scan.next_batch(1 << 62)
    if scan.listings != listings + 1:
        raise RuntimeError(f"{scan.listings - listings} listings in one read, not one")
    return [] if batch is None else list(batch.records)


def measure(
    landing: Landing, files: int, args: argparse.Namespace, work: Path, spark: bool
) -> dict[str, Any]:
    """The scans of ``files`` files against the plain listings of the same directory (the
    files the directory lacks are landed first)."""
    created = landing.land(files - landing.created) if files > landing.created else 0.0
    plain = landing.plain()
    times: dict[str, list[float]] = {name: [] for name in plain}
    times["first scan"] = []
    times["steady scan"] = []
    if spark:
        times["Spark plan"] = []

    # The scans of every kind, kept: a steady scan has read every file once.
    steady = new_scan(landing)
    if len(read_all(steady)) != files:
        raise RuntimeError(f"{landing.backend}: the scan did not read all {files} files")
    reader = spark_reader(landing, work) if spark else None
    offset = reader.latest(None) if reader is not None else None

    def first_scan() -> None:
        scan = new_scan(landing)
        if scan.next_file() is None:
            raise RuntimeError(f"{landing.backend}: the first scan found no file")

    def steady_scan() -> None:
        got = read_all(steady)
        if len(got) != args.new:
            raise RuntimeError(f"{landing.backend}: {len(got)} new files, {args.new} landed")

    def spark_plan() -> None:
        nonlocal offset
        assert reader is not None
        offset = reader.latest(offset)
        if reader.planned != args.new:
            raise RuntimeError(f"Spark planned {reader.planned} new files, {args.new} landed")

    for _ in range(args.repeat):
        # Alternate ours and the plain listing, so neither always runs on warmer caches.
        for name, call in plain.items():
            times[name].append(timed(call))
        times["first scan"].append(timed(first_scan))
        landing.land(args.new)
        times["steady scan"].append(timed(steady_scan))
        if reader is not None:  # the same new files, through its own cursor
            times["Spark plan"].append(timed(spark_plan))
    listed = landing.created
    memory: dict[str, int] = {name: peak_bytes(call) for name, call in plain.items()}
    memory["first scan"] = peak_bytes(first_scan)
    landing.land(args.new)
    memory["steady scan"] = peak_bytes(steady_scan)
    if reader is not None:
        memory["Spark plan"] = peak_bytes(spark_plan)
    baseline = next(iter(plain))
    base = median(times[baseline])
    return {
        "files": files,
        "listed_at_end": landing.created,
        "listed_when_timed": listed,
        "create_seconds": round(created, 2),
        "create_files_per_s": round(files / created) if created else None,
        "baseline": baseline,
        "seconds": times,
        "median_seconds": {k: median(v) for k, v in times.items()},
        "ratio": {k: round(median(v) / base, 3) for k, v in times.items() if k not in plain},
        "peak_bytes": memory,
        "peak_bytes_per_file": {k: round(v / files, 1) for k, v in memory.items()},
    }


class SparkPlanner:
    """The Spark source's planning on the driver (no JVM: latestOffset is plain Python)."""

    def __init__(self, landing: Landing, plan_dir: str) -> None:
        from operators.spark.options import scan_config
        from operators.spark.source import HdfsScanStreamReader

        options = {"directory": landing.directory, "plan_dir": plan_dir}
        if landing.backend != "local":
            options["directory"] = landing.fs.display(landing.directory)
            options["plan_dir"] = "file://" + plan_dir
        config = scan_config(options)
        self.reader = HdfsScanStreamReader(config)
        self.reader._fs = landing.fs  # the same client as the plain listing
        self.planned = 0

    def latest(self, start: dict[str, Any] | None) -> dict[str, Any]:
        from pyspark.sql.streaming.datasource import ReadAllAvailable

        offset: dict[str, Any] = self.reader.latestOffset(start, ReadAllAvailable())  # type: ignore[arg-type]
        self.planned = len(self.reader._read_plan(offset)) if offset.get("plan") else 0
        self.reader.commit(offset)
        return offset


def spark_reader(landing: Landing, work: Path) -> SparkPlanner:
    plan_dir = work / f"plans-{landing.backend}-{landing.created}"
    return SparkPlanner(landing, str(plan_dir))


def archive_rounds(landing: Landing, archive: str, total: int, rounds: int) -> dict[str, Any]:
    """Rounds of files landed, read and moved out, until ``total`` went through the scan."""
    per_round = max(1, total // rounds)
    scan = new_scan(landing)
    seconds: list[float] = []
    peaks: list[int] = []
    kept: list[int] = []
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for _ in range(rounds):
            landing.land(per_round)
            tracemalloc.reset_peak()
            at = tracemalloc.get_traced_memory()[0]
            started = time.perf_counter()
            got = read_all(scan)
            seconds.append(time.perf_counter() - started)
            peaks.append(tracemalloc.get_traced_memory()[1] - at)
            if len(got) != per_round:
                raise RuntimeError(f"archive round: {len(got)} files read, {per_round} landed")
            landing.move_out(got, archive)
            del got
            gc.collect()
            kept.append(tracemalloc.get_traced_memory()[0] - before)
    finally:
        tracemalloc.stop()
    tenth = max(1, rounds // 10)
    return {
        "files_processed": per_round * rounds,
        "rounds": rounds,
        "files_per_round": per_round,
        "seconds_traced": seconds,
        "peak_bytes": peaks,
        "kept_bytes": kept,
        "first_rounds": {
            "seconds": median(seconds[:tenth]),
            "peak_bytes": median(peaks[:tenth]),
            "kept_bytes": median(kept[:tenth]),
        },
        "last_rounds": {
            "seconds": median(seconds[-tenth:]),
            "peak_bytes": median(peaks[-tenth:]),
            "kept_bytes": median(kept[-tenth:]),
        },
        "simulated": "files moved out of the directory by the benchmark after each round",
    }


# -- running it -------------------------------------------------------------------------------


def counts(value: str) -> list[int]:
    try:
        out = [int(v) for v in value.split(",") if v.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{value!r} is not a list of file counts") from None
    if any(n < 1 for n in out):
        raise argparse.ArgumentTypeError(f"{value!r}: every file count must be >= 1")
    return out


def run_local(args: argparse.Namespace, work: Path) -> dict[str, Any]:
    out: dict[str, Any] = {"sizes": []}
    fs = LocalFileSystem()
    for files in args.local_files:
        directory = work / f"local-{files}"
        print(f"local: {files} files ...", flush=True)
        row = measure(Landing(fs, str(directory)), files, args, work, spark=not args.no_spark)
        out["sizes"].append(row)
        shutil.rmtree(directory)
    if args.archive_files:
        print(f"local: steady state with archive, {args.archive_files} files ...", flush=True)
        landing = Landing(fs, str(work / "local-archived"))
        archive = work / "local-archive"
        archive.mkdir()
        out["archive"] = archive_rounds(landing, str(archive), args.archive_files, args.rounds)
        shutil.rmtree(archive)
    return out


def run_hdfs(args: argparse.Namespace, work: Path) -> dict[str, Any]:
    out: dict[str, Any] = {}
    with cluster(args, work, timeout=300.0) as c:
        out["cluster"] = {"hdfs": c.hdfs, "webhdfs": c.webhdfs, "sandbox": c.sandbox}
        root = f"/bench-listing-{os.getpid()}-{time.time_ns()}"
        fs = c.open("hdfs", "/")
        try:
            for backend in ("hdfs", "webhdfs"):
                out[backend] = {"sizes": []}
            for files in args.hdfs_files:
                directory = f"{root}/landing-{files}"
                print(f"HDFS: {files} files ...", flush=True)
                creator = getattr(fs, "client")  # noqa: B009 - its hdfs_native.Client
                landing = HdfsLanding(fs, directory, creator, args.create_concurrency)
                row = measure(landing, files, args, work, spark=not args.no_spark)
                out["hdfs"]["sizes"].append(row)
                web = WebHdfsLanding(
                    c.open("webhdfs", "/"), directory, creator, args.create_concurrency
                )
                web.created = landing.created  # the same directory: nothing to land
                row = measure(web, landing.created, args, work, spark=False)
                row["files"] = files
                out["webhdfs"]["sizes"].append(row)
                fs.delete(directory, recursive=True)
        finally:
            with contextlib.suppress(OSError):
                fs.delete(root, recursive=True)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--local-files",
        type=counts,
        default=counts("10000,100000,1000000"),
        help="directory sizes on the local disk (default 10000,100000,1000000)",
    )
    parser.add_argument(
        "--hdfs-files",
        type=counts,
        default=counts("10000,100000"),
        help="directory sizes on HDFS (default 10000,100000; 1000000 takes about 12 min to "
        "create on the sandbox)",
    )
    parser.add_argument("--no-hdfs", action="store_true", help="the local disk only")
    parser.add_argument("--no-spark", action="store_true", help="leave out the Spark planning")
    parser.add_argument("--repeat", type=int, default=5, help="timed runs of each (default 5)")
    parser.add_argument("--new", type=int, default=10, help="files landing per steady scan")
    parser.add_argument(
        "--archive-files",
        type=int,
        default=200_000,
        help="files processed in the archive rounds (default 200000; 0: none)",
    )
    parser.add_argument("--rounds", type=int, default=20, help="archive rounds (default 20)")
    parser.add_argument("--create-concurrency", type=int, default=16, help="HDFS creates at once")
    group = parser.add_argument_group("cluster (default: a sandbox started for the run)")
    group.add_argument("--hdfs", help="a running cluster's hdfs:// URI")
    group.add_argument("--webhdfs", help="its webhdfs:// URI (with --hdfs)")
    group.add_argument("--conf-dir", help="its Hadoop client configuration directory")
    group.add_argument(
        "--user",
        default=os.environ.get("HADOOP_USER_NAME") or "bench",
        help="the user to act as (default $HADOOP_USER_NAME, else bench)",
    )
    add_common_args(parser, "listing")
    args = parser.parse_args(argv)
    if args.hdfs and not args.webhdfs:
        parser.error("--hdfs needs --webhdfs (the same cluster's WebHDFS)")
    if args.repeat < 1 or args.new < 1 or args.rounds < 1:
        parser.error("--repeat, --new and --rounds must be >= 1")

    load_before = machine()["load_average"]
    print(f"load average before: {load_before}", flush=True)
    started = time.perf_counter()
    result: dict[str, Any] = {
        "benchmark": "listing",
        "repeat": args.repeat,
        "new_per_steady_scan": args.new,
        "memory": "tracemalloc: peak Python heap during one call, above what was allocated "
        "before it (separate untimed runs)",
        "hdfs_native": importlib.metadata.version("hdfs-native"),
    }
    with scratch(args.work, "bench-listing-") as work:
        result["local"] = run_local(args, work)
        if not args.no_hdfs and args.hdfs_files:
            try:
                result.update(run_hdfs(args, work))
            except SandboxSetupError as err:
                print(f"bench_listing: cannot start the HDFS sandbox: {err}", file=sys.stderr)
                return 2
    result["seconds"] = round(time.perf_counter() - started, 1)
    result["load_average"] = {"before": load_before, "after": machine()["load_average"]}
    worst = [
        ratio
        for backend in ("local", "hdfs", "webhdfs")
        for row in result.get(backend, {}).get("sizes", [])
        for name, ratio in row["ratio"].items()
        if name == "steady scan"
    ]
    result["target"] = f"steady scan <= {TARGET_RATIO} x the plain listing through the same client"
    result["target_met"] = bool(worst) and max(worst) <= TARGET_RATIO
    result["output_correct"] = True  # every scan found exactly the files landed (checked)
    print_results(result)
    print(f"load average before: {load_before}, after: {result['load_average']['after']}")
    write_json(args.json, result)
    return 0


def print_results(result: dict[str, Any]) -> None:
    for backend in ("local", "hdfs", "webhdfs"):
        sizes = result.get(backend, {}).get("sizes", [])
        rows = []
        for row in sizes:
            base = row["median_seconds"][row["baseline"]]
            for name, seconds in row["median_seconds"].items():
                rows.append(
                    [
                        f"{row['files']} {name}",
                        seconds,
                        round(seconds / base, 2),
                        row["peak_bytes"][name] / _MB,
                        row["peak_bytes_per_file"][name],
                    ]
                )
        if rows:
            print_table(
                f"{backend}: one listing of N files, median of {result['repeat']} "
                f"(ratio: to {sizes[0]['baseline']})",
                ["N, listing", "seconds", "ratio", "peak MB", "peak bytes/file"],
                rows,
            )
            created = ", ".join(
                f"{r['files']} in {r['create_seconds']} s" for r in sizes if r["create_seconds"]
            )
            if created:
                print(f"files created: {created}")
    archive = result.get("local", {}).get("archive")
    if archive:
        print_table(
            f"local: steady state with archive ({archive['simulated']}), "
            f"{archive['files_processed']} files in {archive['rounds']} rounds",
            ["rounds", "scan seconds (traced)", "peak MB", "kept MB"],
            [
                [
                    label,
                    archive[key]["seconds"],
                    archive[key]["peak_bytes"] / _MB,
                    archive[key]["kept_bytes"] / _MB,
                ]
                for label, key in (("first 10%", "first_rounds"), ("last 10%", "last_rounds"))
            ],
        )


if __name__ == "__main__":
    sys.exit(main())
