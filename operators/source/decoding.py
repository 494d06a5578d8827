"""How the bytes of a file become line records: one rule for both engines.

- A line ends at LF (the byte 0x0A). A CR right before the LF belongs to the line end and is
  removed (CRLF files read like LF files).
- The bytes after a file's last LF, if any, are its last line: no LF is needed. A CR at the end
  of that line stays, since a CR is a line end only before LF: nothing that is not a line end
  is dropped.
- An empty file has no record; a file holding only ``\\n`` has one empty record.
- Lines are split on the byte before decoding, so line mode needs an encoding in which LF is
  that one byte (:func:`line_encoding_problem`).
- Bytes that do not decode follow ``on_decode_error``: ``fail`` raises a
  :class:`~operators.common.errors.BadRecordError` naming the file, the byte offset of the line and
  of
  the bad byte; ``replace`` puts U+FFFD in their place (Python's ``replace`` handler, the same
  characters on both engines); ``skip`` drops the line with a WARNING naming the file and the
  line's offset, and counts it.

The in-process source (Python strings) and the Spark reader (Arrow arrays) keep their own fast
paths for lines that decode; every decision above is taken here. Where nothing between the
in-process source and its sink reads the text, and both use the same encoding, the lines travel
as :class:`EncodedLines`: checked to decode, never decoded into strings and encoded again; and
where a whole run of lines decodes, as one :class:`LineBlock` of their bytes.
"""

from __future__ import annotations

import codecs
import logging
from collections.abc import Iterator, Sequence
from typing import Any, Literal, overload

from operators.common.errors import BadRecordError

__all__ = [
    "EncodedLines",
    "LineBlock",
    "LineDecoder",
    "OnDecodeError",
    "line_encoding_problem",
    "same_codec",
]

logger = logging.getLogger(__name__)

OnDecodeError = Literal["fail", "replace", "skip"]


class EncodedLines(list[Any]):
    """A batch of line records still in the encoding of their file, without line ends: each
    ``bytes`` line holds exactly the bytes its decoded ``str`` encodes to (it was checked to
    decode, under the rule above), so a sink writing in the same encoding writes them as they
    are. A line that the encoding cannot hold (a replacement under ``replace`` in ASCII) stays
    a ``str``, for the sink to report as it reports any record it cannot encode."""


class LineBlock(Sequence[bytes]):
    """A batch of ``len()`` line records as one ``bytes``: each line in the encoding of its file
    followed by LF, a CR before that LF already removed (the rule above), every line checked
    to decode. A sink writing the same encoding writes ``data`` as it is: the lines are never
    split into records and joined again. As a sequence it is the lines of
    :class:`EncodedLines` (without LF), split on first use, for a sink that must cut the
    block at a record (a file that reaches its limit inside it)."""

    __slots__ = ("_count", "_lines", "data")

    def __init__(self, data: bytes, count: int) -> None:
        self.data = data
        self._count = count
        self._lines: list[bytes] | None = None

    def lines(self) -> list[bytes]:
        """The lines, without their LF."""
        if self._lines is None:
            lines = self.data.split(b"\n")
            lines.pop()  # after the last LF
            self._lines = lines
        return self._lines

    def __len__(self) -> int:
        return self._count

    @overload
    def __getitem__(self, index: int) -> bytes: ...

    @overload
    def __getitem__(self, index: slice) -> list[bytes]: ...

    def __getitem__(self, index: int | slice) -> bytes | list[bytes]:
        return self.lines()[index]

    def __iter__(self) -> Iterator[bytes]:
        return iter(self.lines())

    def __eq__(self, other: object) -> bool:
        if isinstance(other, LineBlock):
            return self.data == other.data
        return isinstance(other, Sequence) and list(self) == list(other)

    __hash__ = None  # type: ignore[assignment]  # equal to lists, as they are unhashable

    def __repr__(self) -> str:
        return f"LineBlock({self._count} lines, {len(self.data)} bytes)"


def same_codec(a: str, b: str) -> bool:
    """Whether the encodings ``a`` and ``b`` are one codec (``UTF8`` and ``utf-8`` are)."""
    return codecs.lookup(a).name == codecs.lookup(b).name


def line_encoding_problem(encoding: str) -> str | None:
    """Why ``encoding`` cannot be read (or written) in line mode, or ``None``.

    What matters is that a line end is the one byte 0x0A: a byte-order mark written once at the
    start (``utf-8-sig``) is fine, UTF-16's two-byte LF is not."""
    with_lf, without = "a\n".encode(encoding), "a".encode(encoding)
    if with_lf != without + b"\n":
        return f"encoding {encoding!r} cannot be read in line mode (LF is not the one byte 0x0A)"
    return None


class LineDecoder:
    """Decodes lines of one file at a time (:meth:`reading` names it) under the
    ``on_decode_error`` policy. :attr:`skipped` counts the lines dropped by ``skip``."""

    def __init__(self, encoding: str, on_decode_error: OnDecodeError) -> None:
        self.encoding = encoding
        self.on_decode_error = on_decode_error
        self.path = ""
        self.display = ""
        self.skipped = 0
        #: The error handler of a fast path that decodes many lines at once.
        self.errors = "replace" if on_decode_error == "replace" else "strict"

    def reading(self, path: str, display: str) -> None:
        """The file the next lines come from: ``path`` for errors, ``display`` for messages."""
        self.path, self.display = path, display

    def error(self, line_start: int, exc: UnicodeDecodeError, bad_at: int) -> BadRecordError:
        """The ``fail`` error for the line starting at byte ``line_start`` of the file."""
        msg = (
            f"file {self.display}: the line at byte offset {line_start} is not valid "
            f"{self.encoding} ({exc.reason} at byte {bad_at}); on_decode_error = 'replace' or "
            "'skip' reads past it"
        )
        return BadRecordError(msg, file=self.path, offset=line_start)

    def decode_lines(
        self, lines: Sequence[bytes], starts: Sequence[int]
    ) -> tuple[list[str], list[int] | None]:
        """Decode ``lines`` (without their line ends; ``starts[i]`` is the byte offset of line
        ``i`` in the file) one by one: the decoded lines, and the indices of the lines kept
        (``None`` when all are). Raises the ``fail`` error at the first bad line."""
        out: list[str] = []
        kept: list[int] = []
        encoding, errors = self.encoding, self.errors
        for i, line in enumerate(lines):
            try:
                out.append(line.decode(encoding, errors))
            except UnicodeDecodeError as exc:
                start = int(starts[i])
                if self.on_decode_error == "fail":
                    raise self.error(start, exc, start + exc.start) from None
                self.skipped += 1
                logger.warning(
                    "file %s: skipped the line at byte offset %s, not valid %s (%s)",
                    self.display,
                    start,
                    encoding,
                    exc.reason,
                )
            else:
                kept.append(i)
        return out, None if len(kept) == len(lines) else kept
