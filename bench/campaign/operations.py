"""Fault-campaign scenarios for the operations users perform (not crashes alone): switching the
delivery between runs, a second runner of the Python API, a file that grows while it is read, a
file replaced while the job is down, a sink pointed inside the landing directory, and a second
job pointed at the output directory of the first.

Each scenario drives real processes on real files and counts every record, like the rest of
the campaign, which runs them under ``--only operations``.
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import subprocess
import sys
import time
from pathlib import Path

from bench.campaign.arrivals import Arrivals
from bench.campaign.outcome import Outcome, tally
from bench.campaign.processes import kill, last_error, wait_for
from bench.campaign.workspace import Workspace, progressed

__all__ = ["operations"]

#: The README's Python API, as a user's script would use it: one ``available_now`` run.
API_SCRIPT = """\
import os
import sys
import time

from operators.fs.local import LocalFileSystem
from operators.scan import HDFS2DirectoryScan, ScanSettings
from operators.sink import HDFS2FileSink, SinkSettings
from operators.source import HDFS2FileSource, SourceSettings
from region.checkpoint import CheckpointStore
from region.errors import LockedError
from region.runtime import Pipeline, PipelineRunner
from region.settings import RegionSettings

root = sys.argv[1]
fs = LocalFileSystem()
scan = HDFS2DirectoryScan(ScanSettings(directory=f"{root}/landing", sleep_time=0), fs)
source = HDFS2FileSource(SourceSettings(), fs, files=scan)
sink = HDFS2FileSink(SinkSettings(file=f"{root}/out/part-%FILENUM.txt", tuples_per_file=500), fs)


def pace(record):
    time.sleep(0.0002)  # about 5,000 records/s: the second runner starts mid-run
    return record


runner = PipelineRunner(
    Pipeline(source, transforms=[pace], sinks=[sink], batch_size=100),
    RegionSettings(period=0.25),
    CheckpointStore(fs, f"{root}/ck"),
)
try:
    runner.run(available_now=True)
except LockedError as exc:
    print(f"LockedError: {exc}", file=sys.stderr)
    sys.exit(3)
