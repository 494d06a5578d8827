"""Cron-style runs (``--only cron``): ``hdfs-region run --available-now`` again and again, with
SIGKILLs, where exports land again under one name and clocks are skewed.

- An export that lands again under the name of one the scan archived (or deleted), also when
  the run was killed right after it moved the last one away, before its next checkpoint.
- The hourly export of a ``[source] file`` with ``after_read = "delete"``.
- A file whose mtime is a day ahead, then more files than the census below the late window
  tells apart.

Every record is counted: each must be published exactly once.
"""

from __future__ import annotations

import argparse
import os
import random
import subprocess
import time
from pathlib import Path

from bench.campaign.outcome import Outcome, tally
from bench.campaign.processes import kill, wait_for
from bench.campaign.workspace import Workspace, progressed

__all__ = ["cron"]

#: Where the scan stops (to be killed) right after after_read moved a file away.
AFTER_READ_POINT = "scan-after-read"


def _land(directory: Path, name: str, records: list[str], mtime_ns: int | None = None) -> None:
    """Write-then-rename, as an export job does."""
    hidden = directory / f".{name}.tmp"
    hidden.write_text("\n".join(records) + "\n")
    if mtime_ns is not None:
        os.utime(hidden, ns=(mtime_ns, mtime_ns))
    os.rename(hidden, directory / name)


def _records(rng: random.Random, name: str, count: int) -> list[str]:
    return [f"{name}:{i:05d}:{rng.getrandbits(32):08x}" for i in range(count)]


class _Runs:
    """The runs of one scenario: killed ones and complete ones, and what they printed."""

    def __init__(self, ws: Workspace, args: argparse.Namespace, rng: random.Random) -> None:
        self.ws, self.args, self.rng = ws, args, rng
        self.steps: list[str] = []
        self.codes: list[int] = []
        self.logs: list[str] = []
        self.kills = 0

    def killed_after_read(self) -> None:
        """A run SIGKILLed right after after_read moved a file away (before the next cut)."""
        marks = self.ws.root / "faults"
        marks.mkdir(exist_ok=True)
        (marks / AFTER_READ_POINT).unlink(missing_ok=True)
        proc = self.ws.start(
            available_now=True,
            env={"HDFS_REGION_FAULT": AFTER_READ_POINT, "HDFS_REGION_FAULT_DIR": str(marks)},
        )
        wait_for(
            lambda: (marks / AFTER_READ_POINT).exists() or proc.poll() is not None,
            self.args.timeout,
            "the file moved away",
        )
        self._kill(proc, "after the move")

    def killed_mid_run(self) -> None:
        """A run SIGKILLed at a random moment after its first cut."""
        proc = self.ws.start(available_now=True)
        wait_for(progressed(self.ws, proc), self.args.timeout, "a cut")
        time.sleep(self.rng.uniform(0.0, 0.3))
        self._kill(proc, "mid-run")

    def _kill(self, proc: subprocess.Popen[bytes], where: str) -> None:
        if proc.poll() is None:
            kill(proc)
            self.kills += 1
            self.steps.append(f"killed {where}")
        else:
            self.steps.append(f"ended before the kill ({where})")

    def complete(self) -> str:
        code, text = self.ws.run(timeout=self.args.timeout)
        self.codes.append(code)
        self.logs.append(text)
        return text


def _outcome(
    fault: str, runs: _Runs, expected: set[str], problems: list[str], details: dict[str, object]
) -> Outcome:
    result = tally(expected, runs.ws.output())
    ok = not problems and all(c == 0 for c in runs.codes) and result.exactly_once()
    return Outcome(
        fault=fault,
        engine="local",
        delivery="exactly_once",
        expected="every record once, landing directory emptied",
        outcome=f"{runs.kills} SIGKILL(s), {len(runs.codes)} complete run(s), exit "
        f"{','.join(map(str, runs.codes))}" + (f"; {'; '.join(problems)}" if problems else ""),
        lost=result.lost,
        duplicated=result.duplicated,
        corrupt=result.corrupt,
        ok=ok,
        details={"records": result.expected, "examples": result.examples, **details},
    )


