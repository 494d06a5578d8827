"""A runner whose lock heartbeat dies, a second runner waiting for the lock, and SIGKILLs
(``--only heartbeat``): the first runner stops by itself before its lock can lapse, the second
takes over, is killed, and the runs that follow finish the job. Every record once."""

from __future__ import annotations

import argparse
import random
import subprocess
import sys
import time
from pathlib import Path

from bench.campaign.arrivals import Arrivals, Feeder
from bench.campaign.outcome import Outcome, tally
from bench.campaign.processes import kill, last_error, track, wait_for
from bench.campaign.workspace import Workspace, progressed

__all__ = ["BROKEN_HEARTBEAT", "heartbeat_dies"]

#: ``hdfs-region run`` with no lease file on its lock (as on a remote filesystem) and every lock
#: write after the first failing with ValueError (as WebHDFS maps IllegalArgumentException, the
#: failure seen on a NameNode failover).
BROKEN_HEARTBEAT = """\
import sys

from operators.app import cli, engine_local, engine_spark


class LockWritesFail:
    def __init__(self, fs):
        self._fs, self.writes = fs, 0

    def __getattr__(self, name):
        return getattr(self._fs, name)

    def create(self, path, *args, **kw):
        if "/.lock-" in path:
            self.writes += 1
            if self.writes > 1:
                raise ValueError(path + ": CREATE: java.net.UnknownHostException: minidfs-ns")
        return self._fs.create(path, *args, **kw)


real = engine_local.CheckpointLock
for engine in (engine_local, engine_spark):
    engine.CheckpointLock = lambda fs, *a, **kw: real(LockWritesFail(fs), *a, lease=False, **kw)
sys.exit(cli.main(sys.argv[1:]))
"""


def heartbeat_dies(work: Path, args: argparse.Namespace) -> Outcome:
    """Runner A's heartbeat fails with ValueError; runner B retries until it holds the lock
    and is SIGKILLed mid-run; a final run ends the input."""
    rng = random.Random(args.seed + 70)
    ws = Workspace(work / "heartbeat", records_per_s=args.records_per_s, lock_ttl="3s")
    arrivals = Arrivals(ws.landing, rng)
    for _ in range(max(4, args.backlog // 2)):
        arrivals.place(args.lines, group=rng.randint(1, 3))
    script = ws.root / "broken_heartbeat.py"
    script.write_text(BROKEN_HEARTBEAT, encoding="utf-8")
    feeder = Feeder(arrivals, lines=args.lines, interval=args.arrival_interval)
    feeder.start()
    a_text = ""
    try:
        # 1. Runner A: its lock is never renewed; it must stop by itself (exit 1).
        a_log = ws.root / "runner-a.log"
        with open(a_log, "wb") as log:
            command = [sys.executable, str(script), *ws.command(available_now=False)[3:]]
            runner_a = subprocess.Popen(
                command,
                cwd=ws.root,
                env=ws._env(),
                stdout=log,
                stderr=log,
                start_new_session=True,
            )
        track(runner_a)
        ws.runs += 1
        wait_for(progressed(ws, runner_a), args.timeout, "a cut of runner A")
        # 2. A stops by itself once its lock may no longer be safe (exit 1, naming why).
        try:
            a_code: int | None = runner_a.wait(timeout=args.timeout)
        except subprocess.TimeoutExpired:
            kill(runner_a)
            a_code = None
        # 3. Runner B: refused until A's lock expires (lock_ttl), then takes over; killed
        #    mid-run.
        deadline = time.monotonic() + args.timeout
        while True:
            before = ws.progress()
            runner_b = ws.start()
            wait_for(
                lambda: runner_b.poll() is not None or ws.progress() > before,  # noqa: B023
                args.timeout,
                "runner B to take the lock or be refused",
            )
            if runner_b.poll() is None:
                break
            if time.monotonic() > deadline:
                raise RuntimeError("runner B never got the lock")
            time.sleep(0.5)
        time.sleep(rng.uniform(0.0, 0.4))
        kill(runner_b)
        a_text = a_log.read_text(errors="replace")
    finally:
        feeder.stop_event.set()
        feeder.join()
    code, text = ws.run(timeout=args.timeout)
    result = tally(arrivals.expected, ws.output())
    a_error = last_error(a_text)
    stopped = a_code == 1 and "ValueError" in a_text and "lock" in a_error
    return Outcome(
        fault="lock heartbeat dies (ValueError, no lease), a second runner, SIGKILL",
        engine="local",
        delivery="exactly_once",
        expected="runner A stops by itself naming the failure, no loss, no duplicate",
        outcome=(
            f"runner A exit {a_code}, runner B killed, final run exit {code}"
            if code == 0
            else f"final run FAILED (exit {code}): {last_error(text)}"
        ),
        lost=result.lost,
        duplicated=result.duplicated,
        corrupt=result.corrupt,
        ok=code == 0 and stopped and result.exactly_once(),
        message=a_error,
        details={"records": result.expected, "runs": ws.runs, "examples": result.examples},
    )
