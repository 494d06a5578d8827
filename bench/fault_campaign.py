"""The fault campaign: crash and break the real ``hdfs-region run`` command, count every record.

Each scenario runs ``python -m operators.app run pipeline.toml`` in subprocesses (the command a
user runs), injects one kind of fault, runs the command again until the input is done, and
compares the published output with the input record by record (every input line is unique):

* ``lost``: input records missing from the output; ``duplicated``: extra copies of a record;
  ``corrupt``: output lines that are no input record (a torn or merged line).
* SIGKILLs at random points (start-up, recovery, mid-batch, mid-cut) while files keep arriving,
  several with one mtime and some late (older mtime, within the scan's late window): in-process
  engine for both deliveries, and the Spark engine (``--spark-kills``).
* The newest checkpoint damaged; the WebHDFS server killed mid-write and restarted; undecodable
  bytes (fail / replace / skip); a file deleted between scan and read; the output directory not
  writable; a full disk.
* Everyday operations (``bench/campaign_operations.py``): the delivery switched between runs, a
  second Python API runner, a file growing while read, a file replaced while the job is down,
  the output pointed inside the landing directory.

Prints a table (fault -> outcome -> lost / duplicated) and writes ``bench/results/campaign.json``.

    python bench/fault_campaign.py                        # 10 local kills per delivery, 2 Spark
    python bench/fault_campaign.py --kills 3 --spark-kills 0 --only kills,decode
"""

from __future__ import annotations

import argparse
import contextlib
import errno
import fcntl
import os
import random
import shutil
import signal
import struct
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import REPO, add_common_args, print_table, scratch, write_json
from region.fs import FileSystem

PACE_MODULE = '''\
"""Slows the pipeline down to a steady record rate, so that faults land mid-run."""
import os
import time

_RATE = float(os.environ.get("CAMPAIGN_RECORDS_PER_S", "0"))
_EVERY = max(1, int(_RATE / 100)) if _RATE > 0 else 0
_count = 0


def pace(record):
    global _count
    _count += 1
    if _EVERY and _count % _EVERY == 0:
        time.sleep(0.01)
    return record
'''

SCENARIOS = (
    "kills",
    "spark",
    "checkpoint",
    "webhdfs",
    "decode",
    "vanish",
    "permission",
    "disk",
    "operations",
)
_FS_IOC_GETFLAGS = 0x80086601
_FS_IOC_SETFLAGS = 0x40086602
_FS_IMMUTABLE_FL = 0x10


# -- results ------------------------------------------------------------------------------------


@dataclass
class Outcome:
    """One row of the campaign table."""

    fault: str
    engine: str
    delivery: str
    expected: str  # what must happen: "recovery" or "clear error, then recovery"
    outcome: str  # what happened, in a few words
    lost: int = 0
    duplicated: int = 0
    corrupt: int = 0
    ok: bool = False
    message: str = ""  # the error message the user saw, when there was one
    details: dict[str, Any] = field(default_factory=dict)


@dataclass
class Tally:
    """Output compared with input, record by record."""

    expected: int
    lost: int
    duplicated: int
    corrupt: int
    examples: dict[str, list[str]]

    def exactly_once(self) -> bool:
        return self.lost == 0 and self.duplicated == 0 and self.corrupt == 0

    def at_least_once(self) -> bool:
        return self.lost == 0 and self.corrupt == 0


def tally(
    expected: set[str],
    got: Counter[str],
    *,
    allowed_missing: frozenset[str] | set[str] = frozenset(),
) -> Tally:
    lost = [r for r in expected if r not in got and r not in allowed_missing]
    duplicated = sum(n - 1 for n in got.values() if n > 1)
    corrupt = [r for r in got if r not in expected]
    return Tally(
        expected=len(expected),
        lost=len(lost),
        duplicated=duplicated,
        corrupt=sum(got[r] for r in corrupt),
        examples={
            "lost": sorted(lost)[:5],
            "duplicated": sorted(r for r, n in got.items() if n > 1)[:5],
            "corrupt": sorted(corrupt)[:5],
        },
    )


# -- a pipeline in a work directory ---------------------------------------------------------------


