"""HDFS2FileSink behaviour: writing, rolling, publishing, recovery, and the IBM weaknesses."""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from operators.common.errors import BadRecordError, OperatorError
from operators.fs import LocalFileSystem
from operators.sink import HDFS2FileSink, SinkSettings
from operators.testing import ManualClock
from region.errors import ConfigError, is_permanent
from region.fs import FileWriter
from region.state import Batch
from tests.landing import SinkEnv, SinkRun, published_bytes

PART = "part-%FILENUM.txt"


def settings(env: SinkEnv, **kw: Any) -> dict[str, Any]:
    return {"file": env.out + "/" + PART, **kw}


def lines(n: int, start: int = 0) -> list[str]:
    return [f"record-{i}" for i in range(start, start + n)]


def text(records: list[str]) -> bytes:
    return "".join(r + "\n" for r in records).encode()


class RecordingFS:
    """A real filesystem that records writer calls (flush / sync) and can hide truncate."""

    def __init__(self, inner: Any, *, supports_truncate: bool = True) -> None:
        self._inner = inner
        self.supports_truncate = supports_truncate and inner.supports_truncate
        self.calls: list[tuple[str, str]] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def truncate(self, path: str, length: int) -> None:
        if not self.supports_truncate:
            raise AssertionError("truncate called on a filesystem without truncate")
        self.calls.append(("truncate", path))
        self._inner.truncate(path, length)

    def _wrap(self, writer: FileWriter) -> FileWriter:
        calls = self.calls

        class Writer:
            path = writer.path

            def write(self, data: bytes) -> None:
                calls.append(("write", writer.path))
                writer.write(data)

            def flush(self) -> None:
                calls.append(("flush", writer.path))
                writer.flush()

            def sync(self) -> None:
                calls.append(("sync", writer.path))
                writer.sync()

            def close(self) -> None:
                writer.close()

        return Writer()

    def create(self, path: str, **kw: Any) -> FileWriter:
        return self._wrap(self._inner.create(path, **kw))

    def append(self, path: str) -> FileWriter:
        return self._wrap(self._inner.append(path))


# -- writing --------------------------------------------------------------------------------


def test_line_mode_writes_records_with_newline_in_the_encoding(sink_env: SinkEnv) -> None:
    run = SinkRun(sink_env, settings(sink_env, encoding="latin-1"))
    run.write(["café", "naïve"])
    run.stop()
    assert sink_env.published() == {"part-0.txt": "café\nnaïve\n".encode("latin-1")}
    assert run.notified == [(sink_env.path("part-0.txt"), 11)]


def test_binary_mode_writes_bytes_as_they_are(sink_env: SinkEnv) -> None:
    run = SinkRun(sink_env, settings(sink_env, format="binary"))
    run.write([b"\x00\x01", bytearray(b"\n\xff"), b""])
    run.stop()
    assert sink_env.published() == {"part-0.txt": b"\x00\x01\n\xff"}


def test_one_write_call_per_batch(sink_local: SinkEnv) -> None:
    fs = RecordingFS(sink_local.fs)
    run = SinkRun(sink_local, settings(sink_local), fs=fs)
    run.write(lines(1000))
    assert [c for c in fs.calls if c[0] == "write"] == [("write", run.sink._cur.work)]  # type: ignore[union-attr]


def test_utf16_has_one_byte_order_mark_per_file_also_after_reset(sink_env: SinkEnv) -> None:
    run = SinkRun(sink_env, settings(sink_env, encoding="utf-16", tuples_per_file=3))
    run.write(["a", "b"])
    run.cut()
    run.write(["c", "d"])
    run.crash()
    run.write(["c", "d"])
    run.stop()
    files = sink_env.published()
    assert [v.decode("utf-16") for _, v in sorted(files.items())] == ["a\nb\nc\n", "d\n"]
    assert all(v.count(b"\xff\xfe") + v.count(b"\xfe\xff") == 1 for v in files.values())


@pytest.mark.parametrize(
    ("record", "fragment"),
    [("bad \udcff", "cannot be encoded as ascii"), (42, "line mode needs str")],
)
def test_bad_record_names_index_value_and_file(
    sink_local: SinkEnv, record: Any, fragment: str
) -> None:
    run = SinkRun(sink_local, settings(sink_local, encoding="ascii", on_bad_record="fail"))
    with pytest.raises(BadRecordError) as info:
        run.write(["fine", "also fine", record])
    message = str(info.value)
    assert fragment in message and "record 2" in message and repr(record) in message
    assert "part-0.txt" in message
    assert info.value.offset == 2 and info.value.file == sink_local.path("part-0.txt")


def test_binary_mode_rejects_str(sink_local: SinkEnv) -> None:
    run = SinkRun(sink_local, settings(sink_local, format="binary", on_bad_record="fail"))
    with pytest.raises(BadRecordError, match=r"record 1 .* binary mode needs bytes, got str 'x'"):
        run.write([b"ok", "x"])


def test_write_before_reset_is_refused(sink_local: SinkEnv) -> None:
    sink = HDFS2FileSink(SinkSettings(**settings(sink_local)), sink_local.fs)
    with pytest.raises(OperatorError, match="before reset"):
        sink.write(Batch(["x"]))


def test_files_are_opened_lazily(sink_env: SinkEnv) -> None:
    run = SinkRun(sink_env, settings(sink_env, close_on_punct=True))
    run.write([], punctuation=True)
    run.cut()
    run.sink.on_tick(run.clock.now + 1000)
    run.stop()
    assert sink_env.names() == []


