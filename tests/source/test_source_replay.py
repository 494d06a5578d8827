"""Property test: whatever the cut and crash schedule, replaying the file source alone from the
last cut yields every record of its file exactly once. (scan -> source -> sink with files
arriving is tested with the replay toolkit in test_pipeline_replay.py.)"""

from __future__ import annotations

import json
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from operators.fs import LocalFileSystem
from operators.source import HDFS2FileSource, SourceSettings
from tests.landing import Landing


@contextmanager
def fresh_landing() -> Iterator[Landing]:
    with tempfile.TemporaryDirectory() as tmp:
        fs = LocalFileSystem()
        land = Landing(fs, tmp, lambda p: p)
        fs.mkdirs(land.dir)
        yield land


class Replay:
    """Runs an operator under a schedule: records after the last cut are lost at a crash, and a
    new operator is built from the last cut's state (through JSON, as after a restart)."""

    def __init__(self, build: Any) -> None:
        self.build = build
        self.committed: list[Any] = []
        self.pending: list[Any] = []
        self.state: dict[str, Any] | None = None
        self.cuts = 0
        self.op = self._restart()

    def _restart(self) -> Any:
        op = self.build()
        if self.state is None:
            op.reset_to_initial_state()
        else:
            op.reset(json.loads(json.dumps(self.state)))
        return op

    def run(self, max_records: int, batches: int) -> bool:
        for _ in range(batches):
            batch = self.op.next_batch(max_records)
            if batch is None:
                return False
            assert len(batch.records) <= max_records
            self.pending.extend(batch.records)
        return True

    def cut(self) -> None:
        self.cuts += 1
        self.op.drain()
        self.state = self.op.checkpoint(self.cuts)
        self.committed += self.pending
        self.pending = []

    def crash(self) -> None:
        self.pending = []
        self.op = self._restart()


line_text = st.text(st.characters(blacklist_characters="\r\n", max_codepoint=0x2FF), max_size=6)


@given(
    lines=st.lists(st.tuples(line_text, st.sampled_from(["\n", "\r\n"])), max_size=12),
    unterminated=line_text,
    binary=st.booleans(),
    block_size=st.integers(1, 5),
    read_chunk=st.integers(1, 9),
    schedule=st.lists(st.one_of(st.integers(1, 4), st.sampled_from(["cut", "crash"])), max_size=30),
)
def test_file_source_replays_every_record_exactly_once(
    lines: list[tuple[str, str]],
    unterminated: str,
    binary: bool,
    block_size: int,
    read_chunk: int,
    schedule: list[int | str],
) -> None:
    data = ("".join(text + end for text, end in lines) + unterminated).encode()
    if binary:
        want: list[Any] = [data[i : i + block_size] for i in range(0, len(data), block_size)]
    else:
        want = [text for text, _ in lines] + ([unterminated] if unterminated else [])
    with fresh_landing() as land:
        path = land.put("f", data)
        settings = SourceSettings(
            file=path,
            format="binary" if binary else "line",
            block_size=block_size,
            read_chunk=read_chunk,
        )
        replay = Replay(lambda: HDFS2FileSource(settings, land.fs))
        for item in schedule:
            if item == "cut":
                replay.cut()
            elif item == "crash":
                replay.crash()
            else:
                replay.run(int(item), 1)
        while replay.run(3, 1):
            pass
        replay.cut()
        assert replay.op.exhausted()
        assert replay.state is not None and replay.state["offset"] == len(data)
    assert replay.committed == want
