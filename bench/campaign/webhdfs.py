"""The WebHDFS server killed mid-write and restarted (``--only webhdfs``)."""

from __future__ import annotations

import argparse
import random
import subprocess
import time
from pathlib import Path

from bench.campaign.arrivals import Arrivals
from bench.campaign.outcome import Outcome, tally
from bench.campaign.processes import kill, last_error, wait_for
from bench.campaign.workspace import Workspace

__all__ = ["webhdfs_server_killed"]


def webhdfs_server_killed(work: Path, args: argparse.Namespace) -> Outcome:
    """SIGKILL the WebHDFS server while the pipeline writes through it; restart it on the same
    root and port; the pipeline (or its next run) must recover with nothing lost."""
    # Imported here: the testing toolkit needs the test extra (hypothesis), and only this
    # scenario needs the stand-in server.
    from operators.testing.webhdfs_server import start_process

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
