"""The bytes a source read ahead of its offset, and the records they become: lines or blocks.

:class:`~operators.source.operator.HDFS2FileSource` reads a file in chunks (``read_chunk``
bytes) but emits records a batch at a time, so between the chunk read and the offset (the byte
of the next record, its state) lie records read and not yet emitted, and an unfinished one at
the end of what was read. This module holds them: :class:`Lines` (split on LF, decoded under
:mod:`operators.source.decoding`'s rule, or runs of them checked and kept as one
:class:`~operators.source.decoding.LineBlock`) and :class:`Blocks` (``block_size`` bytes each).

The operator owns the file: which one, where the next chunk is read, whether it is still the
file read before, and the offset. Nothing here reads a file or moves the offset: the operator
hands in each chunk (:meth:`Lines.push`) and the offset of the first byte held, and each
:meth:`Lines.take` says how many bytes the records it returns took, for the operator to count.
A take that raises (a line that does not decode, ``on_decode_error = "fail"``) takes nothing,
so the offset never passes a record that was not emitted.
"""

from __future__ import annotations

import codecs
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from operators.source.decoding import (
    EncodedLines,
    LineBlock,
    LineDecoder,
    OnDecodeError,
    same_codec,
)

if TYPE_CHECKING:
    import numpy as np

__all__ = ["Blocks", "Lines"]

#: Bytes of lines decoded and split at once (a piece of a read chunk): small enough that the
#: lines are still in the CPU cache when their batch goes out (4 MB at once was 30% slower).
_PIECE = 1 << 18
#: Most bytes of lines passed as one :class:`~operators.source.decoding.LineBlock`: a read
#: chunk's complete lines, unless ``read_chunk`` is larger (a batch's work stays bounded).
_BLOCK = 4 << 20
#: Fewer bytes than this are counted by ``bytes.count``; more through numpy, about 5 times
#: faster (``bytes.count`` of one byte is a plain loop; numpy's comparison is vectorized).
_COUNT_IN_NUMPY = 1 << 14


