"""Records to bytes, and what happens to a record that cannot be written.

:class:`RecordEncoder` turns records into the bytes of a file: lines (``str`` + ``\\n`` in the
sink's encoding, a byte-order mark only at the start of a file; the ``bytes`` lines of
:class:`~operators.source.decoding.EncodedLines`, already in it, + ``\\n``; the bytes of a
:class:`~operators.source.decoding.LineBlock` as they are) or binary records (``bytes`` as
they are), stopping at the exact record that reaches ``bytes_per_file``.

:class:`BadRecords` routes a record that cannot be written (a value of the wrong type or not
encodable, a record that is not a (name, value) pair, a refused file name) as
``on_bad_record`` says: ``fail`` raises, ``skip`` logs and drops it, ``reject`` writes it with
the reason as one JSON line to the rejects sink.
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from operators.common.errors import BadRecordError, short
from operators.sink.formats import compress_piece
from operators.sink.rolling import RollingPolicy
from operators.sink.settings import SinkSettings
from operators.source.decoding import EncodedLines, LineBlock
from operators.source.rows import Rejected
from region.fs import FileSystem
from region.state import Batch, SinkOperator

if TYPE_CHECKING:
    from operators.sink.metrics import SinkMetrics

__all__ = ["BadRecords", "RecordEncoder", "rejected_line"]

logger = logging.getLogger(__name__)


class RecordEncoder:
    """The bytes of records in a file of the sink (see the module doc)."""

    def __init__(self, settings: SinkSettings, fs: FileSystem, rolling: RollingPolicy) -> None:
        self._fs = fs
        self._rolling = rolling
        self._attr = settings.file_attribute_name
        self.line = settings.format == "line"
        self.encoding = settings.encoding
        #: Written once at the start of each file by encodings that have one.
        self.bom = "".encode(self.encoding)
        #: ``compression``: each write is one gzip member or zstd frame.
        self.compression = settings.compression_codec
        self.header = compress_piece(self.compression, self.bom)
        #: Plain lines and blocks have no form to keep; compressed ones do, so that a file is
        #: never appended to with and without compression (see operators.sink.formats).
        self.form = f"{settings.format}/{self.compression}" if self.compression else ""

    @property
    def line_encoding(self) -> str | None:
        """The encoding of :class:`~operators.source.decoding.EncodedLines` this sink writes as they
        are: its own, for lines written to the sink's file (not named by a record's attribute),
        without a byte-order mark to leave out."""
        return self.encoding if self.line and self._attr is None and not self.bom else None

    def encode(
        self, records: Sequence[Any], start: int, take: int, final: str, size: int
    ) -> tuple[bytes, int]:
        """Bytes of ``take`` records from ``start`` for the file ``final`` holding ``size``
        bytes; fewer records when ``bytes_per_file`` is reached. BadRecordError (with the
        record's index as offset) when one cannot be encoded."""
        encoded = self.line and isinstance(records, EncodedLines | LineBlock)
        # A whole block is written as it is; a part of one (a file's limit inside it) by line.
        whole = self.line and not start and take == len(records)
        block = records if whole and isinstance(records, LineBlock) else None
        chunk = records if block is not None else records[start : start + take]
        try:
            if block is not None:
                data = block.data
            elif encoded:
                data = b"\n".join(chunk) + b"\n"
            elif self.line:
                text = "\n".join(chunk) + "\n"
                data = text.encode(self.encoding)
                if self.bom:
                    data = data[len(self.bom) :]
            else:
                data = b"".join(chunk)
        except (TypeError, UnicodeError):
            for j, record in enumerate(chunk):
                self.encode_one(record, start + j, final, encoded=encoded)
            raise  # not reached: one record above failed alone (EncodedLines hold a str only
            # where it cannot be encoded)
        rolling = self._rolling
        if self.compression is not None:  # rolls after the write that reaches the limit
            return compress_piece(self.compression, data), take
        if take == 1 or not rolling.crosses(size, len(data)):
            return data, take
        # This chunk crosses the byte limit: encode record by record up to the one reaching it.
        pieces: list[bytes] = []
        cumulative: list[int] = []
        added = 0
        for j, record in enumerate(chunk):
            piece = self.encode_one(record, start + j, final, encoded=encoded)
            pieces.append(piece)
            added += len(piece)
            cumulative.append(added)
            if rolling.crosses(size, added):
                break
        fit = rolling.fitting(cumulative, size)
        return b"".join(pieces[:fit]), fit

    def encode_one(self, record: Any, index: int, final: str, *, encoded: bool = False) -> bytes:
        """The bytes of one record; ``encoded``: a line of
        :class:`~operators.source.decoding.EncodedLines` (``bytes`` already in the sink's
        encoding)."""
        if encoded and isinstance(record, bytes):
            return record + b"\n"
        where = f"record {index} of the batch for {self._fs.display(final)}"
        if self.line:
            if not isinstance(record, str):
                msg = f"{where}: line mode needs str, got {type(record).__name__} {short(record)}"
                raise BadRecordError(msg, file=final, offset=index, field=self._attr)
            try:
                data = (record + "\n").encode(self.encoding)
            except UnicodeEncodeError as exc:
                msg = (
                    f"{where}: {short(record)} cannot be encoded as {self.encoding} "
                    f"(character {exc.start}: {exc.reason})"
                )
                raise BadRecordError(msg, file=final, offset=index, field=self._attr) from None
            return data[len(self.bom) :] if self.bom else data
        if not isinstance(record, bytes | bytearray | memoryview):
            msg = f"{where}: binary mode needs bytes, got {type(record).__name__} {short(record)}"
            raise BadRecordError(msg, file=final, offset=index, field=self._attr)
        return bytes(record)

    def whole_records(self, tail: bytes) -> int:
        """Length of the prefix of ``tail`` (bytes written after a cut) made of whole records:
        up to the last line end in line mode; none in binary mode, where records have no
        boundaries to find."""
        if not self.line or self.compression is not None:
            return 0
        newline = "\n".encode(self.encoding)[len(self.bom) :]  # encode() prefixes a BOM
        end = len(tail)
        while (found := tail.rfind(newline, 0, end)) >= 0:
            if found % len(newline) == 0:  # aligned with the code units of the encoding
                return found + len(newline)
            end = found + len(newline) - 1
        return 0


def as_json(record: Any) -> Any:
    """A record as the rejects file keeps it, so that a reader gets the record back, not its
    Python spelling: a string as itself, bytes as their UTF-8 text (bytes that are not UTF-8
    backslash-escaped, ``\\xff``), a mapping as an object, a tuple or list as an array,
    numbers, booleans and ``None`` as JSON's, anything else as its ``str``."""
    if isinstance(record, float) and not math.isfinite(record):
        return str(record)  # JSON has no NaN nor infinity
    if record is None or isinstance(record, str | bool | int | float):
        return record
    if isinstance(record, bytes | bytearray | memoryview):
        return bytes(record).decode("utf-8", "backslashreplace")
    if isinstance(record, Mapping):
        return {str(k): as_json(v) for k, v in record.items()}
    if isinstance(record, tuple | list):
        return [as_json(v) for v in record]
    return str(record)


def rejected_line(sink: str, rejected: Rejected) -> str:
    """The line of the rejects file keeping a row a source could not read: a JSON object of the
    sink's name, the row's file, byte offset, the reason (naming column and value) and the row
    as read. One rule for both engines (the Spark engine's tasks write it too)."""
    record = {
        "sink": sink,
        "file": rejected.file,
        "offset": rejected.offset,
        "reason": rejected.reason,
        "record": rejected.text,
    }
    return json.dumps(record, ensure_ascii=True)


class BadRecords:
    """``on_bad_record`` of one sink. Default: ``reject`` when a rejects sink is given, else
    ``skip`` logged at ERROR (a skip nobody asked for: the record is gone unless someone reads
    the log). Every routed record is counted in ``metrics.bad_records``."""

    def __init__(
        self,
        settings: SinkSettings,
        sink: str,
        metrics: SinkMetrics,
        rejects: SinkOperator | None,
    ) -> None:
        mode = settings.on_bad_record
        if mode is None:
            mode = "reject" if settings.rejects_file is not None else "skip"
        self.mode = mode
        self._skip_level = logging.WARNING if settings.on_bad_record == "skip" else logging.ERROR
        self._attr = settings.file_attribute_name
        self._sink = sink
        self._metrics = metrics
        self._rejects = rejects

    @property
    def fail(self) -> bool:
        return self.mode == "fail"

    def split(self, record: Any, index: int) -> tuple[Any, Any]:
        """``(file name, value)`` of a record in attribute mode; BadRecordError otherwise."""
        attr = self._attr
        if isinstance(record, tuple | list) and len(record) == 2:
            return record[0], record[1]
        if isinstance(record, Mapping) and len(record) == 2 and attr in record:
            (value,) = (v for k, v in record.items() if k != attr)
            return record[attr], value
        msg = (
            f"record {index}: expected a (file name, value) pair or a mapping of {attr!r} and "
            f"one value, got {type(record).__name__} {short(record)}"
        )
        raise BadRecordError(msg, offset=index, field=attr)

    def route_rejected(self, rejected: Rejected) -> None:
        """Route a row the source could not read (:class:`~operators.source.rows.Rejected`):
        to the rejects with the source's reason, or logged as skipped."""
        self._metrics.bad_records += 1
        reason = f"{rejected.file} at byte {rejected.offset}: {rejected.reason}"
        if self._rejects is not None:
            self._rejects.write(Batch([rejected_line(self._sink, rejected)]))
            self._metrics.records_rejected += 1
            logger.warning("sink %s: rejected the row of %s", self._sink, reason)
        else:
            logger.log(
                self._skip_level,
                "sink %s: skipped the row of %s (no rejects_file to keep it): %s",
                self._sink,
                reason,
                short(rejected.text),
            )

    def route(self, record: Any, index: int, exc: Exception) -> None:
        """Route a record that cannot be written (raise ``exc`` under ``fail``)."""
        if self.fail:
            raise exc
        reason = str(exc)
        if not isinstance(exc, BadRecordError):  # its message names neither record nor value
            reason = f"record {index} {short(record)}: {reason}"
        self._metrics.bad_records += 1
        self._metrics.records_not_written += 1
        if self._rejects is not None:
            line = json.dumps(
                {
                    "sink": self._sink,
                    "index": index,
                    "reason": reason,
                    "record": as_json(record),
                },
                ensure_ascii=True,
            )
            self._rejects.write(Batch([line]))
            self._metrics.records_rejected += 1
            logger.warning("sink %s: rejected %s", self._sink, reason)
        else:
            logger.log(self._skip_level, "sink %s: skipped %s", self._sink, reason)
