"""Spark data-source options to the operators' settings models.

Spark hands options over as a case-insensitive dict of strings (keys lower-cased), so an option
is matched by its name without case and underscores: ``max_files_per_trigger``,
``maxFilesPerTrigger`` and ``MAXFILESPERTRIGGER`` are the same option. Every field name and IBM
alias of the settings models is accepted; an unknown option is a :class:`ConfigError` that names it.

Credentials: pass ``password_env`` / ``token_env`` / ``keytab_env`` (the name of an environment
variable of the driver and the executors) rather than ``password`` / ``token`` / ``keytab``.
Option values are plain strings in Spark's query plan, which ``explain()``, the UI and event logs
show; Spark's ``spark.redaction.regex`` hides only keys it matches (not ``keytab``).
"""

from __future__ import annotations

import json
import posixpath
from collections.abc import Iterable, Mapping
from typing import Any, Literal, TypeVar

from pydantic import AliasChoices, BaseModel, ConfigDict, Field, ValidationError

from operators.fs.settings import FileSystemSettings, split_uri
from operators.scan.operator import ScanSettings
from operators.sink import SinkSettings
from operators.sink.formats import TableSpec
from operators.sink.owner import Owner
from operators.sink.settings import COLUMNS_FROM_INPUT, repeating_names
from operators.sink.templating import FileNameTemplate
from operators.source.operator import SourceSettings
from operators.spark.config import RowsConfig, ScanConfig, SinkConfig
from operators.spark.executors import check_shared_path
from region.errors import ConfigError

__all__ = [
    "FILE_FIELDS",
    "FS_FIELDS",
    "JSON_FIELDS",
    "SCAN_FIELDS",
    "ScanOptions",
    "SinkOptions",
    "build",
    "resolve",
    "route_options",
    "rows_need_transform",
    "scan_config",
    "sink_config",
]

M = TypeVar("M", bound=BaseModel)

#: Options Spark itself may pass along to a data source.
_SPARK_OWN = frozenset({"path", "checkpointlocation", "queryname"})

#: FileSystemSettings fields accepted as data-source options.
FS_FIELDS = (
    "uri",
    "user",
    "password",
    "credentials",
    "cred_file",
    "kerberos_principal",
    "keytab",
    "token",
    "password_env",
    "token_env",
    "keytab_env",
    "config_dir",
    "gateway_path",
    "ca_bundle",
    "key_store_password",
    "key_store_password_env",
    "webhdfs_uri",
    "timeout",
    "lease_recovery_timeout",
    "safe_mode_timeout",
    "reconnection_policy",
    "retries",
    "retry_backoff",
)


def _norm(name: str) -> str:
    return name.replace("_", "").replace("-", "").lower()


def _names(model: type[BaseModel], field: str) -> list[str]:
    info = model.model_fields[field]
    names = [field]
    alias = info.validation_alias
    if isinstance(alias, AliasChoices):
        names += [c for c in alias.choices if isinstance(c, str)]
    elif isinstance(alias, str):
        names.append(alias)
    return names


def route_options(
    options: Mapping[str, str],
    targets: Mapping[str, tuple[type[BaseModel], Iterable[str]]],
    *,
    source: str,
) -> dict[str, dict[str, str]]:
    """Split ``options`` by target: ``{target: {field: value}}``. ``targets`` maps a target name
    to a settings model and the fields of it that are accepted as options."""
    lookup: dict[str, tuple[str, str]] = {}
    for target, (model, fields) in targets.items():
        for field in fields:
            for name in _names(model, field):
                lookup.setdefault(_norm(name), (target, field))
    routed: dict[str, dict[str, str]] = {target: {} for target in targets}
    for key, value in options.items():
        norm = _norm(key)
        if norm in _SPARK_OWN:
            continue
        if norm not in lookup:
            known = sorted({field for _, fields in targets.values() for field in fields})
            msg = f"{source}: unknown option {key!r} (known: {', '.join(known)})"
            raise ConfigError(msg)
        target, field = lookup[norm]
        routed[target][field] = value
    return routed


