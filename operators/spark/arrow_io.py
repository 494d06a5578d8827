"""Byte ranges of files to Arrow record batches, and record batches to bytes: no per-row Python.

A byte range ``[start, end)`` of a file owns the lines that *start* inside it (as Hadoop's line
reader does): a line that begins before ``end`` is read to its end even past ``end``, and a
range that does not start at 0 skips the partial line it begins in. Any set of ranges that tiles
a file therefore yields each line exactly once, wherever the cuts fall. Binary blocks work the
same way: a range owns the blocks (at multiples of ``block_size``) that start inside it.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from operators.source.compressed import range_stream
from operators.source.decoding import LineDecoder, OnDecodeError
from operators.source.ledger import Expected, verify
from operators.source.readahead import ReadAhead
from region.errors import permanent
from region.fs import FileSystem, RangeReader

__all__ = [
    "NotVerbatim",
    "copy_lines",
    "encode_records",
    "first_line_start",
    "read_blocks",
    "read_lines",
    "record_schema",
    "repeat",
]

logger = logging.getLogger(__name__)

_NL = 10
_CR = 13


def record_schema(*, binary: bool, file_info: bool) -> pa.Schema:
    """The Arrow schema Spark expects for ``value string|binary[, file string, offset bigint]``."""
    fields = [pa.field("value", pa.binary() if binary else pa.string())]
    if file_info:
        fields += [pa.field("file", pa.string()), pa.field("offset", pa.int64())]
    return pa.schema(fields)


def repeat(text: str, n: int) -> pa.Array:
    """``n`` copies of ``text`` as a string array, built from buffers."""
    data = text.encode()
    offsets = np.arange(0, (n + 1) * len(data), len(data) or 1, dtype=np.int32)[: n + 1]
    if not data:
        offsets = np.zeros(n + 1, dtype=np.int32)
    return pa.StringArray.from_buffers(n, pa.py_buffer(offsets), pa.py_buffer(data * n))


def first_line_start(fs: FileSystem, path: str, start: int, size: int, chunk: int) -> int:
    """Offset of the first line starting at or after ``start`` (``size`` when none does)."""
    if start == 0:
        return 0
    pos = start - 1  # a line starts at ``start`` exactly when the byte before it is LF
    want = min(chunk, 64 << 10)  # the LF is usually a line length away, not a chunk
    while pos < size:
        data = fs.read(path, pos, min(want, size - pos))
        if not data:
            break
        idx = data.find(b"\n")
        if idx >= 0:
            return pos + idx + 1
        pos += len(data)
        want = min(chunk, want * 2)
    return size


class _Decoder:
    """Binary lines to a string array in ``encoding``; the rule and its errors are
    :class:`operators.source.decoding.LineDecoder`'s (the in-process source's)."""

    def __init__(self, encoding: str, on_error: OnDecodeError, path: str, display: str) -> None:
        self.rule = LineDecoder(encoding, on_error)
        self.rule.reading(path, display)
        self.encoding = encoding
        self.utf8 = _is_utf8(encoding)

    def decode(
        self, lines: pa.Array, starts: np.ndarray, raw: bytes | None, *, keep_last_cr: bool
    ) -> tuple[pa.Array, np.ndarray | None]:
        """(decoded lines, the indices kept or ``None`` when all are). ``raw`` is the chunk the
        lines were cut from (transcoded in one call for other encodings); ``keep_last_cr``: its
        last line is the file's, without LF (its CR is not a line end)."""
        if self.utf8:
            try:
                return lines.cast(pa.string()), None
            except pa.ArrowInvalid:
                return self._each(lines, starts)
        try:
            text = raw.decode(self.encoding) if raw is not None else None
        except UnicodeDecodeError:
            return self._each(lines, starts)
        if text is not None and raw is not None and text.count("\n") == raw.count(b"\n"):
            # Transcoding keeps LF bytes, so the line structure is the same.
            values = text.encode("utf-8")
            split = _split(values, len(lines), strip_cr=True, keep_last_cr=keep_last_cr)
            return split[0].cast(pa.string()), None
        return self._each(lines, starts)

    def _each(self, lines: pa.Array, starts: np.ndarray) -> tuple[pa.Array, np.ndarray | None]:
        """The slow path, only for chunks holding undecodable bytes: line by line."""
        out, kept = self.rule.decode_lines(lines.to_pylist(), starts.tolist())
        index = None if kept is None else np.asarray(kept, dtype=np.int64)
        return pa.array(out, pa.string()), index