class Lines:
    """Line records of one file from the chunks read: each LF-terminated line, and at the end
    the unterminated rest (the file's last line, once the operator says the file ends there).

    ``encoded_for``: the encoding of the only reader of the records (see
    :class:`~operators.source.decoding.EncodedLines`); when it is this file's UTF-8 or ASCII,
    :meth:`take` returns lines as bytes, checked to decode but not decoded: the complete lines
    of a chunk as one :class:`~operators.source.decoding.LineBlock` (as many as ``want``
    allows), and lines one by one (:class:`~operators.source.decoding.EncodedLines`) only from
    the first piece that does not decode on, where each line meets the decoding rule alone."""

    def __init__(
        self, encoding: str, on_decode_error: OnDecodeError, encoded_for: str | None
    ) -> None:
        # Codecs whose valid text has one LF character per LF byte and, when all ASCII, one
        # character per byte: a piece of lines is decoded at once (see _split_piece).
        codec = codecs.lookup(encoding).name
        self._text_codec = codec if codec in ("utf-8", "ascii") else None
        self._encoded = (
            self._text_codec is not None
            and encoded_for is not None
            and same_codec(encoded_for, self._text_codec)
        )
        self._encoding = encoding
        self._decoder = LineDecoder(encoding, on_decode_error)
        self._is_lf: np.ndarray[Any, np.dtype[np.bool_]] | None = None  # _count_lf's buffer
        self.clear()

    def clear(self) -> None:
        """Forget every byte held: the next chunk pushed starts a line."""
        # Complete lines read ahead, without their LF: decoded (_text) when their piece decoded
        # strictly as UTF-8 or ASCII, else as bytes (_lines), decoded batch by batch. At most
        # one of the two holds lines; _li is the next unconsumed index. With _encoded, valid
        # lines leave as blocks (_take_block), never through _text.
        self._text: list[Any] = []
        self._lines: list[bytes] = []
        self._li = 0
        self._sizes: list[int] | None = None  # bytes of each line of _text, unless all ASCII
        self._cr = False  # a line of _text may end with CR
        # Complete lines not yet split: _block[_block_pos:_block_end], _block[_block_end] is LF.
        self._block = b""
        self._block_pos = 0
        self._block_end = -1
        self._tail: list[bytes] = []  # pieces of an unterminated line after _lines
        # With _encoded: the line (without LF) that the last chunk ended, before _block's.
        self._lead: bytes | None = None

    @property
    def skipped(self) -> int:
        """Lines dropped by ``on_decode_error = "skip"`` (each logged)."""
        return self._decoder.skipped

    def reading(self, path: str, display: str) -> None:
        """The file the bytes pushed from now on come from: ``path`` for errors, ``display``
        for messages."""
        self._decoder.reading(path, display)

    def batch(self) -> list[Any]:
        """An empty batch of this source's records."""
        return EncodedLines() if self._encoded else []

    def push(self, data: bytes) -> None:
        """The next chunk of the file, right after the bytes held."""
        end = data.rfind(b"\n")
        if end < 0:
            if data:
                self._tail.append(data)  # a long line: keep pieces, join once it ends
            return
        start = 0
        if self._tail and self._text_codec is not None:
            # The line this chunk ends goes first, joined alone: the chunk is not copied.
            start = data.find(b"\n") + 1
            self._tail.append(data[: start - 1])
            if self._encoded:  # the first line of the next block
                self._lead = b"".join(self._tail)
            else:
                self._lines, self._li = [b"".join(self._tail)], 0
            self._tail = []
        elif self._tail:
            head = b"".join(self._tail)
            self._tail = []
            data = head + data
            end += len(head)
        if end + 1 < len(data):
            self._tail.append(data[end + 1 :])
        if self._text_codec is None:
            lines = data.split(b"\n")
            lines.pop()  # the unterminated rest, in _tail
            self._lines, self._li = lines, 0
        else:
            self._block, self._block_pos, self._block_end = data, start, end

    def take(self, want: int, offset: int) -> tuple[Sequence[Any], int] | None:
        """Up to ``want`` complete lines, the first at byte ``offset`` of the file, and the
        bytes they took with their line ends; ``None`` when no complete line is held. Raises
        the ``fail`` error of a line that does not decode, having taken nothing."""
        while True:
            if self._li < len(self._text):
                return self._take_text(want)
            if self._li < len(self._lines):
                take = self._lines[self._li : self._li + want]
                # May raise: nothing consumed.
                records = self._as_records(self._decode(take, offset, terminated=True))
                self._li += len(take)
                if self._li == len(self._lines):
                    self._lines, self._li = [], 0
                return records, sum(map(len, take)) + len(take)
            if self._encoded and (self._lead is not None or self._block_pos <= self._block_end):
                block = self._take_block(want)
                if block is not None:
                    return block
                continue  # a piece that does not decode: its lines go one by one
            if self._block_pos > self._block_end:
                return None
            self._split_piece()

    def unfinished(self) -> bool:
        """Whether bytes of a line without its LF are held (after the complete lines)."""
        return bool(self._tail)

    def take_unfinished(self, offset: int) -> tuple[list[Any], int]:
        """The unterminated line held, at byte ``offset``, as the file's last record (once no
        complete line is held), and its bytes; raises as :meth:`take` does."""
        last = b"".join(self._tail)
        records = self._as_records(self._decode([last], offset, terminated=False))
        self._tail = []
        return records, len(last)

    def drop_unfinished(self) -> None:
        """Forget the unterminated line held: not a line (the rest of the file is gone), or one
        to read again whole (held back until its newline lands)."""
        self._tail = []

    def empty(self) -> bool:
        """Whether no byte is held."""
        return not (
            self._li < len(self._text)
            or self._li < len(self._lines)
            or self._block_pos <= self._block_end
            or self._lead is not None
            or self._tail
        )

    def _take_text(self, want: int) -> tuple[list[Any], int]:
        """Up to ``want`` lines of ``_text``, consumed, and their bytes."""
        li = self._li
        take = self._text[li : li + want]
        n = len(take)
        sizes = self._sizes
        size = (sum(map(len, take)) if sizes is None else sum(sizes[li : li + n])) + n
        self._li = li + n
        if self._li == len(self._text):
            self._text, self._li, self._sizes = [], 0, None
        if self._cr:
            take = [line[:-1] if line.endswith("\r") else line for line in take]
        return take, size

    def _as_records(self, lines: list[str]) -> list[Any]:
        """Decoded ``lines`` as this source's records: encoded again for
        :class:`~operators.source.decoding.EncodedLines` (only lines a bad byte sent down the slow
        path); a line the encoding cannot hold stays ``str``, for the sink to report."""
        if not self._encoded:
            return lines
        out: list[Any] = []
        for line in lines:
            try:
                out.append(line.encode(self._encoding))
            except UnicodeEncodeError:
                out.append(line)
        return out

    def _take_block(self, want: int) -> tuple[LineBlock, int] | None:
        """Up to ``want`` complete lines held (the lead line first), at most about ``_BLOCK``
        bytes, as one block, and the bytes they took; ``None`` when they do not decode: then
        every line held goes one by one (``_lines``), so that a bad line fails (or is replaced
        or skipped) when it is reached, named by its byte offset."""
        assert self._text_codec is not None
        data, pos, end = self._block, self._block_pos, self._block_end
        lead = self._lead
        stop = end  # the block ends with the LF at data[stop]
        if end - pos > _BLOCK:
            stop = data.rfind(b"\n", pos, pos + _BLOCK)
            if stop < 0:  # a line longer than a block
                stop = data.find(b"\n", pos + _BLOCK, end + 1)
        room = want - (lead is not None)
        n = self._count_lf(data, pos, stop + 1)
        while n > room:  # fewer lines: cut where ``room`` lines of the average length end
            if room == 0:
                stop, n = pos - 1, 0
                break
            aim = pos + (stop + 1 - pos) * room // n  # < stop + 1: each turn takes fewer
            stop = data.rfind(b"\n", pos, aim)
            if stop < 0:
                stop = data.find(b"\n", pos)  # the first line alone
            n = self._count_lf(data, pos, stop + 1)
        if lead is None:
            piece = data[pos : stop + 1]
        else:
            piece = b"".join((lead, b"\n", memoryview(data)[pos : stop + 1]))
        try:
            if not piece.isascii():  # ASCII is valid in both codecs: nothing to check
                str(piece, self._text_codec)
        except UnicodeDecodeError:
            rest = data[pos:end].split(b"\n") if pos <= end else []
            self._lines, self._li = ([lead] if lead is not None else []) + rest, 0
            self._lead = None
            self._block, self._block_pos, self._block_end = b"", 0, -1
            return None
        size = len(piece)
        if piece.find(b"\r") >= 0:  # a CR right before an LF is part of the line end
            piece = piece.replace(b"\r\n", b"\n")
        self._lead = None
        self._block_pos = stop + 1
        if self._block_pos > end:
            self._block, self._block_pos, self._block_end = b"", 0, -1
        return LineBlock(piece, n + (lead is not None)), size

    def _count_lf(self, data: bytes, start: int, stop: int) -> int:
        """LF bytes in ``data[start:stop]``."""
        length = stop - start
        if length < _COUNT_IN_NUMPY:
            return data.count(b"\n", start, stop)
        import numpy as np  # here: nothing else on the line path needs numpy at start

        if self._is_lf is None or len(self._is_lf) < length:
            self._is_lf = np.empty(max(length, _BLOCK + (1 << 16)), np.bool_)
        view = np.frombuffer(data, np.uint8, length, start)
        return int(np.count_nonzero(np.equal(view, 10, out=self._is_lf[:length])))

    def _split_piece(self) -> None:
        """Lines of the next piece of ``_block``, about ``_PIECE`` bytes ending at a line end
        (decoded lines: with ``_encoded`` they leave as blocks).

        The piece is decoded in one call and split once, when it is valid: no join and decode
        per batch, and its lines are still in the CPU cache when the batches use them. Else
        the rest of the block becomes lines of bytes, decoded batch by batch, so that a bad
        line fails (or is replaced or skipped) when it is reached, named by its byte offset.
        """
        assert self._text_codec is not None and not self._encoded
        data, pos, end = self._block, self._block_pos, self._block_end
        stop = end
        if end - pos > _PIECE:
            stop = data.rfind(b"\n", pos, pos + _PIECE)
            if stop < 0:  # a line longer than a piece
                stop = data.find(b"\n", pos + _PIECE, end + 1)
        self._li = 0
        try:
            text = str(memoryview(data)[pos:stop], self._text_codec)
        except UnicodeDecodeError:
            self._lines = data[pos:end].split(b"\n")
            self._block, self._block_pos, self._block_end = b"", 0, -1
            return
        self._text = text.split("\n")
        # Characters are bytes in ASCII; else count the bytes of each line.
        self._sizes = None if text.isascii() else list(map(len, data[pos:stop].split(b"\n")))
        self._cr = data.find(b"\r", pos, stop) >= 0
        self._block_pos = stop + 1
        if self._block_pos > end:
            self._block, self._block_pos, self._block_end = b"", 0, -1

    def _decode(self, lines: list[bytes], offset: int, *, terminated: bool) -> list[str]:
        """Decode ``lines`` (starting at byte ``offset``) in one call; CR before LF is dropped.
        The rule and its errors are :class:`~operators.source.decoding.LineDecoder`'s."""
        decoder = self._decoder
        raw = b"\n".join(lines)
        try:
            text = raw.decode(decoder.encoding, decoder.errors)
        except UnicodeDecodeError as exc:
            if decoder.on_decode_error == "fail":
                line_start = offset + raw.rfind(b"\n", 0, exc.start) + 1
                raise decoder.error(line_start, exc, offset + exc.start) from None
            return self._decode_each(lines, offset, terminated=terminated)
        if terminated and "\r" in text:
            text = text.replace("\r\n", "\n")
            if text.endswith("\r"):
                text = text[:-1]
        out = text.split("\n")
        if len(out) != len(lines):  # a codec's replacement swallowed an LF: go line by line
            return self._decode_each(lines, offset, terminated=terminated)
        return out

    def _decode_each(self, lines: list[bytes], offset: int, *, terminated: bool) -> list[str]:
        starts = []
        for line in lines:
            starts.append(offset)
            offset += len(line) + 1
        if terminated:  # a CR right before the LF is part of the line end
            lines = [line[:-1] if line.endswith(b"\r") else line for line in lines]
        out, _ = self._decoder.decode_lines(lines, starts)
        return out


