"""Byte ranges of CSV and JSON-lines files to Arrow record batches of typed columns, in a Spark
task: the rows are found, parsed and typed by the one row parser
(:class:`operators.source.rows.Rows`, the local engine's), fed the range's bytes.

Which rows a range owns:

- A JSON-lines row is a line (a JSON string holds no raw line end), so a range owns the lines
  that *start* inside it, as :mod:`operators.spark.arrow_io` reads lines: ranges that tile a
  file yield each row once wherever the cuts fall.
- A CSV row may hold line ends inside a quoted value, and whether a line end is one can only
  be told by reading the file from a row boundary: CSV ranges are never cut inside a file
  (:meth:`~operators.spark.config.ScanConfig.unsplittable`), each starts where a row starts
  (the file's start, or where an earlier batch read the file to its end) and ends at the
  file's planned size.
- A compressed file has no index to start reading inside it: it is read whole, decompressed
  from its first byte up to its planned size (:func:`operators.source.compressed.range_stream`);
  a range that continues a grown file (``on_modified = "continue"``) skips the decompressed
  bytes of what was read before, so offsets count decompressed bytes as the local engine's do.

Bytes appended after the plan are never read: a batch run again after a crash reads the same
rows. A compressed file must be whole when listed (a stream cut short fails the batch, naming
the file and the way: a hidden name while it lands, or ``min_file_age``).

A row that does not fit (``on_bad_row = "reject"``) goes to ``on_rejected``: the sink's rejects
file in a fused run that has one (:mod:`operators.spark.rejects`), else the log at ERROR naming
file, byte offset, column and value, as the local engine's sink logs a row it has no rejects
file for; ``skip`` logs a WARNING, ``fail`` fails the task.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

import pyarrow as pa

from operators.common.columns import Columns
from operators.common.errors import short
from operators.source.compressed import codec_of, range_stream
from operators.source.ledger import Expected, verify
from operators.source.rows import Rejected
from operators.spark.arrow_io import decompressed, decompressed_length, first_line_start, repeat
from region.fs import FileSystem

if TYPE_CHECKING:
    from operators.spark.config import ScanConfig

__all__ = ["log_rejected", "read_rows", "rows_schema"]

logger = logging.getLogger(__name__)

#: Records per record batch handed to Spark.
_BATCH = 1 << 16


def rows_schema(config: ScanConfig) -> pa.Schema:
    """The Arrow schema of the batches: the declared columns, then ``file`` and ``offset``."""
    from operators.common.schema import arrow_schema

    assert config.rows is not None and config.rows.schema is not None
    schema = arrow_schema(dict(config.rows.schema))
    if config.include_file_info:
        schema = schema.append(pa.field("file", pa.string())).append(pa.field("offset", pa.int64()))
    return schema


def log_rejected(rejected: Rejected) -> None:
    """A row rejected in a Spark task without a rejects file: logged at ERROR, as the local
    engine's sink logs a rejected row when it has no rejects file to keep it."""
    logger.error(
        "hdfs_scan: skipped the row of %s at byte %d: %s (no rejects_file to keep it): %s",
        rejected.file,
        rejected.offset,
        rejected.reason,
        short(rejected.text, 200),
    )


def read_rows(
    fs: FileSystem,
    path: str,
    start: int,
    end: int,
    *,
    size: int,
    config: ScanConfig,
    expected: Expected | None = None,
    on_rejected: Callable[[Rejected], None] = log_rejected,
) -> Iterator[pa.RecordBatch]:
    """Record batches (:func:`rows_schema`) of the rows owned by ``[start, end)`` of a file of
    ``size`` bytes when planned (see the module doc); ``expected``: what the file held when
    planned (``FileMoved`` before any record when it holds other bytes now)."""
    rows = config.rows
    assert rows is not None
    if expected is not None:
        verify(fs.read, path, expected)
    codec = codec_of(path, config.compression)  # type: ignore[arg-type]
    chunk = config.read_chunk
    display = fs.display(path)
    if codec is not None:
        begin = decompressed_length(fs, path, codec, start) if start else 0
        chunks = decompressed(fs, path, codec, size, begin, chunk)

        def read_head(p: str, length: int) -> bytes:
            return range_stream(fs, p, codec, size).read(length)  # type: ignore[no-any-return]

    else:
        if rows.format == "csv":
            begin, stop = start, end  # whole: planned at row boundaries (unsplittable)
        else:
            begin = _line_start(fs, path, start, size)
            stop = size if end >= size else _line_start(fs, path, end, size)
        chunks = _raw(fs, path, begin, stop, chunk)

        def read_head(p: str, length: int) -> bytes:
            return fs.read(p, 0, length)

    file_info = config.include_file_info
    parser = rows.parser(config.encoding, read_head, record_offsets=file_info)
    parser.reading(path, display)
    schema = rows_schema(config)
    want = _BATCH
    tables: list[pa.Table] = []
    offsets: list[int] = []
    held = 0
    offset = begin

    def taken(records: object) -> None:
        nonlocal held
        assert isinstance(records, Columns)
        if len(records):
            tables.append(records.table)
            held += len(records)
            if file_info:
                offsets.extend(parser.offsets)
        for bad in parser.take_rejected():
            on_rejected(bad)

    def flush() -> pa.RecordBatch | None:
        nonlocal held
        if not held:
            return None
        table = pa.concat_tables(tables)
        columns = [c.combine_chunks() for c in table.columns]
        if file_info:
            columns += [repeat(display, held), pa.array(offsets, pa.int64())]
        batch = pa.RecordBatch.from_arrays(columns, schema=schema)
        tables.clear()
        offsets.clear()
        held = 0
        return batch

    for data in chunks:
        parser.push(data)
        while (got := parser.take(want, offset)) is not None:
            records, consumed = got
            taken(records)
            offset += consumed
            if held >= _BATCH and (batch := flush()) is not None:
                yield batch
    if parser.unfinished():  # the file's last row, without a line end
        records, consumed = parser.take_unfinished(offset)
        taken(records)
    if (batch := flush()) is not None:
        yield batch


def _raw(fs: FileSystem, path: str, begin: int, stop: int, chunk: int) -> Iterator[bytes]:
    pos = begin
    while pos < stop:
        data = fs.read(path, pos, min(chunk, stop - pos))
        if not data:
            msg = (
                f"{fs.display(path)}: the file shrank while being read (nothing at byte {pos}, "
                f"{stop} bytes planned)"
            )
            raise OSError(msg)
        pos += len(data)
        yield data


def _line_start(fs: FileSystem, path: str, at: int, size: int) -> int:
    """The offset of the first line starting at or after ``at`` (``size`` when none does)."""
    return first_line_start(fs, path, at, size, 64 << 10)
