"""The sink's parameters (:class:`SinkSettings`), checked when they are made: everything
that can be refused before a file is written is refused here. IBM's camelCase names are
accepted as aliases."""

from __future__ import annotations

import posixpath
import re
from typing import Annotated, Any, Literal

from pydantic import (
    AliasChoices,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationInfo,
    model_validator,
)

from operators.common.safepath import name_problem
from operators.common.schema import schema_problem
from operators.sink.owner import SINK_DIR
from operators.sink.rolling import RollingPolicy
from operators.sink.templating import FileNameTemplate
from region.settings import Duration, Encoding, FileMode, parse_duration


def _idle(value: Any) -> float | None:
    """``"never"`` (or ``None``) for no limit, else a duration of more than 0 seconds."""
    if value is None or (isinstance(value, str) and value.strip().lower() == "never"):
        return None
    seconds = parse_duration(value)
    if seconds <= 0:
        msg = f"{value!r} must be more than 0 seconds, or 'never'"
        raise ValueError(msg)
    return seconds


IdleDuration = Annotated[float | None, BeforeValidator(_idle)]

__all__ = ["COLUMNS_FROM_INPUT", "Derived", "SinkSettings", "repeating_names"]

#: The validation context key of a sink whose records bring their column types (Spark's
#: ``hdfs_sink`` writes the typed columns of its DataFrame): ``[sink.schema]`` is optional then.
COLUMNS_FROM_INPUT = "columns_from_input"


def repeating_names(template: FileNameTemplate, why: str) -> str:
    """The error for a template without %FILENUM that must name several files (``why``): the
    one rule of both engines. %TIME alone does not make names unique: two files within one
    step of the time format, a stop and a restart within one step, local time repeating an hour
    when the clocks go back. %FILENUM continues from the checkpoint and is never reused."""
    file = template.template
    head, base = posixpath.split(file)
    stem, ext = posixpath.splitext(base)
    example = posixpath.join(head, f"{stem}-%FILENUM{ext}")
    repeats = ""
    if template.uses_time:
        repeats = (
            f"%TIME repeats within one step of time_format={template.time_format!r}, after a "
            "restart and when clocks go back; "
        )
    return (
        f"file={file!r} has no %FILENUM but {why}: their names would repeat ({repeats}files "
        f"are never overwritten): add %FILENUM (e.g. {example!r})"
    )


def _alias(snake: str, camel: str) -> AliasChoices:
    return AliasChoices(snake, camel)


