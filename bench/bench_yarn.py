"""On YARN (``hdfs-region sandbox --yarn``: Hadoop's MiniYARNCluster beside the sandbox's HDFS):
three whole processes, each a YARN application in client mode over the same ``hdfs://`` input,
alternating, median of ``--repeat`` after a warm-up run of each:

a. ``hdfs-region run --engine spark --available-now`` with ``[spark] master = "yarn"`` (fused
   execution; the containers' Python is the packed environment, ``operators/spark/yarn.py``);
b. a user's own PySpark job: ``build_session(master="yarn")``, then ``hdfs_scan`` ->
   ``hdfs_sink`` through the Data Source API as a streaming query (available-now). Spark plans
   a Python source in a Python process beside the driver, started with the workers' Python, so
   the job gives ``spark.pyspark.python`` = this interpreter, present on the NodeManagers (the
   sandbox's run on this host), instead of the packed environment;
c. Spark's built-in ``readStream.text`` -> ``writeStream.text`` (available-now), the same
   session settings.

Every application gets the same executors (``--executors`` of 1 core, 512 MB) and Spark's jars
from this host (``spark.yarn.jars = local:<pyspark>/jars/*``). Each run is timed from the
process's start to its exit; the session start (JVM, application submitted, application
master and executors up: ``SparkSession.getOrCreate`` in client mode waits for them) is
reported separately, from the process's own clock. Every output is checked to hold the input's
bytes. Prints a table and writes ``bench/results/yarn.json``::

    python bench/bench_yarn.py                   # 100 MB in 8 files, 3 runs of each
    python bench/bench_yarn.py --mb 50 --repeat 1
    python bench/bench_yarn.py --hdfs hdfs://127.0.0.1:PORT --conf-dir DIR   # a running sandbox

``--hdfs`` and ``--conf-dir`` name a running sandbox with YARN (its ``conf_dir`` holds
``yarn-site.xml``) instead of starting one; the work goes under ``/bench-yarn-<pid>`` there.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import functools
import json
import os
import posixpath
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.bench_spark_hdfs import visible_bytes
from bench.common import (
    Comparison,
    Timing,
    add_common_args,
    make_text_files,
    scratch,
    upload,
    write_json,
)
from operators.fs import FileSystemSettings, open_path
from operators.sandbox import Sandbox
from operators.spark.session import DEFAULT_CONF

KINDS = ("hdfs-region run", "hdfs_scan -> hdfs_sink", "Spark text -> text")

OURS = """\
engine = "spark"
[filesystem]
uri = "{hdfs}"
user = "{user}"
config_dir = "{conf_dir}"
[region]
checkpoint_dir = "{root}/ck-{tag}"
[scan]
directory = "{src}"
[sink]
file = "{root}/out-{tag}/part-%FILENUM.txt"
[spark]
master = "yarn"
deploy_mode = "client"
[spark.conf]
{conf}
"""

#: (b) and (c): one process each; prints the wall clock at the session's start and the query's
#: end on its last line.
JOB = """\
import json, sys, time
kind, src, out, ck, user = sys.argv[1:6]
conf = json.loads(sys.argv[6])
if kind == "data-source":
    from operators.spark.session import build_session

    spark = build_session("user-job", master="yarn", conf=conf,
                          environment={{"HADOOP_USER_NAME": user}})
    ready = time.time()
    frame = (
        spark.readStream.format("hdfs_scan").option("directory", src)
        .option("plan_dir", ck + "/plans").load()
    )
    writer = frame.writeStream.format("hdfs_sink").option("file", out + "/part-%FILENUM.txt")
else:
    from pyspark.sql import SparkSession

    builder = SparkSession.builder.appName("builtin").master("yarn")
    for key, value in {{**{default!r}, **conf}}.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    ready = time.time()
    frame = spark.readStream.format("text").load(src)
    writer = frame.writeStream.format("text").option("path", out)
query = writer.option("checkpointLocation", ck).trigger(availableNow=True).start()
query.awaitTermination()
if query.exception() is not None:
    raise SystemExit(f"the query failed: {{query.exception()}}")