def build(
    model: type[M],
    values: Mapping[str, Any],
    *,
    source: str,
    context: dict[str, Any] | None = None,
) -> M:
    """``model(**values)`` with validation errors turned into one ConfigError naming the option."""
    try:
        return model.model_validate(dict(values), context=context)
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in err['loc']) or 'options'}: {err['msg']}"
            for err in exc.errors(include_input=False)
        )
        raise ConfigError(f"{source}: bad option value: {problems}") from None


def resolve(
    path_or_uri: str, fs_values: Mapping[str, str], *, source: str
) -> tuple[FileSystemSettings, str]:
    """The filesystem settings and the path on it for a ``directory`` / ``file`` option, which
    may be a local path or a URI such as ``webhdfs://namenode:9870/landing``."""
    fs_uri, path = split_uri(path_or_uri)
    values = dict(fs_values)
    explicit = values.get("uri")
    # An explicit file:// is the local disk, not fs.defaultFS of a Hadoop configuration.
    if fs_uri != "file:///" or path_or_uri.startswith("file:"):
        if explicit is not None and split_uri(explicit)[0] != fs_uri:
            msg = f"{source}: {path_or_uri!r} names another filesystem than uri={explicit!r}"
            raise ConfigError(msg)
        values["uri"] = fs_uri
    settings = build(FileSystemSettings, values, source=source)
    if settings.kind == "local":
        check_shared_path(source, path_or_uri)
    return settings, path


class ScanOptions(BaseModel):
    """Options of the Spark source beyond the scan and file-source settings."""

    model_config = ConfigDict(frozen=True, extra="forbid", populate_by_name=True)

    #: At most this many files per micro-batch (a file continued from the last batch counts).
    max_files_per_trigger: int | None = Field(
        None, ge=1, validation_alias=AliasChoices("max_files_per_trigger", "maxFilesPerTrigger")
    )
    #: At most this many bytes per micro-batch (at least one file with ``batch_boundary=file``).
    max_bytes_per_trigger: int | None = Field(
        None, ge=1, validation_alias=AliasChoices("max_bytes_per_trigger", "maxBytesPerTrigger")
    )
    #: ``file``: a batch always ends at the end of a file (operator-driven regions);
    #: ``bytes``: ``max_bytes_per_trigger`` may end a batch inside a file (at a line boundary).
    batch_boundary: Literal["bytes", "file"] = Field(
        "bytes", validation_alias=AliasChoices("batch_boundary", "batchBoundary")
    )
    #: Largest byte range one Spark task reads; larger files are split at line boundaries.
    split_size: int = Field(
        128 << 20, ge=1, validation_alias=AliasChoices("split_size", "splitSize")
    )
    #: A batch is spread over at least this many tasks when it holds enough bytes (>= 1 MiB each).
    min_partitions: int = Field(
        2, ge=1, validation_alias=AliasChoices("min_partitions", "minPartitions")
    )
    #: Add the ``file`` and ``offset`` columns.
    include_file_info: bool = Field(
        False, validation_alias=AliasChoices("include_file_info", "includeFileInfo")
    )
    #: Where the per-batch plans are kept, one directory per query (required): next to the
    #: query's checkpointLocation, as Spark's file source keeps its log there. Never inside
    #: the watched directory (read-only landing directories, other readers, other queries).
    plan_dir: str | None = Field(None, validation_alias=AliasChoices("plan_dir", "planDir"))
    #: Plans of this many committed batches are kept.
    plan_retain: int = Field(100, ge=1, validation_alias=AliasChoices("plan_retain", "planRetain"))


class SinkOptions(BaseModel):
    """Options of the Spark sink beyond the file-sink settings."""

    model_config = ConfigDict(frozen=True, extra="forbid", populate_by_name=True)

    #: Directory of the sink log. Default ``<output dir>/_hdfs_sink`` (hidden from readers).
    log_dir: str | None = Field(None, validation_alias=AliasChoices("log_dir", "logDir"))
    #: Sink log entries kept (the newest ones).
    log_retain: int = Field(100, ge=1, validation_alias=AliasChoices("log_retain", "logRetain"))
    #: Column to write; default ``value``, or the only column.
    column: str | None = None
    #: The id of the job writing the output (``hdfs-region run`` gives its checkpoints' id);
    #: without it the query's checkpointLocation tells one job from another (operators.sink.owner).
    job_id: str | None = Field(None, validation_alias=AliasChoices("job_id", "jobId"))
    #: With a file limit: a file that is not full stays open across micro-batches (exact
    #: sizes). Then the files open when the query stops are published by
    #: ``operators.spark.sink.close_open_files`` (``hdfs-region run`` calls it at every stop);
    #: until then their records are written but not visible. Off: every batch closes its files.
    span_batches: bool = Field(False, validation_alias=AliasChoices("span_batches", "spanBatches"))


