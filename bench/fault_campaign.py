"""The fault campaign: crash and break the real ``hdfs-region run`` command, count every record.

Each scenario runs ``python -m operators.app run pipeline.toml`` in subprocesses (the command a
user runs), injects one kind of fault, runs the command again until the input is done, and
compares the published output with the input record by record (every input line is unique):

* ``lost``: input records missing from the output; ``duplicated``: extra copies of a record;
  ``corrupt``: output lines that are no input record (a torn or merged line).
* SIGKILLs at random points (start-up, recovery, mid-batch, mid-cut) while files keep arriving,
  several with one mtime and some late (older mtime, within the scan's late window): in-process
  engine for both deliveries, and the Spark engine (``--spark-kills``).
* One SIGKILL of the Spark engine where files span batches (``time_per_file``): after a task
  appended to the file an earlier batch left open, before the commit's entry; the restart comes
  after ``time_per_file``.
* The newest checkpoint damaged; the WebHDFS server killed mid-write and restarted; undecodable
  bytes (fail / replace / skip); a file deleted between scan and read; the output directory not
  writable; a full disk.
* Everyday operations (``bench/campaign/operations.py``): the delivery switched between runs, a
  second Python API runner, a file growing while read, a file replaced while the job is down,
  the output pointed inside the landing directory.

Prints a table (fault -> outcome -> lost / duplicated) and writes ``bench/results/campaign.json``.
The scenarios and their shared setup live in the ``bench/campaign/`` package; this script is
the entry point the README documents.

    python bench/fault_campaign.py                        # 10 local kills per delivery, 2 Spark
    python bench/fault_campaign.py --kills 3 --spark-kills 0 --only kills,decode
"""

from __future__ import annotations

import sys
from pathlib import Path

# Run as ``python bench/fault_campaign.py``: the repository root is not on sys.path yet.
if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.campaign.cli import main

__all__ = ["main"]

if __name__ == "__main__":
    sys.exit(main())