# -- rolling --------------------------------------------------------------------------------


def test_tuples_per_file_splits_batches_at_the_exact_record(sink_local: SinkEnv) -> None:
    run = SinkRun(sink_local, settings(sink_local, tuples_per_file=4))
    run.write(lines(3))
    run.write(lines(7, 3))  # fills file 0 with one record, then 4, then 2
    run.stop()
    files = sink_local.published()
    assert files == {
        "part-0.txt": text(lines(4)),
        "part-1.txt": text(lines(4, 4)),
        "part-2.txt": text(lines(2, 8)),
    }
    assert run.sink.files_written == 3


def test_bytes_per_file_closes_at_the_record_that_reaches_the_limit(sink_local: SinkEnv) -> None:
    run = SinkRun(sink_local, settings(sink_local, bytes_per_file=7))
    run.write(["ab", "cd", "ef", "gh", "ij"])  # 3 bytes each: 9 >= 7 after the third record
    run.write(["k" * 20, "l"])  # one record over the limit is a file on its own
    run.stop()
    assert sink_local.published() == {
        "part-0.txt": b"ab\ncd\nef\n",
        "part-1.txt": b"gh\nij\n" + b"k" * 20 + b"\n",
        "part-2.txt": b"l\n",
    }


def test_bytes_per_file_in_binary_mode(sink_local: SinkEnv) -> None:
    run = SinkRun(sink_local, settings(sink_local, format="binary", bytes_per_file=4))
    run.write([b"12", b"34", b"5", b"678", b"9"])
    run.stop()
    assert sink_local.published() == {
        "part-0.txt": b"1234",
        "part-1.txt": b"5678",
        "part-2.txt": b"9",
    }


def test_time_per_file_closes_an_idle_file_on_tick(sink_local: SinkEnv, clock: ManualClock) -> None:
    run = SinkRun(sink_local, settings(sink_local, time_per_file="10s"), clock=clock)
    run.write(["a"])
    clock.advance(9)
    run.sink.on_tick(clock.now)
    assert run.sink.current_file is not None
    clock.advance(1)
    run.sink.on_tick(clock.now)  # no new data: the timer alone rolls the file
    assert run.sink.current_file is None
    run.cut()
    assert sink_local.published() == {"part-0.txt": b"a\n"}


def test_time_per_file_is_checked_before_each_batch(
    sink_local: SinkEnv, clock: ManualClock
) -> None:
    run = SinkRun(sink_local, settings(sink_local, time_per_file=5), clock=clock)
    run.write(["a"])
    clock.advance(6)
    run.write(["b"])
    run.stop()
    assert sink_local.published() == {"part-0.txt": b"a\n", "part-1.txt": b"b\n"}


def test_close_on_punct_ends_the_file_at_each_punctuation(sink_local: SinkEnv) -> None:
    run = SinkRun(sink_local, settings(sink_local, closeOnPunct=True))
    run.write(["a"], punctuation=True)
    run.write(["b"])
    run.write(["c"], punctuation=True)
    run.stop()
    assert sink_local.published() == {"part-0.txt": b"a\n", "part-1.txt": b"b\nc\n"}


def test_punctuation_without_close_on_punct_keeps_the_file(sink_local: SinkEnv) -> None:
    run = SinkRun(sink_local, settings(sink_local))
    run.write(["a"], punctuation=True)
    run.write(["b"], punctuation=True)
    run.stop()
    assert sink_local.published() == {"part-0.txt": b"a\nb\n"}


def test_time_variable_uses_the_file_creation_time(sink_local: SinkEnv, clock: ManualClock) -> None:
    run = SinkRun(
        sink_local,
        {"file": sink_local.out + "/t-%TIME-%FILENUM", "time_format": "SSS", "tuples_per_file": 1},
        clock=clock,
    )
    clock.now = 1_000_000.123
    run.write(["a"])
    clock.now = 1_000_000.456
    run.write(["b"])
    run.stop()
    assert sorted(sink_local.published()) == ["t-123-0", "t-456-1"]


# -- publishing -----------------------------------------------------------------------------


def test_weakness3_atomic_publish_readers_never_see_partial_files(sink_env: SinkEnv) -> None:
    """IBM forbids tempFile in a region, so readers see files grow; ours stay hidden."""
    run = SinkRun(sink_env, settings(sink_env, tuples_per_file=2))
    run.write(lines(3))
    assert sink_env.published() == {}  # part-0 is closed, but no cut covers it yet
    assert sink_env.hidden() == [".part-0.txt~sink.inprogress", ".part-1.txt~sink.inprogress"]
    run.cut(complete=False)
    assert sink_env.published() == {}  # covered, but the cut is not complete
    run.sink.on_cut_completed(run.cut_id)
    assert sink_env.published() == {"part-0.txt": text(lines(2))}
    assert run.notified == [(sink_env.path("part-0.txt"), len(text(lines(2))))]
    assert run.sink.files_published == 1


def test_visible_mode_shows_the_growing_file_and_notifies_after_the_cut(sink_env: SinkEnv) -> None:
    run = SinkRun(sink_env, settings(sink_env, publish="visible", tuples_per_file=2))
    run.write(lines(3))
    run.sink.drain()
    assert sink_env.published() == {"part-0.txt": text(lines(2)), "part-1.txt": text(lines(1, 2))}
    assert run.notified == []
    run.cut()
    assert run.notified == [(sink_env.path("part-0.txt"), len(text(lines(2))))]
    run.stop()
    assert sink_env.hidden() == []  # markers go once a completed cut covers the file


