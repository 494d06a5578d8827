"""State written by release 0.1.0, restored by this release (docs/upgrading.md: a release reads
the state of the release before it).

``tests/data/state-0.1.0`` holds what three sinks of 0.1.0 left behind when their process died
after cut 1 was stored and before it was published (``make.py`` there says how it was made):
the cut file of the checkpoint store (format 1) and each sink's hidden files, with bytes
written after the cut. The sinks' states are versions 1 (a current and a pending file), 2 (other
open files, one file per name) and 3 (a format with columns). Restored here, each sink goes on
as the restarted job would, and every record is published exactly once. Never regenerate that
directory: a change that cannot read it breaks the upgrade of running jobs.
"""

from __future__ import annotations

import importlib.util
import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from operators.common.errors import OperatorError
from operators.fs import LocalFileSystem
from operators.sink import HDFS2FileSink, SinkSettings
from operators.testing import ManualClock
from region.checkpoint import CheckpointStore
from region.errors import is_permanent
from region.state import Batch
from tests.landing import SinkEnv

DATA = Path(__file__).resolve().parents[1] / "data" / "state-0.1.0"
_spec = importlib.util.spec_from_file_location("state_0_1_0", DATA / "make.py")
assert _spec is not None and _spec.loader is not None
made = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(made)

#: Records the restarted job writes after those the crash lost (which the source replays).
MORE: dict[str, list[Any]] = {
    "lines": ["r7", "r8"],
    "named": [("a.txt", "6")],
    "jsonl": [{"id": i, "name": f"n{i}"} for i in (7, 8)],
}


def _restored(tmp_path: Path) -> dict[str, dict[str, Any]]:
    """The sinks' states of the newest cut, read by this release's checkpoint store from a
    copy of the directory, with the paths moved to the copy."""
    for child in DATA.iterdir():
        if child.is_dir() and child.name != "__pycache__":
            shutil.copytree(child, tmp_path / child.name)
    store = CheckpointStore(
        LocalFileSystem(), str(tmp_path / "checkpoints"), pipeline_id=made.PIPELINE
    )
    checkpoint = store.latest()
    assert checkpoint is not None and checkpoint.cut_id == 1 and not checkpoint.completed
    states: dict[str, dict[str, Any]] = json.loads(
        json.dumps(checkpoint.operators).replace(made.ROOT, str(tmp_path))
    )
    return states


def test_the_checkpoint_of_0_1_0_is_read_with_each_sink_state_version(tmp_path: Path) -> None:
    document = json.loads((DATA / "checkpoints" / "cut-000000000001.json").read_text())
    assert document["format"] == 1
    states = _restored(tmp_path)
    assert {name: state["version"] for name, state in states.items()} == {
        "lines": 1,
        "named": 2,
        "jsonl": 3,
    }


def test_sinks_restored_from_0_1_0_go_on_and_publish_every_record_once(tmp_path: Path) -> None:
    states = _restored(tmp_path)
    fs = LocalFileSystem()
    env = SinkEnv(fs, str(tmp_path))
    for name, settings in made.sinks(str(tmp_path)).items():
        sink = HDFS2FileSink(
            SinkSettings(**settings), fs, name=name, clock=ManualClock(1_000_060.0)
        )
        sink.reset(states[name])
        sink.write(Batch(made.AFTER[name]))  # what the source reads again after the cut
        sink.write(Batch(MORE[name]))
        sink.finish()
        sink.drain()
        sink.checkpoint(2)
        sink.on_cut_completed(2)
        sink.close()
    lines, named, jsonl = (str(tmp_path / d) for d in ("lines", "named", "jsonl"))
    assert env.published(lines) == {
        "part-0.txt": b"r0\nr1\nr2\n",
        "part-1.txt": b"r3\nr4\nr5\n",
        "part-2.txt": b"r6\nr7\nr8\n",
    }
    assert env.published(named) == {"a.txt": b"1\n3\n6\n", "b.txt": b"2\n4\n", "c.txt": b"5\n"}
    rows = {
        file: [json.loads(line)["id"] for line in data.decode().splitlines()]
        for file, data in env.published(jsonl).items()
    }
    assert rows == {"part-0.jsonl": [0, 1, 2], "part-1.jsonl": [3, 4, 5], "part-2.jsonl": [6, 7, 8]}
    # The files the dead process wrote after the cut are gone, none is left half written.
    assert env.hidden(lines) == env.hidden(named) == env.hidden(jsonl) == []


def test_a_sink_state_of_a_newer_release_is_refused_at_once_naming_the_version(
    tmp_path: Path,
) -> None:
    """What a downgrade meets: a state version this release does not know. No retry can read
    it, so the region does not spend its reset attempts on it (the error is permanent)."""
    state = {**_restored(tmp_path)["lines"], "version": 99}
    sink = HDFS2FileSink(
        SinkSettings(**made.sinks(str(tmp_path))["lines"]), LocalFileSystem(), name="lines"
    )
    with pytest.raises(OperatorError) as caught:
        sink.reset(state)
    assert is_permanent(caught.value)
    assert (
        "sink 'lines': checkpointed state version 99 is not one this release reads (1, 2, 3)"
        in (str(caught.value))
    )
