"""What the Spark source and sink need at run time, as plain values.

Parsed once from the options by :mod:`operators.spark.options` (pydantic) on the driver; these
small frozen dataclasses are what travels (pickled) to Spark's Python workers, which then need
neither pydantic nor the settings modules: every worker process starts faster.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from operators.fs import open_filesystem
from operators.fs.local import LocalFileSystem
from operators.scan.cursor import OnModified
from operators.sink.rolling import RollingPolicy
from operators.source.compressed import codec_of
from operators.source.decoding import OnDecodeError
from region.fs import FileSystem

if TYPE_CHECKING:
    from operators.fs.settings import FileSystemSettings
    from operators.sink.formats import TableSpec
    from operators.sink.owner import Owner
    from operators.source.rows import OnBadRow, Rows

__all__ = ["RowsConfig", "ScanConfig", "SinkConfig", "open_config_fs", "spark_columns"]

#: Spark's names of the schema types (:data:`operators.common.schema.SCHEMA_TYPES`); a
#: ``timestamp`` has no time zone (Arrow's ``timestamp[us]``), which is Spark's ``timestamp_ntz``.
_SPARK_TYPES = {
    "string": "string",
    "int64": "bigint",
    "int32": "int",
    "double": "double",
    "float": "float",
    "bool": "boolean",
    "date": "date",
    "timestamp": "timestamp_ntz",
    "binary": "binary",
}


def spark_columns(schema: Mapping[str, str]) -> str:
    """The Spark DDL of the columns of a checked ``[source.schema]`` (names quoted)."""
    from operators.common.schema import arrow_type, type_name

    columns = []
    for name, type_ in schema.items():
        canonical = type_name(arrow_type(type_))  # "decimal( 10 , 2 )" -> "decimal(10,2)"
        spark = _SPARK_TYPES.get(canonical, canonical)
        columns.append(f"`{name.replace('`', '``')}` {spark}")
    return ", ".join(columns)


def open_config_fs(settings: FileSystemSettings | None) -> FileSystem:
    """The filesystem of a config (``None``: the local disk)."""
    if settings is None:
        return LocalFileSystem()
    return open_filesystem(settings)


@dataclass(frozen=True)
class RowsConfig:
    """``[source] format = "csv" | "jsonl"`` and its options: what builds the one row parser
    (:class:`operators.source.rows.Rows`) in each task."""

    format: Literal["csv", "jsonl"]
    #: ``[source.schema]`` as ``(name, type)`` pairs, in order (``None``: jsonl without one).
    schema: tuple[tuple[str, str], ...] | None
    header: bool = True
    delimiter: str = ","
    quote: str = '"'
    escape: str | None = None
    null_values: tuple[str, ...] = ("",)
    on_bad_row: OnBadRow = "reject"

    def parser(
        self, encoding: str, read_head: Callable[[str, int], bytes], *, record_offsets: bool
    ) -> Rows:
        from operators.source.rows import Rows

        return Rows(
            self.format,
            encoding=encoding,
            schema=dict(self.schema) if self.schema is not None else None,
            header=self.header,
            delimiter=self.delimiter,
            quote=self.quote,
            escape=self.escape,
            null_values=self.null_values,
            on_bad_row=self.on_bad_row,
            read_head=read_head,
            record_offsets=record_offsets,
        )


@dataclass(frozen=True)
class ScanConfig:
    """The ``hdfs_scan`` source (see :class:`operators.spark.options.ScanOptions`)."""

    directory: str
    plan_dir: str
    pattern: str | None
    strict_mode: bool
    min_file_age_ns: int
    late_window_ns: int
    on_late_file: Literal["warn", "fail"]
    on_modified: OnModified
    binary: bool
    encoding: str
    on_decode_error: OnDecodeError
    block_size: int
    read_chunk: int
    max_files_per_trigger: int | None
    max_bytes_per_trigger: int | None
    whole_files: bool
    split_size: int
    min_partitions: int
    include_file_info: bool
    plan_retain: int
    fs: FileSystemSettings | None = None
    #: ``[scan] after_read``: what happens to a file read to its end once its batch (and the
    #: records behind it) are published; ``archive_dir`` a path on the scan's filesystem.
    after_read: str = "keep"
    archive_dir: str | None = None
    #: The filesystem of ``plan_dir`` when it is not the scanned one (``None``: the same).
    plan_fs: FileSystemSettings | None = None
    #: ``on_modified = "continue"``: what was read is remembered (:mod:`operators.source.ledger`).
    remember_files: int = 100_000
    remember_for: float = 7 * 86400.0
    #: ``on_modified = "continue"``: ``windows`` or ``exact`` (:mod:`operators.source.ledger`).
    content_check: str = "windows"
    #: ``on_modified = "continue"``: a young file's last line with no newline waits (seconds).
    hold_partial_line: float = 30.0
    #: ``[source] compression``: with ``rows``, files it names compressed are read
    #: decompressed; lines and blocks of such files are refused (read by the local engine
    #: only so far). ``none`` reads every file as it is.
    compression: str = "auto"
    #: CSV or JSON-lines records with columns, instead of lines or blocks.
    rows: RowsConfig | None = None

    def unsplittable(self, path: str) -> bool:
        """Whether a range of ``path`` must hold the rest of the file, never cut by a batch or
        a task (:mod:`operators.spark.rows_io`): a CSV file, where only a read from a row
        boundary tells a line end inside a quoted value from one that ends a row, and a
        compressed file, which has no index to start reading inside it."""
        csv = self.rows is not None and self.rows.format == "csv"
        return csv or codec_of(path, self.compression) is not None  # type: ignore[arg-type]

    def schema(self) -> str:
        if self.rows is not None and self.rows.schema is not None:
            value = spark_columns(dict(self.rows.schema))
        else:
            value = "value binary" if self.binary else "value string"
        return value + (", file string, offset bigint" if self.include_file_info else "")


@dataclass(frozen=True)
class SinkConfig:
    """The ``hdfs_sink`` sink (see :class:`operators.spark.options.SinkOptions`)."""

    template: str
    time_format: str
    output_dir: str
    log_dir: str
    rolling: RollingPolicy
    encoding: str
    binary: bool
    exactly_once: bool
    permission: int
    log_retain: int
    column: str | None
    #: Files stay open across micro-batches until full (see SinkOptions.span_batches).
    span_batches: bool = False
    #: The column naming each record's file (``file_attribute_name``; ``template`` is then
    #: empty and names are relative to ``output_dir``).
    attribute: str | None = None
    #: With ``attribute``: how many files a task keeps open at once (the least recently
    #: written closes when a new name needs a place; ``SinkSettings.max_open_files``).
    max_open_files: int = 32
    #: A manifest of each batch's published files (operators.sink.manifest), how many are kept.
    manifest: bool = False
    manifest_retain: int = 1000
    #: ``"module:function"`` called by the driver with ``(path, size)`` per published file.
    on_published: str | None = None
    fs: FileSystemSettings | None = None
    #: The job writing the output (:mod:`operators.sink.owner`); ``None``: not known, not claimed.
    owner: Owner | None = None
    #: Records with columns (``format`` jsonl, csv, parquet or orc; compression, partitions):
    #: written by the in-process sink's encoder (:mod:`operators.spark.tables`); ``None``:
    #: lines or blocks.
    table: TableSpec | None = None
    #: Lines and blocks: ``gzip`` or ``zstd``, one member or frame per write (``None``: none).
    compression: str | None = None
    #: The rejects files' template (``rejects_file`` under ``output_dir``): the rows the source
    #: could not read, published with their batch (:mod:`operators.spark.rejects`); ``None``:
    #: they are logged only.
    rejects: str | None = None