def _split(
    data: bytes, limit: int, *, strip_cr: bool, keep_last_cr: bool = False
) -> tuple[pa.Array, np.ndarray]:
    """The first ``limit`` LF-terminated lines of ``data`` (which ends with LF) without their
    line ends, as a binary array, and the offsets of their starts in ``data``."""
    buf = np.frombuffer(data, dtype=np.uint8)
    all_ends = np.flatnonzero(buf == _NL)
    ends = all_ends[:limit]
    keep = keep_last_cr and len(ends) == len(all_ends)
    return _cut(data, buf, ends, strip_cr=strip_cr and b"\r" in data, keep_last_cr=keep)


def _cut(
    data: bytes | memoryview,
    buf: np.ndarray,
    ends: np.ndarray,
    *,
    strip_cr: bool,
    keep_last_cr: bool = False,
) -> tuple[pa.Array, np.ndarray]:
    """The lines of ``data`` (``buf`` is its bytes) ending at the LFs at ``ends``, without their
    line ends (and a CR before the LF with ``strip_cr``), and where each starts.

    ``keep_last_cr``: the last LF was added after the file's last line, so a CR before it is
    the line's own (a CR is a line end only before a real LF: :mod:`operators.source.decoding`)."""
    n = len(ends)
    offsets = np.empty(n + 1, dtype=np.int32)
    offsets[0] = 0
    offsets[1:] = ends + 1
    with_lf = pa.BinaryArray.from_buffers(
        pa.binary(), n, [None, pa.py_buffer(offsets), pa.py_buffer(data)]
    )
    lines = pc.binary_slice(with_lf, 0, -1)  # the one copy: drops the LFs
    starts = offsets[:-1].astype(np.int64)
    if strip_cr and n:
        before = np.maximum(ends - 1, 0)
        has_cr = (ends > starts) & (buf[before] == _CR)
        if keep_last_cr:
            has_cr[-1] = False
        if has_cr.any():
            lines = pc.if_else(pa.array(has_cr), pc.binary_slice(lines, 0, -1), lines)
    return lines, starts


def decompressed(
    fs: FileSystem, path: str, codec: str, size: int, skip: int, chunk: int
) -> Iterator[bytes]:
    """The decompressed bytes of the first ``size`` raw bytes of ``path`` from ``skip`` on."""
    stream = range_stream(fs, path, codec, size, chunk)
    pos = 0
    while True:
        try:
            data = stream.read(chunk)
        except OSError as exc:
            # A task reads the raw bytes planned, whole: a stream cut short is no file the
            # batch can read (the local engine reads on as it grows; here it must be whole).
            msg = (
                f"{fs.display(path)} is not a whole {codec} stream in its first {size} bytes "
                f"({exc}): a compressed file is read whole on Spark, so it must be complete "
                "when listed: land it under a hidden name (.name, _name or name._COPYING_) "
                "and rename it, or set [scan] min_file_age"
            )
            raise permanent(OSError(msg)) from None
        if not data:
            return
        if pos + len(data) > skip:
            yield data[max(0, skip - pos) :]
        pos += len(data)


def decompressed_length(fs: FileSystem, path: str, codec: str, raw: int) -> int:
    """How many decompressed bytes the first ``raw`` bytes of ``path`` hold (what an earlier
    batch read of a compressed file that grew since)."""
    return sum(len(d) for d in decompressed(fs, path, codec, raw, 0, 8 << 20))


@dataclass(frozen=True, slots=True)
class _Chunk:
    """Whole lines of a file read at ``base``: ``view`` ends with an LF (added after an
    unterminated last line, then ``unterminated``); the next chunk starts ``consumed`` bytes on,
    and the chunk holds the range's last owned line when ``base + consumed > end``."""

    base: int
    data: bytes
    view: memoryview
    consumed: int
    unterminated: bool