done = time.time()
spark.stop()
print("TIMES " + json.dumps({{"ready": ready, "done": done}}))
"""

#: hdfs-region's log line when its session is up, and each batch's.
_SESSION = re.compile(r"^(\S+ \S+) INFO\s+\S+: SparkSession .* started", re.M)
_BATCH = re.compile(r"^(\S+ \S+) INFO\s+\S+: batch \d+: .* \(job (\d+) ms, commit (\d+) ms\)", re.M)


def _log_time(stamp: str) -> float:
    """A ``logging`` asctime (local time, milliseconds) as seconds since the epoch."""
    return datetime.datetime.strptime(stamp, "%Y-%m-%d %H:%M:%S,%f").timestamp()


def spark_conf(executors: int) -> dict[str, str]:
    import pyspark

    return {
        "spark.yarn.jars": f"local:{Path(pyspark.__file__).parent / 'jars'}/*",
        "spark.executor.instances": str(executors),
        "spark.executor.cores": "1",
        "spark.executor.memory": "512m",
        "spark.yarn.am.memory": "384m",
    }


def driver_env(conf_dir: str, user: str) -> dict[str, str]:
    """The driver's environment: no PYTHONPATH and no worker Python of this shell (YARN's
    client passes PYTHONPATH on to the containers, which import what the job ships)."""
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("PYSPARK_PYTHON", "PYTHONPATH", "PYSPARK_ARCHIVES_PATH")
    }
    env.update(HADOOP_CONF_DIR=conf_dir, HADOOP_USER_NAME=user, SPARK_LOCAL_IP="127.0.0.1")
    return env


@contextlib.contextmanager
def yarn_cluster(args: argparse.Namespace, work: Path) -> Iterator[tuple[str, str, float | None]]:
    """``(hdfs:// URI, Hadoop configuration directory, seconds the sandbox took to start)``:
    the cluster named by the flags, else a sandbox with YARN started here."""
    if args.hdfs:
        yield args.hdfs.rstrip("/"), args.conf_dir, None
        return
    started = time.perf_counter()
    with Sandbox.start(
        work / "sandbox", nodemanagers=args.nodemanagers, block_size=args.block_size
    ) as sandbox:
        yield sandbox.info.hdfs, sandbox.info.conf_dir, time.perf_counter() - started


def run_one(
    kind: str, args: argparse.Namespace, where: dict[str, Any], work: Path, tag: str
) -> dict[str, float]:
    """One application, from its process's start to its exit: ``{"seconds", "session", "job"}``
    (``seconds``: the whole process; ``job``: from the session's start to the query's or last
    batch's end)."""
    src, root, conf = where["src"], where["root"], where["conf"]
    log = work / f"{tag}.log"
    if kind == KINDS[0]:
        config = work / f"{tag}.toml"
        lines = "\n".join(f'"{k}" = "{v}"' for k, v in conf.items())
        config.write_text(
            OURS.format(
                hdfs=where["hdfs"],
                user=args.user,
                conf_dir=where["conf_dir"],
                root=root,
                tag=tag,
                src=src,
                conf=lines,
            )
        )
        command = [sys.executable, "-m", "operators.app", "run", str(config), "--available-now"]
        command += ["--no-progress"]
    else:
        script = work / "job.py"
        script.write_text(JOB.format(default=DEFAULT_CONF))
        job_conf = dict(conf)
        if kind == KINDS[1]:
            # The source's planner runs beside the driver with the workers' Python: one present
            # on this host and the NodeManagers alike (not the packed ./environment/bin/python).
            job_conf["spark.pyspark.python"] = sys.executable
        job = "data-source" if kind == KINDS[1] else "builtin"
        out, ck = f"{root}/out-{tag}", f"{root}/ck-{tag}"
        command = [sys.executable, str(script), job, src, out, ck, args.user, json.dumps(job_conf)]
    launched = time.time()
    started = time.perf_counter()
    with log.open("wb") as sink:
        done = subprocess.run(
            command, cwd=work, stdout=sink, stderr=subprocess.STDOUT, env=where["env"]
        )
    total = time.perf_counter() - started
    text = log.read_text(errors="replace")
    if done.returncode != 0:
        raise RuntimeError(f"{kind} ({tag}) exited {done.returncode}:\n{text[-3000:]}")
    if kind == KINDS[0]:
        session = _SESSION.search(text)
        batches = _BATCH.findall(text)
        if session is None or not batches:
            raise RuntimeError(f"{kind} ({tag}): no session or batch line in its log")
        ready = _log_time(session.group(1))
        end = _log_time(batches[-1][0])
    else:
        found = re.search(r"^TIMES (.*)$", text, re.M)
        if found is None:
            raise RuntimeError(f"{kind} ({tag}): no TIMES line:\n{text[-3000:]}")
        times = json.loads(found.group(1))
        ready, end = times["ready"], times["done"]
    return {"seconds": total, "session": ready - launched, "job": end - ready}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=float, default=100.0, help="input MB (default 100)")
    parser.add_argument("--files", type=int, default=8, help="input files (default 8)")
    parser.add_argument("--repeat", type=int, default=3, help="timed runs of each (default 3)")
    parser.add_argument("--executors", type=int, default=2, help="executors (default 2)")
    parser.add_argument("--nodemanagers", type=int, default=2, help="default 2")
    parser.add_argument(
        "--block-size", type=int, default=128 << 20, help="HDFS block size (default 128 MiB)"
    )
    parser.add_argument("--user", default="bench", help="the HDFS user (default bench)")
    parser.add_argument(
        "--warmup",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="a first run of each on a small input, not timed (default on)",
    )
    parser.add_argument("--hdfs", help="a running sandbox's hdfs:// URI (with --conf-dir)")
    parser.add_argument("--conf-dir", help="its configuration directory, with yarn-site.xml")
    add_common_args(parser, "yarn")
    args = parser.parse_args(argv)
    if bool(args.hdfs) != bool(args.conf_dir):
        parser.error("--hdfs and --conf-dir go together")

    with scratch(args.work, "bench-yarn-") as work:
        total_bytes, total_lines = make_text_files(work / "input", args.mb, args.files)
        make_text_files(work / "warm", max(2.0, min(10.0, args.mb / 10)), 2, seed=1)
        with yarn_cluster(args, work) as (hdfs, conf_dir, sandbox_s):
            settings = FileSystemSettings.model_validate(
                {"uri": hdfs, "user": args.user, "config_dir": conf_dir}
            )
            fs, _ = open_path(hdfs + "/", settings)
            base = f"/bench-yarn-{os.getpid()}"
            upload(work / "input", fs, f"{base}/input")
            upload(work / "warm", fs, f"{base}/warm")
            where: dict[str, Any] = {
                "hdfs": hdfs,
                "conf_dir": conf_dir,
                "root": f"{hdfs}{base}",
                "conf": spark_conf(args.executors),
                "env": driver_env(conf_dir, args.user),
                "src": f"{hdfs}{base}/warm",
            }

            def application(kind: str, i: str) -> Timing:
                one = run_one(kind, args, where, work, f"{KINDS.index(kind)}-{i}")
                print(f"{kind} run {i}: {one['seconds']:.1f} s", flush=True)
                return one

            def check(kind: str, i: str) -> None:
                tag = f"{KINDS.index(kind)}-{i}"
                written = visible_bytes(fs, f"{base}/out-{tag}")
                if written != total_bytes:
                    raise RuntimeError(f"{kind} ({tag}) wrote {written} of {total_bytes} bytes")
                for name in (f"out-{tag}", f"ck-{tag}"):
                    fs.delete(posixpath.join(base, name), recursive=True)

            try:
                for k, kind in enumerate(KINDS if args.warmup else ()):
                    # The packed environment staged, the NodeManagers' caches filled.
                    run_one(kind, args, where, work, f"warm-{k}")
                where["src"] = f"{hdfs}{base}/input"
                race = Comparison(total_bytes / 1e6)
                for kind in KINDS:
                    race.add(kind, kind, functools.partial(application, kind))
                race.race(args.repeat, check=check, warm=False)
            finally:
                with contextlib.suppress(OSError):
                    fs.delete(base, recursive=True)

    mb = race.mb
    builtin = KINDS[2]
    figures: dict[str, dict[str, Any]] = {}
    for kind in KINDS:
        total, job = race.median(kind), race.median(kind, "job")
        samples = race.samples[kind]
        figures[kind] = {
            "total_s": round(total, 2),
            "session_s": round(race.median(kind, "session"), 2),
            "job_s": round(job, 2),
            "mb_per_s": round(mb / total, 2),
            "job_mb_per_s": round(mb / job, 1),
            "samples": [
                {"total": round(t, 2), "session": round(s, 2), "job": round(j, 2)}
                for t, s, j in zip(
                    samples["seconds"], samples["session"], samples["job"], strict=True
                )
            ],
            "ratio_to_builtin": race.ratio(builtin, kind),
            "job_ratio_to_builtin": race.ratio(builtin, kind, figure="job"),
        }
    race.print(
        f"On YARN (sandbox, {args.nodemanagers} NodeManagers, {args.executors} executors of 1 "
        f"core), client mode, whole process; {mb:.0f} MB in {args.files} files on hdfs://, "
        f"median of {args.repeat}",
        baseline=builtin,
        columns={"session start s": "session", "job s": "job"},
    )
    print(
        "the job alone (from the session's start): "
        + ", ".join(
            f"{kind} {mb / race.median(kind, 'job'):.3g} MB/s, ratio "
            f"{f['job_ratio_to_builtin']:.2f}"
            for kind, f in figures.items()
        )
    )
    write_json(
        args.json,
        {
            "benchmark": "yarn",
            "input_mb": round(mb, 1),
            "input_lines": total_lines,
            "input_files": args.files,
            "repeat": args.repeat,
            "executors": args.executors,
            "nodemanagers": args.nodemanagers,
            "block_size": args.block_size,
            "cluster": "given" if args.hdfs else "sandbox",
            "sandbox_start_s": round(sandbox_s, 1) if sandbox_s is not None else None,
            "warmup": args.warmup,
            "runs": figures,
            "output_correct": True,
            "load_average_before": race.load_before,
            "load_average_after": race.load_after,
        },
    )
    return 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