def test_visible_mode_shows_records_no_cut_covers_and_a_crash_takes_them_back(
    sink_env: SinkEnv,
) -> None:
    """What the README promises for ``visible``: the growing tail is not committed."""
    run = SinkRun(sink_env, settings(sink_env, publish="visible"))
    run.write(lines(2))
    run.cut()
    run.write(lines(3, 2))
    run.sink.drain()
    # A reader sees all five lines, though the last cut covers only two.
    assert sink_env.published() == {"part-0.txt": text(lines(5))}
    run.crash()
    assert sink_env.published() == {"part-0.txt": text(lines(2))}
    run.write(lines(3, 2))  # the source replays from the cut
    run.stop()
    # Exactly once in the end; a reader of the tail before the crash saw lines 2-4 twice.
    assert sink_env.published() == {"part-0.txt": text(lines(5))}


def test_publish_is_idempotent_and_reports_each_file_once(sink_env: SinkEnv) -> None:
    run = SinkRun(sink_env, settings(sink_env, tuples_per_file=1))
    run.write(["a", "b"])
    run.cut()
    run.sink.reset(run.state)  # e.g. another operator failed: back to the cut just completed
    run.sink.reset(run.state)
    assert sink_env.published() == {"part-0.txt": b"a\n", "part-1.txt": b"b\n"}
    assert len(run.notified) == 2


def test_publish_never_overwrites_a_file_that_appeared_meanwhile(sink_env: SinkEnv) -> None:
    run = SinkRun(sink_env, settings(sink_env, tuples_per_file=1))
    run.write(["a"])
    run.cut(complete=False)
    w = sink_env.fs.create(sink_env.path("part-0.txt"))
    w.write(b"someone else\n")
    w.close()
    with pytest.raises(FileExistsError, match=r"part-0\.txt exists and is never overwritten"):
        run.sink.on_cut_completed(run.cut_id)
    assert sink_env.published() == {"part-0.txt": b"someone else\n"}


def test_publish_fails_when_neither_name_exists(sink_env: SinkEnv) -> None:
    run = SinkRun(sink_env, settings(sink_env, tuples_per_file=1))
    run.write(["a"])
    run.cut(complete=False)
    sink_env.fs.delete(sink_env.path(".part-0.txt~sink.inprogress"))
    with pytest.raises(FileNotFoundError, match="neither it nor"):
        run.sink.on_cut_completed(run.cut_id)


def test_close_without_a_completed_cut_publishes_nothing(sink_local: SinkEnv) -> None:
    run = SinkRun(sink_local, settings(sink_local, tuples_per_file=1))
    run.write(["a", "b"])
    run.sink.close()
    assert sink_local.published() == {}


def test_default_permission_is_not_world_writable(sink_local: SinkEnv) -> None:
    run = SinkRun(sink_local, settings(sink_local))
    run.write(["a"])
    run.stop()
    assert os.stat(sink_local.path("part-0.txt")).st_mode & 0o777 == 0o640


# -- file numbers ---------------------------------------------------------------------------


def test_filenum_continues_from_the_checkpoint_in_a_new_sink(sink_env: SinkEnv) -> None:
    run = SinkRun(sink_env, settings(sink_env, tuples_per_file=2))
    run.write(lines(5))
    run.cut()
    assert run.state is not None and run.state["next_filenum"] == 3
    run.crash()
    run.write(lines(3, 5))
    run.stop()
    assert sorted(sink_env.published()) == [f"part-{i}.txt" for i in range(4)]
    assert published_bytes(sink_env) == text(lines(8))


def test_filenum_is_never_reused_after_consumers_moved_files_away(sink_env: SinkEnv) -> None:
    run = SinkRun(sink_env, settings(sink_env, tuples_per_file=1))
    run.write(["a", "b"])
    run.cut()
    for name in ("part-0.txt", "part-1.txt"):  # a downstream job takes the files
        sink_env.fs.delete(sink_env.path(name))
    run.crash()
    run.write(["c"])
    run.stop()
    assert sink_env.published() == {"part-2.txt": b"c\n"}


def test_filenum_skips_names_that_exist_and_never_overwrites(sink_env: SinkEnv) -> None:
    first = SinkRun(sink_env, settings(sink_env, tuples_per_file=1))
    first.write(["a", "b"])
    first.stop()
    again = SinkRun(sink_env, settings(sink_env, tuples_per_file=1))  # a fresh start, same dir
    again.write(["c"])
    again.stop()
    assert sink_env.published() == {
        "part-0.txt": b"a\n",
        "part-1.txt": b"b\n",
        "part-2.txt": b"c\n",
    }


def test_weakness2_no_silent_overwrite_without_filenum(sink_env: SinkEnv) -> None:
    """IBM overwrites the same name on each roll. Rolling to a fixed name is refused with the
    settings; a fixed name that exists already is never overwritten."""
    with pytest.raises(ValidationError, match=r"no %FILENUM but tuples_per_file"):
        SinkSettings(file=sink_env.path("fixed.txt"), tuples_per_file=1)
    run = SinkRun(sink_env, {"file": sink_env.path("fixed.txt")})
    run.write(["a"])
    run.stop()
    with pytest.raises(FileExistsError, match=r"never overwritten: add %FILENUM"):
        run.sink.reset_to_initial_state()
        run.write(["b"])
    assert sink_env.published() == {"fixed.txt": b"a\n"}