"""


def delivery_switch(work: Path, args: argparse.Namespace) -> Outcome:
    """exactly_once killed mid-run, at_least_once killed after one cut, exactly_once to the
    end: the switches never cut into a record and nothing is lost. The at_least_once run may
    repeat records, as its setting allows: its start keeps what the killed exactly_once run
    wrote after its cut (append on reset, IBM's behaviour) and reads those records again. How
    many depends on what reached the disk before the kill; none, when the kill came before the
    writer's buffer was flushed (as it did on a quiet machine)."""
    rng = random.Random(args.seed + 60)
    ws = Workspace(work / "delivery-switch", records_per_s=8000, bytes_per_file=400_000)
    arrivals = Arrivals(ws.landing, rng)
    for _ in range(12):
        arrivals.place(1000, group=2)
    steps = []
    for delivery in ("exactly_once", "at_least_once"):
        ws.delivery = delivery
        ws.write_config()
        proc = ws.start()
        wait_for(progressed(ws, proc), args.timeout, "a cut")
        time.sleep(rng.uniform(0.1, 0.4))
        kill(proc)
        steps.append(f"{delivery} killed after cut {ws.progress()}")
    ws.delivery = "exactly_once"
    ws.write_config()
    code, text = ws.run(timeout=args.timeout)
    result = tally(arrivals.expected, ws.output())
    return Outcome(
        fault="delivery switched on existing checkpoints (kill -9 each time)",
        engine="local",
        delivery="exactly_once → at_least_once → exactly_once",
        expected="each run follows its setting (at_least_once may repeat); no loss",
        outcome="; ".join(steps) + f"; final exactly_once run exit {code}",
        lost=result.lost,
        duplicated=result.duplicated,
        corrupt=result.corrupt,
        ok=code == 0 and result.at_least_once(),
        message=last_error(text) if code else "",
        details={"records": result.expected, "examples": result.examples},
    )


def second_api_runner(work: Path, args: argparse.Namespace) -> Outcome:
    """The README's Python API started twice on one checkpoint directory, 0.5 s apart: the
    second is refused with LockedError while the first runs; run again after, it adds nothing
    twice."""
    rng = random.Random(args.seed + 61)
    root = work / "second-api-runner"
    (root / "landing").mkdir(parents=True)
    arrivals = Arrivals(root / "landing", rng)
    for _ in range(6):
        arrivals.place(1000)
    script = root / "api_job.py"
    script.write_text(API_SCRIPT)
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parent.parent)}

    def start() -> subprocess.Popen[str]:
        return subprocess.Popen(
            [sys.executable, str(script), str(root)],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )

    first = start()
    time.sleep(0.5)
    second = start()
    second_out = second.communicate(timeout=args.timeout)[1]
    first_out = first.communicate(timeout=args.timeout)[1]
    refused = second.returncode == 3 and "is locked by" in second_out
    third = start()
    third_out = third.communicate(timeout=args.timeout)[1]
    got = Workspace.read_output(root / "out")
    result = tally(arrivals.expected, got)
    outcome = (
        f"first exit {first.returncode}; second exit {second.returncode} "
        f"(LockedError: {'yes' if refused else 'NO'}); a later run exit {third.returncode}"
    )
    return Outcome(
        fault="a second Python API runner on the same checkpoints, 0.5 s later",
        engine="local (Python API)",
        delivery="exactly_once",
        expected="the second is refused naming the holder; nothing lost or doubled",
        outcome=outcome,
        lost=result.lost,
        duplicated=result.duplicated,
        corrupt=result.corrupt,
        ok=refused and first.returncode == 0 and third.returncode == 0 and result.exactly_once(),
        message=next((ln for ln in second_out.splitlines() if "LockedError" in ln), ""),
        details={"first_stderr_tail": first_out[-300:], "third_stderr_tail": third_out[-300:]},
    )


def _append_lines(path: Path, name: str, count: int, interval: float) -> list[str]:
    """Append ``count`` lines to ``path`` one at a time (as ``echo >>`` does)."""
    lines = []
    for i in range(count):
        line = f"{name}:grow:{i:05d}"
        with open(path, "a") as f:
            f.write(line + "\n")
        lines.append(line)
        time.sleep(interval)
    return lines


def growing_file(work: Path, args: argparse.Namespace) -> list[Outcome]:
    """A file appended to under its final name while ``run`` goes on. With the defaults each
    appended line is read once, after the lines before it (the content decides where the file
    continues); with ``min_file_age`` longer than the writer's pauses it is read once, whole."""
    rows = []
    for min_age in ("0s", "2s"):
        rng = random.Random(args.seed + 62)
        ws = Workspace(work / f"growing-{min_age}", records_per_s=0, sleep_time="100ms")
        ws.write_config()
        if min_age != "0s":
            text = (ws.root / "pipeline.toml").read_text()
            text = text.replace("[scan]\n", f'[scan]\nmin_file_age = "{min_age}"\n', 1)
            (ws.root / "pipeline.toml").write_text(text)
        arrivals = Arrivals(ws.landing, rng)
        arrivals.place(200)
        log = ws.landing / "app.log"
        log.write_text("app.log:grow:start\n")
        proc = ws.start()
        appended = _append_lines(log, "app.log", 300, 0.01)  # about 3 s of writing
        time.sleep(3.0)  # the file is quiet now: old enough for min_file_age
        proc.send_signal(2)  # SIGINT: a graceful stop with a final cut
        try:
            proc.wait(timeout=args.timeout)
        except subprocess.TimeoutExpired:
            kill(proc)
        text = ws.log.read_text(errors="replace")
        grown = {"app.log:grow:start", *appended}
        got = ws.output()
        continued = text.count("continues at byte")
        if min_age == "0s":
            result = tally(arrivals.expected | grown, got)
            ok = proc.returncode == 0 and result.exactly_once()
            outcome = (
                f"exit {proc.returncode}; every appended line read once (the file continued "
                f"{continued} time(s) where it was read to)"
            )
            expected = "each appended line read once"
        else:
            result = tally(arrivals.expected | grown, got)
            ok = proc.returncode == 0 and result.exactly_once()
            outcome = f"exit {proc.returncode}; the file read once, whole"
            expected = "read once, whole"
        rows.append(
            Outcome(
                fault=f"a file appended to while read (min_file_age = {min_age})",
                engine="local",
                delivery="exactly_once",
                expected=expected,
                outcome=outcome,
                lost=result.lost,
                duplicated=result.duplicated,
                corrupt=result.corrupt,
                ok=ok,
                details={"examples": result.examples},
            )
        )
    return rows