def _decompressed_chunks(
    fs: FileSystem,
    path: str,
    codec: str,
    start: int,
    size: int,
    chunk_size: int,
    expected: Expected | None = None,
) -> Iterator[_Chunk]:
    """The chunks of whole lines of a compressed file, read whole from its first byte up to
    ``size`` (it has no index to start inside it); offsets count decompressed bytes, as the
    local engine's do. ``start`` > 0: a file that grew since an earlier batch read its first
    ``start`` raw bytes; the lines after what those held."""
    if expected is not None:
        verify(fs.read, path, expected)
    base = decompressed_length(fs, path, codec, start) if start else 0
    pending = b""
    for data in decompressed(fs, path, codec, size, base, chunk_size):
        held = pending + data if pending else data
        consumed = held.rfind(b"\n") + 1
        pending = held[consumed:]
        if consumed:
            yield _Chunk(base, held, memoryview(held)[:consumed], consumed, False)
            base += consumed
    if pending:  # the last line of the file has no LF
        held = pending + b"\n"
        yield _Chunk(base, held, memoryview(held), len(pending), True)


def _chunks(
    fs: FileSystem,
    path: str,
    start: int,
    end: int,
    size: int,
    chunk_size: int,
    expected: Expected | None = None,
) -> Iterator[_Chunk]:
    """The chunks of whole lines from the first line starting in ``[start, end)`` on, while
    lines start before ``end``. Each read starts at a line start; the partial line at the end
    of a chunk is read again with the next one (instead of being copied over), so chunks are
    used without copies. ``expected``: checked (:func:`verify`) with the first chunk, before
    any of it is used."""
    base = first_line_start(fs, path, start, size, chunk_size)
    if not (base < end and base < size):
        if expected is not None:
            verify(fs.read, path, expected)
        return
    # One open of the file for all its reads where the filesystem has that (HDFS: one
    # NameNode call for the blocks, not one a chunk).
    read = fs.open_ranges(path) if isinstance(fs, RangeReader) else functools.partial(fs.read, path)
    want = chunk_size
    ahead: ReadAhead | None = None
    while base < end and base < size:
        length = min(want, size - base)
        if ahead is not None and ahead.key == (path, base, length):
            data = ahead.result()
        else:
            data = read(base, length)
        ahead = None
        if expected is not None:
            verify(fs.read, path, expected, data, base)
            expected = None
        if len(data) < length:
            msg = (
                f"{fs.display(path)}: the file shrank while being read (wanted {length} bytes "
                f"at offset {base}, got {len(data)}); it was {size} bytes when planned"
            )
            raise OSError(msg)
        unterminated = False
        if base + length >= size:
            consumed = length
            if data[-1] != _NL:
                data += b"\n"  # the last line of the file has no LF
                unterminated = True
            view = memoryview(data)
        else:
            consumed = data.rfind(b"\n") + 1
            if not consumed:
                want *= 2  # a line longer than the chunk: read more at once
                continue
            view = memoryview(data)[:consumed]
        want = chunk_size
        if base + consumed < min(end, size):
            # The next chunk is read while this one's lines are used (on HDFS: written).
            following = base + consumed
            ahead = ReadAhead(read, path, following, min(chunk_size, size - following))
        yield _Chunk(base, data, view, consumed, unterminated)
        base += consumed


