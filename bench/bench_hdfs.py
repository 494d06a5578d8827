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
4. process (not run by default): the whole process, ``hdfs-region run --engine local
   --available-now`` on ``hdfs://``. Baseline: a Python process copying the same files through
   hdfs-native (read whole, write one file, hsync, close). Medians of the whole processes.
5. steady (not run by default): files landing on ``hdfs://`` at ``--steady-rate-mb`` for
   ``--steady-s`` while ``hdfs-region run`` cuts every period. Baseline: a Python process
   polling the directory every second and copying each new file. Throughput, backlog, latency.

Each part is a module of ``bench/real_hdfs/`` (its measurement and its table); this script holds
the command line and starts the cluster of each block size.

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
import contextlib
import importlib.metadata
import os
import sys
import time
from pathlib import Path
from types import ModuleType
from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import add_common_args, load_average, scratch, write_json
from bench.real_hdfs import cuts, pipeline, process, recovery, steady
from bench.real_hdfs.cluster import block_layout, cluster
from operators.sandbox import SandboxSetupError

#: Each part by its ``--parts`` name: its module (``measure``, ``show``) and its key in the JSON,
#: in the order they run and print.
PARTS: dict[str, tuple[ModuleType, str]] = {
    "pipeline": (pipeline, "pipeline"),
    "cuts": (cuts, "cut_latency"),
    "recovery": (recovery, "recovery"),
    "process": (process, "process"),
    "steady": (steady, "steady"),
}
BACKENDS = ("hdfs", "webhdfs")


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
        help="default pipeline,cuts,recovery (also: process, steady)",
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
        parts = _choices(args.parts, tuple(PARTS), "--parts")
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
            for name, (part, key) in PARTS.items():
                if name in parts:
                    result[key] = part.measure(c, root, work, args)
        finally:
            with contextlib.suppress(OSError):
                c.open("hdfs", root).delete(root, recursive=True)


def print_results(args: argparse.Namespace, result: dict[str, Any]) -> None:
    info = result["cluster"]
    where = f"{info['datanodes']} DataNode sandbox" if info["sandbox"] else info["hdfs"]
    if info.get("block_size"):
        where += f", {info['block_size'] / 2**20:g} MB blocks, replication {info['replication']}"
    for part, key in PARTS.values():
        if key in result:
            part.show(args, result[key], where)


if __name__ == "__main__":
    sys.exit(main())
