from __future__ import annotations

import json
import logging
import os
import stat
import threading
import uuid
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from operators.fs.local import LocalFileSystem
from region.checkpoint import (
    FORMAT_VERSION,
    Checkpoint,
    CheckpointStore,
    cut_file_name,
    get_or_create,
)
from region.errors import CheckpointError
from region.fs import FileSystem
from tests.conftest import FsHandle

LOGGER = "region.checkpoint"


def _dir(backend: FsHandle, name: str = "ckpt") -> str:
    return f"{backend.root.rstrip('/')}/{name}"


def _put(fs: FileSystem, path: str, data: bytes) -> None:
    writer = fs.create(path, overwrite=True)
    try:
        writer.write(data)
    finally:
        writer.close()


def _rewrite_doc(fs: FileSystem, path: str, change: Any) -> None:
    doc = json.loads(fs.read(path))
    change(doc)
    _put(fs, path, json.dumps(doc, separators=(",", ":")).encode() + b"\n")


def _wrong_checksum(doc: dict[str, Any]) -> None:
    doc["operators"]["src"]["offset"] += 1  # the content changes, the stored checksum does not


def _future_version(doc: dict[str, Any]) -> None:
    doc["format"] = FORMAT_VERSION + 1


CORRUPTIONS = {
    "truncated": lambda fs, p: _put(fs, p, fs.read(p)[: len(fs.read(p)) // 2]),
    "zero-length": lambda fs, p: _put(fs, p, b""),
    "garbage": lambda fs, p: _put(fs, p, b"\x00\x17not a checkpoint\xff" * 3),
    "wrong checksum": lambda fs, p: _rewrite_doc(fs, p, _wrong_checksum),
    "unknown format version": lambda fs, p: _rewrite_doc(fs, p, _future_version),
}


def _states(n: int) -> dict[str, dict[str, Any]]:
    return {"src": {"offset": n, "file": f"in-{n}.txt"}, "sink": {"files": [f"out-{n}"]}}


def test_write_then_latest_round_trips_the_cut(any_fs: FsHandle) -> None:
    store = CheckpointStore(any_fs.fs, _dir(any_fs), pipeline_id="orders")
    assert store.latest() is None  # the directory does not even exist yet
    assert store.next_cut_id() == 1

    info = store.write(1, _states(1), meta={"trigger": "periodic"})
    assert info.valid and info.cut_id == 1 and info.path.endswith("/cut-000000000001.json")
    store.write(2, _states(2))

    latest = CheckpointStore(any_fs.fs, _dir(any_fs), pipeline_id="orders").latest()
    assert isinstance(latest, Checkpoint)
    assert (latest.cut_id, latest.pipeline_id, latest.operators) == (2, "orders", _states(2))
    doc = json.loads(any_fs.fs.read(info.path))
    assert doc["format"] == FORMAT_VERSION and len(doc["sha256"]) == 64
    assert doc["meta"] == {"trigger": "periodic"} and doc["created"] > 0
    assert CheckpointStore(any_fs.fs, _dir(any_fs)).next_cut_id() == 3


@pytest.mark.parametrize("kind", list(CORRUPTIONS))
def test_a_damaged_newest_cut_falls_back_to_the_previous_one(
    any_fs: FsHandle, kind: str, caplog: pytest.LogCaptureFixture
) -> None:
    store = CheckpointStore(any_fs.fs, _dir(any_fs))
    for n in (1, 2, 3):
        store.write(n, _states(n))
    newest = f"{_dir(any_fs)}/{cut_file_name(3)}"
    CORRUPTIONS[kind](any_fs.fs, newest)

    reader = CheckpointStore(any_fs.fs, _dir(any_fs))
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        latest = reader.latest()
    assert latest is not None and latest.cut_id == 2 and latest.operators == _states(2)
    skipped = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert any(cut_file_name(3) in m and kind in m for m in skipped), skipped
    # The damaged cut's id is never handed out again.
    assert reader.next_cut_id() == 4
    assert [(i.cut_id, i.valid) for i in reader.list()] == [(1, True), (2, True), (3, False)]
    assert kind in reader.list()[-1].reason


def test_no_valid_cut_is_an_error_naming_the_directory_and_every_file(
    any_fs: FsHandle, caplog: pytest.LogCaptureFixture
) -> None:
    directory = _dir(any_fs)
    store = CheckpointStore(any_fs.fs, directory)
    store.write(1, _states(1))
    store.write(2, _states(2))
    CORRUPTIONS["zero-length"](any_fs.fs, f"{directory}/{cut_file_name(2)}")
    CORRUPTIONS["garbage"](any_fs.fs, f"{directory}/{cut_file_name(1)}")

    with pytest.raises(CheckpointError) as err:
        store.latest()
    message = str(err.value)
    assert any_fs.fs.display(directory) in message
    assert f"{cut_file_name(2)}: zero-length" in message
    assert f"{cut_file_name(1)}: garbage" in message

    fresh = CheckpointStore(any_fs.fs, directory, start_fresh=True)
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        assert fresh.latest() is None
    assert any("starting fresh" in r.getMessage() for r in caplog.records)
    # Starting fresh still never reuses an id.
    assert fresh.next_cut_id() == 3


def test_a_leftover_temporary_file_is_ignored_and_cleaned(any_fs: FsHandle) -> None:
    directory = _dir(any_fs)
    store = CheckpointStore(any_fs.fs, directory)
    store.write(1, _states(1))
    # A crash between create and rename leaves a partial hidden file behind.
    leftover = f"{directory}/.cut-000000000002-{uuid.uuid4().hex}.tmp"
    _put(any_fs.fs, leftover, b'{"format":1,"sha256":"ab')

    restarted = CheckpointStore(any_fs.fs, directory)
    latest = restarted.latest()
    assert latest is not None and latest.cut_id == 1
    assert [i.cut_id for i in restarted.list()] == [1]
    next_id = restarted.next_cut_id()
    assert next_id == 3  # the interrupted cut's id is not reused
    restarted.write(next_id, _states(next_id))
    names = sorted(s.name for s in any_fs.fs.list_dir(directory))
    assert names == [cut_file_name(1), cut_file_name(3)]


def test_twelve_writes_with_retain_ten_keep_exactly_the_newest_ten(any_fs: FsHandle) -> None:
    directory = _dir(any_fs)
    store = CheckpointStore(any_fs.fs, directory, retain=10)
    for n in range(1, 13):
        store.write(n, _states(n))
    names = sorted(s.name for s in any_fs.fs.list_dir(directory))
    assert names == [cut_file_name(n) for n in range(3, 13)]
    assert [i.cut_id for i in store.list()] == list(range(3, 13))


def test_another_pipelines_checkpoint_is_refused_loudly(any_fs: FsHandle) -> None:
    directory = _dir(any_fs)
    CheckpointStore(any_fs.fs, directory, pipeline_id="orders").write(1, _states(1))

    with pytest.raises(CheckpointError) as err:
        CheckpointStore(any_fs.fs, directory, pipeline_id="payments").latest()
    assert "'orders'" in str(err.value) and "'payments'" in str(err.value)
    assert any_fs.fs.display(directory) in str(err.value)
    # Not even start_fresh hides it: the other job's cuts would be deleted by retention.
    with pytest.raises(CheckpointError, match="orders"):
        CheckpointStore(any_fs.fs, directory, pipeline_id="payments", start_fresh=True).latest()
    listed = CheckpointStore(any_fs.fs, directory, pipeline_id="payments").list()
    assert not listed[0].valid and "orders" in listed[0].reason


def test_get_or_create_recovers_or_creates(any_fs: FsHandle) -> None:
    directory = _dir(any_fs)
    created = get_or_create(any_fs.fs, directory, lambda cp: ("new",) if cp is None else cp)
    assert created == ("new",)

    CheckpointStore(any_fs.fs, directory, pipeline_id="p").write(7, _states(7))
    recovered = get_or_create(any_fs.fs, directory, lambda cp: cp, pipeline_id="p")
    assert isinstance(recovered, Checkpoint) and recovered.cut_id == 7
    assert recovered.operators == _states(7)


def test_write_refuses_ids_that_would_not_sort_last(any_fs: FsHandle) -> None:
    store = CheckpointStore(any_fs.fs, _dir(any_fs))
    store.write(5, _states(5))
    for cut_id in (5, 4):
        with pytest.raises(CheckpointError, match=cut_file_name(5)):
            store.write(cut_id, _states(cut_id))
    assert [i.cut_id for i in store.list()] == [5]


def test_state_that_is_not_json_names_the_operator(any_fs: FsHandle) -> None:
    store = CheckpointStore(any_fs.fs, _dir(any_fs))
    with pytest.raises(CheckpointError, match="'sink'"):
        store.write(1, {"src": {"n": 1}, "sink": {"when": object()}})
    with pytest.raises(CheckpointError, match="'sink'"):
        store.write(1, {"sink": {"x": float("nan")}})
    assert store.latest() is None


class _FailingReads:
    """The real filesystem, except that reading ``path`` fails like a lost connection."""

    def __init__(self, fs: FileSystem, path: str) -> None:
        self._fs, self._path = fs, path

    def __getattr__(self, name: str) -> Any:
        return getattr(self._fs, name)

    def read(self, path: str, offset: int = 0, length: int = -1) -> bytes:
        if path == self._path:
            raise ConnectionError(f"{path}: connection reset")
        return self._fs.read(path, offset, length)


def test_an_unreadable_newest_cut_is_an_error_not_a_silent_rollback(any_fs: FsHandle) -> None:
    directory = _dir(any_fs)
    store = CheckpointStore(any_fs.fs, directory)
    store.write(1, _states(1))
    store.write(2, _states(2))
    failing = _FailingReads(any_fs.fs, f"{directory}/{cut_file_name(2)}")
    with pytest.raises(CheckpointError, match="connection reset"):
        CheckpointStore(failing, directory).latest()  # type: ignore[arg-type]


def test_files_are_not_world_readable_by_default(tmp_path: Any) -> None:
    directory = str(tmp_path / "ckpt")
    info = CheckpointStore(LocalFileSystem(), directory).write(1, _states(1))
    assert stat.S_IMODE(os.stat(info.path).st_mode) == 0o640
    assert stat.S_IMODE(os.stat(directory).st_mode) == 0o750


def test_a_reader_never_sees_a_partial_or_older_cut_while_a_writer_writes(
    any_fs: FsHandle,
) -> None:
    directory = _dir(any_fs)
    writer = CheckpointStore(any_fs.fs, directory, retain=2)
    writer.write(1, _states(1))
    done = threading.Event()
    seen: list[int] = []
    errors: list[BaseException] = []

    def read_until_done() -> None:
        reader = CheckpointStore(any_fs.fs, directory)
        try:
            while True:
                finished = done.is_set()
                latest = reader.latest()
                assert latest is not None
                assert latest.operators == _states(latest.cut_id)
                seen.append(latest.cut_id)
                if finished:  # this read started after the last write
                    return
        except BaseException as exc:
            errors.append(exc)

    thread = threading.Thread(target=read_until_done)
    thread.start()
    try:
        for n in range(2, 16):
            writer.write(n, _states(n))
    finally:
        done.set()
        thread.join()
    assert not errors, errors
    assert seen == sorted(seen) and seen[-1] == 15
    assert len(set(seen)) > 1  # the reader ran while cuts were being written


# --- property: latest() is always the newest undamaged cut -------------------------------------

_OPS = st.lists(
    st.one_of(
        st.tuples(st.just("write"), st.integers(0, 1000)),
        st.tuples(st.sampled_from(sorted(CORRUPTIONS)), st.integers(0, 20)),
    ),
    min_size=1,
    max_size=8,
)


def _check_write_corrupt_read(
    fs: FileSystem, directory: str, ops: list[tuple[str, int]], retain: int
) -> None:
    store = CheckpointStore(fs, directory, retain=retain)
    model: dict[int, dict[str, Any] | None] = {}  # cut id -> states, None when damaged
    for op, arg in ops:
        if op == "write":
            cut_id = store.next_cut_id()
            states = {"src": {"offset": arg}}
            store.write(cut_id, states)
            model[cut_id] = states
            for old in sorted(model)[:-retain]:
                del model[old]
        elif intact := [i for i, s in sorted(model.items()) if s is not None]:
            victim = intact[arg % len(intact)]
            CORRUPTIONS[op](fs, f"{directory}/{cut_file_name(victim)}")
            model[victim] = None

        reader = CheckpointStore(fs, directory)
        assert [(i.cut_id, i.valid) for i in reader.list()] == [
            (i, s is not None) for i, s in sorted(model.items())
        ]
        intact = [i for i, s in sorted(model.items()) if s is not None]
        if intact:
            latest = reader.latest()
            assert latest is not None
            assert (latest.cut_id, latest.operators) == (intact[-1], model[intact[-1]])
        elif model:
            with pytest.raises(CheckpointError):
                reader.latest()
        else:
            assert reader.latest() is None


@settings(suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ops=_OPS, retain=st.integers(1, 4))
def test_latest_is_the_newest_undamaged_cut(
    tmp_path: Any, ops: list[tuple[str, int]], retain: int
) -> None:
    _check_write_corrupt_read(LocalFileSystem(), f"{tmp_path}/{uuid.uuid4().hex}", ops, retain)


# Each WebHDFS example costs ~0.2 s of HTTP round trips: a few examples on every backend here,
# many on local disk above.
@settings(max_examples=6, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ops=_OPS, retain=st.integers(1, 4))
def test_latest_is_the_newest_undamaged_cut_on_every_backend(
    any_fs: FsHandle, ops: list[tuple[str, int]], retain: int
) -> None:
    _check_write_corrupt_read(any_fs.fs, _dir(any_fs, uuid.uuid4().hex), ops, retain)
