from __future__ import annotations

import json
import logging
import os
import random
import threading
import zlib
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from operators.common.errors import BadRecordError, OperatorError
from operators.fs.local import LocalFileSystem
from operators.scan import HDFS2DirectoryScan, ScanSettings
from operators.sink import HDFS2FileSink, SinkSettings
from operators.source import FileNameList, HDFS2FileSource, SourceSettings
from operators.testing import ManualClock
from region.checkpoint import CheckpointStore
from region.fs import FileSystem, file_identity
from region.runtime import Pipeline, PipelineRunner
from region.settings import RegionSettings
from region.state import Batch
from tests.landing import Landing
from tests.region._participants import wait_until

S = 1_000_000_000
T0 = 1_700_000_000 * S


class ReadLog:
    """The filesystem, with every ``read`` call recorded as (path, offset, length)."""

    def __init__(self, fs: FileSystem) -> None:
        self._fs = fs
        self.reads: list[tuple[str, int, int]] = []

    def read(self, path: str, offset: int = 0, length: int = -1) -> bytes:
        self.reads.append((path, offset, length))
        return self._fs.read(path, offset, length)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._fs, name)


def file_source(landing: Landing, name: str, data: bytes | str, **settings: Any) -> HDFS2FileSource:
    path = landing.put(name, data)
    source = HDFS2FileSource(SourceSettings(file=path, **settings), landing.fs)
    source.reset_to_initial_state()
    return source


def read_all(source: HDFS2FileSource, max_records: int = 1000) -> list[Batch]:
    batches = []
    while (batch := source.next_batch(max_records)) is not None:
        batches.append(batch)
    return batches


def records(batches: list[Batch]) -> list[Any]:
    return [r for b in batches for r in b.records]


def rebuild(
    source: HDFS2FileSource, state: dict[str, Any], fs: Any = None, files: Any = None
) -> HDFS2FileSource:
    """A new source (and feed) from a state that went through JSON, as after a process restart."""
    fresh = HDFS2FileSource(source.settings, fs or source._fs, files=files)
    fresh.reset(json.loads(json.dumps(state)))
    return fresh


# -- settings ---------------------------------------------------------------------------------


def test_ibm_names_are_aliases_and_defaults_match_ibm() -> None:
    s = SourceSettings.model_validate({"file": "/a", "blockSize": 16, "initDelay": "1s"})
    assert (s.block_size, s.init_delay) == (16, 1.0)
    d = SourceSettings(file="/a")
    assert (d.format, d.encoding, d.on_decode_error, d.block_size) == (
        "line",
        "utf-8",
        "fail",
        4096,
    )


def test_bad_settings_name_field_and_value() -> None:
    with pytest.raises(ValidationError, match="encoding 'klingon' is not known to Python's codecs"):
        SourceSettings(file="/a", encoding="klingon")
    with pytest.raises(ValidationError, match="'utf-16' cannot be read in line mode"):
        SourceSettings(file="/a", encoding="utf-16")
    SourceSettings(file="/a", encoding="utf-16", format="binary")  # fine for blocks
    with pytest.raises(ValidationError, match="block_size"):
        SourceSettings(file="/a", block_size=0)
    with pytest.raises(ValueError, match=r"either settings\.file"):
        HDFS2FileSource(SourceSettings(file="/a"), None, files=FileNameList([]))  # type: ignore[arg-type]


# -- line and block mode ----------------------------------------------------------------------


@pytest.mark.parametrize("chunk", [1, 2, 3, 5, 4 << 20])
def test_lines_lf_crlf_empty_and_last_line_without_newline(
    any_landing: Landing, chunk: int
) -> None:
    data = "alpha\r\nbeta\n\n\r\nü-multibyte\r\nlast \r line"
    source = file_source(any_landing, "f.txt", data, read_chunk=chunk)
    batches = read_all(source, 2)
    assert records(batches) == ["alpha", "beta", "", "", "ü-multibyte", "last \r line"]
    assert [b.punctuation for b in batches] == [False, False, True]
    assert all(b.origin == any_landing.path("f.txt") for b in batches)
    assert source.exhausted() and source.next_batch(5) is None
    assert source.offset == len(data.encode())


