"""How this directory was made, by release 0.1.0: three sinks crashed after cut 1.

Kept as a record only. Do not run it with a later release: the point of the directory is state
that the previous release wrote, restored by the current one (tests/sink/test_state_0_1_0.py).

Each sink writes, cut 1 is stored but its completion does not run (a crash between the
checkpoint and the publication), the sink writes on past the cut, and the process dies. The
checkpoint is written by the release's own CheckpointStore; the sinks' paths are renamed to
``ROOT`` before it is stored, so that a test can move the files anywhere.

    cd <checkout of 0.1.0> && python tests/data/state-0.1.0/make.py tests/data/state-0.1.0
"""

from __future__ import annotations

import json
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

from operators.fs import LocalFileSystem
from region.checkpoint import CheckpointStore
from tests.landing import SinkEnv, SinkRun

ROOT = "/hdfs-region-state-0.1.0"
PIPELINE = "state-0.1.0"
SCHEMA = {"id": "int64", "name": "string"}


def sinks(root: str) -> dict[str, dict[str, Any]]:
    """The settings of each sink (the test builds the same with its own root)."""
    return {
        # state version 1: a current file and a pending one
        "lines": {"file": f"{root}/lines/part-%FILENUM.txt", "tuples_per_file": 3},
        # version 2: other open files (one file per name)
        "named": {"file_attribute_name": "name", "directory": f"{root}/named"},
        # version 3: an open file with a form (records with columns)
        "jsonl": {
            "file": f"{root}/jsonl/part-%FILENUM.jsonl",
            "format": "jsonl",
            "schema": SCHEMA,
            "tuples_per_file": 3,
        },
    }


#: Records before cut 1, and records after it (lost with the crash, replayed by a source).
BEFORE: dict[str, list[Any]] = {
    "lines": [f"r{i}" for i in range(5)],
    "named": [("a.txt", "1"), ("b.txt", "2"), ("a.txt", "3")],
    "jsonl": [{"id": i, "name": f"n{i}"} for i in range(5)],
}
AFTER: dict[str, list[Any]] = {
    "lines": ["r5", "r6"],
    "named": [("b.txt", "4"), ("c.txt", "5")],
    "jsonl": [{"id": i, "name": f"n{i}"} for i in (5, 6)],
}


def main(target: Path) -> None:
    work = Path(tempfile.mkdtemp())
    fs = LocalFileSystem()
    states = {}
    for name, settings in sinks(str(work)).items():
        run = SinkRun(SinkEnv(fs, str(work)), settings, name=name)
        run.write(BEFORE[name])
        states[name] = json.loads(json.dumps(run.cut(complete=False)).replace(str(work), ROOT))
        run.write(AFTER[name])
        run.sink.drain()  # the bytes after the cut reach the disk; then the process dies
    store = CheckpointStore(fs, str(work / "checkpoints"), pipeline_id=PIPELINE)
    store.write(1, states, meta={"trigger": "periodic"})
    for child in work.iterdir():
        shutil.copytree(child, target / child.name, dirs_exist_ok=True)
    shutil.rmtree(work)


if __name__ == "__main__":
    main(Path(sys.argv[1]))