class Derived(BaseModel):
    """A partition column derived from a date or timestamp column."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    #: The date or timestamp column.
    column: str
    #: The strftime pattern of the value, e.g. ``%Y-%m-%d``.
    strftime: str = Field(min_length=1)


_PART_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")


class SinkSettings(BaseModel):
    """Parameters of :class:`HDFS2FileSink` (IBM's camelCase names are accepted as aliases)."""

    model_config = ConfigDict(frozen=True, extra="forbid", populate_by_name=True)

    #: Target path template (%HOST %PROCID %PEID %PELAUNCHNUM %TIME %FILENUM %PARTITION).
    file: str | None = None
    #: Base directory: required with ``file_attribute_name`` (names are confined to it);
    #: with ``file`` it is joined in front of a relative template.
    directory: str | None = None
    #: Records are ``(file name, value)`` pairs (or two-key mappings); names are relative
    #: to ``directory``. Excludes ``file`` and the roll limits.
    file_attribute_name: str | None = Field(
        None, validation_alias=_alias("file_attribute_name", "fileAttributeName")
    )
    #: A record naming a file written before (``A, B, A``; or a file that already exists):
    #: ``new_file`` writes it to the first free numbered name (``orders.csv`` ->
    #: ``orders-1.csv``); ``overwrite`` (IBM's behaviour, on request only) replaces the earlier
    #: file, whose records are lost. File-attribute mode only.
    on_returning_name: Literal["new_file", "overwrite"] = Field(
        "new_file", validation_alias=_alias("on_returning_name", "onReturningName")
    )
    #: File-attribute mode: how many files stay open at once, so that interleaved names
    #: (``A, B, A, B``) write one file each instead of one per change of name. When a new name
    #: needs a place, the least recently written file is closed (published at the next cut;
    #: the name returning goes to a numbered file, with a WARNING the first time); a file that
    #: got no record since the previous cut is closed at the cut. 1: IBM's behaviour, a change
    #: of name closes the file.
    max_open_files: int = Field(32, ge=1)
    #: Format of %TIME (IBM's Java-style pattern, e.g. yyyyMMdd_HHmmss).
    time_format: str = Field(
        "yyyyMMdd_HHmmss", validation_alias=_alias("time_format", "timeFormat")
    )
    #: Roll to a new file after this many records.
    tuples_per_file: int | None = Field(
        None, ge=1, validation_alias=_alias("tuples_per_file", "tuplesPerFile")
    )
    #: Roll to a new file after this many bytes.
    bytes_per_file: int | None = Field(
        None, ge=1, validation_alias=_alias("bytes_per_file", "bytesPerFile")
    )
    #: Roll to a new file this many seconds after it was opened (a timer: an idle sink
    #: still closes its file).
    time_per_file: Duration | None = Field(
        None, validation_alias=_alias("time_per_file", "timePerFile")
    )
    #: A file that got no record for this long is closed, so that the next cut publishes it
    #: (records never wait unpublished for ever when the input pauses), whatever the limits
    #: above; ``"never"`` keeps it open until a limit or the stop. Fused Spark execution
    #: checks it between batches; a streaming query of ``hdfs_sink`` only at its stop.
    close_idle_after: IdleDuration = 60.0
    #: A punctuation (the end of an input file) closes the file.
    close_on_punct: bool = Field(False, validation_alias=_alias("close_on_punct", "closeOnPunct"))
    #: Character encoding of line-mode output.
    encoding: Encoding = "utf-8"
    #: "line": each record as text plus a newline; "binary": the bytes as they are. Records
    #: with columns (mappings of column to value): "jsonl" (one JSON object per line), "csv",
    #: "parquet" and "orc" (written as an Arrow stream, converted when the file rolls; see
    #: docs/curated.md). CSV, Parquet and ORC need ``[sink.schema]``.
    format: Literal["line", "binary", "jsonl", "csv", "parquet", "orc"] = "line"
    #: Column name to type (``string``, ``int64``, ``int32``, ``double``, ``float``, ``bool``,
    #: ``date``, ``timestamp``, ``binary``, ``decimal(p,s)``), in the order of the columns. A
    #: record's value is converted without loss or the record is bad (``on_bad_record``).
    #: A pipeline without ``[transform]`` takes ``[source.schema]`` when this is not given.
    schema_: dict[str, str] | None = Field(None, alias="schema")
    #: The codec: inside Parquet (``snappy``, the default, ``zstd``, ``gzip``, ``none``) and
    #: ORC (``zstd``, the default, ``snappy``, ``gzip``, ``none``); of the whole file for
    #: lines, blocks, JSON lines and CSV (``gzip``, ``zstd``; default ``none``), one gzip
    #: member or zstd frame per write so that the file can be cut back to any cut.
    compression: Literal["none", "snappy", "zstd", "gzip"] | None = None
    #: CSV: a header row of the column names at the start of each file.
    header: bool = True
    #: CSV: the field separator (one character).
    delimiter: str = Field(",", min_length=1, max_length=1)
    #: Hive-style partitions: files go to ``<directory>/<col>=<value>/...`` (in this order).
    #: Each is a record column (left out of the files) or a ``[sink.derived]`` column. Files
    #: of each partition roll by the limits above; ``max_open_files`` bounds the partitions
    #: open at once. See docs/curated.md for how values become names.
    partition_by: tuple[str, ...] = ()
    #: Partition columns derived from a date or timestamp column by a strftime pattern:
    #: ``dt = { column = "event_time", strftime = "%Y-%m-%d" }``.
    derived: dict[str, Derived] = Field(default_factory=dict)
    #: "exactly_once": a reset truncates to the cut (no record twice); "at_least_once":
    #: IBM's append on reset (records after the last cut may repeat).
    delivery: Literal["exactly_once", "at_least_once"] = "exactly_once"
    #: "atomic": hidden in-progress names, renamed once a completed cut covers the file;
    #: "visible": final names while written (readers may see a tail a crash takes back).
    publish: Literal["atomic", "visible"] = "atomic"
    #: Permission bits of new files (octal int, or a string such as "0640"); directories the
    #: sink creates get the matching traversal bits (0640 -> 0750).
    permission: FileMode = 0o640
    #: What a bad record does: ``fail`` (raise, the region resets), ``skip`` (log and drop) or
    #: ``reject`` (write it with the reason to ``rejects_file``). Default: ``reject`` when
    #: ``rejects_file`` is set, else ``skip`` logged at ERROR.
    on_bad_record: Literal["fail", "skip", "reject"] | None = Field(
        None, validation_alias=_alias("on_bad_record", "onBadRecord")
    )
    #: Write a manifest of the files each cut published (``<output>/_hdfs_sink/published/``,
    #: :mod:`operators.sink.manifest`), exactly once per file, for downstream jobs to tail.
    manifest: bool = False
    #: How many manifests are kept (the oldest are deleted).
    manifest_retain: int = Field(1000, ge=1)
    #: ``"module:function"`` called as ``function(path, size)`` once per published file (the
    #: Python API may pass the function to the sink instead).
    on_published: str | None = Field(None, pattern=r"^[\w.]+:\w+$")
    #: Template of the rejects files, relative to the base directory (``directory``, or the
    #: template's fixed directory); needs %FILENUM, e.g. ``_rejects/rejects-%FILENUM.jsonl``.
    #: On the Spark engine (``hdfs-region run``, fused execution) it keeps the rows a CSV or
    #: JSON-lines source could not read, published with their batch; a record the sink cannot
    #: write fails the batch there.
    rejects_file: str | None = Field(None, validation_alias=_alias("rejects_file", "rejectsFile"))

    @model_validator(mode="after")
    def _rejects(self) -> SinkSettings:
        mode, rejects = self.on_bad_record, self.rejects_file
        if mode == "reject" and rejects is None:
            msg = "on_bad_record='reject' needs rejects_file= (e.g. '_rejects/r-%FILENUM.jsonl')"
            raise ValueError(msg)
        if rejects is None:
            return self
        if mode in ("fail", "skip"):
            msg = f"rejects_file={rejects!r} is never written with on_bad_record={mode!r}"
            raise ValueError(msg)
        problem = name_problem(rejects)
        if problem is not None:
            msg = f"rejects_file={rejects!r} {problem}; it must be a relative path in the base"
            raise ValueError(msg)
        if SINK_DIR in rejects.split("/"):
            msg = f"rejects_file={rejects!r} is inside {SINK_DIR}/, the sink's own folder"
            raise ValueError(msg)
        if not FileNameTemplate(rejects, self.time_format).uses_filenum:
            msg = f"rejects_file={rejects!r} needs %FILENUM (files are never overwritten)"
            raise ValueError(msg)
        return self

    @model_validator(mode="after")
    def _table(self, info: ValidationInfo) -> SinkSettings:
        fmt = self.format
        typed_input = bool((info.context or {}).get(COLUMNS_FROM_INPUT))
        if self.schema_ is not None:
            problem = schema_problem(self.schema_)
            if problem is not None:
                raise ValueError(f"[sink.schema] {problem}")
            if fmt in ("line", "binary"):
                msg = f"[sink.schema] is for records with columns; format={fmt!r} writes {fmt}s"
                raise ValueError(msg)
        elif fmt in ("csv", "parquet", "orc") and not typed_input:
            msg = (
                f"format={fmt!r} needs [sink.schema], the type of each column, e.g. "
                'schema = { id = "int64", name = "string", day = "date" }'
            )
            raise ValueError(msg)
        codec = self.compression
        if codec not in (None, "none"):
            allowed = {
                "line": ("gzip", "zstd"),
                "binary": ("gzip", "zstd"),
                "jsonl": ("gzip", "zstd"),
                "csv": ("gzip", "zstd"),
                "parquet": ("snappy", "zstd", "gzip"),
                "orc": ("snappy", "zstd", "gzip"),
            }[fmt]
            if codec not in allowed:
                known = ", ".join([*allowed, "none"])
                msg = f"compression={codec!r} cannot be used with format={fmt!r} (known: {known})"
                raise ValueError(msg)
        self._partitions()
        if fmt in ("parquet", "orc") and self.publish == "visible":
            msg = (
                f"format={fmt!r} cannot be read while it is written: publish='visible' would "
                "show readers a file that is not one; use publish='atomic'"
            )
            raise ValueError(msg)
        return self

    def _partitions(self) -> None:
        parts, derived, schema = self.partition_by, self.derived, self.schema_
        for name in derived:
            if name not in parts:
                raise ValueError(f"[sink.derived] {name!r} is not in partition_by={list(parts)}")
        if not parts:
            return
        if self.format in ("line", "binary"):
            msg = f"partition_by needs records with columns; format={self.format!r} has none"
            raise ValueError(msg)
        if self.file_attribute_name is not None:
            raise ValueError("partition_by and file_attribute_name exclude each other")
        if len(set(parts)) != len(parts):
            raise ValueError(f"partition_by={list(parts)} names a column twice")
        for name in parts:
            if not _PART_NAME.fullmatch(name):
                msg = f"partition_by: {name!r} must be letters, digits, '_', '-' or '.'"
                raise ValueError(msg)
            if schema is not None and name not in derived and name not in schema:
                raise ValueError(f"partition_by: {name!r} is not a column of [sink.schema]")
        for name, rule in derived.items():
            if schema is not None and schema.get(rule.column) not in ("date", "timestamp"):
                msg = (
                    f"[sink.derived] {name!r}: {rule.column!r} must be a date or timestamp "
                    "column of [sink.schema]"
                )
                raise ValueError(msg)
        if schema is not None and all(c in parts for c in schema):
            raise ValueError("[sink.schema] has no column left to write besides partition_by")
        if "%" in posixpath.dirname(self.template or "").replace("%%", ""):
            msg = f"partition_by: file={self.file!r} may have variables in its name only"
            raise ValueError(msg)
        template = FileNameTemplate(self.file or "", self.time_format)
        if not template.uses_filenum:
            raise ValueError(repeating_names(template, "each partition has files of its own"))

    @property
    def compression_codec(self) -> str | None:
        """The codec used (``None``: none): the format's default when not given."""
        codec: str | None = self.compression
        if codec is None:
            codec = {"parquet": "snappy", "orc": "zstd"}.get(self.format, "none")
        if self.format == "orc" and codec == "gzip":
            return "zlib"  # ORC's name for gzip's deflate
        return None if codec == "none" else codec

    @model_validator(mode="after")
    def _consistent(self) -> SinkSettings:
        limits = {
            "tuples_per_file": self.tuples_per_file,
            "bytes_per_file": self.bytes_per_file,
            "time_per_file": self.time_per_file,
        }
        given = {k: v for k, v in limits.items() if v is not None}
        if len(given) > 1:
            msg = f"{' and '.join(f'{k}={v!r}' for k, v in given.items())} exclude each other"
            raise ValueError(msg)
        if self.time_per_file is not None and self.time_per_file <= 0:
            msg = f"time_per_file={self.time_per_file!r} must be more than 0 seconds"
            raise ValueError(msg)
        if self.on_returning_name != "new_file" and self.file_attribute_name is None:
            msg = (
                f"on_returning_name={self.on_returning_name!r} needs file_attribute_name "
                "(a template's files are never overwritten)"
            )
            raise ValueError(msg)
        if (
            "max_open_files" in self.model_fields_set
            and self.file_attribute_name is None
            and not self.partition_by
        ):
            msg = (
                f"max_open_files={self.max_open_files!r} needs file_attribute_name or "
                "partition_by (a template writes one file at a time)"
            )
            raise ValueError(msg)
        if self.file_attribute_name is not None:
            if self.file is not None:
                msg = (
                    f"file={self.file!r} and file_attribute_name={self.file_attribute_name!r} "
                    "exclude each other"
                )
                raise ValueError(msg)
            if given:
                k, v = next(iter(given.items()))
                msg = f"{k}={v!r} cannot be used with file_attribute_name"
                raise ValueError(msg)
            if not self.directory:
                msg = (
                    f"file_attribute_name={self.file_attribute_name!r} needs directory= "
                    "(the base directory the file names are confined to)"
                )
                raise ValueError(msg)
            return self
        if not self.file:
            msg = f"file={self.file!r}: a file name template (or file_attribute_name) is required"
            raise ValueError(msg)
        if self.directory is not None and self.file.startswith("/"):
            msg = f"file={self.file!r} must be relative when directory={self.directory!r} is set"
            raise ValueError(msg)
        if SINK_DIR in (self.template or "").split("/"):
            msg = f"file={self.file!r} is inside {SINK_DIR}/, the sink's own folder"
            raise ValueError(msg)
        if self.directory is not None and ".." in self.file.split("/"):
            msg = f"file={self.file!r} must stay inside directory={self.directory!r} (no '..')"
            raise ValueError(msg)
        rolls = given or self.close_on_punct
        template = FileNameTemplate(self.file, self.time_format)
        if rolls and not template.uses_filenum:
            # %TIME alone does not make names unique: two files within one step of the time
            # format, a stop and restart within one step, local time repeating an hour when
            # the clocks go back. %FILENUM continues from the checkpoint and is never reused.
            what = " and ".join([*given, *(["close_on_punct"] if self.close_on_punct else [])])
            msg = repeating_names(template, f"{what} rolls to new files")
            raise ValueError(msg)
        base = self.file.rsplit("/", 1)[-1]
        if not base or base.startswith("."):
            msg = (
                f"file={self.file!r} must end in a file name that does not start with '.' "
                "(hidden names are reserved for in-progress files)"
            )
            raise ValueError(msg)
        return self

    @property
    def rolling(self) -> RollingPolicy:
        """When a file is complete (the same policy on Spark's ``hdfs_sink``)."""
        return RollingPolicy(
            tuples=self.tuples_per_file,
            bytes=self.bytes_per_file,
            seconds=self.time_per_file,
            on_punctuation=self.close_on_punct,
            idle=self.close_idle_after,
        )

    @property
    def template(self) -> str | None:
        """The full file template (``directory`` joined in front), or ``None`` in attribute mode."""
        if self.file is None:
            return None
        return posixpath.join(self.directory, self.file) if self.directory else self.file