def test_empty_file_gives_one_punctuation_and_a_final_newline_no_extra_line(
    landing: Landing,
) -> None:
    batches = read_all(file_source(landing, "empty", b""))
    assert [(b.records, b.punctuation) for b in batches] == [([], True)]
    assert records(read_all(file_source(landing, "one", "x\n"))) == ["x"]
    assert records(read_all(file_source(landing, "cr", "x\r\n"))) == ["x"]


@pytest.mark.parametrize("chunk", [1, 3, 4, 9, 4 << 20])
def test_blocks_of_block_size_with_a_short_last_block(any_landing: Landing, chunk: int) -> None:
    data = bytes(range(10))
    source = file_source(
        any_landing, "b.bin", data, format="binary", block_size=4, read_chunk=chunk
    )
    batches = read_all(source, 2)
    assert records(batches) == [data[0:4], data[4:8], data[8:10]]
    assert batches[-1].punctuation and not batches[0].punctuation


# -- snapshot -> rebuild -> resume ------------------------------------------------------------

LINE_DATA = b"one\r\ntwo\n\nfour\r\n\r\nsix has more\nseven-no-newline"
LINE_RECORDS = ["one", "two", "", "four", "", "six has more", "seven-no-newline"]


@pytest.mark.parametrize(
    ("settings", "data", "expected"),
    [
        ({"read_chunk": 4}, LINE_DATA, LINE_RECORDS),
        ({"read_chunk": 1 << 20}, LINE_DATA + b"\r\n", LINE_RECORDS),
        ({"format": "binary", "block_size": 3, "read_chunk": 5}, b"0123456789a", None),
    ],
    ids=["lines-small-chunks", "lines-crlf-end", "blocks"],
)
def test_snapshot_rebuild_resume_at_every_batch_boundary(
    any_landing: Landing, settings: dict[str, Any], data: bytes, expected: list[Any] | None
) -> None:
    if expected is None:
        expected = [data[i : i + 3] for i in range(0, len(data), 3)]
    for max_records in (1, 2, 3):
        for cut in range(len(expected) // max_records + 2):
            first = file_source(any_landing, "f", data, **settings)
            before = [first.next_batch(max_records) for _ in range(cut)]
            state = first.checkpoint(cut)
            log = ReadLog(any_landing.fs)
            resumed = rebuild(first, state, log)
            after = read_all(resumed, max_records)
            got = records([b for b in before if b]) + records(after)
            assert got == expected, f"max_records={max_records}, cut after {cut} batches"
            # Punctuation exactly once, at the end; a finished file is finished after restart.
            puncts = [b.punctuation for b in [*before, *after] if b]
            assert puncts.count(True) == 1 and puncts[-1]
            # Weakness 7: the resumed source reads on from the checkpointed offset, never from
            # 0; before it, and after each chunk, only the head it checks (the bytes read, up
            # to 4 KiB: a file written over while read is told by them).
            reads = log.reads
            if state["offset"] > 0 and state["opened"]:
                head = state["opened"][3]
                assert reads[0][1:] == (0, head) and 0 < head <= state["offset"]
                reads = [r for r in reads[1:] if r[1:] != (0, head)]
            if reads:
                assert reads[0][1] == state["offset"]
            assert all(offset >= state["offset"] for _, offset, _ in reads)


def test_checkpoint_after_the_end_of_the_file_stays_exhausted(landing: Landing) -> None:
    source = file_source(landing, "f", "a\nb\n")
    assert records(read_all(source)) == ["a", "b"]
    resumed = rebuild(source, source.checkpoint(1))
    assert resumed.exhausted() and resumed.next_batch(10) is None


def test_weakness9_drain_and_checkpoint_before_the_first_record(landing: Landing) -> None:
    source = file_source(landing, "f", "a\n")
    source.drain()
    state = source.checkpoint(0)
    assert state == {
        "path": landing.path("f"),
        "offset": 0,
        "done": False,
        "opened": None,
        "files": None,
    }
    assert records(read_all(rebuild(source, state))) == ["a"]
    feed = HDFS2FileSource(SourceSettings(), landing.fs, files=FileNameList([]))
    feed.drain()
    assert feed.checkpoint(0) == {
        "path": None,
        "offset": 0,
        "done": False,
        "opened": None,
        "files": {"index": 0},
    }
    assert feed.next_batch(5) is None
    feed.reset(feed.checkpoint(1))
    feed.reset_to_initial_state()


def test_init_delay_holds_the_first_read(landing: Landing, clock: ManualClock) -> None:
    path = landing.put("f", "a\n")
    source = HDFS2FileSource(SourceSettings(file=path, init_delay=2), landing.fs, clock=clock)
    source.reset_to_initial_state()
    assert source.next_batch(5) is None and source.poll_interval() == 2
    clock.advance(2)
    assert records(read_all(source)) == ["a"]


# -- undecodable bytes ------------------------------------------------------------------------

BAD = b"good\nstill good\nbad \xff\xfe here\nafter\n"


def test_decode_fail_names_the_file_and_the_byte_offset_of_the_line(any_landing: Landing) -> None:
    source = file_source(any_landing, "bad.txt", BAD)
    with pytest.raises(BadRecordError) as info:
        read_all(source)
    assert info.value.file == any_landing.path("bad.txt") and info.value.offset == 16
    assert "bad.txt" in str(info.value) and "byte offset 16" in str(info.value)
    # Reading one line per batch fails at the same offset, after the good lines.
    one = file_source(any_landing, "bad.txt", BAD)
    assert records([one.next_batch(1), one.next_batch(1)]) == ["good", "still good"]  # type: ignore[list-item]
    with pytest.raises(BadRecordError, match="byte offset 16"):
        one.next_batch(1)


def test_decode_replace_and_skip(landing: Landing, caplog: pytest.LogCaptureFixture) -> None:
    replaced = records(read_all(file_source(landing, "r", BAD, on_decode_error="replace")))
    assert replaced == ["good", "still good", "bad \ufffd\ufffd here", "after"]
    skipping = file_source(landing, "s", BAD, on_decode_error="skip")
    with caplog.at_level(logging.WARNING, logger="operators.source.operator"):
        assert records(read_all(skipping)) == ["good", "still good", "after"]
    assert "skipped the line at byte offset 16" in caplog.text and "/s" in caplog.text
    assert skipping.metrics()["records_skipped"] == 1
    # The offset still counts the skipped line: a resume after it does not see it again.
    part = file_source(landing, "s", BAD, on_decode_error="skip")
    assert records([part.next_batch(3)]) == ["good", "still good", "after"]  # type: ignore[list-item]
    state = part.checkpoint(1)
    assert state["offset"] == len(BAD)
    assert records(read_all(rebuild(part, state))) == []


# -- files that vanish or change --------------------------------------------------------------


def test_missing_file_in_file_mode_is_an_error_naming_it(landing: Landing) -> None:
    source = HDFS2FileSource(SourceSettings(file=landing.path("nope")), landing.fs)
    source.reset_to_initial_state()
    with pytest.raises(FileNotFoundError, match="nope does not exist"):
        source.next_batch(5)


def test_file_deleted_between_scan_and_read_is_skipped_with_a_warning(
    any_landing: Landing, caplog: pytest.LogCaptureFixture
) -> None:
    paths = [any_landing.put(n, f"{n}1\n{n}2\n") for n in "abc"]
    source = HDFS2FileSource(SourceSettings(), any_landing.fs, files=FileNameList(paths))
    source.reset_to_initial_state()
    any_landing.remove("b")
    with caplog.at_level(logging.WARNING, logger="operators.source.operator"):
        batches = read_all(source)
    assert records(batches) == ["a1", "a2", "c1", "c2"]
    assert [b.origin for b in batches if b.punctuation] == [paths[0], paths[2]]
    assert any_landing.fs.display(paths[1]) + " vanished" in caplog.text
    assert source.metrics()["files_vanished"] == 1


def test_file_deleted_after_a_cut_mid_file_closes_its_window(landing: Landing) -> None:
    paths = [landing.put(n, f"{n}1\n{n}2\n") for n in "ab"]
    source = HDFS2FileSource(SourceSettings(), landing.fs, files=FileNameList(paths))
    source.reset_to_initial_state()
    assert records([source.next_batch(1)]) == ["a1"]  # type: ignore[list-item]
    state = source.checkpoint(1)
    landing.remove("a")
    resumed = rebuild(source, state, files=FileNameList(paths))
    batches = read_all(resumed)
    assert (batches[0].records, batches[0].punctuation, batches[0].origin) == ([], True, paths[0])
    assert records(batches) == ["b1", "b2"]


def test_file_shrunk_since_the_checkpoint_is_an_error_naming_file_and_offsets(
    any_landing: Landing,
) -> None:
    source = file_source(any_landing, "f", "0123456789\nabc\n")
    source.next_batch(1)
    state = source.checkpoint(1)
    any_landing.put("f", "short")
    with pytest.raises(OperatorError, match=r"f was replaced since the cut \(it has 5 bytes; 11"):
        rebuild(source, state).next_batch(1)


def test_a_file_written_over_in_place_with_more_bytes_is_never_resumed_into(
    landing: Landing,
) -> None:
    """``cp new orders.csv`` keeps the inode and, longer, looks grown by id and size: the
    leading bytes read before the cut tell it is another file (resumed at the old offset, it
    gave the tail of a record as one). The same when the head is the only sign: no id."""
    path = landing.put("orders.csv", "".join(f"old {i:03d} {'x' * (i % 7)}\n" for i in range(50)))
    source = file_source(landing, "orders.csv", Path(path).read_bytes(), read_chunk=64)
    first = records([source.next_batch(10)])  # type: ignore[list-item]
    assert first[-1].startswith("old 009")
    state = source.checkpoint(1)
    inode = os.stat(path).st_ino
    with open(path, "r+b") as f:  # cp: written through the same inode
        f.write("".join(f"new {i:04d}\n" for i in range(400)).encode())
    assert os.stat(path).st_ino == inode
    with pytest.raises(OperatorError, match=r"orders.csv was replaced since the cut"):
        rebuild(source, state).next_batch(10)
    state["opened"][2] = None  # no id known (hdfs:// without WebHDFS): the head still says
    with pytest.raises(OperatorError, match=r"orders.csv was replaced since the cut"):
        rebuild(source, state).next_batch(10)
    # The same bytes with more after them: grown, resumed where the cut left it.
    data = Path(path).read_bytes()
    source = file_source(landing, "grown.csv", data, read_chunk=64)
    source.next_batch(10)
    state = source.checkpoint(1)
    with open(landing.path("grown.csv"), "ab") as f:
        f.write(b"more\n")
    resumed = records(read_all(rebuild(source, state)))
    assert resumed == [*data.decode().splitlines()[10:], "more"]


# -- file-name-input mode ---------------------------------------------------------------------


def test_weakness7_file_name_input_progress_is_state(any_landing: Landing) -> None:
    """IBM kept no state for files named on the input: a reset re-read the file from the start
    (or an in-flight read ran past the reset). Here the cut covers the file and the offset."""
    paths = [any_landing.put(n, "".join(f"{n}{i}\n" for i in range(5))) for n in "ab"]
    source = HDFS2FileSource(SourceSettings(), any_landing.fs, files=FileNameList(paths))
    source.reset_to_initial_state()
    first = records([source.next_batch(5), source.next_batch(2)])  # type: ignore[list-item]
    assert first == ["a0", "a1", "a2", "a3", "a4", "b0", "b1"]
    state = source.checkpoint(1)
    opened = state.pop("opened")
    status = any_landing.fs.status(paths[1])
    # The head: the 6 bytes read of it (never past the offset), as CRC-32.
    # The id as the scan reads it (hdfs://: through WebHDFS); the head: the 6 bytes read of
    # it (never past the offset), as CRC-32.
    file_id = file_identity(any_landing.fs, status)
    assert opened == [status.mtime_ns, 15, file_id, 6, zlib.crc32(b"b0\nb1\n")]
    assert state == {"path": paths[1], "offset": 6, "done": False, "files": {"index": 2}}
    state["opened"] = opened
    in_flight = records([source.next_batch(2)])  # type: ignore[list-item]
    assert in_flight == ["b2", "b3"]
    source.reset(state)  # in-flight records are dropped, the read restarts at the cut
    fresh = HDFS2FileSource(
        SourceSettings(), ReadLog(any_landing.fs), files=FileNameList(paths), name="again"
    )
    fresh.reset(json.loads(json.dumps(state)))
    for resumed in (source, fresh):
        assert records(read_all(resumed)) == ["b2", "b3", "b4"]
    # The head checked (its 6 bytes), then on from the offset.
    assert fresh._fs.reads[:2] == [(paths[1], 0, 6), (paths[1], 6, 4 << 20)]  # type: ignore[attr-defined]


def test_weakness8_source_pulls_files_from_the_scan_and_a_cut_covers_both(
    any_landing: Landing, clock: ManualClock
) -> None:
    s = 1_000_000_000
    for i, n in enumerate(["b", "a", "c"]):
        any_landing.put(n, f"{n}1\n{n}2\n", 1_700_000_000 * s + (i // 2) * s)  # b, a share an mtime
    scan = HDFS2DirectoryScan(ScanSettings(directory=any_landing.dir), any_landing.fs, clock=clock)
    source = HDFS2FileSource(SourceSettings(), any_landing.fs, files=scan)
    source.reset_to_initial_state()
    batches = [source.next_batch(1) for _ in range(2)]
    assert [(b.records, b.punctuation) for b in batches if b] == [(["a1"], False), (["a2"], True)]
    state = source.checkpoint(1)
    assert state["files"]["key"]["name"] == "a" and state["path"] is None
    assert records(read_all(source)) == ["b1", "b2", "c1", "c2"]
    # Weakness 8: what was handed out after the cut comes back once after a reset, not twice.
    source.reset(state)
    assert records(read_all(source)) == ["b1", "b2", "c1", "c2"]
    clock.advance(60)
    assert read_all(source) == []
    assert scan.metrics()["files_emitted"] == 5
    assert source.metrics()["files_opened"] == 5


def test_a_failed_decode_consumes_nothing(landing: Landing) -> None:
    source = file_source(landing, "bad.txt", BAD, read_chunk=4)
    for _ in range(2):  # the same error again: the bad line was not silently passed over
        with pytest.raises(BadRecordError, match="byte offset 16"):
            read_all(source)
        assert source.offset == 16


def test_file_deleted_while_read_ends_it_with_a_warning(
    landing: Landing, caplog: pytest.LogCaptureFixture
) -> None:
    paths = [landing.put(n, f"{n}1\n{n}2\n") for n in "ab"]
    source = HDFS2FileSource(SourceSettings(read_chunk=2), landing.fs, files=FileNameList(paths))
    source.reset_to_initial_state()
    assert records([source.next_batch(1)]) == ["a1"]  # type: ignore[list-item]
    landing.remove("a")
    with caplog.at_level(logging.WARNING, logger="operators.source.operator"):
        batches = read_all(source)
    # The next chunk may have been read ahead before the file vanished: what was read goes out.
    got = records(batches)
    assert got in (["b1", "b2"], ["a2", "b1", "b2"])
    stopped = 4 if got == ["b1", "b2"] else 6
    assert f"vanished before it was read to the end (at byte {stopped})" in caplog.text


class _HeldRead:
    """A filesystem whose read at ``offset`` waits until released, telling when it is asked."""

    def __init__(self, fs: Any, offset: int) -> None:
        self._fs = fs
        self._offset = offset
        self.asked = threading.Event()
        self.release = threading.Event()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._fs, name)

    def read(self, path: str, offset: int = 0, length: int = -1) -> bytes:
        if offset == self._offset:
            self.asked.set()
            self.release.wait(30)
        data: bytes = self._fs.read(path, offset, length)
        return data


def test_the_next_chunk_is_read_while_the_records_of_the_one_before_go_out(
    landing: Landing,
) -> None:
    """Reading overlaps writing: once a chunk is read, the read of the next one is under way
    while its records are handed on; every record comes out once, in order."""
    lines = [f"line {i:03d}" for i in range(100)]
    path = landing.put("a", "".join(f"{line}\n" for line in lines))
    fs = _HeldRead(landing.fs, 100)
    source = HDFS2FileSource(SourceSettings(file=path, read_chunk=100), fs)  # type: ignore[arg-type]
    source.reset_to_initial_state()
    first = source.next_batch(1)
    assert first is not None and first.records == ["line 000"]
    assert fs.asked.wait(30)  # asked for bytes 100.. while only the first record went out
    fs.release.set()
    assert [first.records[0], *records(read_all(source, 7))] == lines


def test_a_reset_never_uses_a_chunk_read_ahead_before_it(landing: Landing) -> None:
    """A chunk read ahead belongs to the position it was read at before the reset: after a
    reset to a cut (here at that very position, the file rewritten since with another line
    at the same length) the source reads the file again."""
    lines = [f"line {i:03d}" for i in range(30)]
    path = landing.put("a", "".join(f"{line}\n" for line in lines))
    source = HDFS2FileSource(SourceSettings(file=path, read_chunk=27), landing.fs)
    source.reset_to_initial_state()
    first = source.next_batch(3)  # 27 bytes: the next chunk is read ahead
    assert first is not None and first.records == lines[:3]
    state = source.checkpoint(1)
    assert state["offset"] == 27
    source._ahead.result()  # type: ignore[union-attr]  # what it read is in hand
    changed = [*lines[:3], "LINE 003", *lines[4:]]
    with open(path, "r+b") as f:  # the same file (inode), same size: resumed at its offset
        f.write("".join(f"{line}\n" for line in changed).encode())
    source.reset(state)
    assert records(read_all(source)) == changed[3:]


# -- large chunks -----------------------------------------------------------------------------


def _big_lines(n: int, seed: int) -> list[tuple[str, str]]:
    """``n`` (text, line end) pairs: ASCII and multibyte, CR inside and before LF, empty lines,
    and one line longer than the source decodes at once."""
    rng = random.Random(seed)
    words = ["alpha", "beta", "", "ü€ multi", "x\ry", "1234567890" * 3, "z" * 300_000]
    out = []
    for i in range(n):
        text = words[rng.randrange(len(words) - 1)] if i != n // 2 else words[-1]
        out.append((f"{i}:{text}", rng.choice(["\n", "\r\n"])))
    return out


@pytest.mark.parametrize("chunk", [100_000, 1 << 20, 4 << 20])
def test_lines_of_a_large_file_exactly_with_their_bytes_counted(
    landing: Landing, chunk: int
) -> None:
    lines = _big_lines(40_000, seed=chunk)
    data = ("".join(t + e for t, e in lines) + "tail \r").encode()
    expected = [t for t, _ in lines] + ["tail \r"]
    source = file_source(landing, "big.txt", data, read_chunk=chunk)
    batches = read_all(source, 997)
    assert records(batches) == expected
    # Each batch reports the input bytes of its records, line ends included.
    assert sum(b.size or 0 for b in batches) == len(data) == source.metrics()["bytes"]
    # A cut after any batch resumes at the next record.
    for cut in (1, 7, len(batches) // 2):
        first = file_source(landing, "big.txt", data, read_chunk=chunk)
        before = [first.next_batch(997) for _ in range(cut)]
        assert records([b for b in before if b]) == expected[: 997 * cut]
        assert (
            records(read_all(rebuild(first, first.checkpoint(cut)), 997)) == expected[997 * cut :]
        )


def test_bad_bytes_deep_in_a_large_chunk_fail_at_their_line_after_every_good_one(
    landing: Landing, caplog: pytest.LogCaptureFixture
) -> None:
    good = "".join(f"{i} good ü\n" for i in range(60_000)).encode()  # several decode pieces
    data = good + b"bad \xff line\n" + b"after\n"
    source = file_source(landing, "bad.txt", data)
    got: list[str] = []
    with pytest.raises(BadRecordError) as info:
        while (batch := source.next_batch(1000)) is not None:
            got += batch.records
    assert got == [f"{i} good ü" for i in range(60_000)]
    assert info.value.offset == len(good) and f"byte offset {len(good)}" in str(info.value)
    assert source.offset == len(good)
    skipping = file_source(landing, "bad.txt", data, on_decode_error="skip")
    with caplog.at_level(logging.WARNING, logger="operators.source.operator"):
        assert records(read_all(skipping))[-2:] == ["59999 good ü", "after"]
    assert f"skipped the line at byte offset {len(good)}" in caplog.text
    replacing = file_source(landing, "bad.txt", data, on_decode_error="replace")
    assert records(read_all(replacing))[-2:] == ["bad \ufffd line", "after"]


@pytest.mark.parametrize("policy", ["warn", "reread", "fail"])
def test_a_file_replaced_while_down_is_never_resumed_at_the_old_offset(
    landing: Landing, policy: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Read half-way, cut, crash; the file is replaced by another (shorter than it was, longer
    than what was read): resuming at the old offset would tear a record of the new file."""
    first = landing.put("f", "".join(f"old-{i}\n" for i in range(10)), T0)
    source = HDFS2FileSource(
        SourceSettings(), landing.fs, files=FileNameList([first]), on_modified=policy
    )  # type: ignore[arg-type]
    source.reset_to_initial_state()
    assert records([source.next_batch(4)]) == [f"old-{i}" for i in range(4)]  # type: ignore[list-item]
    state = json.loads(json.dumps(source.checkpoint(1)))
    landing.put("f", "".join(f"new-{i}\n" for i in range(5)), T0 + 60 * S)
    resumed = HDFS2FileSource(
        SourceSettings(), landing.fs, files=FileNameList([first]), on_modified=policy
    )  # type: ignore[arg-type]
    resumed.reset(state)
    if policy == "fail":
        with pytest.raises(OperatorError, match=r"f was replaced since the cut .*Put the file"):
            resumed.next_batch(10)
        return
    with caplog.at_level(logging.WARNING, logger="operators.source.operator"):
        batches = read_all(resumed)
    assert "f was replaced since the cut (it has 30 bytes; 24 were read of the 60" in caplog.text
    got = records(batches)
    assert got == ([] if policy == "warn" else [f"new-{i}" for i in range(5)])
    assert batches[-1].punctuation and resumed.metrics()["files_modified"] == 1


@pytest.mark.parametrize("policy", ["warn", "reread"])
def test_a_replaced_file_under_the_scan_is_reported_and_reread_once(
    landing: Landing, clock: ManualClock, policy: str
) -> None:
    """The same replacement with the scan as the feed: its new mtime lets the scan see it, so
    the scan alone applies on_modified (the source once read the new file whole, and then the
    scan emitted it again: every new record twice)."""
    landing.put("f", "".join(f"old-{i}\n" for i in range(10)), T0)
    landing.put("g", "g\n", T0 + S)

    def operators() -> tuple[HDFS2DirectoryScan, HDFS2FileSource]:
        settings = ScanSettings(directory=landing.dir, on_modified=policy)  # type: ignore[arg-type]
        scan = HDFS2DirectoryScan(settings, landing.fs, clock=clock)
        source = HDFS2FileSource(SourceSettings(), landing.fs, files=scan, on_modified=policy)  # type: ignore[arg-type]
        return scan, source

    _, source = operators()
    source.reset_to_initial_state()
    assert records([source.next_batch(4)]) == [f"old-{i}" for i in range(4)]  # type: ignore[list-item]
    state = json.loads(json.dumps(source.checkpoint(1)))
    landing.put("f", "".join(f"new-{i}\n" for i in range(5)), T0 + 60 * S)  # while down
    scan, resumed = operators()
    resumed.reset(state)
    got = records(read_all(resumed))
    clock.advance(60)  # the next listing
    got += records(read_all(resumed))
    assert got == (["g"] if policy == "warn" else ["g", *(f"new-{i}" for i in range(5))])
    # warn: reported and counted once, by the scan (reread reads it again, uncounted).
    assert resumed.metrics()["files_modified"] + scan.modified == (policy == "warn")


def test_a_file_renamed_over_one_read_half_way_is_read_whole_once_under_the_scan(
    landing: Landing, clock: ManualClock, caplog: pytest.LogCaptureFixture
) -> None:
    """Read half-way, cut, crash; another file is renamed over it (``mv new.tmp f``: another
    inode, a new mtime). The scan reads the new file whole, once, with the default
    ``on_modified = "warn"``, and counts nothing: it is new data, not a change."""
    landing.put("f", "".join(f"old-{i}\n" for i in range(10)), T0)

    def operators() -> tuple[HDFS2DirectoryScan, HDFS2FileSource]:
        scan = HDFS2DirectoryScan(ScanSettings(directory=landing.dir), landing.fs, clock=clock)
        return scan, HDFS2FileSource(SourceSettings(), landing.fs, files=scan)

    _, source = operators()
    source.reset_to_initial_state()
    assert records([source.next_batch(4)]) == [f"old-{i}" for i in range(4)]  # type: ignore[list-item]
    state = json.loads(json.dumps(source.checkpoint(1)))
    staged = landing.put(".f.tmp", "".join(f"new-{i}\n" for i in range(5)))
    landing.fs.rename(staged, landing.path("f"), overwrite=True)
    landing.set_mtime(landing.path("f"), T0 + 60 * S)
    scan, resumed = operators()
    resumed.reset(state)
    with caplog.at_level(logging.WARNING):
        got = records(read_all(resumed))
        clock.advance(60)  # the next listing
        got += records(read_all(resumed))
    assert got == [f"new-{i}" for i in range(5)]
    assert resumed.metrics()["files_modified"] + scan.modified == 0
    assert "changed after it was read" not in caplog.text


def test_a_longer_file_renamed_over_the_old_one_is_told_apart_by_its_inode(
    landing: Landing, caplog: pytest.LogCaptureFixture
) -> None:
    """Longer and newer, so size and mtime say "it grew"; the inode says another file."""
    first = landing.put("f", "".join(f"old-{i}\n" for i in range(10)), T0)
    source = HDFS2FileSource(SourceSettings(), landing.fs, files=FileNameList([first]))
    source.reset_to_initial_state()
    assert records([source.next_batch(4)]) == [f"old-{i}" for i in range(4)]  # type: ignore[list-item]
    state = json.loads(json.dumps(source.checkpoint(1)))
    assert state["opened"][2] == landing.fs.status(first).file_id  # the inode
    staged = landing.put("f.new", "".join(f"brand-new-{i}\n" for i in range(50)), T0 + 60 * S)
    landing.fs.rename(staged, first, overwrite=True)  # write-then-rename, as deliveries do
    resumed = HDFS2FileSource(SourceSettings(), landing.fs, files=FileNameList([first]))
    resumed.reset(state)
    with caplog.at_level(logging.WARNING, logger="operators.source.operator"):
        got = records(read_all(resumed))
    assert got == []  # on_modified = "warn": not resumed mid-record, the rest not read
    assert "f was replaced since the cut" in caplog.text
    assert resumed.metrics()["files_modified"] == 1


def test_a_file_that_only_grew_while_down_is_resumed_where_it_was(landing: Landing) -> None:
    first = landing.put("f", "a\nb\n", T0)
    source = HDFS2FileSource(SourceSettings(), landing.fs, files=FileNameList([first]))
    source.reset_to_initial_state()
    assert records([source.next_batch(1)]) == ["a"]  # type: ignore[list-item]
    state = json.loads(json.dumps(source.checkpoint(1)))
    landing.put("f", "a\nb\nc\n", T0 + 5 * S)
    resumed = HDFS2FileSource(SourceSettings(), landing.fs, files=FileNameList([first]))
    resumed.reset(state)
    assert records(read_all(resumed)) == ["b", "c"]


class _BlockingReads(LocalFileSystem):
    """Local files whose reads of ``.txt`` files wait until ``go`` is set (a hung mount, a
    DataNode that does not answer)."""

    def __init__(self) -> None:
        self.go = threading.Event()

    def read(self, path: str, offset: int = 0, length: int = -1) -> bytes:
        if path.endswith(".txt"):
            self.go.wait()
        return super().read(path, offset, length)


def test_a_permit_held_past_drain_timeout_names_the_read_that_holds_it(tmp_path: Path) -> None:
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "a.txt").write_text("a1\na2\n")
    fs = _BlockingReads()
    scan = HDFS2DirectoryScan(ScanSettings(directory=str(tmp_path / "in"), sleep_time=0), fs)
    source = HDFS2FileSource(SourceSettings(), fs, files=scan)
    sink = HDFS2FileSink(SinkSettings(file=str(tmp_path / "out" / "part-%FILENUM.txt")), fs)
    runner = PipelineRunner(
        Pipeline(source, sinks=[sink]),
        RegionSettings(period=0.01, drain_timeout=0.05, reset_timeout=3600),
        CheckpointStore(fs, str(tmp_path / "ck")),
    )
    running = threading.Thread(target=runner.run, kwargs={"available_now": True})
    seen: list[str] = []

    def timed_out() -> bool:
        seen.append(runner.controller.snapshot().last_error or "")
        return "held its permit" in seen[-1]

    running.start()
    try:
        wait_until(timed_out, "the periodic cut to time out")
    finally:
        fs.go.set()
        running.join()
    assert f"source: reading file://{tmp_path}/in/a.txt at byte 0 (thread" in seen[-1]
    # Once the read returns, the region recovers: the file is published once.
    out = tmp_path / "out"
    assert [p.read_text() for p in sorted(out.glob("part-*"))] == ["a1\na2\n"]