def replaced_while_down(work: Path, args: argparse.Namespace, *, longer: bool = False) -> Outcome:
    """kill -9 after a cut in the middle of a big file; the file is replaced (same name, new
    content) while the job is down; never resumed at the old byte offset (no torn record, no
    duplicate). Shorter, with ``on_modified = "reread"``: the new content read whole. Longer
    (it looks grown by its size), with the default settings: another file, read whole once."""
    rng = random.Random(args.seed + 63 + longer)
    ws = Workspace(work / ("replaced-longer" if longer else "replaced"), records_per_s=6000)
    if not longer:
        text = (ws.root / "pipeline.toml").read_text()
        (ws.root / "pipeline.toml").write_text(
            text.replace("[scan]\n", '[scan]\non_modified = "reread"\n', 1)
        )
    arrivals = Arrivals(ws.landing, rng)
    arrivals.place(200)
    (big,) = arrivals.place(20_000)
    old = {r for r in arrivals.expected if r.startswith(big.name + ":")}
    proc = ws.start()
    wait_for(lambda: ws.progress() >= 2 or proc.poll() is not None, args.timeout, "two cuts")
    kill(proc)
    published_old = {r for r in ws.output() if r in old}
    # Replace it under the same name: new records, shorter than what was read, or longer than
    # the old file.
    new = [f"{big.name}:new:{i:05d}" for i in range(30_000 if longer else 3000)]
    replacement = ws.landing / f".{big.name}.tmp"
    replacement.write_text("\n".join(new) + "\n")
    os.rename(replacement, big)
    code, log = ws.run(timeout=args.timeout)
    expected = (arrivals.expected - old) | set(new) | published_old
    # Old records not read before the kill are gone with the old content.
    result = tally(expected | old, ws.output(), allowed_missing=old - published_old)
    return Outcome(
        fault="a file replaced while the job was down, after a cut in its middle"
        + (", by a longer one (default settings)" if longer else ""),
        engine="local",
        delivery="exactly_once",
        expected="never resumed at the old offset; the new content read whole"
        + ("" if longer else " (reread)"),
        outcome=(
            f"killed after {len(published_old)} of its {len(old)} lines were published; "
            f"next run exit {code}"
        ),
        lost=result.lost,
        duplicated=result.duplicated,
        corrupt=result.corrupt,
        ok=code == 0 and result.exactly_once(),
        message=last_error(log) if code else "",
        details={"examples": result.examples},
    )