# -- recovery -------------------------------------------------------------------------------


def test_weakness1_reset_truncates_writes_after_the_cut_and_torn_records(
    sink_env: SinkEnv,
) -> None:
    """IBM reopens in append mode: records after the cut repeat, a torn record stays."""
    run = SinkRun(sink_env, settings(sink_env))
    run.write(lines(3))
    run.cut()
    run.write(lines(2, 3))
    run.sink.drain()
    run.sink.abandon()  # the process dies in the middle of a record
    torn = sink_env.fs.append(sink_env.path(".part-0.txt~sink.inprogress"))
    torn.write(b"record-5-to")
    torn.close()
    run.crash()
    run.write(lines(3, 3))
    run.stop()
    assert sink_env.published() == {"part-0.txt": text(lines(6))}


def test_reset_in_the_same_process_truncates_too(sink_env: SinkEnv) -> None:
    run = SinkRun(sink_env, settings(sink_env))
    run.write(["a"])
    run.cut()
    run.write(["b", "c"])
    run.sink.reset(run.state)  # an upstream operator failed
    run.write(["b", "c"])
    run.stop()
    assert sink_env.published() == {"part-0.txt": b"a\nb\nc\n"}


@pytest.mark.parametrize("publish", ["atomic", "visible"])
def test_weakness2_files_opened_after_the_cut_are_deleted_on_reset(
    sink_env: SinkEnv, publish: str
) -> None:
    """IBM leaves files rolled after the checkpoint behind: their records then appear twice."""
    run = SinkRun(sink_env, settings(sink_env, tuples_per_file=2, publish=publish))
    run.write(lines(3))
    run.cut()
    run.write(lines(5, 3))  # fills part-1, then part-2 and part-3 after the cut
    run.sink.drain()
    assert len(sink_env.names()) >= 4
    run.crash()
    assert sink_env.published() == (
        {"part-0.txt": text(lines(2))}
        if publish == "atomic"
        else {"part-0.txt": text(lines(2)), "part-1.txt": text(lines(1, 2))}
    )
    run.write(lines(5, 3))
    run.stop()
    assert published_bytes(sink_env) == text(lines(8))
    assert sorted(sink_env.published()) == [f"part-{i}.txt" for i in range(4)]
    assert sink_env.hidden() == []


def test_crash_between_checkpoint_write_and_publish(sink_env: SinkEnv) -> None:
    run = SinkRun(sink_env, settings(sink_env, tuples_per_file=2))
    run.write(lines(5))
    run.cut(complete=False)  # the region checkpoint is durable; the renames never happened
    assert sink_env.published() == {}
    run.crash()
    assert sink_env.published() == {"part-0.txt": text(lines(2)), "part-1.txt": text(lines(2, 2))}
    assert [os.path.basename(n) for n, _ in run.notified] == ["part-0.txt", "part-1.txt"]
    run.write(lines(3, 5))
    run.stop()
    assert published_bytes(sink_env) == text(lines(8))


def test_crash_during_publish_is_finished_by_reset(sink_env: SinkEnv) -> None:
    run = SinkRun(sink_env, settings(sink_env, tuples_per_file=1))
    run.write(["a", "b", "c"])
    run.cut(complete=False)
    # The crashed process renamed the first file only.
    sink_env.fs.rename(sink_env.path(".part-0.txt~sink.inprogress"), sink_env.path("part-0.txt"))
    run.crash()
    assert sink_env.published() == {
        "part-0.txt": b"a\n",
        "part-1.txt": b"b\n",
        "part-2.txt": b"c\n",
    }


def test_reset_after_an_uncompleted_cut_goes_back_to_the_previous_one(sink_env: SinkEnv) -> None:
    run = SinkRun(sink_env, settings(sink_env, tuples_per_file=2))
    run.write(lines(3))
    run.cut()
    run.write(lines(2, 3))
    run.cut(store=False)  # the crash came before the region checkpoint was written
    run.crash()
    run.write(lines(2, 3))
    run.stop()
    assert published_bytes(sink_env) == text(lines(5))


def test_reset_to_initial_state_deletes_only_this_sinks_unfinished_files(
    sink_env: SinkEnv,
) -> None:
    other = SinkRun(sink_env, {"file": sink_env.out + "/other-%FILENUM"}, name="other")
    other.write(["x"])
    user = sink_env.fs.create(sink_env.path(".user-file"))
    user.close()
    run = SinkRun(sink_env, settings(sink_env, tuples_per_file=1))
    run.write(["a", "b"])
    run.crash()  # no cut ever completed
    assert sink_env.names() == [".other-0~other.inprogress", ".user-file"]
    run.write(["a", "b"])
    run.stop()
    other.stop()
    assert sink_env.published() == {"other-0": b"x\n", "part-0.txt": b"a\n", "part-1.txt": b"b\n"}


def test_at_least_once_appends_on_reset(sink_env: SinkEnv) -> None:
    run = SinkRun(sink_env, settings(sink_env, delivery="at_least_once"))
    run.write(["a"])
    run.cut()
    run.write(["b"])
    run.crash()
    run.write(["b", "c"])
    run.stop()
    assert sink_env.published() == {"part-0.txt": b"a\nb\nb\nc\n"}  # duplicates, nothing lost


