"""Records with columns to the bytes of a file: JSON lines, CSV, Parquet and ORC.

:class:`TableEncoder` is the sink's encoder for ``format = "jsonl" | "csv" | "parquet" |
"orc"`` (lines and blocks are :class:`~operators.sink.records.RecordEncoder`'s). A record is a
mapping of column name to value. With a schema (``[sink.schema]``, required for CSV, Parquet
and ORC) every value is converted to its column's type without loss
(:func:`operators.common.schema.column`), and a record that does not fit (a value that does
not convert, a column the schema lacks, not a mapping) is a bad record naming its column and
value, routed by ``on_bad_record`` like any other.

Every write appends whole records, so each file stays cut back-able to any cut:

- **Text formats** (JSON lines, CSV): the records as text; with ``compression = "gzip"`` or
  ``"zstd"`` each write is one gzip member or zstd frame (a file of concatenated members is
  one valid stream), so the file cut back to a cut's size is still a whole compressed file.
- **Bulk formats** (Parquet, ORC) cannot be appended to or cut back. A file is written as an
  Arrow IPC stream (the *staged* file, ``.<name>~<sink>.arrow``: the schema, then one record
  batch message per write), which can. When the file rolls, :func:`convert` writes the
  Parquet or ORC file from it, as the in-progress file the publish renames. So files are sized
  by the roll policy, not by the cut interval. What a crash leaves, step by step, is written on
  :meth:`operators.sink.operator.HDFS2FileSink._convert`.

The *form* of a file (format, compression, columns, header, delimiter, partitioning) is kept in
the sink's state: a file restored open whose form is not this run's (the configuration changed
between runs) is closed as it is, never appended to in another form.
"""

from __future__ import annotations

import dataclasses
import datetime
import decimal
import gzip
import hashlib
import io
import itertools
import json
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from operators.common.columns import Columns
from operators.common.errors import BadRecordError, short
from operators.common.lazy import lazy_module
from operators.common.schema import BadValue, arrow_schema, cast, column
from operators.sink.bulk import BulkWriter
from operators.sink.rolling import RollingPolicy
from region.fs import FileSystem, FileWriter, ForwardReader

if TYPE_CHECKING:
    import pyarrow as pa
    import pyarrow.csv as pacsv
    import pyarrow.ipc as ipc

    from operators.sink.settings import SinkSettings
else:
    pa = lazy_module("pyarrow")
    pacsv = lazy_module("pyarrow.csv")
    ipc = lazy_module("pyarrow.ipc")

__all__ = [
    "BULK_FORMATS",
    "TABLE_FORMATS",
    "TableEncoder",
    "TableSettings",
    "TableSpec",
    "compress_piece",
    "convert",
    "form_format",
]

logger = logging.getLogger(__name__)

TABLE_FORMATS = ("jsonl", "csv", "parquet", "orc")
BULK_FORMATS = ("parquet", "orc")
#: Bytes read from the staged file at once while converting.
_READ = 8 << 20


class TableSettings(Protocol):
    """What :class:`TableEncoder` reads of the sink's settings: :class:`SinkSettings` (the
    in-process sink) or :class:`TableSpec` (Spark's tasks, which get plain values)."""

    @property
    def format(self) -> str: ...

    @property
    def compression_codec(self) -> str | None: ...

    @property
    def partition_by(self) -> Sequence[str]: ...

    @property
    def derived(self) -> Mapping[str, Any]: ...

    @property
    def schema_(self) -> Mapping[str, str] | None: ...

    @property
    def delimiter(self) -> str: ...

    @property
    def header(self) -> bool: ...


@dataclass(frozen=True)
class TableSpec:
    """The table settings of a sink as plain values (:class:`TableSettings`), for Spark's
    workers: ``derived`` maps a partition column to ``(source column, strftime pattern)``."""

    format: str
    compression_codec: str | None = None
    partition_by: tuple[str, ...] = ()
    derived: dict[str, tuple[str, str]] = dataclasses.field(default_factory=dict)
    schema_: dict[str, str] | None = None
    delimiter: str = ","
    header: bool = True

    @classmethod
    def of(cls, settings: SinkSettings) -> TableSpec:
        return cls(
            format=settings.format,
            compression_codec=settings.compression_codec,
            partition_by=tuple(settings.partition_by),
            derived={k: (d.column, d.strftime) for k, d in settings.derived.items()},
            schema_=dict(settings.schema_) if settings.schema_ is not None else None,
            delimiter=settings.delimiter,
            header=settings.header,
        )