_NS = 1_000_000_000
_SOURCE = "hdfs_scan"
_SINK = "hdfs_sink"
#: The scan and file-source settings that travel as options of ``hdfs_scan`` (the engine's
#: plan passes those a pipeline sets; the source reads them back).
SCAN_FIELDS = (
    "directory",
    "pattern",
    "strict_mode",
    "min_file_age",
    "late_window",
    "on_late_file",
    "on_modified",
    "remember_files",
    "remember_for",
    "content_check",
    "hold_partial_line",
    "after_read",
    "archive_dir",
)
FILE_FIELDS = (
    "format",
    "encoding",
    "on_decode_error",
    "block_size",
    "read_chunk",
    "compression",
    "schema_",
    "header",
    "delimiter",
    "quote",
    "escape",
    "null_values",
    "on_bad_row",
)
#: File-source options whose values are JSON (Spark options are strings): ``schema`` an object
#: of column name to type, ``null_values`` an array of strings.
JSON_FIELDS = ("schema_", "null_values")
_SINK_FIELDS = (
    "file",
    "directory",
    "file_attribute_name",
    "on_returning_name",
    "max_open_files",
    "time_format",
    "tuples_per_file",
    "bytes_per_file",
    "time_per_file",
    "close_idle_after",
    "close_on_punct",
    "manifest",
    "manifest_retain",
    "on_published",
    "encoding",
    "format",
    "delivery",
    "permission",
    "compression",
    "schema_",
    "partition_by",
    "derived",
    "header",
    "delimiter",
    "rejects_file",
)
#: Sink options whose values are lists or tables: JSON (``partition_by`` may also be a
#: comma-separated list of names).
_JSON_FIELDS = ("schema_", "partition_by", "derived")


def _fs_or_local(settings: FileSystemSettings) -> FileSystemSettings | None:
    return None if settings.kind == "local" else settings


def _plan_location(
    option: str | None,
    fs_values: Mapping[str, str],
    scan_fs: FileSystemSettings,
    directory: str,
) -> tuple[FileSystemSettings, str]:
    """The filesystem and path of the plan log: the ``plan_dir`` option, which is required
    (nothing in a source's options says where the query's checkpoint is) and never inside the
    watched directory."""
    if option is None:
        msg = (
            f"{_SOURCE}: the option 'plan_dir' is required: the directory where this query keeps "
            "its per-batch plans, one per query, e.g. next to its checkpointLocation: "
            ".option('plan_dir', '<checkpointLocation>/hdfs_scan') (never inside the watched "
            "directory)"
        )
        raise ConfigError(msg)
    if option.startswith("file:"):  # the local disk, whatever filesystem the scan is on
        check_shared_path(f"{_SOURCE}: plan_dir", option)
        plan_fs, plan_dir = FileSystemSettings(uri="file:///"), split_uri(option)[1]
    else:
        plan_fs, plan_dir = resolve(option, fs_values, source=_SOURCE)
    inside = posixpath.normpath(plan_dir) == posixpath.normpath(directory) or posixpath.normpath(
        plan_dir
    ).startswith(posixpath.normpath(directory).rstrip("/") + "/")
    if inside and plan_fs.display() == scan_fs.display():
        msg = (
            f"{_SOURCE}: plan_dir {option!r} is inside the watched directory {directory!r}: a "
            "read-only landing directory would fail and other readers and queries would see "
            "it; put it next to the query's checkpointLocation"
        )
        raise ConfigError(msg)
    return plan_fs, plan_dir