def test_switching_delivery_between_runs_never_cuts_into_a_record(sink_env: SinkEnv) -> None:
    """exactly_once, killed -> at_least_once, killed after a cut -> exactly_once. The
    at_least_once reset keeps the bytes written after the cut and now records them, so the next
    exactly_once reset truncates to a record boundary, not into the middle of a record."""
    run = SinkRun(sink_env, settings(sink_env))
    run.write(lines(10, 0))
    run.cut()
    run.write(lines(5, 10))  # after the cut: kept by the at_least_once restart
    run.settings = SinkSettings(**settings(sink_env, delivery="at_least_once"))
    run.crash()
    run.write(lines(3, 15))
    run.cut()
    run.write(lines(2, 18))  # after the cut: cut back by the exactly_once restart
    run.settings = SinkSettings(**settings(sink_env))
    run.crash()
    run.write(lines(7, 18))
    run.stop()
    assert sink_env.published()["part-0.txt"] == text(lines(25, 0))


def test_at_least_once_visible_needs_no_truncate(sink_env: SinkEnv) -> None:
    fs = RecordingFS(sink_env.fs, supports_truncate=False)
    run = SinkRun(sink_env, settings(sink_env, delivery="at_least_once", publish="visible"), fs=fs)
    run.write(["a"])
    run.cut()
    run.write(["b"])
    run.crash()
    run.write(["b"])
    run.stop()
    assert sink_env.published() == {"part-0.txt": b"a\nb\nb\n"}


def test_without_truncate_atomic_mode_rewrites_the_prefix(sink_env: SinkEnv) -> None:
    fs = RecordingFS(sink_env.fs, supports_truncate=False)
    run = SinkRun(sink_env, settings(sink_env), fs=fs)
    run.write(lines(3))
    run.cut()
    run.write(lines(2, 3))
    run.crash()
    assert sink_env.hidden() == [".part-0.txt~sink.inprogress"]
    run.write(lines(2, 3))
    run.stop()
    assert sink_env.published() == {"part-0.txt": text(lines(5))}
    assert not [c for c in fs.calls if c[0] == "truncate"]


def test_without_truncate_visible_exactly_once_is_refused(sink_env: SinkEnv) -> None:
    fs = RecordingFS(sink_env.fs, supports_truncate=False)
    with pytest.raises(ConfigError, match="needs truncate"):
        HDFS2FileSink(SinkSettings(**settings(sink_env, publish="visible")), fs)  # type: ignore[arg-type]


def test_missing_open_file_at_reset_is_an_error_naming_it(sink_env: SinkEnv) -> None:
    run = SinkRun(sink_env, settings(sink_env))
    run.write(["a"])
    run.cut()
    run.sink.abandon()
    sink_env.fs.delete(sink_env.path(".part-0.txt~sink.inprogress"))
    with pytest.raises(FileNotFoundError, match=r"part-0.txt~sink.inprogress.*is missing") as info:
        run.new_sink().reset(run.state)
    # No retry brings it back (the region stops at once), and the message says how to go on.
    assert is_permanent(info.value)
    sink_dir = sink_env.fs.display(sink_env.path("_hdfs_sink"))
    assert f"remove its checkpoint directory and {sink_dir}" in str(info.value)


def test_state_is_a_plain_json_dict_with_the_documented_layout(sink_local: SinkEnv) -> None:
    run = SinkRun(sink_local, settings(sink_local, tuples_per_file=2))
    run.write(lines(3))
    state = run.sink.checkpoint(1)
    assert json.loads(json.dumps(state)) == state
    assert set(state) == {"version", "next_filenum", "current", "pending", "cut"}
    assert state["cut"] == 1  # the cut whose completion publishes the pending files
    assert state["current"]["final"] == sink_local.path("part-1.txt")
    assert state["current"]["work"] == sink_local.path(".part-1.txt~sink.inprogress")
    assert (state["current"]["size"], state["current"]["tuples"]) == (9, 1)
    assert state["current"]["filenum"] == 1 and state["next_filenum"] == 2
    assert state["pending"] == [
        {
            "final": sink_local.path("part-0.txt"),
            "work": sink_local.path(".part-0.txt~sink.inprogress"),
            "size": 18,
        }
    ]
    with pytest.raises(OperatorError, match="state is not understood"):
        run.sink.reset({"version": 1, "current": None})


# -- weaknesses 9 and 10 --------------------------------------------------------------------


def test_weakness9_drain_and_checkpoint_before_the_first_tuple(sink_env: SinkEnv) -> None:
    sink = HDFS2FileSink(SinkSettings(**settings(sink_env)), sink_env.fs)
    sink.drain()
    first = sink.checkpoint(1)  # even before reset: a null state must not crash
    sink.reset_to_initial_state()
    sink.drain()
    assert sink.checkpoint(2) == sink.checkpoint(3) == first
    sink.on_cut_completed(3)
    again = HDFS2FileSink(SinkSettings(**settings(sink_env)), sink_env.fs)
    again.reset(first)
    again.write(Batch(["a"]))
    again.finish()
    again.checkpoint(4)
    again.on_cut_completed(4)
    assert sink_env.published() == {"part-0.txt": b"a\n"}