class TableEncoder:
    """The bytes of records with columns in a file of the sink (see the module doc).

    ``columns``: the records' Arrow schema, when the settings give no ``[sink.schema]`` (a
    Spark DataFrame's typed columns); the settings' schema wins when both are given."""

    #: Records of these formats are never EncodedLines.
    line_encoding = None

    def __init__(
        self,
        settings: TableSettings,
        fs: FileSystem,
        rolling: RollingPolicy,
        *,
        columns: pa.Schema | None = None,
    ) -> None:
        self._fs = fs
        self._rolling = rolling
        self.format = settings.format
        self.bulk = settings.format in BULK_FORMATS
        #: The record batch of the last bulk encode, whose IPC message its bytes are: an early
        #: conversion takes it as it is, instead of reading the bytes back.
        self.batch: pa.RecordBatch | None = None
        self.compression = settings.compression_codec
        # Partition columns that are record columns are in the directory names, not the files.
        parts = frozenset(c for c in settings.partition_by if c not in settings.derived)
        self._parts = parts
        if settings.schema_ is None and columns is not None:
            kept = [f for f in columns if f.name not in parts]
            self._schema = pa.schema(kept) if kept else None
            self._names = frozenset(columns.names) | parts
        else:
            written = {k: v for k, v in (settings.schema_ or {}).items() if k not in parts}
            self._schema = arrow_schema(written) if written else None
            self._names = frozenset(settings.schema_ or ()) | parts
        self._delimiter = settings.delimiter
        header = b""
        if self.bulk:
            assert self._schema is not None
            header = self._schema.serialize().to_pybytes()
        elif self.format == "csv" and settings.header:
            assert self._schema is not None
            header = self._csv(pa.RecordBatch.from_pylist([], schema=self._schema), header=True)
        #: Written once at the start of each file (already compressed).
        self.header = self._compress(header) if header else b""
        # The partitioning too: a file of a partition directory is not the file of a template
        # without partitions, nor of another partitioning.
        layout = "/".join(settings.partition_by).encode()
        columns = self._schema.serialize().to_pybytes() if self._schema is not None else b""
        shape = f"{self._delimiter}|{settings.header}".encode()
        digest = hashlib.sha256(b"\0".join([self.header, layout, columns, shape])).hexdigest()
        digest = digest[:16]
        #: What a file of this run is: a restored file of another form is not appended to.
        self.form = f"{self.format}/{self.compression or 'none'}/{digest}"

    # -- records to bytes ---------------------------------------------------------------------

    def encode(
        self, records: Sequence[Any], start: int, take: int, final: str, size: int
    ) -> tuple[bytes | memoryview, int]:
        """Bytes of ``take`` records from ``start`` for the file ``final`` holding ``size``
        bytes; fewer records when an uncompressed text file reaches ``bytes_per_file`` (a
        compressed or bulk file rolls after the write that reaches it). BadRecordError, with
        the record's index as offset, for the first record that does not fit."""
        chunk = records[start : start + take]
        if self.format == "jsonl" and self._schema is None:
            rows = [self._json_row(record, start + j, final) for j, record in enumerate(chunk)]
            return self._fit(rows, size)
        # Columns that fit are taken as they are; the others are converted record by record,
        # which names the first that does not fit.
        fitted = self._columns(chunk) if isinstance(chunk, Columns) else None
        batch = fitted if fitted is not None else self._batch(chunk, start, final)
        if self.bulk:
            self.batch = batch
            # Arrow's buffer as it is: the file writer copies it once (a file's own buffer, a
            # send), where a bytes copy of it first was a second copy of every row.
            return memoryview(batch.serialize()).cast("B"), take
        if self.format == "jsonl":
            rows = [
                self._json_row(record, start + j, final)
                for j, record in enumerate(batch.to_pylist())
            ]
            return self._fit(rows, size)
        data = self._csv(batch)
        if self.compression is not None or not self._rolling.crosses(size, len(data)):
            return self._compress(data), take
        rows = [self._csv(batch.slice(j, 1)) for j in range(take)]
        return self._fit(rows, size)

    def _fit(self, rows: list[bytes], size: int) -> tuple[bytes, int]:
        """The rows that fit ``bytes_per_file`` (at least one), compressed as one piece."""
        data = b"".join(rows)
        take = len(rows)
        if self.compression is None and take > 1 and self._rolling.crosses(size, len(data)):
            take = self._rolling.fitting(list(itertools.accumulate(map(len, rows))), size)
            data = b"".join(rows[:take])
        return self._compress(data), take

    def _columns(self, chunk: Columns) -> pa.RecordBatch | None:
        """Records that are already columns as a record batch of the schema, or ``None`` when
        one does not fit (the record-at-a-time path names it)."""
        schema = self._schema
        if schema is None or not self._names.issuperset(chunk.schema.names):
            return None
        table = chunk.table
        arrays = []
        try:
            for field in schema:
                index = table.schema.get_field_index(field.name)
                if index < 0:  # as a record without the key: a null
                    arrays.append(pa.nulls(len(table), field.type))
                else:
                    arrays.append(cast(table.column(index).combine_chunks(), field))
        except BadValue:
            return None
        return pa.RecordBatch.from_arrays(arrays, schema=schema)

    def _batch(self, chunk: Sequence[Any], start: int, final: str) -> pa.RecordBatch:
        """The records as a record batch of the schema; BadRecordError for the first one that
        does not fit."""
        assert self._schema is not None
        names = self._names
        for j, record in enumerate(chunk):
            if not isinstance(record, Mapping):
                msg = (
                    f"{self._where(start + j, final)}: {self.format} needs a mapping of column "
                    f"to value, got {type(record).__name__} {short(record)}"
                )
                raise BadRecordError(msg, file=final, offset=start + j)
            if not names.issuperset(record):
                extra = sorted(str(k) for k in record if k not in names)
                msg = (
                    f"{self._where(start + j, final)}: column {extra[0]!r} is not in the schema "
                    f"(columns: {', '.join(self._schema.names)})"
                )
                raise BadRecordError(msg, file=final, offset=start + j, field=extra[0])
        arrays = []
        for field in self._schema:
            name = field.name
            try:
                arrays.append(column([record.get(name) for record in chunk], field))
            except BadValue as exc:
                msg = f"{self._where(start + exc.index, final)}: {exc}"
                raise BadRecordError(
                    msg, file=final, offset=start + exc.index, field=name
                ) from None
        return pa.RecordBatch.from_arrays(arrays, schema=self._schema)

    def _json_row(self, record: Any, index: int, final: str) -> bytes:
        if self._parts and isinstance(record, Mapping):
            record = {k: v for k, v in record.items() if k not in self._parts}
        if not isinstance(record, Mapping):
            msg = (
                f"{self._where(index, final)}: jsonl needs a mapping of column to value, got "
                f"{type(record).__name__} {short(record)}"
            )
            raise BadRecordError(msg, file=final, offset=index)
        try:
            text = json.dumps(record, ensure_ascii=False, separators=(",", ":"), default=_json)
        except (TypeError, ValueError) as exc:
            msg = f"{self._where(index, final)}: {short(record)} is not JSON ({exc})"
            raise BadRecordError(msg, file=final, offset=index) from None
        return (text + "\n").encode("utf-8", "surrogatepass")

    def _csv(self, batch: pa.RecordBatch, *, header: bool = False) -> bytes:
        out = io.BytesIO()
        options = pacsv.WriteOptions(include_header=header, delimiter=self._delimiter)
        pacsv.write_csv(batch, out, write_options=options)
        return out.getvalue()

    def _compress(self, data: bytes) -> bytes:
        return data if self.bulk else compress_piece(self.compression, data)

    def _where(self, index: int, final: str) -> str:
        return f"record {index} of the batch for {self._fs.display(final)}"

    def whole_records(self, tail: bytes) -> int:
        """None of the bytes after a cut are kept: the records are replayed, and a compressed
        piece or a CSV row with a line end in a quoted value has no boundary to find."""
        return 0