def output_inside_input(work: Path, args: argparse.Namespace) -> Outcome:
    """``[sink] file`` inside the watched directory: refused at start (exit 2), nothing
    written; with a ``pattern`` that leaves the output out, every record once."""
    rng = random.Random(args.seed + 64)
    ws = Workspace(work / "output-inside-input", output_dir=None)
    arrivals = Arrivals(ws.landing, rng)
    for _ in range(3):
        arrivals.place(300)
    text = (ws.root / "pipeline.toml").read_text()
    inside = text.replace(f'file = "{ws.out}/', f'file = "{ws.landing}/out-', 1)
    (ws.root / "pipeline.toml").write_text(inside)
    code, log = ws.run(timeout=args.timeout)
    written = sorted(p.name for p in ws.landing.iterdir() if p.name.startswith(("out-", ".out-")))
    refused = code == 2 and not written
    message = next((ln.strip() for ln in log.splitlines() if "watched directory" in ln), "")
    (ws.root / "pipeline.toml").write_text(
        inside.replace("[scan]\n", "[scan]\npattern = 'in-.*'\n", 1)
    )
    code2, _ = ws.run(timeout=args.timeout)
    got = Workspace.read_output(ws.landing, prefix="out-")
    result = tally(arrivals.expected, got)
    return Outcome(
        fault="the sink writes inside the watched directory",
        engine="local",
        delivery="exactly_once",
        expected="refused at start (exit 2); with a pattern excluding it, every record once",
        outcome=(
            f"exit {code}, nothing written: {'yes' if not written else 'NO'}; "
            f"with pattern: exit {code2}"
        ),
        lost=result.lost,
        duplicated=result.duplicated,
        corrupt=result.corrupt,
        ok=refused and code2 == 0 and result.exactly_once(),
        message=message,
    )


def second_job_same_output(work: Path, args: argparse.Namespace) -> Outcome:
    """A second job (its own landing directory and checkpoints) pointed at the output directory
    of a running first job: refused at start (exit 2); the first finishes; pointed at its own
    output directory, the second moves its records too."""
    rng = random.Random(args.seed + 65)
    root = work / "second-job-same-output"
    shared_out = root / "shared-out"
    first = Workspace(root / "first", records_per_s=3000, output_dir=shared_out)
    second = Workspace(root / "second", output_dir=shared_out)
    first_in, second_in = Arrivals(first.landing, rng), Arrivals(second.landing, rng)
    for _ in range(6):
        first_in.place(1000)
        second_in.place(1000)
    running = first.start(available_now=True)
    wait_for(progressed(first, running), args.timeout, "a cut of the first job")
    code, log = second.run(timeout=args.timeout)
    refused = code == 2 and "is written by another job" in log
    first_code = running.wait(timeout=args.timeout)
    second.out = root / "second-out"
    second.write_config()
    own_code, _ = second.run(timeout=args.timeout)
    got = Workspace.read_output(shared_out) + Workspace.read_output(second.out)
    result = tally(first_in.expected | second_in.expected, got)
    return Outcome(
        fault="a second job writes into the output directory of a running job",
        engine="local",
        delivery="exactly_once",
        expected="the second is refused at start (exit 2); nothing lost or doubled",
        outcome=(
            f"second exit {code} (refused: {'yes' if refused else 'NO'}); first exit "
            f"{first_code}; second with its own output exit {own_code}"
        ),
        lost=result.lost,
        duplicated=result.duplicated,
        corrupt=result.corrupt,
        ok=refused and first_code == 0 and own_code == 0 and result.exactly_once(),
        message=last_error(log) if code else "",
        details={"examples": result.examples},
    )


def paused_input(work: Path, args: argparse.Namespace) -> Outcome:
    """Records land, then nothing: a running job publishes them once their file is idle for
    ``close_idle_after``, without a stop (they waited for the stop before); a kill -9 after
    that, more records and a restart publish every record once."""
    rng = random.Random(args.seed + 71)
    ws = Workspace(
        work / "paused", records_per_s=0, bytes_per_file=50_000_000, close_idle_after="2s"
    )
    arrivals = Arrivals(ws.landing, rng)
    arrivals.place(1000)
    proc = ws.start(paced=False)
    published_while_running = False
    try:
        wait_for(
            lambda: set(ws.output()) == arrivals.expected or proc.poll() is not None,
            args.timeout,
            "the idle file published while the job runs",
        )
        published_while_running = proc.poll() is None and set(ws.output()) == arrivals.expected
    finally:
        kill(proc)
    arrivals.place(300)
    code, log = ws.run(timeout=args.timeout)
    result = tally(arrivals.expected, ws.output())
    return Outcome(
        fault="the input pauses (records land, then nothing), then kill -9 and a restart",
        engine="local",
        delivery="exactly_once",
        expected="published while running once the file is idle (close_idle_after); once each",
        outcome=(
            f"published while running: {published_while_running}; after the kill, next run "
            f"exit {code}"
        ),
        lost=result.lost,
        duplicated=result.duplicated,
        corrupt=result.corrupt,
        ok=code == 0 and published_while_running and result.exactly_once(),
        message=last_error(log) if code else "",
        details={"examples": result.examples},
    )


