"""The fixed cost of a run: a one-line input, whole processes, alternately. ``hdfs-region run``
on the Spark engine with its defaults (the JVM's class-data archive, ``[spark]
class_data_archive``, built once before the runs into a scratch cache; the small batch run in
the driver, ``driver_batch_bytes``), with every batch a Spark job, and with neither, the local
engine, and Spark's built-in ``readStream.text`` -> ``writeStream.text`` (available-now) with
the same session settings. This is what a run from cron pays every time. Beside each time: the
peak RSS of the process tree (the JVM counts). Prints a table and writes
``bench/results/startup.json``.

Where an interpreter with apache-flink is found (bench/bench_flink.py's ``--flink-python``
rule), the Flink job of bench/flink_job.py (parallelism 2) is one more contender.

    python -m bench.bench_startup --repeat 5
"""

from __future__ import annotations

import argparse
import functools
import os
import sys
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.bench_flink import INSTALL, JOB, flink_python
from bench.bench_spark_engine import BUILTIN
from bench.common import Comparison, add_common_args, machine, run_measured, scratch, write_json
from operators.spark.session import DEFAULT_CONF

SETTINGS = """\
engine = "{engine}"
[region]
checkpoint_dir = "{work}/ck-{key}-{tag}"
[scan]
directory = "{work}/in"
after_read = "keep"
[sink]
file = "{work}/out-{key}-{tag}/part-%FILENUM.txt"
[spark]
class_data_archive = {archive}
driver_batch_bytes = {driver}
"""

#: key -> (label, engine, class_data_archive, driver_batch_bytes)
OURS = {
    "archive": ("spark engine (defaults)", "spark", "true", 4 << 20),
    "jobs": ("spark engine, every batch a Spark job", "spark", "true", 0),
    "plain": ("spark engine, no archive, every batch a job", "spark", "false", 0),
    "local": ("local engine", "local", "false", 0),
}


def run_ours(key: str, work: Path, env: dict[str, str], tag: str) -> dict[str, float]:
    _, engine, archive, driver = OURS[key]
    config = work / f"{key}-{tag}.toml"
    config.write_text(
        SETTINGS.format(engine=engine, work=work, key=key, tag=tag, archive=archive, driver=driver)
    )
    command = [sys.executable, "-m", "operators.app", "run", str(config), "--available-now"]
    return run_measured(command, work, env)


def run_builtin(work: Path, env: dict[str, str], tag: str) -> dict[str, float]:
    script = work / "builtin.py"
    script.write_text(BUILTIN.format(conf=DEFAULT_CONF))
    dirs = [str(work / "in"), str(work / f"out-builtin-{tag}"), str(work / f"ck-builtin-{tag}")]
    return run_measured([sys.executable, str(script), *dirs], work, env)


def run_flink(python: str, work: Path, env: dict[str, str], tag: str) -> dict[str, float]:
    dirs = [str(work / "in"), str(work / f"out-flink-{tag}"), str(work / f"ck-flink-{tag}")]
    return run_measured([python, str(JOB), *dirs, "--parallelism", "2"], work, env)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5, help="runs of each (default 5)")
    parser.add_argument(
        "--flink-python", default=None, help="an interpreter with apache-flink installed"
    )
    add_common_args(parser, "startup")
    args = parser.parse_args(argv)
    python = flink_python(args.flink_python)
    if python is None:
        print(f"pyflink not found, the Flink row is skipped; to install it: {INSTALL}")
    with scratch(args.work, "bench-startup-") as work:
        (work / "in").mkdir()
        (work / "in" / "one.txt").write_text("one line\n")
        env = {**os.environ, "XDG_CACHE_HOME": str(work / "cache")}
        # The archive, as the first run's background builder makes it.
        from operators.spark import classdata
        from operators.spark.session import find_java

        folder = work / "cache" / "hdfs-region" / "class-data"
        folder.mkdir(parents=True)
        name = classdata._archive_name(find_java(), DEFAULT_CONF)
        if not classdata.build(folder, name, {}):
            raise RuntimeError(f"no class-data archive was built in {folder}")
        race = Comparison(len("one line\n") / 1e6)
        for key, (label, *_) in OURS.items():
            race.add(key, label, functools.partial(run_ours, key, work, env))
        race.add(
            "builtin", "Spark built-in text -> text", functools.partial(run_builtin, work, env)
        )
        if python is not None:
            race.add(
                "flink",
                "Flink FileSource -> FileSink, p=2",
                functools.partial(run_flink, python, work, env),
            )
        race.race(args.repeat)
    race.print(
        f"a one-line input, whole process, median of {args.repeat}",
        baseline="builtin",
        columns={"tree MB (median)": "peak_tree_rss_mb"},
    )
    result = {
        "repeat": args.repeat,
        "median_seconds": {key: round(race.median(key), 2) for key in race.entrants},
        "runs": race.figures(),
        "machine": machine(),
    }
    write_json(args.json, result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
