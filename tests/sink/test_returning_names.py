"""File names from records that return (``A, B, A``) never lose or duplicate a record, and never
overwrite a file: property tests over the sink alone (every delivery and publish mode, cuts,
cuts that were never stored or never completed, in-process resets and crashes, in any order) and
over the whole pipeline with the replay toolkit (crashes anywhere, in the middle of writes and
inside every phase of a cut)."""

from __future__ import annotations

import posixpath
import re
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from operators.fs import LocalFileSystem
from operators.testing import PipelineReplay, Schedule
from tests.landing import SinkEnv, SinkRun

# Names that return, and names that look like the numbered names a returning one gets.
NAMES = ["o.csv", "b", "o-1.csv", "d/o.csv", "b-1"]

_OPS = st.one_of(
    st.tuples(st.just("write"), st.lists(st.sampled_from(NAMES), min_size=1, max_size=5)),
    st.tuples(st.just("cut"), st.sampled_from(["completed", "not stored", "not completed"])),
    st.tuples(st.just("reset"), st.none()),
    st.tuples(st.just("crash"), st.none()),
)


def _matches(asked: str, path: str) -> bool:
    if path == asked:
        return True
    head, base = posixpath.split(asked)
    stem, ext = posixpath.splitext(base)
    pattern = re.escape(posixpath.join(head, stem)) + r"-[0-9]+" + re.escape(ext)
    return re.fullmatch(pattern, path) is not None


def _published(out: Path) -> dict[str, bytes]:
    """What a plain reader sees below ``out`` (hidden names and the sink's folder left out)."""
    if not out.exists():
        return {}
    return {
        str(p.relative_to(out)): p.read_bytes()
        for p in out.rglob("*")
        if p.is_file() and not any(part.startswith((".", "_")) for part in p.relative_to(out).parts)
    }


class _Source:
    """The records the sink was given since the last stored cut: what a replaying source
    writes again after a reset or a restart."""

    def __init__(self) -> None:
        self.count = 0
        self.asked: dict[str, str] = {}
        self.since: list[tuple[str, str]] = []

    def take(self, names: list[str]) -> list[tuple[str, str]]:
        records = []
        for name in names:
            value = f"r{self.count}"
            self.count += 1
            self.asked[value] = name
            records.append((name, value))
        self.since += records
        return records


@pytest.mark.parametrize("publish", ["atomic", "visible"])
@pytest.mark.parametrize("delivery", ["exactly_once", "at_least_once"])
@settings(max_examples=40)
@given(ops=st.lists(_OPS, max_size=14), max_open_files=st.sampled_from([1, 2, 32]))
def test_returning_names_lose_nothing_duplicate_nothing_overwrite_nothing(
    tmp_path_factory: pytest.TempPathFactory,
    delivery: str,
    publish: str,
    ops: list[tuple[str, Any]],
    max_open_files: int,
) -> None:
    env = SinkEnv(LocalFileSystem(), str(tmp_path_factory.mktemp("names")))
    out = Path(env.out)
    run = SinkRun(
        env,
        {
            "file_attribute_name": "name",
            "directory": env.out,
            "delivery": delivery,
            "publish": publish,
            "on_bad_record": "fail",
            # 1: a change of name closes the file (IBM); 2: the pool evicts; 32: it never does.
            "max_open_files": max_open_files,
        },
    )
    source = _Source()
    final: dict[str, bytes] = {}  # published files a reader saw (atomic): never changed

    def replay() -> None:
        run.write(source.since)

    for op, arg in ops:
        if op == "write":
            run.write(source.take(arg))
        elif op == "cut":
            run.cut(store=arg != "not stored", complete=arg == "completed")
            if arg == "completed":
                source.since = []
            elif arg == "not stored":  # the cut failed: the region resets
                run.sink.reset(run.state) if run.state else run.sink.reset_to_initial_state()
                replay()
            else:  # stored, but the process died before its completion
                source.since = []
                run.crash()
        elif op == "reset":
            run.sink.reset(run.state) if run.state else run.sink.reset_to_initial_state()
            replay()
        else:
            run.crash()
            replay()
        if publish == "atomic":
            for name, data in _published(out).items():
                assert final.setdefault(name, data) == data, f"{name} was overwritten"
    run.stop()

    files = _published(out)
    for name, data in final.items():
        assert files.get(name) == data, f"{name} changed after it was published"
    got: Counter[str] = Counter()
    for name, data in files.items():
        for value in data.decode().splitlines():
            got[value] += 1
            assert _matches(source.asked[value], name), (value, name)
    wanted = Counter(f"r{i}" for i in range(source.count))
    assert not wanted - got, f"lost: {sorted(wanted - got)}"
    if delivery == "exactly_once":
        assert got == wanted, f"duplicated: {sorted(got - wanted)}"
    assert env.hidden() == [] and env.hidden(env.path("d")) == []


# -- the whole pipeline, crashes anywhere (the replay toolkit) --------------------------------

_ROUTE = ["o.csv", "b.txt", "o.csv", "o-1.csv", "sub/o.csv"]


def route(record: str) -> tuple[str, str]:
    """Line ``a.txt:3`` -> a file name that returns every few records (deterministic)."""
    name, index = record.rsplit(":", 1)
    return _ROUTE[(int(index) + len(name)) % len(_ROUTE)], record


NAMED = {"file_attribute_name": "name", "on_bad_record": "fail"}


def _replay(**sink: Any) -> PipelineReplay:
    return PipelineReplay(sink={**NAMED, **sink}, transforms=[route], source={"read_chunk": 5})


ATOMIC = _replay()
VISIBLE = _replay(publish="visible")
AT_LEAST_ONCE = _replay(delivery="at_least_once")
EVICTING = _replay(max_open_files=2)  # four names through two open files


@given(ATOMIC.schedules())
def test_pipeline_returning_names_atomic_exactly_once(schedule: Schedule) -> None:
    ATOMIC.check(schedule)


@given(VISIBLE.schedules())
def test_pipeline_returning_names_visible_exactly_once(schedule: Schedule) -> None:
    VISIBLE.check(schedule)


@given(AT_LEAST_ONCE.schedules())
def test_pipeline_returning_names_at_least_once(schedule: Schedule) -> None:
    AT_LEAST_ONCE.check(schedule)


@given(EVICTING.schedules())
def test_pipeline_returning_names_with_a_full_pool_of_open_files(schedule: Schedule) -> None:
    EVICTING.check(schedule)


def test_the_replay_names_a_record_written_to_the_wrong_file() -> None:
    # The check itself can fail: a sink that sends every record to one file breaks it.
    replay = PipelineReplay(sink={**NAMED}, transforms=[lambda r: ("same", r)])
    replay.check("write a.txt (3 lines, mtime t0); run 2 batches; cut")  # fine: one name
    wrong = PipelineReplay(sink={**NAMED}, transforms=[route], line=lambda n, i: f"{n}:{i}")
    result = wrong.check("write a.txt (5 lines, mtime t0); run 1 batch; crash; run 3 batches")
    assert any("-1" in name for name in result.published)  # a returning name was numbered
