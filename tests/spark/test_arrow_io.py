"""Byte ranges to Arrow lines and blocks, without Spark: every line once, wherever the cuts are."""

from __future__ import annotations

import collections
import itertools
import threading
from pathlib import Path

import pyarrow as pa
import pytest
from hypothesis import given
from hypothesis import strategies as st

from operators.common.errors import BadRecordError
from operators.fs.local import LocalFileSystem
from operators.spark.arrow_io import (
    NotVerbatim,
    copy_lines,
    encode_records,
    read_blocks,
    read_lines,
)

FS = LocalFileSystem()


def expected_lines(data: bytes) -> list[bytes]:
    """The rule of operators.source.decoding, written plainly: LF ends a line, a CR before it too;
    the
    rest after the last LF is a line, CR included."""
    *ended, last = data.split(b"\n")
    lines = [line[:-1] if line.endswith(b"\r") else line for line in ended]
    return [*lines, last] if last else lines


def read_all(path: Path, cuts: list[int], size: int, chunk: int, **kw: object) -> list[tuple]:
    bounds = [0, *sorted(set(cuts)), size]
    rows = []
    for start, end in itertools.pairwise(bounds):
        for batch in read_lines(FS, str(path), start, end, size=size, chunk_size=chunk, **kw):
            rows.extend(zip(*(c.to_pylist() for c in batch.columns), strict=True))
    return rows


@given(
    lines=st.lists(st.text(alphabet="ab\r\n€", max_size=12), max_size=12),
    final_lf=st.booleans(),
    cuts=st.lists(st.integers(min_value=0, max_value=200), max_size=5),
    chunk=st.integers(min_value=1, max_value=40),
)
def test_ranges_tiling_a_file_yield_each_line_once(
    tmp_path_factory: pytest.TempPathFactory,
    lines: list[str],
    final_lf: bool,
    cuts: list[int],
    chunk: int,
) -> None:
    data = "\n".join(lines).encode() + (b"\n" if final_lf and lines else b"")
    path = tmp_path_factory.mktemp("in") / "f.txt"
    path.write_bytes(data)
    cuts = [c for c in cuts if c < len(data)]
    rows = read_all(path, cuts, len(data), chunk, file_info=True)
    assert [r[0].encode() for r in rows] == expected_lines(data)
    # The offset column is where each line starts in the file.
    starts = [0, *[i + 1 for i, b in enumerate(data) if b == 10][: len(rows) - 1]]
    assert [r[2] for r in rows] == starts[: len(rows)]
    assert all(r[1] == "file://" + str(path) for r in rows)


def copied(path: Path, start: int, end: int, size: int, chunk: int) -> tuple[bytes, int]:
    """What fused execution writes for ``[start, end)``: bytes as they are while they can be,
    then the decoded lines, encoded (``replace``: undecodable bytes become U+FFFD)."""
    out, count = b"", 0
    try:
        for data, n in copy_lines(FS, str(path), start, end, size=size, chunk_size=chunk):
            out, count = out + data, count + n
    except NotVerbatim as at:
        for batch in read_lines(
            FS, str(path), at.offset, end, size=size, chunk_size=chunk, on_decode_error="replace"
        ):
            out += b"".join(encode_records(batch.column(0), binary=False))
            count += batch.num_rows
    return out, count


@given(
    pieces=st.lists(
        st.sampled_from([b"ab", b"c", b"\n", b"\r", "€".encode(), b"\xff"]), max_size=30
    ),
    cuts=st.lists(st.integers(min_value=0, max_value=80), max_size=5),
    chunk=st.integers(min_value=1, max_value=40),
)
def test_lines_copied_as_bytes_are_what_decoding_and_encoding_would_write(
    tmp_path_factory: pytest.TempPathFactory, pieces: list[bytes], cuts: list[int], chunk: int
) -> None:
    data = b"".join(pieces)
    path = tmp_path_factory.mktemp("in") / "f.txt"
    path.write_bytes(data)
    bounds = [0, *sorted({c for c in cuts if c < len(data)}), len(data)]
    fast, fast_count = b"", 0
    slow = b""
    for start, end in itertools.pairwise(bounds):
        out, n = copied(path, start, end, len(data), chunk)
        fast, fast_count = fast + out, fast_count + n
        for batch in read_lines(
            FS, str(path), start, end, size=len(data), chunk_size=chunk, on_decode_error="replace"
        ):
            slow += b"".join(encode_records(batch.column(0), binary=False))
    assert fast == slow
    assert fast_count == len(expected_lines(data))


