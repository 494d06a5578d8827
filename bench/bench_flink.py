"""Whole process against Flink: ``hdfs-region run --available-now`` (the Spark engine, fused,
and the local engine) and Spark's built-in ``readStream.text`` -> ``writeStream.text`` script
against a PyFlink job (bench/flink_job.py: a bounded ``FileSource`` of text lines -> a
row-format ``FileSink``, exactly-once with a checkpoint every second, parallelism 2 and, with
``--only``, 1), over the same input, alternating the contenders, medians of ``--repeat``.

Each row: the median time, its ratio to Flink at parallelism 2, and the peak RSS of the
process tree (the JVM counts). Every output must hold exactly the input's lines (count and
bytes, hidden ``.``/``_`` names skipped as a directory reader does); Flink's must also have no
in-progress or pending part file left. Then the re-run: each of Flink and the local engine run
twice over one small input into the same output (and checkpoints): the lines after each run.

PyFlink runs under its own interpreter, not the project's: apache-flink pins pyarrow < 21,
pandas < 2.3 and (through apache-beam) numpy < 2.2, which would replace the versions ours is
measured with. Without it the Flink rows are skipped with one line saying how to install it::

    python3 -m venv .venv-flink && .venv-flink/bin/pip install -r bench/requirements-flink.txt

With ``--hdfs`` input, output and checkpoints are on ``hdfs://`` of a sandbox started here
(as bench_spark_engine.py's ``--hdfs``); Flink gets the sandbox's Hadoop client jars on
``HADOOP_CLASSPATH``. Prints tables and writes ``bench/results/flink.json``
(``flink_hdfs.json``).

    python bench/bench_flink.py --mb 200            # 200 MB in 8 files, 3 runs of each
    python bench/bench_flink.py --mb 1000 --only fused,local,builtin,flink-p2,flink-p1
    python bench/bench_flink.py --hdfs --mb 200
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import os
import posixpath
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.bench_spark_engine import Place, command, places
from bench.common import (
    REPO,
    RESULTS_DIR,
    Comparison,
    add_common_args,
    make_text_files,
    run_measured,
    scratch,
    upload,
    write_json,
)
from operators.fs import open_path
from region.fs import FileSystem

JOB = Path(__file__).resolve().parent / "flink_job.py"
INSTALL = (
    "python3 -m venv .venv-flink && .venv-flink/bin/pip install -r bench/requirements-flink.txt"
)

#: key -> label
KINDS = {
    "fused": "hdfs-region, spark engine (fused)",
    "local": "hdfs-region, local engine",
    "builtin": "Spark built-in text -> text",
    "flink-p2": "Flink FileSource -> FileSink, p=2",
    "flink-p1": "Flink FileSource -> FileSink, p=1",
}
DEFAULT_KINDS = ("fused", "local", "builtin", "flink-p2")


@dataclasses.dataclass(frozen=True)
class Output:
    """What a directory holds, as a plain directory reader sees it."""

    files: int
    lines: int
    bytes: int
    hidden: tuple[str, ...]  # hidden (``.``/``_``) files below it, relative paths

    def unfinished(self) -> list[str]:
        """Flink's part files not yet committed: ``.part-*.inprogress.*`` (in-progress, or
        pending: a pending file keeps its in-progress name until its checkpoint commits)."""
        return [p for p in self.hidden if ".inprogress" in posixpath.basename(p)]


def count_output(fs: FileSystem, directory: str, chunk: int = 8 << 20) -> Output:
    """The visible files below ``directory`` (any depth: Flink writes into bucket folders),
    their lines and bytes; hidden files (a name starting ``.`` or ``_``, or below such a
    folder) are listed, not counted."""
    files = lines = size = 0
    hidden: list[str] = []
    todo = [("", directory)]
    while todo:
        relative, path = todo.pop()
        for status in fs.list_dir(path):
            name = posixpath.join(relative, status.name)
            if status.name.startswith((".", "_")):
                if status.is_dir:
                    hidden += [posixpath.join(name, h) for h in _all_files(fs, status.path)]
                else:
                    hidden.append(name)
            elif status.is_dir:
                todo.append((name, status.path))
            else:
                files += 1
                size += status.size
                for offset in range(0, status.size, chunk):
                    lines += fs.read(status.path, offset, chunk).count(b"\n")
    return Output(files, lines, size, tuple(sorted(hidden)))


def _all_files(fs: FileSystem, path: str) -> list[str]:
    out: list[str] = []
    for status in fs.list_dir(path):
        if status.is_dir:
            out += [posixpath.join(status.name, f) for f in _all_files(fs, status.path)]
        else:
            out.append(status.name)
    return out


def flink_python(given: str | None) -> str | None:
    """An interpreter that imports pyflink: ``given``, else ``$FLINK_PYTHON``, else
    ``.venv-flink`` of the repository, else this one; ``None`` when none does."""
    candidates = (
        [given]
        if given
        else [os.environ.get("FLINK_PYTHON"), str(REPO / ".venv-flink/bin/python"), sys.executable]
    )
    for python in candidates:
        if python and Path(python).exists():
            found = subprocess.run([python, "-c", "import pyflink"], capture_output=True)
            if found.returncode == 0:
                return python
    return None


def hadoop_classpath() -> str:
    """The sandbox's Hadoop client jars (resolved by Maven once): what Flink's ``hdfs://``
    file system loads from ``HADOOP_CLASSPATH``."""
    from operators.sandbox import _prepare

    return _prepare()[1]


@dataclasses.dataclass(frozen=True)
class Runner:
    """Runs each contender as a whole process into ``{root}/out-{kind}-{tag}``."""

    place: Place
    work: Path
    python: str | None  # Flink's interpreter
    flink_env: dict[str, str] | None

    def run(self, kind: str, tag: str) -> dict[str, float]:
        if kind.startswith("flink"):
            assert self.python is not None
            name = f"{kind}-{tag}"
            line = [self.python, str(JOB), self.place.src, *self.dirs(name)]
            line += ["--parallelism", kind.removeprefix("flink-p")]
            return run_measured(line, REPO, self.flink_env)
        return run_measured(command(kind, self.place, self.work, tag), REPO, self.place.env)

    def dirs(self, name: str) -> tuple[str, str]:
        return f"{self.place.root}/out-{name}", f"{self.place.root}/ck-{name}"

    def output(self, name: str) -> Output:
        fs, root = self.filesystem()
        return count_output(fs, posixpath.join(root, f"out-{name}"))

    def filesystem(self) -> tuple[FileSystem, str]:
        if self.place.fs is not None:
            return self.place.fs, self.place.fs_root
        return open_path(self.place.root)

    def clean(self, name: str) -> None:
        """Output and checkpoints removed (five contenders of 1 GB would fill the disk)."""
        if self.place.fs is not None:
            self.place.clean(name)
            return
        for directory in self.dirs(name):
            shutil.rmtree(directory, ignore_errors=True)


def check(runner: Runner, lines: int, size: int, kind: str, tag: str) -> None:
    """Raises unless the output of ``kind``'s run ``tag`` holds the input's lines and bytes
    (Flink's: with every part file committed)."""
    name = f"{kind}-{tag}"
    out = runner.output(name)
    if (out.lines, out.bytes) != (lines, size):
        raise RuntimeError(f"{name}: {out.lines} lines, {out.bytes} bytes of {lines}, {size}")
    if kind.startswith("flink") and out.unfinished():
        raise RuntimeError(f"{name}: part files left uncommitted: {out.unfinished()[:5]}")
    runner.clean(name)


def rerun(runner: Runner, kinds: list[str], work: Path) -> dict[str, Any]:
    """Each of ``kinds`` twice over one small input into one output and one checkpoint
    directory: the visible lines after each run (an exactly-once re-run adds none)."""
    _, input_lines = make_text_files(work / "again", 2.0, 2, seed=3)
    src = str(work / "again")
    if runner.place.fs is not None:
        upload(work / "again", runner.place.fs, posixpath.join(runner.place.fs_root, "again"))
        src = posixpath.join(posixpath.dirname(runner.place.src), "again")
    again = dataclasses.replace(runner, place=dataclasses.replace(runner.place, src=src))
    result: dict[str, Any] = {"input_lines": input_lines}
    for kind in kinds:
        counts = []
        for _ in range(2):
            again.run(kind, "again")
            counts.append(again.output(f"{kind}-again").lines)
        result[kind] = counts
        again.clean(f"{kind}-again")
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=float, default=200.0, help="input MB (default 200)")
    parser.add_argument("--files", type=int, default=8, help="input files (default 8)")
    parser.add_argument("--repeat", type=int, default=3, help="runs of each (default 3)")
    parser.add_argument("--only", default=",".join(DEFAULT_KINDS), help=f"of {','.join(KINDS)}")
    parser.add_argument(
        "--flink-python",
        default=None,
        help="an interpreter with apache-flink installed (default: $FLINK_PYTHON, "
        ".venv-flink/bin/python, this one)",
    )
    parser.add_argument(
        "--no-rerun", action="store_true", help="skip the run-twice check of Flink and ours"
    )
    parser.add_argument(
        "--hdfs", action="store_true", help="input, output and checkpoints on hdfs:// (sandbox)"
    )
    parser.add_argument(
        "--block-size", type=int, default=128 << 20, help="with --hdfs: the block size in bytes"
    )
    parser.add_argument("--user", default="bench", help="with --hdfs: the HDFS user")
    add_common_args(parser, "flink")
    args = parser.parse_args(argv)
    if args.hdfs and args.json == RESULTS_DIR / "flink.json":
        args.json = RESULTS_DIR / "flink_hdfs.json"
    kinds = [k for k in args.only.split(",") if k]
    unknown = set(kinds) - set(KINDS)
    if unknown:
        parser.error(f"--only: unknown {sorted(unknown)} (known: {', '.join(KINDS)})")
    python = flink_python(args.flink_python)
    if python is None:
        print(f"pyflink not found, the Flink rows are skipped; to install it: {INSTALL}")
        kinds = [k for k in kinds if not k.startswith("flink")]
    with scratch(args.work, "bench-flink-") as work, places(args, work) as located:
        place, warm, info = located
        flink_env = dict(place.env or os.environ)
        if args.hdfs:
            flink_env["HADOOP_CLASSPATH"] = hadoop_classpath()
        runner = Runner(place, work, python, flink_env)
        total, lines = info["input_bytes"], info["input_lines"]
        if args.hdfs:  # the JVM's jars and the DataNode's blocks read once
            warmer = Runner(warm, work, python, flink_env)
            for kind in kinds:
                warmer.run(kind, "warm")
                warmer.clean(f"{kind}-warm")
        race = Comparison(total / 1e6)
        for kind in kinds:
            race.add(kind, KINDS[kind], functools.partial(runner.run, kind))
        race.race(args.repeat, check=functools.partial(check, runner, lines, total), warm=False)
        again = None
        if not args.no_rerun:
            again = rerun(runner, [k for k in ("local", "flink-p2") if k in kinds], work)
    baseline = "flink-p2" if "flink-p2" in kinds else None
    where = (
        f"on hdfs:// (sandbox, {args.block_size / 2**20:g} MiB blocks)" if args.hdfs else "local"
    )
    race.print(
        f"whole process {where}, {race.mb:.0f} MB in {args.files} files, median of {args.repeat}",
        baseline=baseline,
        columns={"tree MB (median)": "peak_tree_rss_mb"},
    )
    if again is not None:
        print(f"\nrun twice over {again['input_lines']} lines into one output: lines after each")
        for kind in kinds:
            if kind in again:
                print(f"  {KINDS[kind]}: {again[kind]}")
    result = {
        "input_mb": round(race.mb, 1),
        "input_lines": lines,
        "input_files": args.files,
        "repeat": args.repeat,
        "hdfs": {k: v for k, v in info.items() if k not in ("input_bytes", "input_lines")}
        if args.hdfs
        else None,
        "flink_python": python,
        "median_seconds": {kind: round(race.median(kind), 2) for kind in kinds},
        "median_peak_tree_rss_mb": {
            kind: round(race.median(kind, "peak_tree_rss_mb")) for kind in kinds
        },
        "ratio_to_flink_p2": {kind: race.ratio(baseline, kind) for kind in kinds}
        if baseline
        else None,
        "runs": race.figures(),
        "rerun_lines": again,
    }
    write_json(args.json, result)
    return 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