class Workspace:
    """Landing, output and checkpoint directories and the settings file of one pipeline.

    ``data_root`` is where the landing and output directories live on the local disk (the
    backing directory of the WebHDFS server for a ``webhdfs://`` pipeline).

    On a real cluster nothing mirrors the remote directories locally: ``remote_root`` is the
    directory on ``fs_uri`` that holds ``landing``, ``out`` and ``ck`` (default its root),
    ``remote_fs`` the filesystem through which :meth:`progress` and :meth:`output` read them,
    ``landing_uri`` a directory to scan instead of the remote landing (``file://`` + the local
    :attr:`landing`, where :class:`Arrivals` places files) and ``filesystem`` replaces or adds
    ``[filesystem]`` settings (``config_dir``, ``user``, ...).
    """

    def __init__(
        self,
        root: Path,
        *,
        engine: str = "local",
        delivery: str = "exactly_once",
        fs_uri: str | None = None,
        data_root: Path | None = None,
        remote_root: str = "",
        remote_fs: FileSystem | None = None,
        landing_uri: str | None = None,
        filesystem: dict[str, str | int] | None = None,
        records_per_s: float = 0.0,
        period: str = "250ms",
        late_window: str = "60s",
        sleep_time: str = "100ms",
        bytes_per_file: int = 60_000,
        on_decode_error: str = "fail",
        max_resets: int = 3,
        checkpoint_dir: Path | None = None,
        output_dir: Path | None = None,
    ) -> None:
        self.root = root
        root.mkdir(parents=True, exist_ok=True)
        self.engine = engine
        self.delivery = delivery
        self.fs_uri = fs_uri
        self.remote_root = remote_root.rstrip("/")
        self.remote_fs = remote_fs
        self.landing_uri = landing_uri
        self.filesystem: dict[str, str | int] = {
            "uri": fs_uri or "",
            "user": "campaign",
            "timeout": "5s",
            "retries": 2,
            "retry_backoff": "200ms",
            "lease_recovery_timeout": "10s",
            **(filesystem or {}),
        }
        self.data_root = data_root if data_root is not None else root
        self.landing = self.data_root / "landing"
        self.out = output_dir if output_dir is not None else self.data_root / "out"
        if checkpoint_dir is not None:
            self.checkpoints = checkpoint_dir
        else:
            # On the pipeline's filesystem, as the settings file recommends.
            self.checkpoints = (self.data_root if fs_uri is not None else root) / "ck"
        self.landing.mkdir(parents=True, exist_ok=True)
        self.records_per_s = records_per_s
        self.log = root / "runs.log"
        self.runs = 0
        (root / "campaign_pace.py").write_text(PACE_MODULE)
        self.settings: dict[str, Any] = {
            "period": period,
            "late_window": late_window,
            "sleep_time": sleep_time,
            "bytes_per_file": bytes_per_file,
            "on_decode_error": on_decode_error,
            "max_resets": max_resets,
        }
        self.write_config()

    def write_config(self, **changes: Any) -> None:
        self.settings.update(changes)
        s = self.settings
        remote = self.fs_uri is not None
        landing = self.remote_path("landing") if remote else str(self.landing)
        if self.landing_uri is not None:
            landing = self.landing_uri
        out = self.remote_path("out") if remote else str(self.out)
        lines = [
            f'engine = "{self.engine}"',
            "[region]",
            f'period = "{s["period"]}"',
            f'checkpoint_dir = "{self.remote_path("ck") if remote else self.checkpoints}"',
            f"max_consecutive_reset_attempts = {s['max_resets']}",
            'drain_timeout = "60s"',
            "[scan]",
            f'directory = "{landing}"',
            f'sleep_time = "{s["sleep_time"]}"',
            f'late_window = "{s["late_window"]}"',
            "[source]",
            f'on_decode_error = "{s["on_decode_error"]}"',
            "[sink]",
            f'file = "{out}/part-%FILENUM.txt"',
            f'delivery = "{self.delivery}"',
            f"bytes_per_file = {s['bytes_per_file']}",
        ]
        if self.engine == "local":
            lines += ["[transform]", 'function = "campaign_pace:pace"']
        if remote:
            lines.append("[filesystem]")
            lines += [
                f'{key} = "{value}"' if isinstance(value, str) else f"{key} = {value}"
                for key, value in self.filesystem.items()
            ]
        if self.engine == "spark":
            lines += ["[spark]", 'master = "local[2]"']
        (self.root / "pipeline.toml").write_text("\n".join(lines) + "\n")

    def command(self, *, available_now: bool) -> list[str]:
        cmd = [sys.executable, "-m", "operators.app", "run", str(self.root / "pipeline.toml")]
        cmd += ["--no-progress", "--log-level", "INFO"]
        return cmd + (["--available-now"] if available_now else [])

    def _env(self) -> dict[str, str]:
        env = dict(os.environ)
        env["CAMPAIGN_RECORDS_PER_S"] = str(self.records_per_s)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH", "")) if p)
        return env

    def start(self, *, available_now: bool = False, paced: bool = True) -> subprocess.Popen[bytes]:
        """Start a run in its own process group (a kill takes Spark's JVM down with it).
        ``paced``: at ``records_per_s`` (so that faults land mid-run), else at full speed."""
        self.runs += 1
        env = self._env()
        if not paced:
            env["CAMPAIGN_RECORDS_PER_S"] = "0"
        with open(self.log, "ab") as log:
            log.write(f"\n===== run {self.runs} {time.strftime('%H:%M:%S')}\n".encode())
            proc = subprocess.Popen(
                self.command(available_now=available_now),
                cwd=self.root,
                env=env,
                stdout=log,
                stderr=log,
                start_new_session=True,
            )
        _STARTED.append(proc)
        return proc

    def run(self, *, timeout: float = 300.0, paced: bool = False) -> tuple[int, str]:
        """Run ``--available-now`` to the end; (exit code, what it printed)."""
        start = self.log.stat().st_size if self.log.exists() else 0
        proc = self.start(available_now=True, paced=paced)
        try:
            code = proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            kill(proc)
            msg = f"{self.root.name}: a run did not end within {timeout:.0f} s"
            raise RuntimeError(msg) from None
        with open(self.log, "rb") as f:
            f.seek(start)
            return code, f.read().decode(errors="replace")

    def remote_path(self, name: str) -> str:
        """``landing``, ``out`` or ``ck`` on the pipeline's remote filesystem."""
        return f"{self.remote_root}/{name}"

    def _remote_names(self, name: str) -> list[str]:
        assert self.remote_fs is not None
        try:
            return [s.name for s in self.remote_fs.list_dir(self.remote_path(name))]
        except FileNotFoundError:
            return []

    def progress(self) -> int:
        """How many cuts (local) or committed batches (Spark) exist so far."""
        if self.engine == "spark":
            commits = self.checkpoints / "spark" / "commits"
            ids = [int(p.name) for p in commits.glob("[0-9]*")] if commits.exists() else []
            return max(ids, default=-1) + 1
        if self.remote_fs is not None:
            names = self._remote_names("ck")
        else:
            names = [p.name for p in self.checkpoints.glob("cut-*.json")]
        ids = [int(n[4:16]) for n in names if n.startswith("cut-") and n.endswith(".json")]
        return max(ids, default=0)

    def output_names(self) -> set[str]:
        """The names of the published output files (``part-*``)."""
        if self.remote_fs is not None:
            return {n for n in self._remote_names("out") if n.startswith("part-")}
        return {p.name for p in self.out.glob("part-*")} if self.out.exists() else set()

    def output(self) -> Counter[str]:
        """Every record a plain directory reader sees (hidden ``.``/``_`` names skipped)."""
        got: Counter[str] = Counter()
        if self.remote_fs is not None:
            out = self.remote_path("out")
            for name in sorted(self._remote_names("out")):
                if not name.startswith((".", "_")):
                    data = self.remote_fs.read(f"{out}/{name}")
                    got.update(data.decode("utf-8", "replace").splitlines())
            return got
        return self.read_output(self.out)

    @staticmethod
    def read_output(directory: Path, *, prefix: str = "") -> Counter[str]:
        """The records of the files under a local ``directory`` whose names start with
        ``prefix``, as a plain reader sees them (hidden ``.``/``_`` names skipped)."""
        got: Counter[str] = Counter()
        if not directory.exists():
            return got
        for path in directory.rglob(f"{prefix}*"):
            rel = path.relative_to(directory).parts
            if path.is_file() and not any(p.startswith((".", "_")) for p in rel):
                got.update(path.read_bytes().decode("utf-8", "replace").splitlines())
        return got

    def newest_cut(self) -> Path | None:
        cuts = sorted(self.checkpoints.glob("cut-*.json"))
        return cuts[-1] if cuts else None


