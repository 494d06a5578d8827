"""Shared pieces of the benchmark scripts: input files, timing helpers, tables and JSON results.

Every script prints a table and writes ``bench/results/<name>.json`` (git-ignored) with its
parameters, its figures, the target and whether it was met, and the machine it ran on.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import json
import math
import os
import platform
import posixpath
import random
import shutil
import statistics
import string
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from region.fs import FileSystem

__all__ = [
    "RESULTS_DIR",
    "Comparison",
    "Timing",
    "add_common_args",
    "concat_files",
    "machine",
    "make_text_files",
    "percentile",
    "print_table",
    "published_files",
    "run_measured",
    "scratch",
    "upload",
    "write_json",
]

RESULTS_DIR = Path(__file__).resolve().parent / "results"
REPO = Path(__file__).resolve().parent.parent


def _tree_rss(root: int) -> int:
    """Bytes resident in ``root`` and every process below it (Linux ``/proc``; 0 elsewhere)."""
    children: dict[int, list[int]] = {}
    rss: dict[int, int] = {}
    page = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096
    for entry in os.listdir("/proc") if os.path.isdir("/proc") else []:
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as f:
                fields = f.read().rsplit(b")", 1)[1].split()
        except OSError:  # ended meanwhile
            continue
        pid = int(entry)
        children.setdefault(int(fields[1]), []).append(pid)  # field 4: the parent
        rss[pid] = int(fields[21]) * page  # field 24: resident pages
    total, todo = 0, [root]
    while todo:
        pid = todo.pop()
        total += rss.get(pid, 0)
        todo.extend(children.get(pid, ()))
    return total


def run_measured(
    command: Sequence[str],
    cwd: Path,
    env: dict[str, str] | None = None,
    *,
    every: float = 0.1,
    log: Path | None = None,
) -> dict[str, float]:
    """Run a whole process: its seconds, its own peak RSS and the peak RSS of its process tree
    (sampled every ``every`` seconds: a JVM the process starts counts), in MB. Its output goes
    to ``log`` when given (appended), else nowhere. A failure raises with the end of its
    standard error (of ``log``)."""
    import subprocess
    import threading

    start = time.perf_counter()
    with contextlib.ExitStack() as stack:
        out = stack.enter_context(log.open("ab")) if log is not None else None
        process = subprocess.Popen(
            list(command),
            cwd=cwd,
            env=env,
            stdout=out if out is not None else subprocess.DEVNULL,
            stderr=subprocess.STDOUT if out is not None else subprocess.PIPE,
        )
        peak = [0]
        own_peak = [0]
        done = threading.Event()

        def sample() -> None:
            while not done.wait(every):
                peak[0] = max(peak[0], _tree_rss(process.pid))
                own_peak[0] = max(own_peak[0], _high_water(process.pid))

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        # Read until it ends (a full pipe would stop it).
        err = process.stderr.read() if process.stderr is not None else b""
        _, status, usage = os.wait4(process.pid, 0)
        seconds = time.perf_counter() - start
        done.set()
        sampler.join()
    if os.waitstatus_to_exitcode(status) != 0:
        if log is not None:
            err = log.read_bytes()[-3000:]
        raise RuntimeError(f"{list(command)[:3]} failed: {err.decode(errors='replace')[-3000:]}")
    # ru_maxrss is no measure here: Linux keeps, across exec, the peak of the forked copy of
    # this (benchmark) process, which grows as it checks outputs. VmHWM is the new program's.
    own = own_peak[0] / 2**20 if own_peak[0] else usage.ru_maxrss / 1024
    return {"seconds": seconds, "peak_rss_mb": own, "peak_tree_rss_mb": max(own, peak[0] / 2**20)}


def _high_water(pid: int) -> int:
    """Peak resident bytes of ``pid``'s program (``VmHWM``; 0 when it has ended)."""
    try:
        with open(f"/proc/{pid}/status", "rb") as f:
            for line in f:
                if line.startswith(b"VmHWM:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def load_average() -> list[float]:
    """The load average over 1, 5 and 15 minutes (empty where the system gives none)."""
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:
        return []


def machine() -> dict[str, Any]:
    """What the figures were measured on (the load average says how shared the machine was)."""
    return {
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "date": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "load_average": load_average(),
    }


def add_common_args(parser: argparse.ArgumentParser, name: str) -> None:
    parser.add_argument(
        "--json",
        type=Path,
        default=RESULTS_DIR / f"{name}.json",
        help=f"where to write the results (default bench/results/{name}.json)",
    )
    parser.add_argument("--work", type=Path, default=None, help="scratch directory parent")


@contextlib.contextmanager
def scratch(parent: Path | None, prefix: str) -> Iterator[Path]:
    """A fresh directory, removed afterwards."""
    if parent is not None:
        parent.mkdir(parents=True, exist_ok=True)
    path = Path(tempfile.mkdtemp(prefix=prefix, dir=parent))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def make_text_files(
    directory: Path, megabytes: float, files: int, *, seed: int = 7, prefix: str = "part-"
) -> tuple[int, int]:
    """``files`` text files of random lines (20..180 bytes) totalling about ``megabytes`` MB.

    Every line is unique (it starts with its file and line number). Returns (bytes, lines).
    """
    directory.mkdir(parents=True, exist_ok=True)
    rng = random.Random(seed)
    alphabet = string.ascii_letters + string.digits + "     "
    pool = ["".join(rng.choices(alphabet, k=rng.randint(20, 180))) for _ in range(4096)]
    per_file = max(1, int(megabytes * 1_000_000 / max(files, 1)))
    total_bytes = total_lines = 0
    for i in range(files):
        lines: list[str] = []
        size = 0
        while size < per_file:
            line = f"{prefix}{i}:{len(lines)} {pool[rng.randrange(len(pool))]}"
            lines.append(line)
            size += len(line) + 1
        data = ("\n".join(lines) + "\n").encode()
        (directory / f"{prefix}{i:05d}.txt").write_bytes(data)
        total_bytes += len(data)
        total_lines += len(lines)
    return total_bytes, total_lines


def upload(local: Path, fs: FileSystem, remote: str, attempts: int = 5) -> None:
    """Copy the files of ``local`` to ``remote`` in name order (distinct mtimes: scan order).

    A file is written again after an ``OSError``: hdfs-native does not retry the NameNode's
    ``NotReplicatedYetException`` (a new block asked for before the previous one is reported
    replicated; Hadoop's client retries it), which the sandbox's 1 MiB blocks make frequent.
    """
    fs.mkdirs(remote)
    for path in sorted(local.iterdir()):
        target = posixpath.join(remote, path.name)
        for attempt in range(attempts):
            tmp = posixpath.join(remote, f".{path.name}.{attempt}.tmp")  # a fresh lease each
            try:
                writer = fs.create(tmp, overwrite=True)
                with path.open("rb") as f:
                    while chunk := f.read(4 << 20):
                        writer.write(chunk)
                writer.close()
                fs.rename(tmp, target)
                break
            except OSError as err:
                if attempt == attempts - 1:
                    raise
                print(f"upload of {path.name} failed, again: {err}", file=sys.stderr)
                time.sleep(0.5 * 2**attempt)
        time.sleep(0.002)  # HDFS keeps milliseconds


def concat_files(paths: Sequence[Path]) -> bytes:
    return b"".join(p.read_bytes() for p in paths)


def published_files(directory: Path) -> list[Path]:
    """Files a plain directory reader sees: hidden (``.``/``_``) names skipped, sorted by name."""
    return sorted(
        p for p in directory.iterdir() if p.is_file() and not p.name.startswith((".", "_"))
    )


def output_bytes(directory: Path) -> int:
    """Bytes a plain directory reader sees (hidden ``.``/``_`` names skipped, as Spark does)."""
    return sum(
        p.stat().st_size
        for p in directory.rglob("*")
        if p.is_file()
        and not any(part.startswith((".", "_")) for part in p.relative_to(directory).parts)
    )


def percentile(values: Sequence[float], q: float) -> float:
    """The ``q``-th percentile (0..100), nearest rank: a value that was actually measured."""
    if not values:
        return math.nan
    ordered = sorted(values)
    rank = max(1, math.ceil(q / 100 * len(ordered)))
    return ordered[min(rank, len(ordered)) - 1]


def median(values: Sequence[float]) -> float:
    return statistics.median(values) if values else math.nan


def print_table(title: str, headers: Sequence[str], rows: Sequence[Sequence[object]]) -> None:
    """A plain-text table: the first column left-aligned, the others right-aligned."""
    cells = [[str(h) for h in headers]] + [[_cell(v) for v in row] for row in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]

    def line(row: Sequence[str]) -> str:
        return "  ".join(
            c.ljust(w) if i == 0 else c.rjust(w)
            for i, (c, w) in enumerate(zip(row, widths, strict=True))
        )

    print(f"\n{title}")
    print(line(cells[0]))
    print("  ".join("-" * w for w in widths))
    for row in cells[1:]:
        print(line(row))
    sys.stdout.flush()


def _cell(value: object) -> str:
    if isinstance(value, bool):
        return "yes" if value else "NO"
    if isinstance(value, float):
        if math.isnan(value):
            return "-"
        return f"{value:.3g}" if abs(value) < 100 else f"{value:.0f}"
    return str(value)


def write_json(path: Path, result: dict[str, Any]) -> Path:
    """Write ``result`` with the machine and the command line added."""
    out = dict(result)
    out.setdefault("machine", machine())
    out.setdefault("command", " ".join([Path(sys.argv[0]).name, *sys.argv[1:]]))
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(out, indent=2) + "\n")
    print(f"results: {path}")
    return path


