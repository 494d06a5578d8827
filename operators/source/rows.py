"""Rows of CSV and JSON-lines files, as records with columns: the third kind of what a source
reads ahead (beside :class:`~operators.source.records.Lines` and ``Blocks``), with the same calls.

A row ends at a line end (LF, a CR before it dropped) that is not inside a quoted CSV value,
so a value holding line ends is one row, and the offset (the byte of the next row) is always
at a row boundary: a resume never starts inside a quoted value. Rows are found in the raw
bytes (the quote and the line end are single ASCII bytes in every encoding a source accepts),
then decoded, parsed and typed a batch at a time.

With a schema (``[source.schema]``, required for CSV) each record is a mapping of the schema's
columns to values of their types (:func:`operators.common.schema.column`: ``"12"`` is an
``int64``, ``"1.5"`` is not); a file's columns that the schema does not name are left out
(logged once per file). A row that does not fit — a value that does not convert, a CSV row
with another number of fields, a line that is not a JSON object, bytes that do not decode —
is named by file, byte offset, column and value, and ``on_bad_row`` says what happens:
``reject`` (the default) hands it to the sinks' rejects with the batch
(:attr:`region.state.Batch.rejected`), ``skip`` logs and counts it, ``fail`` raises.
"""

from __future__ import annotations

import codecs
import csv
import itertools
import json
import logging
import sys
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from operators.common.columns import Columns
from operators.common.errors import BadRecordError, short
from operators.common.lazy import lazy_module
from operators.common.schema import BadValue, arrow_schema, column

if TYPE_CHECKING:
    import numpy as np
    import pyarrow as pa
    import pyarrow.csv as pacsv
else:
    np = lazy_module("numpy")
    pa = lazy_module("pyarrow")
    pacsv = lazy_module("pyarrow.csv")


__all__ = ["OnBadRow", "Rejected", "Rows"]

logger = logging.getLogger(__name__)

# A value as long as the row (Python's default refuses values over 128 Ki characters, which
# pyarrow's and Spark's readers read).
csv.field_size_limit(sys.maxsize)

OnBadRow = Literal["reject", "skip", "fail"]
#: Bytes of a file's start read to find its header row when a resume starts past it.
_HEAD = 1 << 16
_PLUS_ONE = (1).__add__  # a line's length with its line end, at C speed
_LF = ord("\n")


@dataclass(frozen=True, slots=True)
class Rejected:
    """A row a source could not read as a record: for the sinks' rejects."""

    file: str
    offset: int
    reason: str
    #: The row as read (decoded with replacement characters where it did not decode).
    text: str