#: Every run started, so that none outlives a scenario that failed half-way.
_STARTED: list[subprocess.Popen[bytes]] = []


def kill_all() -> None:
    """SIGKILL every run still going (after a scenario error, and at the end)."""
    while _STARTED:
        proc = _STARTED.pop()
        if proc.poll() is None:
            kill(proc)


def kill(proc: subprocess.Popen[bytes]) -> None:
    """SIGKILL the run and everything it started (no cleanup, no final cut)."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()


def wait_for(condition: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(0.02)


def last_error(text: str) -> str:
    """The command's own error line (``hdfs-region: error: ...``), else its last line."""
    lines = [ln for ln in text.splitlines() if ln.strip()]
    for line in reversed(lines):
        if line.startswith("hdfs-region: "):
            return line
    return lines[-1] if lines else ""


# -- input ----------------------------------------------------------------------------------------


class Arrivals:
    """Places input files the way landing directories see them: written under a hidden name,
    renamed into place; several files sharing one mtime; some late (an mtime older than files
    already placed, within ``late_s`` seconds)."""

    def __init__(self, directory: Path, rng: random.Random, *, late_s: float = 5.0) -> None:
        self.directory = directory
        self.rng = rng
        self.late_s = late_s
        self.expected: set[str] = set()
        self.files: list[str] = []
        self.newest_ns = time.time_ns()
        self.late = 0
        self._lock = threading.Lock()

    def place(self, lines: int, *, group: int = 1, late: bool = False) -> list[Path]:
        """``group`` files with one shared mtime (older than the newest when ``late``)."""
        with self._lock:
            if late:
                mtime = self.newest_ns - int(self.rng.uniform(0.5, self.late_s) * 1e9)
                self.late += group
            else:
                mtime = max(time.time_ns(), self.newest_ns)
                self.newest_ns = mtime
            placed = []
            for _ in range(group):
                index = len(self.files)
                name = f"in-{index:05d}.txt"
                records = [f"{name}:{i:05d}:{self.rng.getrandbits(32):08x}" for i in range(lines)]
                hidden = self.directory / f".{name}.tmp"
                hidden.write_text("\n".join(records) + "\n")
                os.utime(hidden, ns=(mtime, mtime))
                os.rename(hidden, self.directory / name)
                self.files.append(name)
                self.expected.update(records)
                placed.append(self.directory / name)
            return placed


class Feeder(threading.Thread):
    """Keeps files arriving until stopped: groups of 1-4 with one mtime, every 4th late."""

    def __init__(self, arrivals: Arrivals, *, lines: int, interval: float) -> None:
        super().__init__(name="feeder", daemon=True)
        self.arrivals = arrivals
        self.lines = lines
        self.interval = interval
        self.stop_event = threading.Event()

    def run(self) -> None:
        rng = self.arrivals.rng
        n = 0
        while not self.stop_event.wait(self.interval * rng.uniform(0.5, 1.5)):
            n += 1
            self.arrivals.place(self.lines, group=rng.randint(1, 4), late=n % 4 == 0)


# -- scenarios ------------------------------------------------------------------------------------


def _progressed(ws: Workspace, proc: subprocess.Popen[bytes]) -> Callable[[], bool]:
    before = ws.progress()
    return lambda: ws.progress() > before or proc.poll() is not None


