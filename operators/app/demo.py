"""``hdfs-region demo``: crash a running pipeline on purpose and prove nothing was lost or doubled.

1. Write sample landing files (several share one mtime, the common case on ext4 and HDFS).
2. Write ``pipeline.toml`` and start ``hdfs-region run pipeline.toml --available-now`` in a
   subprocess.
3. As soon as some output is published, but before the end, SIGKILL it: no final cut, no
   cleanup, files half written.
4. Run the very same command again: it resumes from the last cut and finishes.
5. Read every published output file and compare it with the input record by record.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import TextIO

from operators.app.config import Engine
from operators.app.console import command as typed_command
from region.errors import ConfigError

__all__ = ["PACE_ENV", "expected_output", "read_output", "run_demo", "shout", "write_landing"]

#: Seconds the local engine's demo transform sleeps per record, so that the crash lands mid-run.
PACE_ENV = "HDFS_REGION_DEMO_PACE"
_MARKER = ".hdfs-region-demo"
_TIMEOUT = 300.0


def shout(record: str) -> str:
    """The demo's transform for the local engine (Spark runs the same as SQL ``upper``).

    It also sleeps a little per record: the demo pipeline must still be running when it is
    killed, and without a pause the local engine moves its few thousand records in a blink.
    """
    pace = float(os.environ.get(PACE_ENV, "0.001"))
    if pace > 0:
        time.sleep(pace)
    return record.upper()


def write_landing(landing: Path, files: int, lines: int) -> list[str]:
    """Write the sample input files; return every record written. Files 1-3 share one mtime."""
    landing.mkdir(parents=True, exist_ok=True)
    records: list[str] = []
    base_ns = time.time_ns() - 3_600 * 1_000_000_000
    for f in range(files):
        path = landing / f"orders-{f:03d}.csv"
        rows = [
            f"order-{f:03d}-{i:06d},customer-{(f * 7 + i) % 97:02d},{i % 13 + 1}"
            for i in range(lines)
        ]
        path.write_text("\n".join(rows) + "\n", encoding="utf-8")
        # Files 1, 2 and 3 share an mtime: the scan orders them by name, exactly once.
        step = min(f, 1) if f <= 3 else f - 2
        mtime = base_ns + step * 1_000_000_000
        os.utime(path, ns=(mtime, mtime))
        records.extend(rows)
    return records


def expected_output(records: list[str]) -> Counter[str]:
    return Counter(r.upper() for r in records)


def read_output(out: Path) -> tuple[Counter[str], int, int]:
    """Records of the published output files, how many files, and how many hidden files."""
    got: Counter[str] = Counter()
    published = hidden = 0
    if not out.is_dir():
        return got, 0, 0
    for entry in sorted(out.iterdir()):
        if not entry.is_file():
            continue
        if entry.name.startswith((".", "_")):
            hidden += 1
            continue
        published += 1
        got.update(entry.read_text(encoding="utf-8").splitlines())
    return got, published, hidden


def _pipeline_toml(engine: Engine, records: int) -> str:
    transform = (
        'sql = "SELECT upper(value) AS value FROM input"'
        if engine == "spark"
        else 'function = "operators.app.demo:shout"   # upper-case, paced to be killed mid-run'
    )
    return f"""\
# Written by `hdfs-region demo`. Run it yourself:
#   hdfs-region run pipeline.toml --available-now
engine = "{engine}"
name = "demo"

[region]
trigger = "periodic"
period = "250ms"
checkpoint_dir = "checkpoints"

[scan]
directory = "landing"
pattern = '.*\\.csv'

[transform]
{transform}