#: What one run of a pipeline returns: its seconds, or its figures by name with its seconds under
#: ``"seconds"`` and others the benchmark keeps per run beside them (CPU seconds, cuts...).
Timing = float | dict[str, float]


@dataclass
class Comparison:
    """Whole runs of several pipelines over one input of ``mb`` MB, timed alternately: the part
    every speed benchmark shares. A benchmark adds its pipelines (``add``: a function that runs
    one whole pipeline for a tag and returns its seconds, or its figures), races them, and keeps
    only what it measures; the table, the medians, the ratios and the load beside them come from
    here."""

    mb: float
    entrants: dict[str, tuple[str, Callable[[str], Timing]]] = field(default_factory=dict)
    #: Each pipeline's figures by name, one value per timed run; ``"seconds"`` always.
    samples: dict[str, dict[str, list[float]]] = field(default_factory=dict)
    load_before: list[float] = field(default_factory=load_average)
    load_after: list[float] = field(default_factory=list)

    def add(self, key: str, label: str, run: Callable[[str], Timing]) -> None:
        """``run(tag)``: the pipeline ``key`` (shown as ``label``) once, writing under ``tag``."""
        self.entrants[key] = (label, run)

    def race(
        self, repeat: int, *, check: Callable[[str, str], None] | None = None, warm: bool = True
    ) -> None:
        """Each pipeline once untimed (``warm``: JVM, workers, caches), then ``repeat`` rounds of
        each in turn, so that no side always runs on a warmer page cache; ``check(key, tag)``
        after each timed run raises when its output is wrong."""
        if warm:
            for _, run in self.entrants.values():
                run("warm")
        self.samples = {key: {"seconds": []} for key in self.entrants}
        for i in range(repeat):
            for key, (_, run) in self.entrants.items():
                timing = run(str(i))
                figures = timing if isinstance(timing, dict) else {"seconds": timing}
                for name, value in figures.items():
                    self.samples[key].setdefault(name, []).append(value)
                if check is not None:
                    check(key, str(i))
        self.load_after = load_average()

    def median(self, key: str, figure: str = "seconds") -> float:
        return median(self.samples[key][figure])

    def ratio(self, baseline: str, key: str, *, figure: str = "seconds", digits: int = 2) -> float:
        """How many times faster ``key`` ran than ``baseline`` (medians of ``figure``, a time;
        above 1: faster)."""
        return round(self.median(baseline, figure) / self.median(key, figure), digits)

    def figures(self, names: dict[str, str] | None = None) -> dict[str, Any]:
        """For the JSON: each pipeline's runs (every figure) and rate (under ``names[key]`` when
        given), and the load before and after."""
        names = names or {}
        out: dict[str, Any] = {
            names.get(key, key): {**runs, "mb_per_s": round(self.mb / self.median(key), 1)}
            for key, runs in self.samples.items()
        }
        out["load_average_before"] = self.load_before
        out["load_average_after"] = self.load_after
        return out

    def print(
        self, title: str, *, baseline: str | None = None, columns: dict[str, str] | None = None
    ) -> None:
        """The table: each pipeline's rate and median seconds; with ``baseline``, its ratio to
        that pipeline; ``columns`` (header -> figure): the median of other figures its runs
        returned."""
        columns = dict(columns or {})
        measured = any("peak_tree_rss_mb" in runs for runs in self.samples.values())
        if measured and "peak_tree_rss_mb" not in columns.values():
            # Memory beside every whole-process time: the peak RSS of its process tree.
            columns["tree MB (median)"] = "peak_tree_rss_mb"
        headers = ["pipeline", "MB/s", "seconds (median)"]
        if baseline is not None:
            headers.append(f"ratio to {self.entrants[baseline][0]}")
        rows = []
        for key, (label, _) in self.entrants.items():
            row: list[object] = [label, self.mb / self.median(key), self.median(key)]
            if baseline is not None:
                row.append(self.ratio(baseline, key))
            row += [
                self.median(key, figure) if figure in self.samples[key] else "-"
                for figure in columns.values()
            ]
            row.append(" ".join(f"{s:.2f}" for s in self.samples[key]["seconds"]))
            rows.append(row)
        print_table(title, [*headers, *columns, "runs"], rows)
        print(f"load average (1, 5, 15 min) before: {self.load_before}, after: {self.load_after}")
