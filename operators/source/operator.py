"""HDFS2FileSource: read files as lines or binary blocks, resumable at a byte offset.

Two modes, as in IBM Streams: one file (``settings.file``), or file names pulled one at a time
from a feed (the directory scan, or :class:`FileNameList`). The state is the current path and the
byte offset of the next unread byte; a reset seeks there, so nothing is read again from the start
of a file to find its place. In feed mode the feed's state is nested in the source's state, so
one cut covers both which file comes next and how far the current one was read.

A file named by the feed that no longer exists when it is opened (or vanishes while read) is
skipped with a WARNING naming it: there is nothing left to read, and failing would only replay
the same missing file until the region gives up. In single-file mode a missing file is an error.
"""

from __future__ import annotations

import codecs
import collections
import functools
import logging
import re
import time
import zlib
from collections.abc import Callable, Iterable, Sequence
from typing import Any, Literal, Protocol, runtime_checkable

from pydantic import AliasChoices, BaseModel, ConfigDict, Field, model_validator

from operators.common.errors import OperatorError
from operators.common.schema import schema_problem
from operators.scan.cursor import OnModified
from operators.scan.housekeeping import ReadFile
from operators.source.compressed import Compression, Decompressed
from operators.source.decoding import LineBlock, OnDecodeError, line_encoding_problem
from operators.source.ledger import EDGE, HEAD, Read, ReadLedger, may_grow, prefix_crc
from operators.source.readahead import ReadAhead
from operators.source.records import Blocks, Lines
from operators.source.rows import OnBadRow, Rows
from region.activity import doing
from region.errors import ConfigError, permanent
from region.fs import FileStatus, FileSystem, file_identity, mtime_tracks_writes
from region.settings import Duration, Encoding
from region.state import Batch, StartOperator, State, StateHandler

__all__ = ["FileFeed", "FileNameList", "HDFS2FileSource", "SourceSettings"]

logger = logging.getLogger(__name__)

#: Leading bytes of each file whose CRC-32 the state keeps: a file resumed after a cut must
#: still begin with them (:meth:`HDFS2FileSource._same_head`).
_HEAD = HEAD


@runtime_checkable
class FileFeed(Protocol):
    """Where file-name-input mode gets its files:
    :class:`operators.scan.operator.HDFS2DirectoryScan`,
    :class:`FileNameList`, or anything with ``next_file``. A feed that is also a
    :class:`StateHandler` has its state checkpointed and reset inside the source's state.

    A feed with ``watches_changes = True`` (the scan) finds a file whose mtime changed after
    it handed it out and handles it itself (another file under the name: emitted again as new;
    changed in place: ``on_modified``); the source then leaves such a file to it, so it is
    reported, or read again, once, not twice.
    """

    def next_file(self) -> FileStatus | str | None:
        """The next file to read, or ``None`` when there is none now."""


#: Encodings in which the bytes 0x00-0x7F stand only for themselves (a CSV row's quotes and
#: line ends can be found in the raw bytes).
_ASCII_SAFE = re.compile(r"utf-8(-sig)?|ascii|latin-1|iso8859-\d+|cp125\d|mac-roman")