def kill_campaign(
    work: Path, args: argparse.Namespace, *, engine: str, delivery: str, kills: int
) -> Outcome:
    """Random SIGKILLs while files keep arriving, then a final run to completion."""
    rng = random.Random(args.seed + (0 if delivery == "exactly_once" else 1))
    spark = engine == "spark"
    ws = Workspace(
        work / f"kills-{engine}-{delivery}",
        engine=engine,
        delivery=delivery,
        records_per_s=args.records_per_s,
        period="1s" if spark else "250ms",
        bytes_per_file=60_000,
    )
    arrivals = Arrivals(ws.landing, rng)
    # Spark pays seconds per batch whatever its size: fewer records keep its runs short.
    lines = max(10, args.lines // 10) if spark else args.lines
    for _ in range(args.backlog):
        arrivals.place(lines, group=rng.randint(1, 4))
    feeder = Feeder(arrivals, lines=lines, interval=args.arrival_interval * (3 if spark else 1))
    feeder.start()
    where: list[str] = []
    try:
        for _ in range(kills):
            proc = ws.start()
            if rng.random() < 0.25:
                time.sleep(rng.uniform(0.0, 3.0 if spark else 0.8))  # start-up and recovery
                where.append("start-up")
            else:
                wait_for(_progressed(ws, proc), args.timeout, "a cut of this run")
                if proc.poll() is not None:
                    raise RuntimeError(f"run {ws.runs} ended by itself (see {ws.log})")
                time.sleep(rng.uniform(0.0, 1.6 if spark else 0.4))  # mid-batch or mid-cut
                where.append("running")
            kill(proc)
    finally:
        feeder.stop_event.set()
        feeder.join()
    if arrivals.late == 0:  # a short campaign: arrive late once before the final run
        arrivals.place(lines, group=2, late=True)
    code, text = ws.run(timeout=args.timeout)
    result = tally(arrivals.expected, ws.output())
    good = result.exactly_once() if delivery == "exactly_once" else result.at_least_once()
    outcome = (
        f"{kills} kills, final run exit {code}"
        if code == 0
        else f"final run FAILED (exit {code}): {last_error(text)}"
    )
    return Outcome(
        fault=f"{kills} x SIGKILL while files arrive",
        engine=engine,
        delivery=delivery,
        expected="no loss" + (", no duplicate" if delivery == "exactly_once" else ""),
        outcome=outcome,
        lost=result.lost,
        duplicated=result.duplicated,
        corrupt=result.corrupt,
        ok=code == 0 and good,
        details={
            "records": result.expected,
            "files": len(arrivals.files),
            "late_files": arrivals.late,
            "kill_points": where,
            "runs": ws.runs,
            "examples": result.examples,
        },
    )


def corrupt_checkpoint(work: Path, args: argparse.Namespace, *, rolling: bool) -> Outcome:
    """Damage the newest cut file of a killed run: the next run must fall back to the one
    before it and say so.

    Without rolling, nothing was published under the damaged cut: the fallback truncates the
    open file and every record arrives once. With rolling, the damaged cut has usually
    published a file the previous cut still had open: that output cannot be taken back, so
    the run must stop with an error naming the file rather than duplicate records.
    """
    rng = random.Random(args.seed + (11 if rolling else 10))
    ws = Workspace(
        work / f"checkpoint-{'rolling' if rolling else 'one-file'}",
        records_per_s=args.records_per_s,
        bytes_per_file=20_000 if rolling else 10**9,
    )
    arrivals = Arrivals(ws.landing, rng)
    for _ in range(args.backlog):
        arrivals.place(args.lines, group=rng.randint(1, 3))
    proc = ws.start()
    wait_for(lambda: ws.progress() >= 3 or proc.poll() is not None, args.timeout, "3 cuts")
    time.sleep(0.3 if rolling else 0.0)  # let the newest cut complete (and publish)
    kill(proc)
    newest = ws.newest_cut()
    assert newest is not None
    data = bytearray(newest.read_bytes())
    middle = len(data) // 2
    data[middle : middle + 8] = b"\x00garbage"
    newest.write_bytes(bytes(data))
    code, text = ws.run(timeout=args.timeout)
    got = ws.output()
    result = tally(arrivals.expected, got)
    said = newest.name in text and "Skipping checkpoint" in text
    skipped = next((ln for ln in text.splitlines() if "Skipping checkpoint" in ln), "")
    message = skipped.split("WARNING", 1)[-1].strip()
    fault = "newest checkpoint corrupted" + (" (rolling output)" if rolling else "")
    if code == 0:
        return Outcome(
            fault=fault,
            engine="local",
            delivery="exactly_once",
            expected="falls back to the previous cut, says so",
            outcome=f"recovered from the previous cut (exit 0), says so: {'yes' if said else 'NO'}",
            lost=result.lost,
            duplicated=result.duplicated,
            corrupt=result.corrupt,
            ok=said and result.exactly_once(),
            message=message,
            details={"damaged": newest.name, "examples": result.examples},
        )
    # Stopped: what is published so far must hold no duplicate and no torn record; the rest
    # of the input is still in the landing directory (not delivered, not lost).
    error = last_error(text)
    published = tally(arrivals.expected, got, allowed_missing=arrivals.expected)
    return Outcome(
        fault=fault,
        engine="local",
        delivery="exactly_once",
        expected="falls back and says so; or stops naming the file",
        outcome=f"stopped (exit {code}) naming the file the newer cut published",
        lost=0,
        duplicated=published.duplicated,
        corrupt=published.corrupt,
        ok=code == 1 and said and "is missing" in error and published.exactly_once(),
        message=error,
        details={
            "damaged": newest.name,
            "undelivered": result.lost,
            "skipped_message": message,
        },
    )


def webhdfs_server_killed(work: Path, args: argparse.Namespace) -> Outcome:
    """SIGKILL the WebHDFS server while the pipeline writes through it; restart it on the same
    root and port; the pipeline (or its next run) must recover with nothing lost."""
    from tests.webhdfs_server import start_process

    rng = random.Random(args.seed + 20)
    data_root = work / "webhdfs-root"
    data_root.mkdir(parents=True)
    server = start_process(data_root, soft_limit=1.0)
    port = server.port
    ws = Workspace(
        work / "webhdfs",
        fs_uri=server.uri,
        data_root=data_root,
        records_per_s=4000,  # about 1.5 s of work: the server dies while it runs
        max_resets=5,
    )
    arrivals = Arrivals(ws.landing, rng)
    for _ in range(6):
        arrivals.place(500, group=2)
    outcome = ""
    first_code: int | None = None
    mid_run = False
    try:
        proc = ws.start(available_now=True)
        wait_for(
            lambda: any(ws.out.glob(".*inprogress")) or proc.poll() is not None,
            args.timeout,
            "the first output file",
        )
        time.sleep(rng.uniform(0.1, 0.5))
        mid_run = proc.poll() is None
        server.kill()  # mid-write: an APPEND may be cut off, its lease left in recovery
        time.sleep(1.0)
        server = start_process(data_root, port=port, soft_limit=1.0)
        try:
            first_code = proc.wait(timeout=args.timeout)
        except subprocess.TimeoutExpired:
            kill(proc)
            raise
        runs = 1
        code, text = first_code, ""
        if first_code != 0:
            with open(ws.log, "rb") as f:
                text = f.read().decode(errors="replace")
            outcome = f"first run: exit {first_code} ({last_error(text)[:120]}); "
            code, text2 = ws.run(timeout=args.timeout)
            runs += 1
            text += text2
        else:
            outcome = "the run rode out the restart; "
        outcome += f"{'next run' if runs > 1 else 'run'} exit {code}"
    finally:
        server.stop()
    result = tally(arrivals.expected, ws.output())
    return Outcome(
        fault="WebHDFS server killed mid-write, restarted",
        engine="local (webhdfs://)",
        delivery="exactly_once",
        expected="recovery, nothing lost",
        outcome=outcome,
        lost=result.lost,
        duplicated=result.duplicated,
        corrupt=result.corrupt,
        ok=code == 0 and mid_run and result.exactly_once(),
        message=last_error(text) if first_code != 0 else "",
        details={"first_exit": first_code, "killed_mid_run": mid_run, "examples": result.examples},
    )


def undecodable(work: Path, args: argparse.Namespace) -> list[Outcome]:
    """A file with a line that is not UTF-8: fail names the file and offset; replace and skip
    carry on."""
    rows = []
    for mode in ("fail", "replace", "skip"):
        rng = random.Random(args.seed + 30)
        ws = Workspace(work / f"decode-{mode}", on_decode_error=mode, max_resets=2)
        arrivals = Arrivals(ws.landing, rng)
        arrivals.place(50)
        bad_name = "in-bad.txt"
        good_before = [f"{bad_name}:{i:05d}:ok" for i in range(3)]
        good_after = [f"{bad_name}:{i:05d}:ok" for i in range(4, 8)]
        head = ("\n".join(good_before) + "\n").encode()
        bad_line = b"in-bad.txt:00003:\xff\xfe not utf-8"
        (ws.landing / bad_name).write_bytes(
            head + bad_line + b"\n" + "\n".join(good_after).encode() + b"\n"
        )
        os.utime(ws.landing / bad_name, ns=(arrivals.newest_ns, arrivals.newest_ns))
        expected = arrivals.expected | set(good_before) | set(good_after)
        code, text = ws.run(timeout=args.timeout)
        got = ws.output()
        message = last_error(text)
        if mode == "fail":
            named = bad_name in message and f"byte offset {len(head)}" in message
            published = sum(got.values())
            result = tally(expected, got, allowed_missing=expected)  # nothing must be invented
            ok = code == 1 and named and result.duplicated == 0 and result.corrupt == 0
            outcome = f"exit {code}, names file and offset: {'yes' if named else 'NO'}"
            # Then the user fixes the file and runs again: everything arrives once.
            (ws.landing / bad_name).write_bytes(
                head + b"in-bad.txt:00003:fixed\n" + "\n".join(good_after).encode() + b"\n"
            )
            os.utime(ws.landing / bad_name, ns=(arrivals.newest_ns, arrivals.newest_ns))
            code2, _ = ws.run(timeout=args.timeout)
            fixed = tally(expected | {"in-bad.txt:00003:fixed"}, ws.output())
            ok = ok and code2 == 0 and fixed.exactly_once()
            outcome += f"; fixed file, next run exit {code2}"
            rows.append(
                Outcome(
                    fault="undecodable bytes (on_decode_error=fail)",
                    engine="local",
                    delivery="exactly_once",
                    expected="clear error naming file and offset, exit 1",
                    outcome=outcome,
                    lost=fixed.lost,
                    duplicated=fixed.duplicated,
                    corrupt=fixed.corrupt,
                    ok=ok,
                    message=message,
                    details={"published_before_fix": published},
                )
            )
            continue
        replaced = "in-bad.txt:00003:\ufffd\ufffd not utf-8"
        if mode == "replace":
            result = tally(expected | {replaced}, got)
            ok = code == 0 and result.exactly_once()
            outcome = f"exit {code}, the bad line written with U+FFFD"
            message = ""
        else:
            result = tally(expected, got)
            warned = any(
                "skipped the line at byte offset" in ln and bad_name in ln
                for ln in text.splitlines()
            )
            ok = code == 0 and result.exactly_once() and warned
            outcome = (
                f"exit {code}, the bad line dropped with a warning: {'yes' if warned else 'NO'}"
            )
            message = next((ln for ln in text.splitlines() if "skipped the line" in ln), "")
            message = message.split("WARNING", 1)[-1].strip()
        rows.append(
            Outcome(
                fault=f"undecodable bytes (on_decode_error={mode})",
                engine="local",
                delivery="exactly_once",
                expected="carries on",
                outcome=outcome,
                lost=result.lost,
                duplicated=result.duplicated,
                corrupt=result.corrupt,
                ok=ok,
                message=message,
            )
        )
    return rows


def vanished(work: Path, args: argparse.Namespace) -> Outcome:
    """Delete a listed file before the source reaches it: a warning names it, nothing else is
    lost."""
    rng = random.Random(args.seed + 40)
    # Slow enough that the last file is still unread when the first cut completes.
    ws = Workspace(work / "vanish", records_per_s=4000, sleep_time="60s")
    arrivals = Arrivals(ws.landing, rng)
    for _ in range(12):
        arrivals.place(400)
    victim = ws.landing / arrivals.files[-1]
    victim_records = {r for r in arrivals.expected if r.startswith(victim.name + ":")}
    proc = ws.start(available_now=True)
    # The one listing happens at start (sleep_time 60 s); the last file is read last.
    wait_for(lambda: ws.progress() >= 1 or proc.poll() is not None, args.timeout, "a first cut")
    victim.unlink()
    code = proc.wait(timeout=args.timeout)
    text = ws.log.read_text(errors="replace")
    warning = next((ln for ln in text.splitlines() if "vanished" in ln), "")
    result = tally(arrivals.expected - victim_records, ws.output())
    named = victim.name in warning
    return Outcome(
        fault="file deleted between scan and read",
        engine="local",
        delivery="exactly_once",
        expected="warning naming the file, nothing else lost",
        outcome=f"exit {code}, warning names the file: {'yes' if named else 'NO'}",
        lost=result.lost,
        duplicated=result.duplicated,
        corrupt=result.corrupt,
        ok=code == 0 and named and result.exactly_once(),
        message=warning.split("WARNING", 1)[-1].strip(),
        details={"deleted_records": len(victim_records)},
    )


@contextlib.contextmanager
def read_only_dir(path: Path) -> Iterator[str]:
    """Make ``path`` refuse new files, also for root: the immutable attribute (FS_IOC_SETFLAGS)
    when running as root, else mode 0555. Yields how."""
    if os.geteuid() != 0:
        os.chmod(path, 0o555)
        try:
            yield "mode 0555"
        finally:
            os.chmod(path, 0o755)
        return
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        (flags,) = struct.unpack("i", fcntl.ioctl(fd, _FS_IOC_GETFLAGS, struct.pack("i", 0)))
        fcntl.ioctl(fd, _FS_IOC_SETFLAGS, struct.pack("i", flags | _FS_IMMUTABLE_FL))
        try:
            yield "immutable attribute (chattr +i), which stops root too"
        finally:
            fcntl.ioctl(fd, _FS_IOC_SETFLAGS, struct.pack("i", flags))
    finally:
        os.close(fd)


def permission_denied(work: Path, args: argparse.Namespace) -> Outcome:
    """The output directory refuses writes: exit 1 naming the path, nothing published; once
    writable again, the next run delivers everything once."""
    rng = random.Random(args.seed + 50)
    ws = Workspace(work / "permission", max_resets=2)
    arrivals = Arrivals(ws.landing, rng)
    for _ in range(4):
        arrivals.place(args.lines)
    ws.out.mkdir(parents=True, exist_ok=True)
    try:
        with read_only_dir(ws.out) as how:
            code, text = ws.run(timeout=args.timeout)
            published = sum(ws.output().values())
    except OSError as err:
        return Outcome(
            fault="output directory not writable",
            engine="local",
            delivery="exactly_once",
            expected="clear error, exit 1",
            outcome=f"not run: cannot make a directory read-only here ({err})",
            ok=True,
        )
    message = last_error(text)
    named = str(ws.out) in message
    code2, _ = ws.run(timeout=args.timeout)
    result = tally(arrivals.expected, ws.output())
    return Outcome(
        fault="output directory not writable",
        engine="local",
        delivery="exactly_once",
        expected="exit 1 naming the path, nothing published",
        outcome=(
            f"exit {code}, names the path: {'yes' if named else 'NO'}, published {published}; "
            f"writable again: exit {code2}"
        ),
        lost=result.lost,
        duplicated=result.duplicated,
        corrupt=result.corrupt,
        ok=code == 1 and named and published == 0 and code2 == 0 and result.exactly_once(),
        message=message,
        details={"method": how},
    )


@contextlib.contextmanager
def small_filesystem(path: Path, size_kb: int) -> Iterator[bool]:
    """A tmpfs of ``size_kb`` mounted at ``path`` when this process may mount (root with
    CAP_SYS_ADMIN); yields False when it may not."""
    path.mkdir(parents=True, exist_ok=True)
    try:
        subprocess.run(
            ["mount", "-t", "tmpfs", "-o", f"size={size_kb}k", "tmpfs", str(path)],
            check=True,
            capture_output=True,
            timeout=10,
        )
    except (OSError, subprocess.SubprocessError):
        yield False
        return
    try:
        yield True
    finally:
        subprocess.run(["umount", "-l", str(path)], check=False, capture_output=True)


def disk_full(work: Path, args: argparse.Namespace) -> Outcome:
    """The output filesystem fills up: a clear error (exit 1); after space is freed the next
    run recovers and delivers everything once."""
    rng = random.Random(args.seed + 60)
    small = work / "small-fs"
    with small_filesystem(small, 1024) as mounted:
        if not mounted:
            return disk_full_injected(work, args)
        ws = Workspace(
            work / "disk",
            max_resets=2,
            output_dir=small / "out",
            checkpoint_dir=small / "ck",
            bytes_per_file=10**9,
        )
        arrivals = Arrivals(ws.landing, rng)
        for _ in range(12):
            arrivals.place(2000)  # about 70 kB each: more than the space left
        ballast = small / "ballast"
        with open(ballast, "wb") as f:
            f.write(b"\0" * (1024 - 400) * 1024)
        code, text = ws.run(timeout=args.timeout)
        message = last_error(text)
        clear = "No space left on device" in message or "ENOSPC" in message
        names_path = str(small) in message
        ballast.unlink()  # space freed
        code2, _ = ws.run(timeout=args.timeout)
        result = tally(arrivals.expected, ws.output())
        return Outcome(
            fault="disk full (1 MB tmpfs)",
            engine="local",
            delivery="exactly_once",
            expected="clear error, exit 1; recovery once space is freed",
            outcome=f"exit {code}, says no space: {'yes' if clear else 'NO'}, names the path: "
            f"{'yes' if names_path else 'NO'}; space freed: exit {code2}",
            lost=result.lost,
            duplicated=result.duplicated,
            corrupt=result.corrupt,
            ok=code == 1 and clear and code2 == 0 and result.exactly_once(),
            message=message,
            details={"method": "tmpfs of 1 MB, 624 kB of it taken by a ballast file"},
        )


def disk_full_injected(work: Path, args: argparse.Namespace) -> Outcome:
    """Where nothing can be mounted: the in-process runtime over a filesystem wrapper that
    answers ENOSPC once a write budget is spent; then the budget is lifted."""
    from operators.fs.local import LocalFileSystem
    from operators.scan import HDFS2DirectoryScan, ScanSettings
    from operators.sink import HDFS2FileSink, SinkSettings
    from operators.source import HDFS2FileSource, SourceSettings
    from region.checkpoint import CheckpointStore
    from region.errors import RegionFailedError
    from region.runtime import Pipeline, PipelineRunner
    from region.settings import RegionSettings

    class Budget:
        left = 300_000

    class Writer:
        def __init__(self, inner: Any) -> None:
            self.inner = inner
            self.path = inner.path

        def write(self, data: bytes) -> None:
            if Budget.left < len(data):
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), self.path)
            Budget.left -= len(data)
            self.inner.write(data)

        def flush(self) -> None:
            self.inner.flush()

        def sync(self) -> None:
            self.inner.sync()

        def close(self) -> None:
            self.inner.close()

    class FullDisk(LocalFileSystem):
        def create(self, path: str, **kw: Any) -> Any:
            return Writer(super().create(path, **kw))

        def append(self, path: str) -> Any:
            return Writer(super().append(path))

    rng = random.Random(args.seed + 60)
    root = work / "disk-injected"
    (root / "landing").mkdir(parents=True)
    arrivals = Arrivals(root / "landing", rng)
    for _ in range(12):
        arrivals.place(2000)
    fs = FullDisk()

    def runner() -> PipelineRunner:
        scan = HDFS2DirectoryScan(ScanSettings(directory=str(root / "landing")), fs)
        source = HDFS2FileSource(SourceSettings(), fs, files=scan)
        sink = HDFS2FileSink(SinkSettings(file=str(root / "out" / "part-%FILENUM.txt")), fs)
        settings = RegionSettings(period=0.25, max_consecutive_reset_attempts=2)
        store = CheckpointStore(fs, str(root / "ck"))
        return PipelineRunner(Pipeline(source, sinks=[sink]), settings, store)

    message = ""
    try:
        runner().run(available_now=True)
        failed = False
    except RegionFailedError as exc:
        failed, message = True, str(exc)
    clear = "No space left on device" in message
    Budget.left = 1 << 40
    runner().run(available_now=True)
    ws_out = root / "out"
    got: Counter[str] = Counter()
    for p in ws_out.iterdir():
        if not p.name.startswith("."):
            got.update(p.read_text().splitlines())
    result = tally(arrivals.expected, got)
    return Outcome(
        fault="disk full (injected ENOSPC)",
        engine="local (in-process)",
        delivery="exactly_once",
        expected="clear error; recovery once space is freed",
        outcome=f"region failed: {'yes' if failed else 'NO'}, says no space: "
        f"{'yes' if clear else 'NO'}; space freed: completed",
        lost=result.lost,
        duplicated=result.duplicated,
        corrupt=result.corrupt,
        ok=failed and clear and result.exactly_once(),
        message=message,
        details={"method": "FileSystem wrapper raising ENOSPC past a write budget"},
    )