class Rows:
    """CSV or JSON-lines records of one file from the chunks read (see the module doc).

    ``read_head(path, length)`` gives the first ``length`` bytes of a file, for its header row
    when reading starts past it (a resume)."""

    def __init__(
        self,
        fmt: Literal["csv", "jsonl"],
        *,
        encoding: str,
        schema: Mapping[str, str] | None,
        header: bool = True,
        delimiter: str = ",",
        quote: str = '"',
        escape: str | None = None,
        null_values: tuple[str, ...] = ("",),
        on_bad_row: OnBadRow = "reject",
        read_head: Callable[[str, int], bytes],
        record_offsets: bool = False,
    ) -> None:
        self._csv = fmt == "csv"
        self._encoding = encoding
        self._schema = arrow_schema(schema) if schema else None
        self._header = header and self._csv
        self._delimiter, self._quotechar, self._escapechar = delimiter, quote, escape
        self._quote = quote.encode("ascii")
        self._delimiter_byte = delimiter.encode("ascii")
        self._escape = escape.encode("ascii") if escape else None
        self._nulls = frozenset(null_values)
        self._on_bad = on_bad_row
        self._read_head = read_head
        self._schema_names = self._schema.names if self._schema is not None else []
        self._empty = Columns.empty(self._schema) if self._schema is not None else None
        self._line_bytes = 128  # bytes of a line, as the last block had them
        # Arrow's CSV reader for blocks of rows it reads as the row path does (see _block):
        # UTF-8, nulls and truth values as the rule of types has them.
        self._arrow: tuple[pacsv.ParseOptions, pacsv.ConvertOptions] | None = None
        if self._csv and self._schema is not None and codecs.lookup(encoding).name == "utf-8":
            self._arrow = (
                pacsv.ParseOptions(delimiter=delimiter, quote_char=False, escape_char=False),
                pacsv.ConvertOptions(
                    column_types=self._schema,
                    include_columns=self._schema.names,
                    null_values=list(null_values),
                    strings_can_be_null=True,
                    true_values=["true", "True", "TRUE", "1"],
                    false_values=["false", "False", "FALSE", "0"],
                ),
            )
        self.skipped = 0
        #: With ``record_offsets``: the byte offset of each record of the last take, in order
        #: (a reader that shows where each record starts: Spark's ``include_file_info``).
        self._record_offsets = record_offsets
        self.offsets: list[int] = []
        self._path = ""
        self._display = ""
        self._columns: list[str] | None = None  # the file's header, once known
        self.clear()

    # -- the calls of Lines and Blocks --------------------------------------------------------

    def clear(self) -> None:
        """Forget every byte held and every row rejected and not taken: the next chunk pushed
        starts a row (a reset reads those rows again)."""
        self._rejected: list[Rejected] = []
        self._buf = b""
        self._pos = 0
        self._quoted = False  # _buf[_pos:_scan] ends inside a quoted value
        self._scan = 0  # bytes of _buf from _pos looked at for row ends

    def reading(self, path: str, display: str) -> None:
        self._path, self._display = path, display
        self._columns = None

    def batch(self) -> Any:
        return self._empty if self._empty is not None else []

    def push(self, data: bytes) -> None:
        if self._pos:  # _scan counts from _pos: it stays
            self._buf, self._pos = self._buf[self._pos :], 0
        self._buf += data

    def take(self, want: int, offset: int) -> tuple[list[Any], int] | None:
        """Up to ``want`` records of the complete rows held, the first at byte ``offset``,
        and the bytes the rows took (rejected and header rows included); ``None`` when no
        complete row is held."""
        ends = self._row_ends(want)
        if not ends:
            return None
        return self._records(ends, offset, last=False)

    def unfinished(self) -> bool:
        return self._pos < len(self._buf)

    def take_unfinished(self, offset: int) -> tuple[list[Any], int]:
        """The row without a line end held, as the file's last one."""
        return self._records([len(self._buf)], offset, last=True)

    def drop_unfinished(self) -> None:
        self._buf = self._buf[: self._pos]
        self._scan = 0
        self._quoted = False

    def empty(self) -> bool:
        return self._pos >= len(self._buf)

    def take_rejected(self) -> list[Rejected]:
        """The rows rejected since the last call, for the batch."""
        rejected, self._rejected = self._rejected, []
        rejected.sort(key=lambda r: r.offset)  # a row's parse fails before another's value
        return rejected

    # -- rows ---------------------------------------------------------------------------------

    def _row_ends(self, want: int) -> Sequence[int]:
        """Ends (past the LF) of up to ``want`` complete rows from ``_pos``."""
        buf, ends = self._buf, list[int]()
        start = self._pos + self._scan
        quoted = self._quoted
        quote = self._quote if self._csv else None
        if not quoted and (quote is None or buf.find(quote, start) < 0):
            # No quote ahead: every line is a row, found at C speed.
            lines = _LineEnds.of(buf, start, want, want * self._line_bytes * 21 // 20 + 4096)
            if not lines:
                self._scan = len(buf) - self._pos
            elif len(lines) > 1:  # the next block's lines are looked for in as many bytes
                self._line_bytes = (lines[-1] - start) // len(lines) + 1
            return lines
        while len(ends) < want:
            end = buf.find(b"\n", start)
            if end < 0:
                break
            if quote is not None and (quoted or buf.find(quote, start, end) >= 0):
                quoted = self._quoting(buf, start, end, quoted)
            start = end + 1
            if not quoted:
                ends.append(start)
        if not ends:  # no row complete yet: the next call scans on from here
            self._scan, self._quoted = start - self._pos, quoted
        return ends  # (taking them consumes them and scans afresh from the last end)

    def _quoting(self, buf: bytes, start: int, end: int, quoted: bool) -> bool:
        """Whether the line ``buf[start:end]`` (without its LF) ends inside a quoted value,
        ``quoted`` telling whether it starts inside one, by the ``csv`` module's rule: a
        quote opens a value only at the start of a field (``5" screen`` is a plain value); in
        a quoted value a quote closes it unless doubled (or, with ``escape``, escaped)."""
        quote, delimiter, escape = self._quote, self._delimiter_byte, self._escape
        p = buf.find(quote, start, end)
        while p >= 0:
            if not quoted:
                quoted = p == start or buf[p - 1 : p] == delimiter
                p = buf.find(quote, p + 1, end)
                continue
            if escape is None:
                if buf[p + 1 : p + 2] == quote and p + 1 < end:  # doubled: one quote
                    p = buf.find(quote, p + 2, end)
                    continue
            else:
                escapes, k = 0, p
                while k > start and buf[k - 1 : k] == escape:
                    escapes, k = escapes + 1, k - 1
                if escapes % 2 == 1:  # escaped: one quote
                    p = buf.find(quote, p + 1, end)
                    continue
            quoted = False
            p = buf.find(quote, p + 1, end)
        return quoted

    def _records(self, ends: Sequence[int], offset: int, *, last: bool) -> tuple[Any, int]:
        """The records of the rows ending at ``ends`` (the first at ``_pos``, byte ``offset``),
        consumed."""
        buf, start = self._buf, self._pos
        if self._header and self._columns is None:
            if offset > 0:
                self._columns = self._head_columns()
            else:  # the file's first row is its header
                raw = buf[start : ends[0]]
                raw = (
                    raw[:-2] if raw.endswith(b"\r\n") else raw[:-1] if raw.endswith(b"\n") else raw
                )
                self._columns = self._parse_header(self._header_text(raw, offset), offset)
                start = ends[0]
                ends = ends[1:]
        # Typed before anything is consumed: a row that fails (on_bad_row = "fail") raises
        # with the offset still before it.
        self.offsets = []
        records = self._block(buf[start : ends[-1]]) if ends else None
        if records is None:
            records = self._rows(buf, start, ends, offset)
        elif self._record_offsets:  # every row of the block but blank lines, as Arrow reads
            at = offset - self._pos
            row = start
            for end in ends:
                if end - row > 2 or (end - row == 2 and buf[row] != 13):  # not "\n", "\r\n"
                    self.offsets.append(at + row)
                row = end
        if ends:
            start = ends[-1]
        size = start - self._pos
        self._pos = start
        self._scan = 0
        self._quoted = False
        if last:
            self._buf, self._pos = b"", 0
        return records, size

    def _rows(self, buf: bytes, start: int, ends: Sequence[int], offset: int) -> Any:
        """The records of the rows from ``start`` ending at ``ends``, one row at a time."""
        texts: list[str] = []
        offsets: list[int] = []
        for end in ends:
            at = offset + (start - self._pos)
            raw = buf[start:end]
            start = end
            if raw.endswith(b"\n"):
                raw = raw[:-2] if raw.endswith(b"\r\n") else raw[:-1]
            if not raw:
                continue  # a blank line is no row (as pyarrow's and Spark's readers skip it)
            try:
                text = raw.decode(self._encoding)
            except UnicodeDecodeError as exc:
                reason = f"bytes that are not {self._encoding} at offset {exc.start} of the row"
                self._bad(at, reason, raw.decode(self._encoding, "replace"))
                continue
            texts.append(text)
            offsets.append(at)
        return self._typed(texts, offsets)

    def _block(self, block: bytes) -> Columns | None:
        """The records of a block of whole CSV rows parsed and typed by Arrow at once, or
        ``None`` when the block needs the row-at-a-time path: it has a quote, an escape, a CR
        that ends no line or a byte-order mark (where Arrow's reader and Python's differ), or
        a row that does not fit (which that path names). Where this succeeds it gives what
        the row-at-a-time path gives (a property test holds them equal)."""
        options = self._arrow
        if (
            options is None
            or self._quote in block
            or (self._escape is not None and self._escape in block)
            or (b"\r" in block and block.count(b"\r") != block.count(b"\r\n"))
            or block.startswith(b"\xef\xbb\xbf")
        ):
            return None
        names = self._columns if self._columns is not None else self._schema_names
        if len(set(names)) != len(names):
            return None  # a header naming a column twice: the row path keeps the last one
        parse, convert = options
        try:
            table = pacsv.read_csv(
                pa.py_buffer(block),
                read_options=pacsv.ReadOptions(column_names=names, use_threads=False),
                parse_options=parse,
                convert_options=convert,
            )
        except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError):
            return None
        return Columns(table)

    def _head_columns(self) -> list[str]:
        """The header of a file read from its start (reading began past it)."""
        length = _HEAD
        while True:
            head = self._read_head(self._path, length)
            saved = (self._buf, self._pos, self._scan, self._quoted)
            self._buf, self._pos, self._scan, self._quoted = head, 0, 0, False
            try:
                ends = self._row_ends(1)
            finally:
                self._buf, self._pos, self._scan, self._quoted = saved
            if ends or len(head) < length:
                break
            length *= 4  # a header longer than what was read: read more
        if not ends:
            msg = f"{self._display}: the header row has no line end"
            raise ValueError(msg)
        raw = head[: ends[0]].rstrip(b"\n").rstrip(b"\r")
        return self._parse_header(self._header_text(raw, 0), 0)

    def _header_text(self, raw: bytes, at: int) -> str:
        try:
            return raw.decode(self._encoding)
        except UnicodeDecodeError as exc:
            msg = (
                f"{self._display} at byte {at}: the header row is not {self._encoding} "
                f"(byte {exc.start} of it); give [source] encoding"
            )
            raise BadRecordError(msg, file=self._path, offset=at) from None

    def _parse_header(self, text: str, at: int) -> list[str]:
        try:
            names = self._split(text)
        except (csv.Error, ValueError) as exc:
            msg = f"{self._display} at byte {at}: the header row is not CSV ({exc}): {text!r}"
            raise ValueError(msg) from None
        if self._schema is not None:
            missing = [n for n in self._schema.names if n not in names]
            if missing:
                msg = (
                    f"{self._display}: the header row has no column {missing[0]!r} of "
                    f"[source.schema] (it has: {', '.join(names)})"
                )
                raise ValueError(msg)
            extra = [n for n in names if n not in self._schema.names]
            if extra:
                logger.warning(
                    "%s: columns %s are not in [source.schema] and are left out",
                    self._display,
                    ", ".join(extra),
                )
        return list(names)

    def _typed(self, texts: list[str], offsets: list[int]) -> Any:
        """Records of the rows' texts; a row that does not fit is handled by ``on_bad_row``."""
        rows: list[Any] = []
        kept: list[tuple[int, str]] = []  # (offset, text) of each row parsed
        for text, at in zip(texts, offsets, strict=True):
            try:
                row = self._parse(text)
            except ValueError as exc:
                self._bad(at, str(exc), text)
                continue
            rows.append(row)
            kept.append((at, text))
        schema = self._schema
        if self._record_offsets:
            self.offsets = [at for at, _ in kept]  # kept in step below as rows go bad
        if schema is None:
            return rows
        if not rows:
            return self._empty
        while True:
            arrays = []
            try:
                for field in schema:
                    name = field.name
                    values = [r.get(name) for r in rows]
                    arrays.append(column(values, field))
            except BadValue as exc:
                i = exc.index
                at, text = kept[i]
                self._bad(at, str(exc), text, exc.name)
                del rows[i], kept[i]
                if self._record_offsets:
                    del self.offsets[i]
                if not rows:
                    return self._empty
                continue
            return Columns(pa.RecordBatch.from_arrays(arrays, schema=schema))

    def _parse(self, text: str) -> dict[str, Any]:
        if not self._csv:
            try:
                value = json.loads(text)
            except json.JSONDecodeError as exc:
                raise ValueError(f"not JSON at character {exc.pos} ({exc.msg})") from None
            if not isinstance(value, dict):
                raise ValueError(f"a JSON {type(value).__name__}, not an object")
            return value
        try:
            fields = self._split(text)
        except (csv.Error, ValueError) as exc:
            raise ValueError(f"not one CSV row ({exc})") from None
        names = self._columns
        if names is None:
            assert self._schema is not None
            names = self._schema.names
        if len(fields) != len(names):
            raise ValueError(f"{len(fields)} fields where the columns are {len(names)}")
        nulls = self._nulls
        return {n: (None if v in nulls else v) for n, v in zip(names, fields, strict=True)}

    def _split(self, text: str) -> list[str]:
        """The fields of one row's text (ValueError or csv.Error when it is not one row)."""
        rows = list(
            csv.reader(
                [text],
                delimiter=self._delimiter,
                quotechar=self._quotechar,
                escapechar=self._escapechar,
                doublequote=self._escapechar is None,
                strict=True,
            )
        )
        if len(rows) != 1:
            raise ValueError(f"{len(rows)} rows in one")
        return rows[0]

    def _bad(self, offset: int, reason: str, text: str, field: str | None = None) -> None:
        where = f"{self._display} at byte {offset}"
        if self._on_bad == "fail":
            msg = f"{where}: {reason}: {short(text, 120)}; on_bad_row = 'reject' or 'skip' reads on"
            raise BadRecordError(msg, file=self._path, offset=offset, field=field)
        if self._on_bad == "skip":
            self.skipped += 1
            logger.warning("skipped the row of %s: %s: %s", where, reason, short(text, 120))
            return
        self._rejected.append(Rejected(self._display, offset, reason, text))