def scan_config(options: Mapping[str, str]) -> ScanConfig:
    """The ``hdfs_scan`` options, validated (ConfigError naming the option otherwise)."""
    routed = route_options(
        options,
        {
            "scan": (ScanSettings, SCAN_FIELDS),
            "file": (SourceSettings, FILE_FIELDS),
            "spark": (ScanOptions, tuple(ScanOptions.model_fields)),
            "fs": (FileSystemSettings, FS_FIELDS),
        },
        source=_SOURCE,
    )
    if "directory" not in routed["scan"]:
        raise ConfigError(f"{_SOURCE}: the option 'directory' is required")
    scan = build(ScanSettings, routed["scan"], source=_SOURCE)
    assert scan.directory is not None
    fs_settings, directory = resolve(scan.directory, routed["fs"], source=_SOURCE)
    spark = build(ScanOptions, routed["spark"], source=_SOURCE)
    file_values = _json_options(routed["file"], JSON_FIELDS, _SOURCE)
    file = build(SourceSettings, file_values, source=_SOURCE)
    plan_fs, plan_dir = _plan_location(spark.plan_dir, routed["fs"], fs_settings, directory)
    archive_dir = None
    if scan.archive_dir is not None:
        archive_fs, archive_dir = resolve(scan.archive_dir, routed["fs"], source=_SOURCE)
        if archive_fs.display() != fs_settings.display():
            msg = f"{_SOURCE}: archive_dir must be on the watched directory's filesystem"
            raise ConfigError(msg)
    rows = None
    if file.format in ("csv", "jsonl"):
        if file.schema_ is None:
            msg = (
                f"{_SOURCE}: format={file.format!r} needs the option 'schema' (a JSON object "
                'of column name to type, e.g. \'{"id": "int64", "name": "string"}\'): the '
                "DataFrame's columns are known before any file is read"
            )
            raise ConfigError(msg)
        rows = RowsConfig(
            format=file.format,
            schema=tuple(file.schema_.items()),
            header=file.header,
            delimiter=file.delimiter,
            quote=file.quote,
            escape=file.escape,
            null_values=file.null_values,
            on_bad_row=file.on_bad_row,
        )
    return ScanConfig(
        directory=directory,
        plan_dir=plan_dir,
        plan_fs=None if plan_fs.display() == fs_settings.display() else plan_fs,
        pattern=scan.pattern,
        strict_mode=scan.strict_mode,
        min_file_age_ns=round(scan.min_file_age * _NS),
        late_window_ns=round(scan.late_window * _NS),
        on_late_file=scan.on_late_file,
        on_modified=scan.on_modified,
        remember_files=scan.remember_files,
        remember_for=scan.remember_for,
        content_check=scan.content_check,
        hold_partial_line=scan.hold_partial_line,
        binary=file.format == "binary",
        encoding=file.encoding,
        on_decode_error=file.on_decode_error,
        compression=file.compression,
        block_size=file.block_size,
        read_chunk=file.read_chunk,
        max_files_per_trigger=spark.max_files_per_trigger,
        max_bytes_per_trigger=spark.max_bytes_per_trigger,
        whole_files=spark.batch_boundary == "file",
        split_size=spark.split_size,
        min_partitions=spark.min_partitions,
        include_file_info=spark.include_file_info,
        plan_retain=spark.plan_retain,
        fs=_fs_or_local(fs_settings),
        after_read=scan.after_read,
        archive_dir=archive_dir,
        rows=rows,
    )


def _json_options(values: Mapping[str, Any], fields: tuple[str, ...], who: str) -> dict[str, Any]:
    """``values`` with the options of ``fields`` parsed from JSON (``partition_by`` may also be
    ``a,b``); ConfigError naming the option when one is not JSON."""
    out = dict(values)
    for key in fields:
        raw = out.get(key)
        if not isinstance(raw, str):
            continue
        text = raw.strip()
        if key == "partition_by" and not text.startswith("["):
            out[key] = [c.strip() for c in text.split(",") if c.strip()]
            continue
        try:
            out[key] = json.loads(text)
        except ValueError as exc:
            msg = f"{who}: option {key.rstrip('_')}={raw!r} is not JSON ({exc})"
            raise ConfigError(msg) from None
    return out