def test_clean_text_is_copied_as_its_own_bytes(tmp_path: Path) -> None:
    path = tmp_path / "f.txt"
    data = "a\n€\n\nlast".encode()
    path.write_bytes(data)
    chunks = list(copy_lines(FS, str(path), 0, len(data), size=len(data), chunk_size=4))
    assert b"".join(d for d, _ in chunks) == "a\n€\n\nlast\n".encode()
    assert sum(n for _, n in chunks) == 4
    path.write_bytes(b"ok\nbad\xff\n")
    with pytest.raises(NotVerbatim) as info:
        list(copy_lines(FS, str(path), 0, 8, size=8, chunk_size=3))
    assert info.value.offset == 3  # where the undecodable line starts


class _ReadsSeen(LocalFileSystem):
    """The local filesystem, telling which offsets were asked of it (from any thread)."""

    def __init__(self) -> None:
        super().__init__()
        self.asked: dict[int, threading.Event] = collections.defaultdict(threading.Event)

    def read(self, path: str, offset: int = 0, length: int = -1) -> bytes:
        self.asked[offset].set()
        return super().read(path, offset, length)


@pytest.mark.parametrize("verbatim", [True, False])
def test_the_next_chunk_is_read_while_the_one_before_is_used(
    tmp_path: Path, verbatim: bool
) -> None:
    """On HDFS a read waits on the DataNodes: a task reads its next chunk while it writes the
    lines of the one before, and the lines are the same."""
    path = tmp_path / "f.txt"
    data = b"".join(b"line %03d\n" % i for i in range(30))  # 9 bytes a line
    path.write_bytes(data)
    fs = _ReadsSeen()
    read = copy_lines if verbatim else read_lines
    chunks = read(fs, str(path), 0, len(data), size=len(data), chunk_size=27)
    first = next(chunks)  # lines 0-2, in the caller's hands
    assert fs.asked[27].wait(timeout=30), "the next chunk was not read ahead"
    rest = list(chunks)
    if verbatim:
        assert first[0] + b"".join(d for d, _ in rest) == data
    else:
        got = [v for b in (first, *rest) for v in b.column(0).to_pylist()]
        assert got == [f"line {i:03d}" for i in range(30)]


def test_bytes_appended_after_planning_are_not_read(tmp_path: Path) -> None:
    path = tmp_path / "f.txt"
    path.write_bytes(b"one\ntwo")
    size = path.stat().st_size
    with path.open("ab") as f:
        f.write(b"-more\nthree\n")
    assert read_all(path, [], size, 3) == [("one",), ("two",)]


def test_undecodable_bytes_fail_with_file_and_offset_or_are_replaced(tmp_path: Path) -> None:
    path = tmp_path / "bad.txt"
    path.write_bytes(b"good\nba\xffd\nlast\n")
    with pytest.raises(
        BadRecordError, match=r"bad\.txt: the line at byte offset 5 .* byte 7"
    ) as info:
        read_all(path, [], 15, 1 << 20)
    assert info.value.offset == 5  # the line's first byte, as the in-process source says
    assert read_all(path, [], 15, 1 << 20, on_decode_error="replace")[1] == ("ba\ufffdd",)
    assert read_all(path, [], 15, 1 << 20, on_decode_error="skip") == [("good",), ("last",)]


def test_other_encodings_are_transcoded(tmp_path: Path) -> None:
    path = tmp_path / "latin.txt"
    data = "café\r\nnaïve\n".encode("latin-1")
    path.write_bytes(data)
    assert read_all(path, [3], len(data), 4, encoding="latin-1") == [("café",), ("naïve",)]


def test_blocks_are_owned_by_the_range_they_start_in(tmp_path: Path) -> None:
    path = tmp_path / "b.bin"
    data = bytes(range(256)) * 3 + b"tail"
    path.write_bytes(data)
    blocks = []
    for start, end in [(0, 100), (100, 700), (700, len(data))]:
        for batch in read_blocks(
            FS, str(path), start, end, size=len(data), block_size=64, chunk_size=130
        ):
            blocks.extend(batch.column(0).to_pylist())
    assert b"".join(blocks) == data
    assert [len(b) for b in blocks] == [64] * 12 + [4]


def test_encode_records_writes_lines_and_blocks() -> None:
    values = pa.array(["a", None, "ü"])
    assert b"".join(encode_records(values, binary=False)) == "a\n\nü\n".encode()
    assert b"".join(encode_records(values, binary=False, encoding="latin-1")) == "a\n\nü\n".encode(
        "latin-1"
    )
    assert b"".join(encode_records(pa.array([b"\x00", b"xy"]), binary=True)) == b"\x00xy"
    assert encode_records(pa.array([], pa.string()), binary=False) == []