def test_weakness10_drain_syncs_not_only_flushes(sink_env: SinkEnv) -> None:
    fs = RecordingFS(sink_env.fs)
    run = SinkRun(sink_env, settings(sink_env), fs=fs)
    run.write(["a"])
    fs.calls.clear()
    run.sink.drain()
    assert ("sync", sink_env.path(".part-0.txt~sink.inprogress")) in fs.calls
    fs.calls.clear()
    run.sink.drain()  # nothing new: no second sync
    assert fs.calls == []


def test_weakness10_a_rolled_file_is_synced_before_it_waits_for_publication(
    sink_local: SinkEnv,
) -> None:
    fs = RecordingFS(sink_local.fs)
    run = SinkRun(sink_local, settings(sink_local, tuples_per_file=2), fs=fs)
    run.write(["a", "b", "c"])
    assert ("sync", sink_local.path(".part-0.txt~sink.inprogress")) in fs.calls


def test_weakness10_lease_held_by_a_dead_writer_surfaces_and_recovers(sink_env: SinkEnv) -> None:
    """A writer still holding the file (lease not yet recovered) makes the append fail loudly;
    once it is gone, a repeated reset continues correctly."""
    run = SinkRun(sink_env, settings(sink_env))
    run.write(["a"])
    run.cut()
    run.write(["b"])
    stale = run.sink  # "dead" but still holding its lease
    run.sink = run.new_sink()
    run.sink.reset(run.state)
    with pytest.raises(BlockingIOError, match=r"part-0\.txt~sink\.inprogress"):
        run.write(["b"])
    stale.abandon()  # the lease is recovered
    run.sink.reset(run.state)
    run.write(["b"])
    run.stop()
    assert sink_env.published() == {"part-0.txt": b"a\nb\n"}


# -- file names from the records --------------------------------------------------------------


def attr_settings(env: SinkEnv, **kw: Any) -> dict[str, Any]:
    return {"file_attribute_name": "name", "directory": env.out, **kw}


def test_file_attribute_name_switches_files(sink_env: SinkEnv) -> None:
    run = SinkRun(sink_env, attr_settings(sink_env))
    run.write([("a.txt", "1"), ("a.txt", "2"), {"name": "b.txt", "line": "3"}])
    run.write([("sub/c.txt", "4")])
    run.stop()
    assert sink_env.published() == {"a.txt": b"1\n2\n", "b.txt": b"3\n"}
    assert sink_env.published(sink_env.path("sub")) == {"c.txt": b"4\n"}


def test_file_attribute_name_recovers_like_the_template_mode(sink_env: SinkEnv) -> None:
    run = SinkRun(sink_env, attr_settings(sink_env))
    run.write([("d1/a", "1"), ("d2/b", "2")])
    run.cut()
    run.write([("d2/b", "3"), ("d3/c", "4")])
    run.crash()
    assert sink_env.hidden(sink_env.path("d3")) == []  # opened after the cut, in a new dir
    run.write([("d2/b", "3"), ("d3/c", "4")])
    run.stop()
    assert sink_env.published(sink_env.path("d1")) == {"a": b"1\n"}
    assert sink_env.published(sink_env.path("d2")) == {"b": b"2\n3\n"}
    assert sink_env.published(sink_env.path("d3")) == {"c": b"4\n"}


def test_interleaved_names_keep_one_open_file_each(sink_env: SinkEnv) -> None:
    """A file per name, not a file per record (IBM closes the file at each change of name)."""
    run = SinkRun(sink_env, attr_settings(sink_env))
    names = ["a.csv", "b.csv", "c.csv"]
    run.write([(names[i % 3], str(i)) for i in range(300)])
    run.cut()
    assert sink_env.published() == {}  # all three are open, covered by the cut
    run.write([("c.csv", "300")])
    run.cut()  # a and b got no record since the last cut: closed, published on completion
    assert sink_env.published() == {
        "a.csv": "".join(f"{i}\n" for i in range(0, 300, 3)).encode(),
        "b.csv": "".join(f"{i}\n" for i in range(1, 300, 3)).encode(),
    }
    run.stop()
    c_records = [*range(2, 300, 3), 300]
    assert sink_env.published()["c.csv"] == "".join(f"{i}\n" for i in c_records).encode()
    assert run.sink.metrics.files_opened == 3 and sink_env.hidden() == []


def test_every_open_file_comes_back_to_the_cut_after_a_crash(sink_env: SinkEnv) -> None:
    run = SinkRun(sink_env, attr_settings(sink_env))
    run.write([("a", "1"), ("b", "2"), ("a", "3"), ("d/c", "4")])
    state = run.cut()
    # Plain JSON: the file written last is "current", the others in order of their last write.
    assert state["current"]["final"] == sink_env.path("d/c")
    assert [f["final"] for f in state["others"]] == [sink_env.path("b"), sink_env.path("a")]
    assert [(f["size"], f["tuples"]) for f in state["others"]] == [(2, 1), (4, 2)]
    after = [("b", "5"), ("a", "6"), ("e", "7"), ("d/c", "8")]
    run.write(after)
    run.crash()  # each open file is cut back to its size at the cut; e is deleted
    assert sink_env.hidden() == [".a~sink.inprogress", ".b~sink.inprogress"]
    run.write(after)
    run.stop()
    assert sink_env.published() == {"a": b"1\n3\n6\n", "b": b"2\n5\n", "e": b"7\n"}
    assert sink_env.published(sink_env.path("d")) == {"c": b"4\n8\n"}
    assert sink_env.hidden() == [] and sink_env.hidden(sink_env.path("d")) == []


