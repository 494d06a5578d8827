"""Random SIGKILLs while gzip'd CSV lands into Parquet partitioned by day (``--only curated``):
every row once in the published files, with its declared types, and every bad row once in the
rejects."""

from __future__ import annotations

import argparse
import gzip
import os
import random
import re
import threading
import time
from collections import Counter
from pathlib import Path

from bench.campaign.arrivals import Feeder
from bench.campaign.outcome import Outcome, tally
from bench.campaign.processes import kill, last_error, wait_for
from bench.campaign.workspace import Workspace, progressed

__all__ = ["curated_campaign"]

CONFIG = """\
engine = "local"
[region]
period = "250ms"
checkpoint_dir = "{ck}"
max_consecutive_reset_attempts = 3
[scan]
directory = "{landing}"
sleep_time = "100ms"
[source]
format = "csv"
[source.schema]
id = "int64"
day = "date"
amount = "decimal(12,2)"
note = "string"
[transform]
function = "curated_pace:pace"
vectorized = true
[sink]
file = "{out}/part-%FILENUM.parquet"
format = "parquet"
compression = "zstd"
tuples_per_file = 700
rejects_file = "_rejects/rejects-%FILENUM.jsonl"
partition_by = ["day"]
[sink.schema]
id = "int64"
day = "date"
amount = "decimal(12,2)"
note = "string"
"""
#: Paces the pipeline a batch at a time (a vectorized function: rows stay columns), so that
#: the kills land mid-run.
PACE = """\
import os, time
RATE = float(os.environ.get("CAMPAIGN_RECORDS_PER_S", "0"))
def pace(batch):
    if RATE > 0:
        time.sleep(batch.num_rows / RATE)
    return batch
"""


class CsvArrivals:
    """gzip'd CSV files placed as landing directories see them (under a hidden name, renamed
    into place, some sharing an mtime, some late), each row with a unique id; about one row in
    50 does not fit its schema (a rejected row)."""

    def __init__(self, directory: Path, rng: random.Random) -> None:
        self.directory = directory
        self.rng = rng
        self.expected: set[str] = set()
        self.bad: set[str] = set()
        self.files: list[str] = []
        self.late = 0
        self._next = 0
        self._newest = time.time_ns()
        self._lock = threading.Lock()

    def place(self, lines: int, *, group: int = 1, late: bool = False) -> None:
        with self._lock:
            if late:
                mtime = self._newest - int(self.rng.uniform(0.5, 5.0) * 1e9)
                self.late += group
            else:
                mtime = self._newest = max(time.time_ns(), self._newest)
            for _ in range(group):
                name = f"in-{len(self.files):05d}.csv.gz"
                rows = ["id,day,amount,note"]
                for _ in range(lines):
                    n = self._next
                    self._next += 1
                    if self.rng.random() < 0.02:
                        rows.append(f"{n},2026-11-{1 + n % 5:02d},not a number,bad {n}")
                        self.bad.add(f"bad {n}")
                    else:
                        rows.append(f'{n},2026-11-{1 + n % 5:02d},{n % 997}.{n % 100:02d},"n, {n}"')
                        self.expected.add(str(n))
                hidden = self.directory / f".{name}.tmp"
                hidden.write_bytes(gzip.compress(("\n".join(rows) + "\n").encode()))
                os.utime(hidden, ns=(mtime, mtime))
                os.rename(hidden, self.directory / name)
                self.files.append(name)


def curated_campaign(work: Path, args: argparse.Namespace) -> Outcome:
    """``args.kills`` SIGKILLs while gzip'd CSV files arrive, then a final run to completion;
    the published Parquet files are read as a dataset (hidden files skipped, as every reader
    does) and must hold each good row once, typed as declared."""
    import pyarrow as pa
    import pyarrow.dataset as ds

    rng = random.Random(args.seed + 7)
    ws = Workspace(work / "curated", records_per_s=args.records_per_s, period="250ms")
    (ws.root / "curated_pace.py").write_text(PACE)
    config = CONFIG.format(ck=ws.checkpoints, landing=ws.landing, out=ws.out)
    (ws.root / "pipeline.toml").write_text(config)
    arrivals = CsvArrivals(ws.landing, rng)
    for _ in range(args.backlog):
        arrivals.place(args.lines, group=rng.randint(1, 3))
    feeder = Feeder(arrivals, lines=args.lines, interval=args.arrival_interval)  # type: ignore[arg-type]
    feeder.start()
    where: list[str] = []
    try:
        for _ in range(args.kills):
            proc = ws.start()
            if rng.random() < 0.25:
                time.sleep(rng.uniform(0.0, 0.8))
                where.append("start-up")
            else:
                wait_for(progressed(ws, proc), args.timeout, "a cut of this run")
                if proc.poll() is not None:
                    raise RuntimeError(f"run {ws.runs} ended by itself (see {ws.log})")
                time.sleep(rng.uniform(0.0, 0.4))
                where.append("running")
            kill(proc)
    finally:
        feeder.stop_event.set()
        feeder.join()
    code, text = ws.run(timeout=args.timeout)
    got: Counter[str] = Counter()
    types_ok = True
    if ws.out.exists():
        table = ds.dataset(ws.out, format="parquet", partitioning="hive").to_table()
        types_ok = table.schema.field("id").type == pa.int64() and table.schema.field(
            "amount"
        ).type == pa.decimal128(12, 2)
        got.update(str(i) for i in table["id"].to_pylist())
    rejected: Counter[str] = Counter()
    for path in (ws.out / "_rejects").glob("rejects-*") if ws.out.exists() else []:
        for line in path.read_text().splitlines():
            rejected.update(f"bad {n}" for n in re.findall(r"bad (\d+)", line)[:1])
    result = tally(arrivals.expected, got)
    rejects_ok = set(rejected) == arrivals.bad and all(n == 1 for n in rejected.values())
    outcome = (
        f"{args.kills} kills, final run exit {code}, {len(arrivals.bad)} bad rows "
        f"{'rejected once each' if rejects_ok else 'NOT rejected once each'}"
        if code == 0
        else f"final run FAILED (exit {code}): {last_error(text)}"
    )
    return Outcome(
        fault=f"curated: {args.kills} x SIGKILL while gzip'd CSV lands into partitioned Parquet",
        engine="local",
        delivery="exactly_once",
        expected="no loss, no duplicate, types kept, bad rows rejected once",
        outcome=outcome,
        lost=result.lost,
        duplicated=result.duplicated,
        corrupt=result.corrupt,
        ok=code == 0 and result.exactly_once() and types_ok and rejects_ok,
        details={
            "rows": result.expected,
            "bad_rows": len(arrivals.bad),
            "files": len(arrivals.files),
            "late_files": arrivals.late,
            "kill_points": where,
            "runs": ws.runs,
            "examples": result.examples,
        },
    )