class SourceSettings(BaseModel):
    """Parameters of the file source; IBM Streams names are accepted as aliases."""

    model_config = ConfigDict(frozen=True, extra="forbid", populate_by_name=True)

    #: The one file to read; ``None`` for file-name-input mode (a feed names the files).
    file: str | None = None
    #: Compressed input: ``auto`` reads ``.gz``, ``.bz2``, ``.zst`` and ``.lz4`` (LZ4 frames)
    #: files decompressed, by their name's extension as Hadoop does; ``none`` reads every file
    #: as it is; a codec (``gzip``, ``bz2``, ``zstd``, ``lz4``) reads every file with it.
    #: Offsets count decompressed bytes: a resume decompresses again from the file's start.
    compression: Compression = "auto"
    #: ``line``: one ``str`` record per line (LF or CRLF); ``binary``: ``bytes`` blocks;
    #: ``csv`` and ``jsonl``: one record with columns (a mapping) per row, typed by
    #: ``[source.schema]`` (required for CSV); a quoted CSV value may hold line ends.
    format: Literal["line", "binary", "csv", "jsonl"] = "line"
    #: Column name to type (the names of ``[sink.schema]``): the columns read, converted
    #: without loss; a file's other columns are left out.
    schema_: dict[str, str] | None = Field(None, alias="schema")
    #: CSV: the first row of each file names the columns (else they are the schema's, in order).
    header: bool = True
    #: CSV: the field separator (one character).
    delimiter: str = Field(",", min_length=1, max_length=1)
    #: CSV: the quote character (one character).
    quote: str = Field('"', min_length=1, max_length=1)
    #: CSV: the escape character inside quoted values (``None``: a quote is doubled).
    escape: str | None = Field(None, min_length=1, max_length=1)
    #: CSV: field values read as null.
    null_values: tuple[str, ...] = ("",)
    #: A CSV or JSON row that does not fit (a value that does not convert, another number of
    #: fields, not a JSON object, bytes that do not decode): ``reject`` hands it, named by
    #: file, byte offset, column and value, to the sink's rejects (``[sink] rejects_file``;
    #: without one the sink logs it at ERROR); ``skip`` logs it (WARNING) and counts it;
    #: ``fail`` stops the run with that message.
    on_bad_row: OnBadRow = "reject"
    #: Character encoding of line-mode input (any Python codec that keeps newline bytes).
    encoding: Encoding = "utf-8"
    #: Undecodable line: ``fail`` (error naming file and byte offset), ``replace`` (U+FFFD) or
    #: ``skip`` (dropped, with a WARNING naming file and offset, counted in ``records_skipped``).
    #: The rule is :mod:`operators.source.decoding`'s, shared with the Spark source.
    on_decode_error: OnDecodeError = Field(
        "fail", validation_alias=AliasChoices("on_decode_error", "onDecodeError")
    )
    #: Bytes per record in binary mode (the last block of a file may be shorter).
    block_size: int = Field(4096, gt=0, validation_alias=AliasChoices("block_size", "blockSize"))
    #: Seconds before the first read.
    init_delay: Duration = Field(0.0, validation_alias=AliasChoices("init_delay", "initDelay"))
    #: Bytes asked of the filesystem per read.
    read_chunk: int = Field(4 << 20, gt=0, validation_alias=AliasChoices("read_chunk", "readChunk"))

    @model_validator(mode="after")
    def _lines_need_ascii_newlines(self) -> SourceSettings:
        problem = line_encoding_problem(self.encoding) if self.format != "binary" else None
        if problem is not None:
            raise ValueError(problem)
        return self

    @model_validator(mode="after")
    def _rows(self) -> SourceSettings:
        fmt = self.format
        if self.schema_ is not None:
            problem = schema_problem(self.schema_)
            if problem is not None:
                raise ValueError(f"[source.schema] {problem}")
            if fmt not in ("csv", "jsonl"):
                msg = f"[source.schema] is for csv and jsonl; format={fmt!r} reads {fmt}s"
                raise ValueError(msg)
        elif fmt == "csv":
            msg = (
                "format='csv' needs [source.schema], the type of each column, e.g. "
                'schema = { id = "int64", name = "string", day = "date" }'
            )
            raise ValueError(msg)
        if fmt == "csv" and len({self.delimiter, self.quote, self.escape or "", "\n"}) < 4:
            msg = (
                f"delimiter={self.delimiter!r}, quote={self.quote!r} and escape={self.escape!r} "
                "must differ from each other and from a line end"
            )
            raise ValueError(msg)
        if fmt == "csv" and not all(c.isascii() for c in self.delimiter + self.quote):
            raise ValueError("delimiter and quote must be ASCII characters")
        codec = codecs.lookup(self.encoding).name
        if fmt == "csv" and not _ASCII_SAFE.fullmatch(codec):
            msg = (
                f"format='csv' finds quotes and line ends as bytes, and encoding="
                f"{self.encoding!r} may hold those bytes inside a character: use utf-8, ascii, "
                "latin-1, iso8859-* or cp125* (or recode the files)"
            )
            raise ValueError(msg)
        return self


class FileNameList(StateHandler):
    """A fixed list of paths, handed out one at a time. State: ``{"index": next position}``."""

    def __init__(self, paths: Iterable[str], *, name: str = "files") -> None:
        self.name = name
        self._paths = list(paths)
        self._index = 0

    def next_file(self) -> str | None:
        if self._index >= len(self._paths):
            return None
        self._index += 1
        return self._paths[self._index - 1]

    def drain(self) -> None:
        pass

    def checkpoint(self, cut_id: int) -> dict[str, Any]:
        return {"index": self._index}

    def reset(self, state: State) -> None:
        self._index = int(state["index"])

    def reset_to_initial_state(self) -> None:
        self._index = 0


def _run_on(prefix: tuple[int, int], at: int, data: bytes, stop: int) -> tuple[int, int] | None:
    """``prefix`` (pos, CRC-32 of a file's bytes ``[0, pos)``) run on over the chunk ``data``
    read at ``at``, up to ``stop``; ``None`` when the chunk begins after ``pos`` (a gap)."""
    pos, crc = prefix
    end = min(at + len(data), stop)
    if end <= pos:
        return prefix
    if at > pos:
        return None
    return end, zlib.crc32(data[pos - at : end - at], crc)