def rows_need_transform(fmt: str) -> str:
    """Why records with columns cannot go to a sink of lines or blocks as they are."""
    return (
        f"[source] format = {fmt!r} reads records with columns, and the sink writes one value "
        "per record (a line or a block): give a [transform] that makes each record's line, "
        "e.g. sql = \"SELECT concat_ws(',', id, name) AS value FROM input\" or function = "
        "'module:function' (it gets each record as a dict)"
    )


def sink_config(options: Mapping[str, str]) -> SinkConfig:
    """The ``hdfs_sink`` options, validated (ConfigError naming the option otherwise)."""
    routed = route_options(
        options,
        {
            "sink": (SinkSettings, _SINK_FIELDS),
            "spark": (SinkOptions, tuple(SinkOptions.model_fields)),
            "fs": (FileSystemSettings, FS_FIELDS),
        },
        source=_SINK,
    )
    values = _json_options(routed["sink"], _JSON_FIELDS, _SINK)
    # The records' columns come with the DataFrame: [sink.schema] is optional here.
    typed = {COLUMNS_FROM_INPUT: True}
    attribute = values.get("file_attribute_name")
    if "file" not in values and attribute is None:
        raise ConfigError(f"{_SINK}: the option 'file' (a file name template) is required")
    if attribute is not None:
        # File names come from a column: the base directory names the filesystem.
        if "directory" not in values:
            msg = f"{_SINK}: file_attribute_name={attribute!r} needs the option 'directory'"
            raise ConfigError(msg)
        fs_settings, directory = resolve(values.pop("directory"), routed["fs"], source=_SINK)
        sink = build(SinkSettings, {**values, "directory": directory}, source=_SINK, context=typed)
        if sink.on_returning_name != "new_file":
            msg = (
                f"{_SINK}: on_returning_name={sink.on_returning_name!r}: the Spark sink never "
                "overwrites a published file; a returning name goes to a numbered file"
            )
            raise ConfigError(msg)
        template, output_dir = "", directory
    else:
        fs_settings, file_path = resolve(values.pop("file"), routed["fs"], source=_SINK)
        if "directory" in values:
            dir_fs, directory = resolve(values.pop("directory"), routed["fs"], source=_SINK)
            if dir_fs.display() != fs_settings.display():
                raise ConfigError(f"{_SINK}: directory and file name different filesystems")
            values["directory"] = directory
        sink = build(SinkSettings, {**values, "file": file_path}, source=_SINK, context=typed)
        assert sink.template is not None
        template = sink.template
        names = FileNameTemplate(template, sink.time_format)
        if not names.uses_filenum:
            why = "every micro-batch and task on Spark writes files of its own"
            raise ConfigError(f"{_SINK}: {repeating_names(names, why)}")
        output_dir = posixpath.dirname(template) or "."
    if "%" in output_dir.replace("%%", ""):
        msg = (
            f"{_SINK}: file={template!r}: variables are allowed in the file name only, "
            "not in its directory"
        )
        raise ConfigError(msg)
    table = None if sink.format in ("line", "binary") else TableSpec.of(sink)
    spark = build(SinkOptions, routed["spark"], source=_SINK)
    if spark.log_dir is not None:
        log_fs, log_dir = resolve(spark.log_dir, routed["fs"], source=_SINK)
        if log_fs.display() != fs_settings.display():
            raise ConfigError(f"{_SINK}: log_dir must be on the output filesystem")
    else:
        log_dir = posixpath.join(output_dir, "_hdfs_sink")
    return SinkConfig(
        template=template,
        time_format=sink.time_format,
        output_dir=output_dir,
        log_dir=log_dir,
        rolling=sink.rolling,
        encoding=sink.encoding,
        binary=sink.format == "binary",
        exactly_once=sink.delivery == "exactly_once",
        permission=sink.permission,
        log_retain=spark.log_retain,
        column=spark.column,
        span_batches=spark.span_batches,
        attribute=sink.file_attribute_name,
        max_open_files=sink.max_open_files,
        manifest=sink.manifest,
        manifest_retain=sink.manifest_retain,
        on_published=sink.on_published,
        fs=_fs_or_local(fs_settings),
        owner=Owner.of_options(options),
        table=table,
        compression=sink.compression_codec if table is None else None,
        rejects=(
            posixpath.join(output_dir, sink.rejects_file) if sink.rejects_file is not None else None
        ),
    )