class Blocks:
    """Binary records of one file from the chunks read: ``size`` bytes each, the last one of a
    file maybe shorter (once the operator says the file ends there). The same calls as
    :class:`Lines`; nothing is decoded, so nothing is skipped or named."""

    skipped = 0

    def __init__(self, size: int) -> None:
        self._size = size
        self.clear()

    def clear(self) -> None:
        """Forget every byte held."""
        self._buf = b""
        self._pos = 0  # the first byte of _buf not taken

    def reading(self, path: str, display: str) -> None:
        """Nothing to name: a block is never refused."""

    def batch(self) -> list[Any]:
        """An empty batch of blocks."""
        return []

    def push(self, data: bytes) -> None:
        """The next chunk of the file, right after the bytes held."""
        self._buf = self._buf[self._pos :] + data
        self._pos = 0

    def take(self, want: int, offset: int) -> tuple[list[Any], int] | None:
        """Up to ``want`` whole blocks and their bytes; ``None`` when no whole block is held.
        (``offset``, the byte of the first, is :class:`Lines`'s, for its errors.)"""
        size = self._size
        whole = min((len(self._buf) - self._pos) // size, want)
        if not whole:
            return None
        start = self._pos
        self._pos += whole * size
        return [self._buf[p : p + size] for p in range(start, self._pos, size)], whole * size

    def unfinished(self) -> bool:
        """Whether a piece of a block is held (after the whole ones)."""
        return (len(self._buf) - self._pos) % self._size != 0

    def take_unfinished(self, offset: int) -> tuple[list[Any], int]:
        """The short block held, as the file's last record (once no whole block is held), and
        its bytes."""
        rest = self._buf[self._pos :]
        self._pos = len(self._buf)
        return [rest], len(rest)

    def drop_unfinished(self) -> None:
        """Forget the piece of a block after the whole ones: the rest of the file is gone."""
        whole = (len(self._buf) - self._pos) // self._size
        self._buf = self._buf[: self._pos + whole * self._size]

    def empty(self) -> bool:
        """Whether no byte is held."""
        return self._pos >= len(self._buf)
