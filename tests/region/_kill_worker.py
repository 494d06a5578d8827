"""A real process for tests/region/test_kill.py: the in-process runtime moving numbered records
into a file, with a periodic trigger. The test SIGKILLs it at random points and restarts it.

Prints ``ready`` once records flow (after the recovery at start).
"""

from __future__ import annotations

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

from operators.fs.local import LocalFileSystem
from region.checkpoint import CheckpointStore
from region.runtime import Pipeline, PipelineRunner
from region.settings import RegionSettings
from tests.region._participants import FileSink, ListSource


def records(count: int) -> list[str]:
    return [f"{i:06d}" for i in range(count)]


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--checkpoints", required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--records", type=int, required=True)
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--pause", type=float, default=0.0, help="seconds per batch")
    parser.add_argument("--period", default="50ms")
    parser.add_argument("--available-now", action="store_true")
    args = parser.parse_args()

    announced = False

    def pace(index: int) -> None:
        nonlocal announced
        if not announced:
            announced = True
            print("ready", flush=True)
        if args.pause:
            time.sleep(args.pause)

    source = ListSource(records(args.records), finite=False, on_batch=pace)
    sink = FileSink(args.out, torn_writes=True)
    store = CheckpointStore(LocalFileSystem(), args.checkpoints, retain=3)
    settings = RegionSettings(trigger="periodic", period=args.period, retain=3)
    pipeline = Pipeline(source, sinks=[sink], batch_size=args.batch_size)
    runner = PipelineRunner(pipeline, settings, store, install_signal_handlers=True)
    stats = runner.run(available_now=args.available_now)
    print(f"done {stats.region.status} cuts={stats.region.cuts}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