def read_lines(
    fs: FileSystem,
    path: str,
    start: int,
    end: int,
    *,
    size: int,
    encoding: str = "utf-8",
    on_decode_error: OnDecodeError = "fail",
    chunk_size: int = 8 << 20,
    file_info: bool = False,
    expected: Expected | None = None,
    codec: str | None = None,
) -> Iterator[pa.RecordBatch]:
    """Record batches of the lines owned by ``[start, end)`` of a file of ``size`` bytes.

    ``size`` is the size when the range was planned: bytes appended later are never read, so a
    replay yields the same lines. The line rule is :mod:`operators.source.decoding`'s. ``expected``:
    what the file held when planned (:class:`FileMoved` before any record, when it holds
    other bytes now). ``codec``: the file is compressed, and its range holds the rest of it
    (:func:`_decompressed_chunks`).
    """
    display = fs.display(path)
    decoder = _Decoder(encoding, on_decode_error, path, display)
    schema = record_schema(binary=False, file_info=file_info)
    if codec is not None:
        chunks = _decompressed_chunks(fs, path, codec, start, size, chunk_size, expected)
        end = 1 << 62  # every line of the decompressed rest
    else:
        chunks = _chunks(fs, path, start, end, size, chunk_size, expected)
    for chunk in chunks:
        base, data, view, consumed = chunk.base, chunk.data, chunk.view, chunk.consumed
        buf = np.frombuffer(view, dtype=np.uint8)
        ends = np.flatnonzero(buf == _NL)
        # Only lines starting before ``end`` belong to this range.
        total = len(ends)
        limit = total if base + consumed <= end else _lines_before(ends, end - base)
        has_cr = data.find(b"\r", 0, len(view)) >= 0
        keep_last_cr = chunk.unterminated and limit == total
        lines, starts = _cut(view, buf, ends[:limit], strip_cr=has_cr, keep_last_cr=keep_last_cr)
        starts += base
        raw = None if decoder.utf8 else bytes(view)
        values, kept = decoder.decode(lines, starts, raw, keep_last_cr=keep_last_cr)
        if kept is not None:
            starts = starts[kept]
        columns = [values]
        if file_info:
            columns += [repeat(display, len(values)), pa.array(starts, pa.int64())]
        if len(values):
            yield pa.RecordBatch.from_arrays(columns, schema=schema)
        if limit < total:
            return


class NotVerbatim(Exception):
    """The text from ``offset`` (a line start) is not written byte for byte as it is read:
    it holds a CR or bytes that are not UTF-8. Read it with :func:`read_lines` from there."""

    def __init__(self, offset: int) -> None:
        super().__init__(offset)
        self.offset = offset


def copy_lines(
    fs: FileSystem,
    path: str,
    start: int,
    end: int,
    *,
    size: int,
    chunk_size: int = 8 << 20,
    expected: Expected | None = None,
) -> Iterator[tuple[bytes, int]]:
    """The lines owned by ``[start, end)`` as the line sink writes them in UTF-8 (each line and
    LF), with how many: for UTF-8 text without CR that is the file's own bytes (LF added after
    an unterminated last line), so they are checked, not decoded and encoded again.

    Raises :class:`NotVerbatim` at the first chunk that is not such text; the lines before it
    were yielded. Same ownership and size rule as :func:`read_lines`.
    """
    for chunk in _chunks(fs, path, start, end, size, chunk_size, expected):
        data, usable = chunk.data, len(chunk.view)
        # Only lines starting before ``end`` are this range's: up to the LF ending the line
        # that holds byte ``end - 1``.
        last = chunk.base + chunk.consumed > end
        if last:
            usable = data.find(b"\n", end - 1 - chunk.base) + 1
        piece = data if usable == len(data) else bytes(chunk.view[:usable])
        if piece.find(b"\r") >= 0:
            raise NotVerbatim(chunk.base)
        # ASCII is UTF-8: checked about 7 times faster than decoding, which only other text needs.
        if not piece.isascii():
            try:
                str(piece, "utf-8")
            except UnicodeDecodeError:
                raise NotVerbatim(chunk.base) from None
        yield piece, piece.count(b"\n")
        if last:
            return


def _lines_before(ends: np.ndarray, rel_end: int) -> int:
    """How many lines start before offset ``rel_end`` (the first starts at 0, the others after
    the LFs at ``ends``)."""
    if rel_end <= 0:
        return 0
    # Line k (k >= 1) starts after the k-th LF: it starts before rel_end when that LF is
    # before rel_end - 1.
    return 1 + int(np.searchsorted(ends, rel_end - 1, side="left"))