# -- main -----------------------------------------------------------------------------------------


def _operations(work: Path, args: argparse.Namespace) -> list[Outcome]:
    """The scenarios of everyday operations (bench/campaign_operations.py)."""
    from bench.campaign_operations import operations

    return operations(work, args)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kills", type=int, default=10, help="SIGKILLs per delivery, local")
    parser.add_argument("--spark-kills", type=int, default=2, help="SIGKILLs of the Spark run")
    parser.add_argument("--backlog", type=int, default=20, help="files present at the start")
    parser.add_argument("--lines", type=int, default=400, help="lines per input file")
    parser.add_argument(
        "--arrival-interval", type=float, default=0.15, help="seconds between arrivals"
    )
    parser.add_argument(
        "--records-per-s",
        type=float,
        default=20_000,
        help="pace of the local pipeline, so faults land mid-run (0: full speed)",
    )
    parser.add_argument("--seed", type=int, default=None, help="random seed (default: random)")
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds per run at most")
    parser.add_argument(
        "--only",
        default=",".join(SCENARIOS),
        help=f"scenarios (default all: {','.join(SCENARIOS)})",
    )
    parser.add_argument("--keep", action="store_true", help="keep the work directory")
    add_common_args(parser, "campaign")
    args = parser.parse_args(argv)
    if args.seed is None:
        args.seed = random.randrange(1 << 30)
    only = [s.strip() for s in args.only.split(",") if s.strip()]
    unknown = sorted(set(only) - set(SCENARIOS))
    if unknown:
        parser.error(f"--only: unknown scenario(s) {unknown} (known: {', '.join(SCENARIOS)})")

    rows: list[Outcome] = []
    started = time.perf_counter()
    with scratch(args.work, "fault-campaign-") as work:
        steps: list[tuple[str, Callable[[], Outcome | list[Outcome]]]] = []
        if "kills" in only and args.kills > 0:
            for delivery in ("exactly_once", "at_least_once"):
                steps.append(
                    (
                        "kills",
                        lambda d=delivery: kill_campaign(
                            work, args, engine="local", delivery=d, kills=args.kills
                        ),
                    )
                )
        if "spark" in only and args.spark_kills > 0:
            steps.append(
                (
                    "spark",
                    lambda: kill_campaign(
                        work, args, engine="spark", delivery="exactly_once", kills=args.spark_kills
                    ),
                )
            )
        for name, func in (
            ("checkpoint", lambda: corrupt_checkpoint(work, args, rolling=False)),
            ("checkpoint", lambda: corrupt_checkpoint(work, args, rolling=True)),
            ("webhdfs", lambda: webhdfs_server_killed(work, args)),
            ("decode", lambda: undecodable(work, args)),
            ("vanish", lambda: vanished(work, args)),
            ("permission", lambda: permission_denied(work, args)),
            ("disk", lambda: disk_full(work, args)),
            ("operations", lambda: _operations(work, args)),
        ):
            if name in only:
                steps.append((name, func))
        for name, func in steps:
            begun = time.perf_counter()
            try:
                produced = func()
            except Exception as exc:  # a scenario that could not run is a failed row, not a crash
                kill_all()
                produced = Outcome(
                    fault=name,
                    engine="-",
                    delivery="-",
                    expected="-",
                    outcome=f"scenario error: {type(exc).__name__}: {exc}",
                )
            for row in produced if isinstance(produced, list) else [produced]:
                row.details["seconds"] = round(time.perf_counter() - begun, 1)
                rows.append(row)
                print(
                    f"[{'ok' if row.ok else 'FAIL'}] {row.fault} ({row.engine}, {row.delivery}): "
                    f"{row.outcome}",
                    flush=True,
                )
        kill_all()
        if args.keep:
            kept = Path(str(work) + "-kept")
            shutil.copytree(work, kept, symlinks=True)
            print(f"work directory kept in {kept}")

    print_table(
        f"Fault campaign (seed {args.seed}, {time.perf_counter() - started:.0f} s)",
        ["fault", "engine", "delivery", "outcome", "lost", "dup", "corrupt", "ok"],
        [
            [r.fault, r.engine, r.delivery, r.outcome, r.lost, r.duplicated, r.corrupt, r.ok]
            for r in rows
        ],
    )
    messages = [(r.fault, r.message) for r in rows if r.message]
    if messages:
        print("\nWhat the user was told:")
        for fault, message in messages:
            print(f"  {fault}: {message}")
    all_ok = all(r.ok for r in rows)
    write_json(
        args.json,
        {
            "benchmark": "fault_campaign",
            "seed": args.seed,
            "kills": args.kills,
            "spark_kills": args.spark_kills,
            "seconds": round(time.perf_counter() - started, 1),
            "all_ok": all_ok,
            "total_lost": sum(r.lost for r in rows),
            "total_duplicated": sum(r.duplicated for r in rows if r.delivery != "at_least_once"),
            "rows": [asdict(r) for r in rows],
        },
    )
    return 0 if all_ok else 1


if __name__ == "__main__":
    sys.exit(main())