class _Logs:
    """Logs landing every way users land them: appended to, rotated by copytruncate and by
    rename (to a new numbered name each time), and a cumulative export written anew and
    moved over its name. ``expected`` holds every line landed, each unique."""

    def __init__(self, landing: Path, rng: random.Random) -> None:
        self.landing, self.rng = landing, rng
        self.expected: set[str] = set()
        self.cumulative: list[str] = []
        self._n = 0
        self._rotations = 0

    def _lines(self, name: str, count: int) -> list[str]:
        out = [f"{name}:{self._n + i:06d}" for i in range(count)]
        self._n += count
        self.expected.update(out)
        return out

    def land(self) -> None:
        d, rng = self.landing, self.rng
        with open(d / "app.log", "a") as f:
            f.write("".join(f"{line}\n" for line in self._lines("app.log", rng.randint(50, 400))))
        if rng.random() < 0.3:
            self._rotations += 1
            shutil.copyfile(d / "app.log", d / f"app.log.{self._rotations}")
            os.truncate(d / "app.log", 0)
        if rng.random() < 0.3 and (d / "svc.log").exists():
            self._rotations += 1
            os.replace(d / "svc.log", d / f"svc.log.{self._rotations}")
        with open(d / "svc.log", "a") as f:
            f.write("".join(f"{line}\n" for line in self._lines("svc.log", rng.randint(50, 400))))
        self.cumulative += self._lines("cumulative.csv", rng.randint(20, 200))
        (d / ".cumulative.tmp").write_text("".join(f"{line}\n" for line in self.cumulative))
        os.replace(d / ".cumulative.tmp", d / "cumulative.csv")


def landings_under_kills(work: Path, args: argparse.Namespace) -> Outcome:
    """Logs appended to, rotated by copytruncate and by rename, and a cumulative export
    written anew, while the job runs and is killed (kill -9) at random moments, and while it
    is down; then a run to the end. With the default settings, each line once."""
    rng = random.Random(args.seed + 81)
    ws = Workspace(work / "landings", records_per_s=3000)
    logs = _Logs(ws.landing, rng)
    logs.land()
    kills = 0
    for _ in range(3):
        proc = ws.start()
        for _ in range(rng.randint(2, 5)):
            logs.land()
            time.sleep(rng.uniform(0.05, 0.5))
        kill(proc)
        kills += 1
        logs.land()  # while it is down
    code, log = ws.run(timeout=args.timeout)
    result = tally(logs.expected, ws.output())
    return Outcome(
        fault="logs appended to, rotated (copytruncate, rename) and a cumulative export "
        "written anew, while the job runs, is killed and is down",
        engine="local",
        delivery="exactly_once",
        expected="each line once (default settings: the content read decides)",
        outcome=f"{kills} kill -9, {len(logs.expected)} lines landed; next run exit {code}",
        lost=result.lost,
        duplicated=result.duplicated,
        corrupt=result.corrupt,
        ok=code == 0 and result.exactly_once(),
        message=last_error(log) if code else "",
        details={"examples": result.examples},
    )


def operations(work: Path, args: argparse.Namespace) -> list[Outcome]:
    """Every operation scenario, one row each (two for the growing file)."""
    rows: list[Outcome] = []
    for scenario in (
        delivery_switch,
        second_api_runner,
        replaced_while_down,
        output_inside_input,
        second_job_same_output,
    ):
        rows.append(scenario(work, args))
    rows.append(replaced_while_down(work, args, longer=True))
    rows.append(paused_input(work, args))
    rows.append(landings_under_kills(work, args))
    rows.extend(growing_file(work, args))
    return rows