def test_the_open_files_are_bounded_and_the_first_eviction_warns(
    sink_local: SinkEnv, caplog: pytest.LogCaptureFixture
) -> None:
    run = SinkRun(sink_local, attr_settings(sink_local, max_open_files=2))
    with caplog.at_level(logging.WARNING, logger="operators.sink"):
        run.write([("a", "1"), ("b", "2"), ("a", "3"), ("c", "4"), ("a", "5"), ("b", "6")])
        run.write([("c", "7"), ("b", "8")])
    run.stop()
    # a and b share the pool until c needs a place: the least recently written (b) closes,
    # and b returning goes to a numbered file (c closes for it); then a closes for c.
    assert sink_local.published() == {
        "a": b"1\n3\n5\n",
        "b": b"2\n",
        "c": b"4\n",
        "b-1": b"6\n8\n",
        "c-1": b"7\n",
    }
    (warning,) = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert "max_open_files=2" in warning.getMessage()
    assert sink_local.path("b") in warning.getMessage()


def test_max_open_files_needs_file_attribute_name(sink_local: SinkEnv) -> None:
    with pytest.raises(ValidationError, match="max_open_files=4 needs file_attribute_name"):
        SinkSettings(**settings(sink_local, max_open_files=4))
    with pytest.raises(ValidationError, match="greater than or equal to 1"):
        SinkSettings(**attr_settings(sink_local, max_open_files=0))


def test_a_returning_name_rolls_to_a_numbered_file_keeping_the_extension(
    sink_env: SinkEnv,
) -> None:
    run = SinkRun(sink_env, attr_settings(sink_env, on_bad_record="fail", max_open_files=1))
    run.write([("o.csv", "1"), ("b", "2"), ("o.csv", "3")])
    run.cut()
    run.write([("o.csv", "4"), ("o.csv-1", "5"), ("o.csv", "6"), ("x.tar.gz", "7")])
    run.stop()
    assert sink_env.published() == {
        "o.csv": b"1\n",
        "b": b"2\n",
        "o-1.csv": b"3\n4\n",  # the same file goes on across a cut
        "o.csv-1": b"5\n",
        "o-2.csv": b"6\n",
        "x.tar.gz": b"7\n",
    }


def test_a_numbered_name_taken_by_a_record_or_a_file_is_skipped(sink_local: SinkEnv) -> None:
    (Path(sink_local.out)).mkdir(parents=True)
    (Path(sink_local.out) / "o-1.csv").write_text("foreign\n")
    (Path(sink_local.out) / "o.csv").write_text("foreign\n")
    run = SinkRun(sink_local, attr_settings(sink_local, on_bad_record="fail"))
    run.write([("o-2.csv", "1"), ("o.csv", "2"), ("o-3.csv", "3")])
    run.stop()
    assert sink_local.published() == {
        "o.csv": b"foreign\n",
        "o-1.csv": b"foreign\n",
        "o-2.csv": b"1\n",
        "o-3.csv": b"2\n",  # o.csv and o-1/o-2 are taken
        "o-3-1.csv": b"3\n",  # o-3.csv returned: it was written before
    }


def test_the_returning_file_goes_on_after_a_crash(sink_env: SinkEnv) -> None:
    run = SinkRun(sink_env, attr_settings(sink_env, max_open_files=1))
    run.write([("a", "1"), ("b", "2"), ("a", "3")])
    run.cut()
    run.write([("a", "4"), ("b", "5")])
    run.crash()  # a-1 is open at the cut: records naming a go on in it
    run.write([("a", "4"), ("b", "5")])
    run.stop()
    assert sink_env.published() == {"a": b"1\n", "b": b"2\n", "a-1": b"3\n4\n", "b-1": b"5\n"}
    assert sink_env.hidden() == []


def test_numbered_names_stay_within_the_name_limit(sink_local: SinkEnv) -> None:
    long = "y" * 230 + ".csv"  # fits with its in-progress name, not with "-1" added
    run = SinkRun(sink_local, attr_settings(sink_local, on_bad_record="fail", max_open_files=1))
    run.write([(long, "1"), ("b", "2"), (long, "3")])
    run.stop()
    files = sink_local.published()
    numbered = [n for n in files if n.endswith("-1.csv")]
    assert len(numbered) == 1 and files[numbered[0]] == b"3\n" and len(numbered[0]) == 236


@pytest.mark.parametrize("publish", ["atomic", "visible"])
def test_overwrite_replaces_the_earlier_file_only_when_asked(
    sink_local: SinkEnv, publish: str
) -> None:
    run = SinkRun(
        sink_local,
        attr_settings(sink_local, on_returning_name="overwrite", publish=publish, max_open_files=1),
    )
    run.write([("a", "1"), ("b", "2")])
    run.cut()
    run.write([("a", "3"), ("b", "4"), ("a", "5")])  # a published, then b unpublished
    run.stop()
    assert sink_local.published() == {"a": b"5\n", "b": b"4\n"}
    assert sink_local.hidden() == []


def test_overwrite_is_refused_without_file_attribute_name(sink_local: SinkEnv) -> None:
    with pytest.raises(ValidationError, match="on_returning_name='overwrite' needs"):
        SinkSettings(**settings(sink_local, on_returning_name="overwrite"))
    ibm = {"fileAttributeName": "n", "directory": "/o", "onReturningName": "overwrite"}
    assert SinkSettings.model_validate(ibm).on_returning_name == "overwrite"