def compress_piece(codec: str | None, data: bytes) -> bytes:
    """``data`` as one gzip member or zstd frame (``codec``; as it is for ``None``): pieces
    concatenated are one valid stream, so a file of them can be cut back between any two."""
    if codec is None or not data:
        return data
    if codec == "gzip":
        return gzip.compress(data, compresslevel=6, mtime=0)
    compressed: bytes = pa.compress(data, codec="zstd", asbytes=True)
    return compressed


def _json(value: Any) -> Any:
    """JSON for the values Arrow and users' functions hand out that ``json`` does not know."""
    if isinstance(value, datetime.date | datetime.time):
        return value.isoformat()
    if isinstance(value, decimal.Decimal):
        return str(value)
    if isinstance(value, bytes):
        return value.decode("utf-8", "backslashreplace")
    raise TypeError(f"{type(value).__name__} {short(value)} is not JSON")


def form_format(form: str) -> tuple[str, str | None]:
    """``(format, compression)`` of a file's form (``""``: lines or blocks)."""
    if not form:
        return "line", None
    fmt, codec, _ = form.split("/", 2)
    return fmt, None if codec == "none" else codec


def convert(
    fs: FileSystem, staged: str, target: str, form: str, permission: int | None
) -> tuple[FileWriter, int]:
    """Write the Parquet or ORC file of the staged Arrow stream ``staged`` (a file of the form
    ``form``) as ``target`` (overwritten: a conversion cut short by a crash is redone), synced
    and not closed: the open writer and the file's size are returned, for the caller to close
    it (HDFS's close may wait on a DataNode, which the caller need not wait for now).
    ``OSError`` naming the staged file when it is not a readable stream."""
    fmt, codec = form_format(form)
    out = fs.create(target, overwrite=True, permission=permission)
    try:
        reader = ipc.open_stream(
            pa.PythonFile(io.BufferedReader(ForwardReader(fs, staged, _READ), _READ))
        )
        bulk = BulkWriter(out, fmt, codec, reader.schema)
        for batch in reader:
            bulk.add(batch)
        size = bulk.close()
        out.sync()
    except (pa.ArrowInvalid, pa.ArrowTypeError) as exc:
        out.close()
        msg = f"cannot convert {fs.display(staged)} to {fmt}: not a whole Arrow stream ({exc})"
        raise OSError(msg) from None
    except BaseException:
        out.close()
        raise
    return out, size