[sink]
file = "out/part-%FILENUM.csv"
tuples_per_file = {max(10, records // 8)}

[filesystem]
uri = "file:///"   # the local disk, also where HADOOP_CONF_DIR names a cluster

[spark]
# Two landing files per micro-batch, so that the crash lands between batches of one run.
max_files_per_trigger = 2
"""


def _prepare(directory: Path | None) -> Path:
    if directory is None:
        return Path(tempfile.mkdtemp(prefix="hdfs-region-demo-"))
    directory = directory.absolute()
    if directory.exists() and any(directory.iterdir()):
        if not (directory / _MARKER).exists():
            msg = (
                f"demo directory {directory} exists and is not empty: give a new or empty "
                "directory (or one an earlier demo created)"
            )
            raise ConfigError(msg)
        for name in ("landing", "out", "checkpoints"):
            shutil.rmtree(directory / name, ignore_errors=True)
    directory.mkdir(parents=True, exist_ok=True)
    return directory


def _first_line(path: Path) -> str:
    lines = path.read_text(encoding="utf-8", errors="replace").strip().splitlines()
    errors = [line for line in lines if "error" in line.lower()]
    return (errors or lines or ["(no output)"])[-1]


def run_demo(
    directory: Path | None = None,
    *,
    engine: Engine = "spark",
    files: int = 8,
    lines: int = 500,
    out: TextIO | None = None,
) -> bool:
    """Run the demo; print its report to ``out`` (stdout); ``True`` when every record arrived
    exactly once."""
    stream = out if out is not None else sys.stdout

    def say(text: str = "") -> None:
        print(text, file=stream, flush=True)

    if files < 2 or lines < 1:
        raise ConfigError(f"demo: needs --files >= 2 and --lines >= 1, got {files} and {lines}")
    if engine == "spark":
        from operators.spark.session import find_java

        try:
            find_java()
        except ConfigError as exc:
            raise ConfigError(f"{exc}; or run the demo without Spark: --engine local") from None
    started = time.monotonic()
    work = _prepare(directory)
    (work / _MARKER).write_text("created by hdfs-region demo\n")
    records = write_landing(work / "landing", files, lines)
    config = work / "pipeline.toml"
    config.write_text(_pipeline_toml(engine, len(records)), encoding="utf-8")
    expected = expected_output(records)
    output = work / "out"
    command = [
        sys.executable,
        "-m",
        "operators.app.cli",
        "run",
        config.name,
        "--available-now",
        "--engine",
        engine,
        "--no-progress",
    ]
    shown = typed_command("run", str(config), "--available-now", "--engine", engine)

    say(f"hdfs-region demo ({engine} engine) in {work}")
    say(f"1. wrote {files} landing files, {len(records):,} records, in landing/ (3 share an mtime)")
    say(f"2. running: {shown}")

    # Run 1: kill it once output is published but before everything is.
    log1 = work / "run1.log"
    with open(log1, "wb") as log:
        first = subprocess.Popen(command, cwd=work, stdout=log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + _TIMEOUT
        killed_at: int | None = None
        while time.monotonic() < deadline:
            if first.poll() is not None:
                break
            got, published, _ = read_output(output)
            if published and 0 < sum(got.values()) < len(records):
                first.send_signal(signal.SIGKILL)
                first.wait()
                killed_at = sum(got.values())
                break
            time.sleep(0.02)
        else:
            first.kill()
            first.wait()
            raise RuntimeError(f"demo: the first run did not publish anything in {_TIMEOUT:.0f}s")
    if killed_at is not None:
        _, published, hidden = read_output(output)
        say(
            f"   killed it with SIGKILL mid-run: {killed_at:,} of {len(records):,} records were "
            f"published in {published} file(s), {hidden} in-progress file(s) left behind"
        )
    elif first.returncode != 0:
        say(f"   the first run failed (exit {first.returncode}): {_first_line(log1)}")
        return False
    else:
        say("   the first run finished before it could be killed (use more --lines)")

    # Run 2: the same command, to completion.
    say(f"3. running the same command again: {shown}")
    log2 = work / "run2.log"
    with open(log2, "wb") as log:
        second = subprocess.run(
            command, cwd=work, stdout=log, stderr=subprocess.STDOUT, timeout=_TIMEOUT
        )
    if second.returncode != 0:
        say(f"   it failed (exit {second.returncode}): {_first_line(log2)}")
        say(f"   see {log2}")
        return False
    resumed = re.search(r"Recovering from cut (\d+)", log2.read_text(errors="replace"))
    where = f"cut {resumed.group(1)}" if resumed else "its checkpoint"
    say(f"   it resumed from {where} and finished (exit 0); logs: {log1.name}, {log2.name}")

    # Compare record by record.
    got, published, hidden = read_output(output)
    duplicates = sum(max(0, got[r] - n) for r, n in expected.items())
    missing = sum(max(0, n - got[r]) for r, n in expected.items())
    unexpected = sum(c for r, c in got.items() if r not in expected)
    ok = duplicates == 0 and missing == 0 and unexpected == 0 and got == expected
    say(f"4. every record of out/ ({published} files) compared with the input:")
    say(f"   records in    {len(records):>8,}")
    say(f"   records out   {sum(got.values()):>8,}")
    say(f"   duplicates    {duplicates:>8,}")
    say(f"   missing       {missing:>8,}")
    if unexpected:
        say(f"   unexpected    {unexpected:>8,}")
    if hidden:
        say(f"   (in-progress files left: {hidden})")
    verdict = "exactly once: YES" if ok else "exactly once: NO"
    say(f"   {verdict}   ({time.monotonic() - started:.1f}s)")
    say(f"   look around: {typed_command('inspect', str(work / 'checkpoints'))}")
    return ok