class _LineEnds(Sequence[int]):
    """The ends (past the LF) of the first whole lines of ``buf`` from ``start``: the last is
    found at once, the others only when asked for (a block Arrow reads needs none of them)."""

    def __init__(self, buf: bytes, start: int, last: int, count: int) -> None:
        self._buf, self._start, self._last, self._count = buf, start, last, count
        self._ends: list[int] | None = None

    @classmethod
    def of(cls, buf: bytes, start: int, want: int, span: int) -> _LineEnds:
        """The ends of up to ``want`` lines, looked for ``span`` bytes at a time, the span
        doubled each time (reading the lines of a large buffer for each block would cost more
        than reading it). The line ends of a span are listed by numpy, which does it several
        times faster than ``bytes.count`` counts them."""
        data = np.frombuffer(buf, np.uint8)
        count, at = 0, start
        last = start
        while at < len(buf):
            stop = min(len(buf), at + span)
            ends = np.flatnonzero(data[at:stop] == _LF)
            if count + len(ends) >= want:
                return cls(buf, start, at + int(ends[want - count - 1]) + 1, want)
            if len(ends):
                last = at + int(ends[-1]) + 1
            count += len(ends)
            at, span = stop, span * 2
        return cls(buf, start, last, count)

    def __len__(self) -> int:
        return self._count

    def __getitem__(self, index: int) -> int:  # type: ignore[override]
        if index in (-1, self._count - 1) and self._count:
            return self._last
        return self._list()[index]

    def __iter__(self) -> Iterator[int]:
        return iter(self._list())

    def _list(self) -> list[int]:
        if self._ends is None:
            lines = self._buf[self._start : self._last].split(b"\n")
            lines.pop()
            ends = itertools.accumulate(map(_PLUS_ONE, map(len, lines)), initial=self._start)
            self._ends = list(ends)[1:]
        return self._ends