def relanded(work: Path, args: argparse.Namespace, after_read: str) -> Outcome:
    """Exports under one name, each moved away after it was read: killed right after the move
    while the next export lands, killed mid-run, and run to the end."""
    rng = random.Random(args.seed + 80 + (after_read == "delete"))
    ws = Workspace(work / f"cron-{after_read}", records_per_s=4000, after_read=after_read)
    runs = _Runs(ws, args, rng)
    expected: set[str] = set()
    problems: list[str] = []

    def export(hour: int) -> None:
        records = _records(rng, f"export-h{hour}", args.lines * 8)
        _land(ws.landing, "export.txt", records)
        expected.update(records)

    export(0)
    runs.killed_after_read()
    export(1)  # lands while the job is down, under the name the killed run moved away
    runs.killed_mid_run()
    runs.complete()
    export(2)
    runs.complete()
    if (ws.landing / "export.txt").exists():
        problems.append("export.txt left in the landing directory")
    archived = sorted(p.name for p in ws.archive.iterdir()) if ws.archive.exists() else []
    if after_read == "archive" and len(archived) != 3:
        problems.append(f"archive holds {archived}")
    return _outcome(
        f"after_read = {after_read}: an export landing again under its name (SIGKILL after "
        "the move)",
        runs,
        expected,
        problems,
        {"archived": archived},
    )


def single_file_export(work: Path, args: argparse.Namespace) -> Outcome:
    """``[source] file`` with ``after_read = "delete"``: the hourly export read and deleted each
    hour, with a run killed right after the delete (the next export lands meanwhile) and one
    killed mid-run."""
    rng = random.Random(args.seed + 82)
    ws = Workspace(work / "cron-single-file", records_per_s=4000, after_read="delete")
    config = ws.root / "pipeline.toml"
    text = config.read_text()
    text = text.replace(f'directory = "{ws.landing}"\n', "")
    text = text.replace("[source]\n", f'[source]\nfile = "{ws.landing}/orders.csv"\n')
    config.write_text(text)
    runs = _Runs(ws, args, rng)
    expected: set[str] = set()
    problems: list[str] = []

    def export(hour: int) -> None:
        records = _records(rng, f"orders-h{hour}", args.lines * 8)
        _land(ws.landing, "orders.csv", records)
        expected.update(records)

    def complete(hour: int) -> None:
        log = runs.complete()
        # A run that read the export (a killed run may have read and deleted it all) must not
        # say that it does not exist.
        if "does not exist" in log and "Pipeline finished: 0 records in" not in log:
            problems.append(f"hour {hour}: a false 'does not exist' warning")
        if (ws.landing / "orders.csv").exists():
            problems.append(f"hour {hour}: orders.csv not deleted")

    export(0)
    runs.killed_after_read()
    export(1)  # the next export lands while the job is down
    complete(1)
    export(2)
    runs.killed_mid_run()
    complete(2)
    export(3)  # plain cron: one run per export
    complete(3)
    return _outcome(
        "[source] file with after_read = delete: the hourly export (SIGKILL after the delete)",
        runs,
        expected,
        problems,
        {},
    )


def future_mtime(work: Path, args: argparse.Namespace) -> Outcome:
    """A file with an mtime a day ahead, then 600 files while the job is down, SIGKILLs in
    both runs: nothing passed over, nothing read twice."""
    rng = random.Random(args.seed + 83)
    ws = Workspace(work / "cron-future-mtime", records_per_s=4000)
    runs = _Runs(ws, args, rng)
    expected: set[str] = set()
    for i in range(10):
        records = _records(rng, f"early-{i:02d}", args.lines)
        _land(ws.landing, f"early-{i:02d}.txt", records)
        expected.update(records)
    skewed = _records(rng, "skewed", args.lines)
    _land(ws.landing, "skewed.txt", skewed, time.time_ns() + 86_400 * 1_000_000_000)
    expected.update(skewed)
    runs.killed_mid_run()
    runs.complete()
    for i in range(600):  # more than the census below the late window tells apart
        records = _records(rng, f"later-{i:03d}", 2)
        _land(ws.landing, f"later-{i:03d}.txt", records)
        expected.update(records)
    runs.killed_mid_run()
    runs.complete()
    log = "".join(runs.logs)
    problems = ["files passed over"] if "passed over" in log else []
    if "skewed.txt has an mtime" not in log:
        problems.append("no warning names skewed.txt")
    return _outcome(
        "a file with an mtime a day ahead, then 600 files (SIGKILLs)",
        runs,
        expected,
        problems,
        {},
    )


def cron(work: Path, args: argparse.Namespace) -> list[Outcome]:
    return [
        relanded(work, args, "archive"),
        relanded(work, args, "delete"),
        single_file_export(work, args),
        future_mtime(work, args),
    ]