def read_blocks(
    fs: FileSystem,
    path: str,
    start: int,
    end: int,
    *,
    size: int,
    block_size: int,
    chunk_size: int = 8 << 20,
    file_info: bool = False,
    expected: Expected | None = None,
    codec: str | None = None,
) -> Iterator[pa.RecordBatch]:
    """Record batches of the ``block_size`` blocks starting in ``[start, end)`` (zero-copy);
    ``expected`` and ``codec`` as for :func:`read_lines` (blocks of the decompressed bytes)."""
    if expected is not None:
        verify(fs.read, path, expected)
    schema = record_schema(binary=True, file_info=file_info)
    step = max(1, chunk_size // block_size) * block_size
    if codec is None:
        first = -(-start // block_size) * block_size
        pieces = _raw_blocks(fs, path, first, min(size, -(-end // block_size) * block_size), step)
    else:
        first = decompressed_length(fs, path, codec, start) if start else 0
        first = -(-first // block_size) * block_size
        pieces = _whole_blocks(decompressed(fs, path, codec, size, first, chunk_size), step)
    pos = first
    for data in pieces:
        n = -(-len(data) // block_size)
        offsets = np.minimum(np.arange(n + 1, dtype=np.int64) * block_size, len(data))
        values = pa.BinaryArray.from_buffers(
            pa.binary(), n, [None, pa.py_buffer(offsets.astype(np.int32)), pa.py_buffer(data)]
        )
        columns = [values]
        if file_info:
            columns += [repeat(fs.display(path), n), pa.array(offsets[:-1] + pos, pa.int64())]
        yield pa.RecordBatch.from_arrays(columns, schema=schema)
        pos += len(data)


def _raw_blocks(fs: FileSystem, path: str, pos: int, stop: int, step: int) -> Iterator[bytes]:
    while pos < stop:
        data = fs.read(path, pos, min(step, stop - pos))
        if not data:
            msg = f"{fs.display(path)}: the file shrank while being read (nothing at {pos})"
            raise OSError(msg)
        yield data
        pos += len(data)


def _whole_blocks(data: Iterator[bytes], step: int) -> Iterator[bytes]:
    """``data`` in pieces of ``step`` bytes (a multiple of the block size), the last shorter."""
    held = b""
    for piece in data:
        held += piece
        while len(held) >= step:
            yield held[:step]
            held = held[step:]
    if held:
        yield held


def encode_records(values: pa.Array, *, binary: bool, encoding: str = "utf-8") -> list[bytes]:
    """The bytes of a file holding ``values``: each followed by LF (line mode) or back to back
    (binary mode). Nulls become empty records. Returns buffers to write in order."""
    if len(values) == 0:
        return []
    if values.null_count:
        values = values.fill_null("" if pa.types.is_string(values.type) else b"")
    large = pa.types.is_large_string(values.type) or pa.types.is_large_binary(values.type)
    if binary:
        # Back to back: the array's own values buffer, without a copy.
        offsets = np.frombuffer(
            values.buffers()[1],
            dtype=np.int64 if large else np.int32,
            count=len(values) + 1,
            offset=values.offset * (8 if large else 4),
        )
        data = values.buffers()[2]
        return [_unsigned(data)[int(offsets[0]) : int(offsets[-1])]]  # type: ignore[list-item]
    if large:
        listed = pa.LargeListArray.from_arrays(pa.array([0, len(values)], pa.int64()), values)
    else:
        listed = pa.ListArray.from_arrays(pa.array([0, len(values)], pa.int32()), values)
    sep = pa.scalar(
        "\n" if pa.types.is_string(values.type) or pa.types.is_large_string(values.type) else b"\n",
        values.type,
    )
    joined = pc.binary_join(listed, sep)[0].as_buffer()
    if pa.types.is_string(values.type) and not _is_utf8(encoding):
        return [(joined.to_pybytes().decode("utf-8") + "\n").encode(encoding)]
    return [_unsigned(joined), b"\n"]  # type: ignore[list-item]


def _unsigned(buffer: pa.Buffer) -> memoryview:
    """A view of ``buffer`` as unsigned bytes, without a copy. Arrow exports its buffers as
    signed bytes (format ``b``), and hdfs-native's ``write`` converts the items of a buffer
    to ``u8``: any byte above 0x7F (non-ASCII text, binary data) failed with ``OverflowError:
    number too small to fit in target type`` on ``hdfs://``."""
    return memoryview(buffer).cast("B")


def _is_utf8(encoding: str) -> bool:
    return encoding.replace("_", "-").lower() in ("utf-8", "utf8")