class HDFS2FileSource(StartOperator):
    """Records of one file, or of each file a feed names, with a punctuation after each file.

    State: ``{"path": str | None, "offset": int, "done": bool, "opened": [mtime_ns, size,
    file_id, head_length, head_crc32] | None, "files": feed state | None}`` where ``offset`` is
    the byte offset of the next unread byte of ``path`` (``None`` between files), ``done`` is
    set in single-file mode once the file's punctuation went out, ``opened`` is the file's
    mtime, size and id (inode or HDFS fileId, as :func:`region.fs.file_identity` reads it;
    ``null`` where the filesystem has none) when it was opened, and the CRC-32 of its first
    ``head_length`` bytes read (at most :data:`_HEAD` and never past ``offset``; ``null`` before
    a first read). A file replaced since, another id or other leading bytes, is never resumed
    at the old offset. ``files`` is the feed's own checkpoint when the feed is a state handler.
    ``ledger`` (``on_modified = "continue"``) is what was read, by content; ``held`` (when
    any) lists ``[path, mtime_ns, size]`` of files whose unterminated last line waits.
    """

    def __init__(
        self,
        settings: SourceSettings,
        fs: FileSystem,
        *,
        files: FileFeed | None = None,
        name: str = "source",
        clock: Callable[[], float] = time.time,
        on_modified: OnModified | None = None,
        encoded_for: str | None = None,
        remember_files: int | None = None,
        remember_for: float | None = None,
        content_check: str | None = None,
        hold_partial_line: float | None = None,
    ) -> None:
        """``encoded_for``: the encoding of the only reader of the records, a sink writing
        lines as they come (no transform between): when it is this source's UTF-8 or ASCII,
        lines are :class:`~operators.source.decoding.EncodedLines`, checked to decode but not
        decoded. ``on_modified``, ``remember_files`` and ``remember_for`` are the feed's own
        settings (a directory scan's) unless given: the scan emits a changed file again and
        the source decides where it starts, by one rule. So are ``content_check`` and
        ``hold_partial_line`` (``continue`` only): an unterminated last line of a young file
        is held back."""
        feed_settings = getattr(files, "settings", None)
        if on_modified is None:
            on_modified = getattr(feed_settings, "on_modified", "warn")
        if remember_files is None:
            remember_files = int(getattr(feed_settings, "remember_files", 100_000))
        if remember_for is None:
            remember_for = float(getattr(feed_settings, "remember_for", 7 * 86400.0))
        if hold_partial_line is None:
            hold_partial_line = float(getattr(feed_settings, "hold_partial_line", 30.0))
        if content_check is None:
            content_check = str(getattr(feed_settings, "content_check", "windows"))
        if (settings.file is None) == (files is None):
            msg = (
                f"{name}: give either settings.file (one file) or files (a feed), not both or none"
            )
            raise ValueError(msg)
        self.name = name
        self.settings = settings
        # Compressed files read as their decompressed bytes (operators.source.compressed).
        if isinstance(fs, Decompressed):
            fs = fs.inner
        self._fs: FileSystem = (
            fs if settings.compression == "none" else Decompressed(fs, settings.compression)
        )
        self._files = files
        self._stateful_feed: StateHandler | None = (
            files if isinstance(files, StateHandler) else None
        )
        if files is not None and self._stateful_feed is None:
            logger.warning(
                "%s: the file feed %r keeps no state: after a reset it cannot name again the files "
                "handed out after the cut",
                name,
                files,
            )
        self._clock = clock
        self._not_before = clock() + settings.init_delay
        self._binary = settings.format == "binary"
        # The bytes read ahead of the offset, as the records they become.
        self._pending: Lines | Blocks | Rows
        if self._binary:
            self._pending = Blocks(settings.block_size)
        elif settings.format in ("csv", "jsonl"):
            self._pending = Rows(
                "csv" if settings.format == "csv" else "jsonl",
                encoding=settings.encoding,
                schema=settings.schema_,
                header=settings.header,
                delimiter=settings.delimiter,
                quote=settings.quote,
                escape=settings.escape,
                null_values=settings.null_values,
                on_bad_row=settings.on_bad_row,
                read_head=lambda path, length: self._fs.read(path, 0, length),
            )
        else:
            self._pending = Lines(settings.encoding, settings.on_decode_error, encoded_for)
        self.files_opened = 0
        self.records = 0
        self.bytes = 0
        self.files_vanished = 0
        self.files_modified = 0
        #: What a file replaced since the cut does (the scan's ``on_modified``).
        self.on_modified = on_modified
        #: ``continue``: what was read of each file, by content (:mod:`operators.source.ledger`): a
        #: file the feed names again continues where its content was read to.
        self._ledger: ReadLedger | None = None
        if on_modified == "continue" and files is not None:
            self._ledger = ReadLedger(keep_files=remember_files, keep_for=remember_for)
        #: ``content_check = "exact"``: what is remembered of a file is the CRC-32 of every byte
        #: read (``_prefix``, run on as chunks are read), not two windows of it.
        self._exact = self._ledger is not None and content_check == "exact"
        # ``continue``: files whose unterminated last line is held back, path -> (mtime_ns,
        # size) when held and when (this clock) it was first seen so: read on from where
        # they were read to (the ledger's) once unchanged for ``_hold`` seconds; a change
        # sends them through the feed again. ``_release``: the file read so now.
        self._hold = hold_partial_line if self._ledger is not None else 0.0
        self._held: dict[str, tuple[int, int, float]] = {}
        self._release: str | None = None
        # Checkpointed state; _opened is (mtime_ns, size, file id) of the file when it was
        # opened, _head (length, CRC-32) of its leading bytes read.
        self._path: str | None = settings.file
        self._offset = 0
        self._done = False
        self._opened: tuple[int, int, int | None] | None = None
        self._head: tuple[int, int] | None = None
        # Not state: the id the feed handed with the file, and the file's first bytes read.
        self._entry_id: int | None = None
        self._head_bytes: bytes | None = None
        self._clear_reader()

    def _clear_reader(self) -> None:
        """Forget everything read ahead: the next read starts at ``_offset``."""
        self._open = False
        self._eof = False
        self._read_pos = self._offset
        self._ahead: ReadAhead | None = None  # a read of the next chunk under way
        self._pending.clear()
        # ``continue``: the chunks read from EDGE bytes before the offset on, (start offset,
        # bytes): what is remembered of a file ends at the offset (the chunks are held for
        # their lines anyway, but for the one before).
        self._chunks: collections.deque[tuple[int, bytes]] = collections.deque()
        # ``continue``: (offset, length, CRC-32) of the bytes before the offset of the last
        # checkpoint, as read before it (restored by a reset).
        self._edge_at: tuple[int, int, int] | None = None
        # The exact check: (pos, CRC-32 of the file's bytes [0, pos)) as read, run on over the
        # chunks dropped; ``None`` when a part of them was not read by this process.
        self._prefix: tuple[int, int] | None = (0, 0) if self._offset == 0 else None

    # -- reading ----------------------------------------------------------------------------

    def next_batch(self, max_records: int) -> Batch | None:
        """Up to ``max_records`` records of the current file; the batch that ends a file carries
        the punctuation (its records may be empty). ``None`` when no file is available now."""
        if max_records < 1:
            raise ValueError(f"{self.name}: max_records must be >= 1, got {max_records}")
        if self._done or self._clock() < self._not_before:
            return None
        while True:
            if self._path is None and not self._release_due() and not self._pull_next_file():
                return None
            path = self._path
            assert path is not None
            if not self._open and not self._open_current(path):
                # Vanished before we could read it. If records of it went out before the cut,
                # close its window; else nothing of it was ever seen: just move on.
                had_records = self._offset > 0
                self._finish_file()
                if had_records:
                    return Batch([], punctuation=True, origin=path)
                continue
            start = self._offset
            records = self._read_records(max_records)
            # Taken with the records (before the file is finished, which clears the reader).
            rejected = self._pending.take_rejected() if isinstance(self._pending, Rows) else []
            size = self._offset - start
            at_end = self._at_end()
            if at_end:
                self._remember(path)
                if path not in self._held:  # after_read waits for the held line
                    self._read_to_end(path)
                self._finish_file()
            return Batch(records, punctuation=at_end, origin=path, size=size, rejected=rejected)

    def _pull_next_file(self) -> bool:
        assert self._files is not None
        entry = self._files.next_file()
        if entry is None:
            return False
        self._path = entry.path if isinstance(entry, FileStatus) else entry
        self._entry_id = entry.file_id if isinstance(entry, FileStatus) else None
        self._held.pop(self._path, None)  # changed since: read on from where it was read to
        self._offset = 0
        self._opened = None
        self._head = self._head_bytes = None
        self._clear_reader()
        return True

    def _release_due(self) -> bool:
        """Make the current file one whose held line is due: unchanged for ``_hold`` seconds
        since it was held. It continues where it was read to (the ledger's), and its last
        line is emitted whether it ends with a newline or not. ``False`` when none is due."""
        if not self._held:
            return False
        now = self._clock()
        for path, (mtime_ns, size, seen) in list(self._held.items()):
            if now - seen < self._hold:
                continue
            del self._held[path]
            try:
                status = self._fs.status(path)
            except FileNotFoundError:
                continue  # renamed away: its new name continues by content
            if (status.mtime_ns, status.size) != (mtime_ns, size):
                continue  # changed since: the feed names it again
            self._path, self._entry_id, self._release = path, status.file_id, path
            self._offset = 0
            self._opened = None
            self._head = self._head_bytes = None
            self._clear_reader()
            return True
        return False

    def _hold_tail(self) -> bool:
        """At the end of the file with an unterminated line read: whether it is held back
        (``hold_partial_line``): the file changed within that time, so its writer may still
        be writing the line. An mtime ahead of this clock counts as changed now; where the
        mtime moves only when a file is closed (HDFS), every such line is held once."""
        path = self._path
        if self._hold <= 0 or path is None or path == self._release:
            return False
        try:
            status = self._fs.status(path)
        except FileNotFoundError:
            return False
        now = self._clock()
        current = mtime_tracks_writes(self._fs)
        if not may_grow(
            status.mtime_ns, round(now * 1e9), round(self._hold * 1e9), mtime_current=current
        ):
            return False
        self._held[path] = (status.mtime_ns, status.size, now)
        logger.debug(
            "%s: %s ends with a line without newline at byte %d: held for up to %.0f s",
            self.name,
            self._fs.display(path),
            self._offset,
            self._hold,
        )
        return True

    def _open_current(self, path: str) -> bool:
        try:
            status = self._fs.status(path)
        except FileNotFoundError:
            if self._files is None:
                msg = f"{self.name}: file {self._fs.display(path)} does not exist"
                raise FileNotFoundError(msg) from None
            self._vanished(path)
            self._remember(path)  # renamed away mid-file: its new name continues there
            return False
        if status.file_id is None:
            # The id the scan read for this file where the listing leaves it out (hdfs://),
            # else read now the same way: one rule for the scan and the source.
            fresh = self._offset == 0 and self._entry_id is not None
            status = status._replace(
                file_id=self._entry_id if fresh else file_identity(self._fs, status)
            )
        fresh = self._offset == 0
        if self._offset > 0 and self._replaced(status):
            seen_by_scan = self._scan_sees(status)
            if self._ledger is not None:
                # What was read of the file before stays known (a rotated copy of it
                # continues there), aside: the name holds other bytes now.
                self._remember(path)
                self._ledger.set_aside(path)
            if self.on_modified in ("reread", "continue") and not seen_by_scan:
                self._offset = 0  # the new content is read whole, as a new file
            else:
                # Never resumed at the old offset. With a new mtime the scan finds the file
                # changed and handles it (another file: emits it again as new; changed in
                # place: on_modified), so it is handled once, there.
                self._opened = None
                return False
        if self._offset == 0 or self._opened is None:
            self._opened = (status.mtime_ns, status.size, status.file_id)
            self._head = self._head_bytes = None
        if self._offset == 0:
            self._prefix = (0, 0)  # nothing read of it yet: the exact check runs from byte 0
        if fresh and self._ledger is not None and not self._continue(status):
            return False
        self._open = True
        self._read_pos = self._offset
        self._pending.reading(path, self._fs.display(path))
        self.files_opened += 1
        logger.debug("%s: reading %s from byte %s", self.name, path, self._offset)
        return True

    def _continue(self, status: FileStatus) -> bool:
        """Start a file the feed names at the byte its content was read to before (rule of
        :mod:`operators.source.ledger`); ``False`` when it vanished meanwhile."""
        assert self._ledger is not None
        self._forget_moved()
        path = status.path
        want = self.settings.read_chunk
        # A file not read before under this name (new, most likely): its first chunk, what the
        # comparison reads and the reader's first read, so a new file costs no read more. One
        # read before (grown, most likely): its head only, so what it costs is what grew.
        first_length = min(want, HEAD) if path in self._ledger else want
        try:
            with doing(f"{self.name}: reading {self._fs.display(path)} at byte 0"):
                first = self._fs.read(path, 0, first_length)

            def read(p: str, offset: int, length: int) -> bytes:
                if p == path and (offset + length <= len(first) or len(first) < first_length):
                    return first[offset : offset + length]
                return self._fs.read(p, offset, length)

            where = self._ledger.start(
                path, status.size, read, name=self.name, display=self._fs.display
            )
        except FileNotFoundError:
            self._vanished(path)
            return False
        if len(first) < first_length:  # the whole file: the rest of it is in hand
            self._ahead = ReadAhead.ready(path, where.offset, want, first[where.offset :])
        elif where.offset == 0 and first_length == want:
            self._ahead = ReadAhead.ready(path, 0, want, first)
        if where.offset > 0:
            earlier = self._ledger.get(path)  # what it continues, now under its name
            assert earlier is not None
            self._offset = self._read_pos = where.offset
            self._head = (earlier.head_len, earlier.head_crc)
            exact = earlier.edge_len == earlier.length == where.offset
            self._prefix = (where.offset, earlier.edge_crc) if exact else None
        return True

    def _forget_moved(self) -> None:
        """Forget the content of the files the feed moved away (``after_read``): what lands
        under such a name later is a new file, whatever its bytes."""
        moved_away = getattr(self._files, "moved_away", None)
        if moved_away is not None:
            for read in moved_away():  # drained under any policy: the feed keeps none
                if self._ledger is not None:
                    self._ledger.forget(read.path, read.size)

    def _remember(self, path: str) -> None:
        """What was read of ``path`` up to the offset, for :meth:`_continue`: at its end, and
        where a read stops in the middle (the file vanished, renamed away, or was replaced:
        the file that has its bytes now, a rotated copy, continues there)."""
        if self._ledger is None or self._offset == 0:
            return
        read = self._read_up_to_offset(path)
        if read is not None:
            self._ledger.remember(path, read)

    def _read_up_to_offset(self, path: str) -> Read | None:
        """The :class:`~operators.source.ledger.Read` of ``path`` up to ``_offset``, from the bytes
        this process read (the file may be gone or other by now), else from the checkpoint's,
        else from the file; ``None`` when none of them has them."""
        length = self._offset
        edge = self._bytes_before(length, min(length, EDGE))
        # The leading bytes as read: at most HEAD, maybe fewer (a first chunk that short).
        head: bytes | None = self._head_bytes
        try:
            exact = self._exact_edge(path, length) if self._exact else None
            if exact is not None:
                edge_len, edge_crc = exact
            elif edge is None and self._edge_at is not None and self._edge_at[0] == length:
                edge_len, edge_crc = self._edge_at[1], self._edge_at[2]
            else:
                if edge is None:
                    edge = self._fs.read(path, max(0, length - EDGE), min(length, EDGE))
                edge_len, edge_crc = len(edge), zlib.crc32(edge)
            if head is not None:
                head = head[: min(length, HEAD)]
                head_len, head_crc = len(head), zlib.crc32(head)
            elif self._head is not None:
                head_len, head_crc = self._head
            else:
                data = self._fs.read(path, 0, min(length, HEAD))
                head_len, head_crc = len(data), zlib.crc32(data)
        except FileNotFoundError:
            logger.warning(
                "%s: what was read of %s (%d bytes) is not remembered: it is gone; a copy of it "
                "landing later is read whole",
                self.name,
                self._fs.display(path),
                length,
            )
            return None
        return Read(length, head_len, head_crc, edge_len, edge_crc, self._clock())

    def _exact_edge(self, path: str, length: int) -> tuple[int, int] | None:
        """The exact check's edge at ``length``: ``(length, CRC-32 of the first length
        bytes)`` as this process read them, else read again from the file (once, where its
        read began elsewhere: a checkpoint of the windows check); ``None`` when shorter."""
        crc = self._prefix_at(length)
        if crc is None:
            crc = prefix_crc(path, length, self._fs.read)
        return None if crc is None else (length, crc)

    def _prefix_at(self, offset: int) -> int | None:
        """The CRC-32 of the file's first ``offset`` bytes as this process read them: the
        running CRC, on over the chunks held; ``None`` when a part was not read here."""
        prefix = self._prefix
        if prefix is None or prefix[0] > offset:
            return None
        for at, data in self._chunks:
            if prefix is None or prefix[0] >= offset:
                break
            prefix = _run_on(prefix, at, data, offset)
        return prefix[1] if prefix is not None and prefix[0] == offset else None

    def _drop_chunk(self) -> None:
        """The oldest chunk held, no longer needed for an edge: the exact check runs its CRC
        on over it first."""
        at, data = self._chunks.popleft()
        if self._exact and self._prefix is not None:
            self._prefix = _run_on(self._prefix, at, data, at + len(data))

    def _bytes_before(self, offset: int, n: int) -> bytes | None:
        """Up to ``n`` bytes before ``offset`` from the chunks this process read: fewer when
        its read began later (resumed, or continued), ``None`` when it read none there."""
        out = b""
        for at, data in reversed(self._chunks):
            if at >= offset:
                continue
            if at + len(data) < offset - len(out):
                break  # a gap: not contiguous
            out = data[: offset - len(out) - at] + out
            if len(out) >= n:
                return out[len(out) - n :]
        return out if out or n == 0 else None

    def _replaced(self, status: FileStatus) -> bool:
        """Whether the file resumed at ``_offset`` is no longer the one read before the cut:
        another file id (inode, HDFS fileId) than when it was opened, other leading bytes than
        those read (the head's CRC-32: where no id is known, hdfs:// without WebHDFS, this is
        what tells a new export written over the name from the file grown), shorter than what
        was read, or shorter than when it was opened with a new mtime (a file that only grew is
        the same file: resuming reads on from the same byte). A replaced file is never resumed
        at the old offset: ``on_modified`` says what happens instead."""
        opened = self._opened
        other_id = (
            self._ledger is None  # the content decides, never the id alone
            and opened is not None
            and opened[2] is not None
            and status.file_id is not None
            and status.file_id != opened[2]
        )
        if (
            not other_id
            and status.size >= self._offset
            and (opened is None or status.mtime_ns == opened[0] or status.size >= opened[1])
            and self._same_head(status.path)
        ):
            return False
        display = self._fs.display(status.path)
        message = (
            f"{self.name}: file {display} was replaced since the cut (it has {status.size} "
            f"bytes; {self._offset} were read"
            + ("" if opened is None else f" of the {opened[1]} it had")
            + ")"
        )
        if self.on_modified == "fail" or self._files is None:
            msg = (
                f"{message}: resuming at byte {self._offset} would read into other data. Put the "
                "file read before back, or set [scan] on_modified = 'warn' (the rest of it is "
                "not read) or 'reread' (the new file is read whole)"
            )
            raise permanent(OperatorError(msg))
        if self._scan_sees(status):
            logger.info("%s: not resumed; the scan reads it as new or applies on_modified", message)
            return True
        self.files_modified += 1  # same mtime: the scan cannot tell, so it is reported here
        if self.on_modified == "reread":
            logger.warning("%s: it is read again whole (on_modified = 'reread')", message)
        else:
            logger.warning("%s: the rest of it is not read (on_modified = 'warn')", message)
        return True

    def _same_head(self, path: str) -> bool:
        """Whether the file's leading bytes are still those read before the cut (true when
        none were recorded: a checkpoint of an earlier release)."""
        if self._head is None:
            return True
        length, crc = self._head
        try:
            data = self._fs.read(path, 0, length)
        except FileNotFoundError:
            return True  # gone: the open that follows says so
        return len(data) == length and zlib.crc32(data) == crc

    def _scan_sees(self, status: FileStatus) -> bool:
        """Whether the feed will find this file changed by itself (a new mtime, and a feed
        that watches changes): it then reports and rereads it, not the source."""
        opened = self._opened
        return (
            opened is not None
            and status.mtime_ns != opened[0]
            and bool(getattr(self._files, "watches_changes", False))
        )

    def _vanished(self, path: str) -> None:
        self.files_vanished += 1
        logger.warning(
            "%s: file %s vanished before it was read to the end (at byte %s): skipped",
            self.name,
            self._fs.display(path),
            self._read_pos,
        )

    def _read_to_end(self, path: str) -> None:
        """Tell a feed that keeps files after reading (``after_read``) which file, as read, is
        done: it acts on it once a cut covering its last record is published."""
        finished = getattr(self._files, "finished", None)
        if finished is None or self._opened is None:
            return
        mtime_ns, _, file_id = self._opened
        size = self._offset
        if isinstance(self._fs, Decompressed) and self._fs.codec(path) is not None:
            # The feed knows the file by its raw bytes: the compressed size whose
            # decompression ended here, if it is the file opened (else it is kept).
            read = self._fs.read_whole(path)
            size = read[1] if read is not None and read[0] == mtime_ns else -1
        finished(ReadFile(path, mtime_ns, size, file_id))

    def _finish_file(self) -> None:
        self._release = None
        if self._files is None:
            self._done = True
        else:
            self._path = None
            self._offset = 0
        self._opened = None
        self._head = self._head_bytes = None
        self._clear_reader()

    def _read_chunk(self) -> bytes:
        """The next chunk after ``_read_pos``; sets ``_eof`` on a short read."""
        assert self._path is not None
        want = self.settings.read_chunk
        ahead, self._ahead = self._ahead, None
        head: Callable[[], bytes] | None = None  # the file's first bytes, read after the chunk
        try:
            # Named in messages about a stop or a cut that this read holds up.
            with doing(
                f"{self.name}: reading {self._fs.display(self._path)} at byte {self._read_pos}"
            ):
                if ahead is not None and ahead.key == (self._path, self._read_pos, want):
                    data = ahead.result()
                    if ahead.head_length and ahead.head_length == self._head_length():
                        head = ahead.head
                else:
                    data = self._fs.read(self._path, self._read_pos, want)
        except FileNotFoundError:
            if self._files is None:
                raise
            self._vanished(self._path)
            self._eof = True
            # The rest of the file is gone: an unfinished piece is no record (the complete
            # ones read ahead still go out).
            self._pending.drop_unfinished()
            return b""
        # Reads go by name: a file written over meanwhile must not lend this read its bytes,
        # nor its end to a record left unfinished at the old file's end.
        if (
            self._read_pos > 0
            and (data or self._pending.unfinished())
            and (self._written_over(head) or (not data and self._shrunk()))
        ):
            self._eof = True
            self._pending.drop_unfinished()
            return b""
        if self._read_pos == 0 and self._head is None and self._head_bytes is None:
            self._head_bytes = data[:_HEAD]
        self._read_pos += len(data)
        if self._ledger is not None and data:
            chunks = self._chunks
            chunks.append((self._read_pos - len(data), data))
            while chunks[0][0] + len(chunks[0][1]) <= self._offset - EDGE:
                self._drop_chunk()
        if len(data) < want:
            self._eof = True
        else:
            read = functools.partial(self._fs.read, self._path)
            self._ahead = ReadAhead(
                read, self._path, self._read_pos, want, head=self._head_length()
            )
        return data

    def _head_length(self) -> int:
        """Bytes of the file's start that :meth:`_written_over` compares (0: none known)."""
        if self._head_bytes is not None:
            return len(self._head_bytes)
        return self._head[0] if self._head is not None else 0

    def _written_over(self, head: Callable[[], bytes] | None = None) -> bool:
        """Whether the file no longer begins with the bytes read at its start: another file
        was moved or copied over the name while this one was read (reads go by name), and
        what was just read may be the other file's. One read of at most 4 KiB per chunk after
        the first (``head``: that read, made by the read-ahead after its chunk, off this
        thread); a file that grew, or a cumulative export of the same leading rows, is the
        same file as far as its bytes go."""
        assert self._path is not None
        if self._head_bytes is not None:
            length, crc = len(self._head_bytes), zlib.crc32(self._head_bytes)
        elif self._head is not None:
            length, crc = self._head
        else:
            return False
        try:
            data = head() if head is not None else self._fs.read(self._path, 0, length)
        except FileNotFoundError:
            if self._files is None:
                raise  # the one file: its absence is an error, as at any read
            self._vanished(self._path)
            return True
        if len(data) == length and zlib.crc32(data) == crc:
            return False
        logger.warning(
            "%s: %s was written over while read (its first bytes changed at byte %d): what "
            "was read of it stands, the rest is not read from it; the file is read as it is "
            "now once it is listed again",
            self.name,
            self._fs.display(self._path),
            self._read_pos,
        )
        return True

    def _shrunk(self) -> bool:
        """At the end of what was read with a piece unfinished: whether the file is now
        shorter than what was read of it (written over, or truncated, while read), so that
        piece is not where the file ends: a torn record."""
        assert self._path is not None
        try:
            size = self._fs.status(self._path).size
        except FileNotFoundError:
            if self._files is None:
                raise
            self._vanished(self._path)
            return True
        if size >= self._read_pos:
            return False
        logger.warning(
            "%s: %s has %d bytes, fewer than the %d read of it: it was written over or "
            "truncated while read; the unfinished record at its old end is not emitted, the "
            "file is read as it is now once it is listed again",
            self.name,
            self._fs.display(self._path),
            size,
            self._read_pos,
        )
        return True

    def _at_end(self) -> bool:
        return self._eof and self._pending.empty()

    def _read_records(self, max_records: int) -> Sequence[Any]:
        """Up to ``max_records`` records from the offset on, chunks read as they are needed;
        the offset moves past each record taken (a line that fails to decode takes none). A
        :class:`~operators.source.decoding.LineBlock` of lines is a batch of its own."""
        pending = self._pending
        out: Any = pending.batch()  # a list, or Rows' columns (added to, not extended)
        while len(out) < max_records:
            taken = pending.take(max_records - len(out), self._offset)
            if taken is None and not self._eof:
                pending.push(self._read_chunk())
                continue
            if taken is None:
                # The end of the file as read: an unfinished record left is its last one (a
                # line without newline, a short block), unless the line is held back.
                if not pending.unfinished():
                    break
                if not self._binary and self._hold_tail():
                    # Read again, whole, when its newline lands or it is due.
                    pending.drop_unfinished()
                    break
                taken = pending.take_unfinished(self._offset)
            records, size = taken
            self._consumed(size)
            if isinstance(records, LineBlock) and not out:
                self.records += len(records)
                return records  # as it is: a block is never split into lines to be joined
            out += records
        self.records += len(out)
        batch: Sequence[Any] = out
        return batch

    def _consumed(self, n: int) -> None:
        self._offset += n
        self.bytes += n

    # -- metrics and lifecycle --------------------------------------------------------------

    @property
    def path(self) -> str | None:
        """The file being read (``None`` between files in file-name-input mode)."""
        return self._path

    @property
    def offset(self) -> int:
        """Byte offset of the next record of :attr:`path`."""
        return self._offset

    @property
    def records_skipped(self) -> int:
        """Lines dropped by ``on_decode_error = "skip"`` (each logged)."""
        return self._pending.skipped

    def reading(self) -> tuple[int, int] | None:
        """``(mtime_ns, bytes not read yet)`` of the file being read, or ``None`` between files.
        Safe from another thread (a metrics scrape): plain attribute reads."""
        opened, path = self._opened, self._path
        if path is None or opened is None:
            return None
        return opened[0], max(0, opened[1] - self._offset)

    def metrics(self) -> dict[str, int]:
        return {
            "files_opened": self.files_opened,
            "records": self.records,
            "bytes": self.bytes,
            "records_skipped": self.records_skipped,
            "files_vanished": self.files_vanished,
            "files_modified": self.files_modified,
        }

    def exhausted(self) -> bool:
        return self._done

    def holding(self) -> bool:
        return bool(self._held)

    def poll_interval(self) -> float:
        wait = self._not_before - self._clock()
        if wait > 0:
            return wait
        poll = getattr(self._files, "poll_interval", None)
        return float(poll()) if callable(poll) else 0.05

    def drain(self) -> None:
        """Nothing is buffered downstream of the offset: records read ahead are not emitted."""
        if self._stateful_feed is not None:
            self._stateful_feed.drain()

    def checkpoint(self, cut_id: int) -> dict[str, Any]:
        feed = self._stateful_feed
        head = self._head
        if self._head_bytes is not None and self._offset > 0:
            # Never past the offset: bytes not read yet are not what a resume relies on.
            data = self._head_bytes[: self._offset]
            head = self._head = (len(data), zlib.crc32(data))
        opened = None if self._opened is None else [*self._opened, *(head or (None, None))]
        if opened is not None and self._ledger is not None and self._offset > 0:
            # What a rotated copy of the file would be matched with, were the file renamed
            # away or replaced while the job is down: the bytes before the offset, as read
            # (the exact check: all of them).
            crc = self._prefix_at(self._offset) if self._exact else None
            edge = (
                None
                if crc is not None
                else self._bytes_before(self._offset, min(self._offset, EDGE))
            )
            if crc is not None:
                self._edge_at = (self._offset, self._offset, crc)
            elif edge is not None:
                self._edge_at = (self._offset, len(edge), zlib.crc32(edge))
            at = self._edge_at
            opened += [at[1], at[2]] if at is not None and at[0] == self._offset else [None, None]
        self._forget_moved()  # the cut's memory holds no file after_read moved away
        return {
            "path": self._path,
            "offset": self._offset,
            "done": self._done,
            "opened": opened,
            "files": dict(feed.checkpoint(cut_id)) if feed is not None else None,
            **({"ledger": self._ledger.state()} if self._ledger is not None else {}),
            **({"held": [[p, m, s] for p, (m, s, _) in self._held.items()]} if self._held else {}),
            **({"codec": codec} if (codec := self._codec(self._path)) else {}),
        }

    def _codec(self, path: str | None) -> str | None:
        """The codec the file ``path`` is read with (``None``: its bytes as they are)."""
        if path is None or not isinstance(self._fs, Decompressed):
            return None
        return self._fs.codec(path)

    def reset(self, state: State) -> None:
        path = state.get("path")
        if self._files is None and path != self.settings.file:
            msg = (
                f"{self.name}: the checkpoint is for file {path!r} but the source reads "
                f"{self.settings.file!r}"
            )
            raise OperatorError(msg)
        if self._stateful_feed is not None:
            files_state = state.get("files")
            if files_state is None:
                self._stateful_feed.reset_to_initial_state()
            else:
                self._stateful_feed.reset(files_state)
        if self._ledger is not None:
            self._ledger.restore(state.get("ledger"))
        now = self._clock()  # a held line waits its time again from the restart
        self._held = {str(p): (int(m), int(s), now) for p, m, s in state.get("held", ())}
        self._release = None
        self._path = path
        self._offset = int(state.get("offset", 0))
        self._done = bool(state.get("done", False))
        was, reads = state.get("codec"), self._codec(path)
        if path is not None and self._offset > 0 and was != reads:
            # The offset counts the bytes of one reading: the other would resume elsewhere.
            then = f"decompressed as {was}" if was else "as it is"
            later = f"decompressed as {reads}" if reads else "as it is"
            msg = (
                f"{self.name}: the checkpoint is at byte {self._offset} of "
                f"{self._fs.display(path)} read {then}, and [source] compression now reads it "
                f"{later}: set [source] compression = {was or 'none'!r} until the job has read "
                "past this file, then change it"
            )
            raise permanent(ConfigError(msg))
        opened = state.get("opened")
        self._opened = None
        self._head = self._head_bytes = None
        self._entry_id = None
        if opened:  # [mtime_ns, size], + file_id since file ids are kept, + the head's
            file_id = int(opened[2]) if len(opened) > 2 and opened[2] is not None else None
            self._opened = (int(opened[0]), int(opened[1]), file_id)
            if len(opened) > 4 and opened[3] is not None:
                self._head = (int(opened[3]), int(opened[4]))
        self._clear_reader()
        if opened and len(opened) > 6 and opened[5] is not None:
            self._edge_at = (self._offset, int(opened[5]), int(opened[6]))
            if self._edge_at[1] == self._offset:  # the exact check's: run on from there
                self._prefix = (self._offset, self._edge_at[2])

    def reset_to_initial_state(self) -> None:
        if self._stateful_feed is not None:
            self._stateful_feed.reset_to_initial_state()
        if self._ledger is not None:
            self._ledger.restore(None)
        self._held, self._release = {}, None
        self._path = self.settings.file
        self._offset = 0
        self._done = False
        self._opened = None
        self._head = self._head_bytes = None
        self._clear_reader()

    def on_cut_completed(self, cut_id: int) -> None:
        if self._stateful_feed is not None:
            self._stateful_feed.on_cut_completed(cut_id)

    def on_cut_published(self, cut_id: int) -> None:
        if self._stateful_feed is not None:
            self._stateful_feed.on_cut_published(cut_id)

    def changed_after_publish(self) -> bool:
        feed = self._stateful_feed
        return feed is not None and feed.changed_after_publish()

    def retire_checkpoint(self, cut_id: int) -> None:
        if self._stateful_feed is not None:
            self._stateful_feed.retire_checkpoint(cut_id)

    def close(self) -> None:
        if self._stateful_feed is not None:
            self._stateful_feed.close()