@pytest.mark.parametrize(
    ("name", "problem"),
    [
        ("", "is empty"),
        ("/etc/passwd", "is absolute"),
        ("../x", "'..'"),
        ("a/../../x", "'..'"),
        ("a/..", "'..'"),
        (".hidden", "starting with '.'"),
        ("dir/", "names a directory"),
        ("a\x00b", "control character"),
        ("a\nb", "control character"),
        (7, "not a string"),
    ],
)
def test_file_names_are_confined_to_the_base_directory(
    sink_local: SinkEnv, name: Any, problem: str
) -> None:
    run = SinkRun(sink_local, attr_settings(sink_local, on_bad_record="fail"))
    with pytest.raises(BadRecordError, match=problem) as info:
        run.write([("ok", "1"), (name, "2")])
    assert info.value.offset == 1 and info.value.field == "name"
    assert sink_local.names(sink_local.root) == []  # nothing written outside the base
    assert sink_local.names() == [".ok~sink.inprogress"]


def test_file_attribute_records_must_be_pairs(sink_local: SinkEnv) -> None:
    run = SinkRun(sink_local, attr_settings(sink_local, on_bad_record="fail"))
    with pytest.raises(BadRecordError, match=r"record 0: expected a \(file name, value\) pair"):
        run.write(["just a line"])


# -- metrics --------------------------------------------------------------------------------


def test_metrics_count_files_and_records(sink_local: SinkEnv) -> None:
    run = SinkRun(sink_local, settings(sink_local, tuples_per_file=2))
    run.write(lines(5))
    run.stop()
    m = run.sink.metrics
    assert (m.files_opened, m.files_written, m.files_published) == (3, 3, 3)
    assert m.tuples_written == 5 and m.bytes_written == len(text(lines(5)))
    assert m.published[-1] == (sink_local.path("part-2.txt"), len(text(lines(1, 4))))


def test_variables_in_directories_are_recovered(sink_env: SinkEnv) -> None:
    run = SinkRun(
        sink_env, {"file": sink_env.out + "/p%PARTITION/f%FILENUM/x", "tuples_per_file": 1}
    )
    run.write(["a"])
    run.cut()
    run.write(["b", "c"])
    run.crash()
    assert sink_env.hidden(sink_env.path("p0/f1")) == []
    run.write(["b", "c"])
    run.stop()
    assert [sink_env.published(sink_env.path(f"p0/f{i}")) for i in range(3)] == [
        {"x": b"a\n"},
        {"x": b"b\n"},
        {"x": b"c\n"},
    ]


@pytest.mark.parametrize("template", ["/%HOST/part-%FILENUM", "%HOST/part-%FILENUM"])
def test_variables_in_the_first_directory_are_refused(template: str) -> None:
    with pytest.raises(ConfigError, match="first directory"):
        HDFS2FileSink(SinkSettings(file=template), LocalFileSystem())


def published_by_a_newer_cut_then_back_to_the_older(run: SinkRun) -> dict[str, Any]:
    """part-0 open at cut 1 with "a"; cut 2 publishes it with "b" too; cut 2's checkpoint is
    then lost: the region goes back to cut 1 (returned) and the source replays "b"."""
    run.write(["a"])
    older = run.cut()
    run.write(["b"])
    run.sink.finish()
    run.cut()
    run.sink.abandon()
    assert run.env.published() == {"part-0.txt": b"a\nb\n"}
    return older


def test_open_file_published_by_a_lost_newer_cut_fails_saying_what_to_do(
    sink_env: SinkEnv,
) -> None:
    run = SinkRun(sink_env, settings(sink_env))
    older = published_by_a_newer_cut_then_back_to_the_older(run)
    final = sink_env.path("part-0.txt")
    work = sink_env.path(".part-0.txt~sink.inprogress")
    with pytest.raises(OperatorError) as info:
        run.new_sink().reset(older)
    message = str(info.value)
    display = sink_env.fs.display
    assert f"{display(work)}, open at the checkpoint with 2 bytes, is missing" in message
    assert f"already published as {display(final)} by a newer cut" in message
    assert "Restore the newer checkpoint" in message
    assert is_permanent(info.value)  # every retry would restore the same checkpoint
    assert f"rename {display(final)} back to {display(work)} and restart" in message
    assert sink_env.published() == {"part-0.txt": b"a\nb\n"}  # nothing touched
    # Doing what it says resumes exactly once.
    sink_env.fs.rename(final, work)
    run.sink = run.new_sink()
    run.sink.reset(older)
    run.write(["b"])
    run.stop()
    assert sink_env.published() == {"part-0.txt": b"a\nb\n"}


def test_at_least_once_goes_on_when_a_lost_newer_cut_published_the_open_file(
    sink_env: SinkEnv, caplog: pytest.LogCaptureFixture
) -> None:
    run = SinkRun(sink_env, settings(sink_env, delivery="at_least_once"))
    older = published_by_a_newer_cut_then_back_to_the_older(run)
    run.sink = run.new_sink()
    with caplog.at_level("WARNING", logger="operators.sink"):
        run.sink.reset(older)
    assert "already published as" in caplog.text and "part-0.txt" in caplog.text
    run.write(["b"])
    run.stop()
    # "b" twice, nothing lost: the promise of at_least_once.
    assert sink_env.published() == {"part-0.txt": b"a\nb\n", "part-1.txt": b"b\n"}
