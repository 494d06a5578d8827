"""The pipeline settings file: directory scan -> file source -> optional transform -> file sink.

One TOML file describes one pipeline (see ``conf/periodic.toml``)::

    engine = "spark"            # or "local" (in-process, no JVM)
    name = "orders"             # optional pipeline identity
    [region]    ...             # RegionSettings
    [scan]      directory = "landing"   # ScanSettings
    [source]    format = "line"         # SourceSettings (file = "x.csv": one file, no [scan])
    [transform] sql = "SELECT upper(value) AS value FROM input"   # or function = "mod:func"
    [sink]      file = "out/part-%FILENUM.txt"                    # SinkSettings
    [filesystem] uri = "webhdfs://namenode:9870"                  # FileSystemSettings
    [spark]     master = "local[2]"                               # SparkSettings

snake_case keys are canonical, the IBM Streams camelCase names are accepted too. A URI names its
own filesystem; a plain path is on ``[filesystem]``. A relative path resolves against the folder
of the settings file when ``[filesystem]`` is the local disk, and is refused on a cluster (a
``uri``, or ``fs.defaultFS`` of ``HADOOP_CONF_DIR``): see :func:`resolve_path`. Every problem
becomes a :class:`PipelineConfigError` with one line per bad key, naming the table, the key and
the value (never the value of a credential).
"""

from __future__ import annotations

import contextlib
import difflib
import hashlib
import json
import logging
import os
import posixpath
import re
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

from pydantic import (
    AliasChoices,
    BaseModel,
    ConfigDict,
    Field,
    PrivateAttr,
    SecretStr,
    ValidationError,
    field_validator,
    model_validator,
)

from operators.app.engines import IDENTITY_FILE
from operators.fs.settings import FileSystemSettings, split_uri
from operators.scan import ScanSettings
from operators.scan.listing import would_list
from operators.sink import SinkSettings
from operators.sink.templating import FileNameTemplate
from operators.source import SourceSettings
from region.checkpoint import cut_file_name
from region.errors import ConfigError
from region.settings import Duration, RegionSettings, load_toml

__all__ = [
    "DEFAULT_ENGINE",
    "ENGINES",
    "Engine",
    "MetricsSettings",
    "PipelineConfig",
    "PipelineConfigError",
    "SparkSettings",
    "TransformSettings",
    "check_default_fs_input",
    "format_validation_error",
    "key_line",
    "load_pipeline",
    "resolve_path",
    "with_line_numbers",
]

Engine = Literal["spark", "local"]
ENGINES: tuple[Engine, ...] = ("spark", "local")
#: The engine of a settings file without an ``engine`` key. It stays "spark" on purpose: a
#: checkpoint directory belongs to the engine that wrote it, and a job whose file never named
#: its engine must not change engines on an upgrade (it would be refused, or with fresh
#: checkpoints read its input again). New files name their engine (``init`` writes one).
DEFAULT_ENGINE: Engine = "spark"

#: Tables of the settings file, in the order they are documented.
_TABLES = ("region", "scan", "source", "transform", "sink", "filesystem", "spark", "metrics")
#: Tables whose values are never echoed in messages (passwords, tokens, keytab paths, URIs
#: that may carry ``user:password@``).
_SECRET_TABLES = frozenset({"filesystem"})
#: Keys of the ``[filesystem]`` table whose values are credentials.
_SECRET_KEYS = frozenset(
    {
        "password",
        "hdfsPassword",
        "token",
        "keytab",
        "authKeytab",
        "credentials",
        "key_store_password",
        "keyStorePassword",
    }
)
#: Keys of the ``[filesystem]`` table naming local files or folders, read while the settings
#: are validated: relative ones are taken from the settings file's folder.
_LOCAL_FILE_KEYS = (
    "config_dir",
    "configPath",
    "hadoop_conf_dir",
    "cred_file",
    "credFile",
    "ca_bundle",
    "keyStorePath",
    "key_store_path",
)
_FUNCTION = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_]\w*$")
#: Keys of the ``[filesystem]`` table that only a cluster reads (a login, credentials, TLS,
#: WebHDFS's addresses): on the local disk they do nothing, and why, for the warning.
_CLUSTER_ONLY_KEYS = {
    "kerberos_principal": "the local disk has no Kerberos login",
    "keytab": "the local disk has no Kerberos login",
    "keytab_env": "the local disk has no Kerberos login",
    "user": "the local disk acts as the process's own user",
    "password": "the local disk takes no password",
    "password_env": "the local disk takes no password",
    "token": "the local disk takes no delegation token",
    "token_env": "the local disk takes no delegation token",
    "ca_bundle": "the local disk has no TLS",
    "key_store_password": "the local disk has no TLS",
    "key_store_password_env": "the local disk has no TLS",
    "gateway_path": "the local disk has no WebHDFS",
    "webhdfs_uri": "the local disk has no WebHDFS",
}

logger = logging.getLogger(__name__)


class PipelineConfigError(ConfigError):
    """The settings file is wrong; ``problems`` holds one readable line per bad key."""

    def __init__(self, path: str, problems: list[str]) -> None:
        self.path = path
        self.problems = problems
        super().__init__(f"{path}: " + "; ".join(problems))


class TransformSettings(BaseModel):
    """An optional step between the source and the sink: exactly one of ``sql`` or ``function``."""

    model_config = ConfigDict(frozen=True, extra="forbid", populate_by_name=True)

    #: Spark SQL over a view named ``input`` with a column ``value``; must return a ``value``
    #: column (string in line mode). Spark engine only.
    sql: str | None = None
    #: ``"module:function"`` called once per record; returns the new record, or ``None`` to drop
    #: it. Both engines (a Python UDF on Spark). The settings file's folder is importable.
    function: str | None = None
    #: The ``function`` takes and returns a ``pyarrow.RecordBatch`` of a batch's records (their
    #: columns: records with a ``[source.schema]``), called once per batch instead of once per
    #: record. Local engine.
    vectorized: bool = False

    @field_validator("function")
    @classmethod
    def _module_colon_function(cls, value: str | None) -> str | None:
        if value is not None and not _FUNCTION.match(value):
            raise ValueError(f"{value!r} is not 'module:function' (e.g. 'mytransforms:clean')")
        return value

    @model_validator(mode="after")
    def _exactly_one(self) -> TransformSettings:
        if (self.sql is None) == (self.function is None):
            raise ValueError("give exactly one of sql = '...' or function = 'module:function'")
        if self.sql is not None and not self.sql.strip():
            raise ValueError("sql is empty")
        if self.vectorized and self.function is None:
            raise ValueError("vectorized = true is for a function = 'module:function'")
        return self


class SparkSettings(BaseModel):
    """How the Spark engine runs (local mode by default)."""

    model_config = ConfigDict(frozen=True, extra="forbid", populate_by_name=True)

    #: Spark master URL: ``local[2]`` runs in this process's JVM; a cluster URL works too, and
    #: ``yarn`` (the ResourceManager of ``HADOOP_CONF_DIR``; docs/cluster.md, "On YARN").
    master: str = "local[2]"
    #: With ``master = "yarn"``: ``client`` runs the driver in this process; ``cluster`` in
    #: YARN's application master (this command submits it and waits for its exit code).
    deploy_mode: Literal["client", "cluster"] = "client"
    #: A Spark Connect server (``sc://host:port``) to run on instead of a session of this
    #: process: no JVM here; the server's Python workers must import this project, and its
    #: environment holds the secrets (README, "Through Spark Connect").
    remote: str | None = None
    #: At most this many input files per micro-batch.
    max_files_per_trigger: int | None = Field(
        None, ge=1, validation_alias=AliasChoices("max_files_per_trigger", "maxFilesPerTrigger")
    )
    #: At most this many input bytes per micro-batch.
    max_bytes_per_trigger: int | None = Field(
        None, ge=1, validation_alias=AliasChoices("max_bytes_per_trigger", "maxBytesPerTrigger")
    )
    #: Extra Spark configuration (``spark.*`` keys), e.g. ``{"spark.driver.memory" = "2g"}``.
    conf: dict[str, str] = Field(default_factory=dict)
    #: The driver's JVM maps a class-data archive of Spark's classes, written by the first run
    #: of a Java and Spark release into the cache directory (about 160 MB): later runs start
    #: about 6 s sooner. ``false``: every JVM loads its classes from the jars.
    class_data_archive: bool = True
    #: On a local master (``local[N]``), a batch that reads at most this many bytes runs in the
    #: driver's Python, with the tasks' own code, instead of as a Spark job, which would start
    #: a Python worker and schedule tasks that cost more than the batch (a run from cron over
    #: a few small files, a trickle of input). ``0``: every batch is a Spark job. Batches
    #: with a transform (a function may take any time, and only a job can be cancelled), and
    #: on a cluster or over Spark Connect, are always Spark jobs.
    driver_batch_bytes: int = Field(4 << 20, ge=0)
    #: ``auto``: fused execution (each batch one Spark job whose tasks read, transform and
    #: write) unless a SQL transform keeps state across batches (an aggregation, a
    #: deduplication), which needs a streaming query; ``streaming``: always a Structured
    #: Streaming query of ``hdfs_scan`` -> ``hdfs_sink``. Both keep the same checkpoint, so a
    #: pipeline may switch between them.
    execution: Literal["auto", "streaming"] = "auto"

    @field_validator("remote")
    @classmethod
    def _remote_is_connect_url(cls, value: str | None) -> str | None:
        if value is not None and not value.startswith("sc://"):
            raise ValueError(f"{value!r} is not a Spark Connect URL (sc://host:port)")
        return value

    @model_validator(mode="after")
    def _master_or_remote(self) -> SparkSettings:
        if self.remote is not None and "master" in self.model_fields_set:
            msg = (
                "master and remote are both given: a Spark Connect server has its own master "
                "(its --master); give one of them"
            )
            raise ValueError(msg)
        return self


class MetricsSettings(BaseModel):
    """Prometheus metrics and health checks of the job: ``/metrics``, ``/healthz``, ``/readyz``
    on one port (the driver's, on Spark). Off unless a port is given: a fixed default port
    would make a second job on the same host fail at start."""

    model_config = ConfigDict(frozen=True, extra="forbid", populate_by_name=True)

    #: Port to serve on (off when unset); 0 takes any free port and logs it.
    port: int | None = Field(None, ge=0, le=65535)
    #: Address to listen on: every interface by default, so that a Prometheus server or a
    #: Kubernetes probe on another host reaches it (only counters are served, never a path).
    host: str = "0.0.0.0"
    #: ``/healthz`` fails when one cut or reset lasts longer than this (each of their steps has
    #: a shorter timeout of its own, so only a blocked operator gets there), or the region failed.
    #: Default: 10 minutes, or ``drain_timeout + reset_timeout`` and one minute when longer.
    stuck_after: Duration | None = Field(None, gt=0)

    def bound(self, region: RegionSettings) -> float:
        """The ``stuck_after`` in force for ``region``'s timeouts."""
        if self.stuck_after is not None:
            return self.stuck_after
        return max(600.0, region.drain_timeout + region.reset_timeout + 60.0)


class PipelineConfig(BaseModel):
    """A whole pipeline as read from its settings file (paths already resolved)."""

    model_config = ConfigDict(frozen=True, extra="forbid", populate_by_name=True)

    engine: Engine = DEFAULT_ENGINE
    #: The pipeline identity stored in every checkpoint; default: derived from the scanned
    #: directory and the sink's file template (see :meth:`pipeline_id`).
    name: str | None = None
    region: RegionSettings = Field(default_factory=RegionSettings)
    #: The directory scan; with ``[source] file`` it is derived (see :meth:`_one_file`).
    scan: ScanSettings = Field(default_factory=ScanSettings)
    source: SourceSettings = Field(default_factory=SourceSettings)
    transform: TransformSettings | None = None
    sink: SinkSettings
    filesystem: FileSystemSettings = Field(default_factory=FileSystemSettings)
    spark: SparkSettings = Field(default_factory=SparkSettings)
    metrics: MetricsSettings = Field(default_factory=MetricsSettings)

    #: Folder of the settings file (user transforms are imported from there).
    _folder: str = PrivateAttr(default_factory=os.getcwd)
    #: The settings file as the command line named it (for commands in messages).
    _path: str = PrivateAttr("CONFIG.toml")
    _real_paths: bool = PrivateAttr(False)

    @property
    def folder(self) -> str:
        return self._folder

    @property
    def path(self) -> str:
        return self._path

    @field_validator("name")
    @classmethod
    def _name_not_blank(cls, value: str | None) -> str | None:
        if value is not None and not value.strip():
            raise ValueError("name is empty")
        return value

    @model_validator(mode="before")
    @classmethod
    def _one_file(cls, data: Any) -> Any:
        """``[source] file``: the pipeline reads that one file, through a scan of its directory
        that lists only its name, so the file follows the scan's rules (read once, resumed
        mid-file, ``on_modified`` when it changes after it was read) on both engines."""
        if not isinstance(data, dict):
            return data
        source, scan = data.get("source"), data.get("scan", {})
        if not isinstance(source, dict) or not isinstance(scan, dict):
            return data
        file = source.get("file")
        if not isinstance(file, str) or not file:
            return data  # absent, or the field's own check names what is wrong
        for key in ("directory", "pattern"):
            if key in scan:
                raise ValueError(
                    f"[scan] {key}: not used with [source] file = {file!r}, which reads that one "
                    "file: remove one of them"
                )
        head, base = posixpath.split(file)
        if not base or base.startswith((".", "_")):
            raise ValueError(
                f"[source] file: {file!r} must end in a file name that does not start with '.' "
                "or '_' (hidden names are never read)"
            )
        scan = {**scan, "directory": head or ".", "pattern": re.escape(base)}
        return {**data, "scan": scan}

    @model_validator(mode="before")
    @classmethod
    def _sink_schema_of_the_source(cls, data: Any) -> Any:
        """Without a ``[transform]`` the sink writes the records the source reads: its
        ``[sink.schema]`` is ``[source.schema]`` unless given."""
        if not isinstance(data, dict) or "transform" in data:
            return data
        source, sink = data.get("source"), data.get("sink")
        if not isinstance(source, dict) or not isinstance(sink, dict):
            return data
        table = sink.get("format") in ("jsonl", "csv", "parquet", "orc")
        if table and "schema" in source and "schema" not in sink and "schema_" not in sink:
            return {**data, "sink": {**sink, "schema": source["schema"]}}
        return data

    @model_validator(mode="after")
    def _pipeline_shape(self) -> PipelineConfig:
        if self.scan.directory is None:
            raise ValueError(
                "[scan] directory: required (the landing directory to watch), or [source] file "
                "(one file to read)"
            )
        paths = {
            "[scan] directory": self.scan.directory,
            "[sink] file": self.sink.file,
            "[sink] directory": self.sink.directory,
            "[region] checkpoint_dir": self.region.checkpoint_dir,
        }
        for key, path in paths.items():
            if path is None:
                continue
            try:
                fs_uri, _ = split_uri(path)
                if fs_uri != "file:///":
                    FileSystemSettings(uri=fs_uri)  # a bad host or port fails here
            except ValidationError as exc:
                why = str(exc.errors()[0]["msg"]).removeprefix("Value error, ")
                raise ValueError(f"{key}: {why.removeprefix('uri: ')}") from None
            except ValueError as exc:
                why = str(exc).removeprefix("uri: ")
                raise ValueError(f"{key}: {why} (got {path!r})") from None
        self._output_outside_input()
        self._checkpoints_apart()
        # A cut or a reset may rightly last its timeouts: a bound below them would have an
        # orchestrator kill a job that is only slow.
        steps = self.region.drain_timeout + self.region.reset_timeout
        if self.metrics.stuck_after is not None and self.metrics.stuck_after <= steps:
            raise ValueError(
                f"[metrics] stuck_after: {self.metrics.stuck_after:g} s must be longer than "
                f"[region] drain_timeout + reset_timeout ({steps:g} s): a cut or a reset may "
                "take that long without being stuck"
            )
        return self

    def _where(self, path: str) -> str:
        """Where a configured directory is, to compare two: its URI, normalized; on the local
        disk with links followed once the paths are resolved (a link to the output directory
        is the output directory)."""
        settings, on_fs = self.locate(path)
        if self._real_paths and settings.kind == "local":
            on_fs = os.path.realpath(on_fs)
        return posixpath.normpath(settings.display(on_fs))

    def apart_by_identity(self) -> None:
        """The checks of the watched, output and checkpoint directories again, on the resolved
        paths with links followed. ValueError naming the key."""
        self._real_paths = True
        try:
            self._output_outside_input()
            self._checkpoints_apart()
        finally:
            self._real_paths = False

    def _checkpoints_apart(self) -> None:
        """Refuse a checkpoint directory that is the watched directory (the scan would read the
        checkpoint files as input) or the output directory (plain readers would see them)."""
        checkpoints = self._where(self.region.checkpoint_dir)
        pattern = re.compile(self.scan.pattern) if self.scan.pattern is not None else None
        if checkpoints == self._where(self.scan_directory) and any(
            would_list(name, pattern) for name in (IDENTITY_FILE, cut_file_name(1))
        ):
            raise ValueError(
                f"[region] checkpoint_dir: {self.region.checkpoint_dir!r} is the watched "
                "directory, and the scan would read the checkpoint files as input: keep the "
                "checkpoints in a directory of their own"
            )
        template = self.sink.template
        folder = posixpath.dirname(template) if template is not None else self.sink.directory
        if folder is not None and checkpoints == self._where(folder or "."):
            raise ValueError(
                f"[region] checkpoint_dir: {self.region.checkpoint_dir!r} is the output "
                "directory, where readers would see the checkpoint files among the output: "
                "keep the checkpoints in a directory of their own"
            )

    def _output_outside_input(self) -> None:
        """Refuse a sink that writes files the scan would read: it would read its own output
        forever (every output record becomes input again)."""
        watched = self._where(self.scan_directory)
        pattern = re.compile(self.scan.pattern) if self.scan.pattern is not None else None
        sink = self.sink
        template = sink.template
        if template is None:  # file names come from the records, anywhere below the base
            assert sink.directory is not None
            base = self._where(sink.directory)
            if watched == base or watched.startswith(base.rstrip("/") + "/"):
                raise ValueError(
                    f"[sink] directory: {sink.directory!r} holds the watched directory "
                    f"{self.scan_directory!r}, and records may name files there, which the scan "
                    "would read again: write below another directory"
                )
            return
        names = [template]
        if sink.rejects_file is not None:
            names.append(posixpath.join(posixpath.dirname(template), sink.rejects_file))
        for name in names:
            sample = FileNameTemplate(name, sink.time_format).render(filenum=0, now=time.time())
            folder, base_name = posixpath.split(sample)
            if self._where(folder or ".") == watched and would_list(base_name, pattern):
                key = "[sink] file" if name == template else "[sink] rejects_file"
                raise ValueError(
                    f"{key}: {name!r} writes into the watched directory {self.scan_directory!r} "
                    f"and the scan would read its own output ({base_name!r} is read): write "
                    "elsewhere, or set [scan] pattern so that it does not match"
                )

    @property
    def single_file(self) -> str | None:
        """The one file the pipeline reads (``[source] file``), or ``None`` (the scan names
        the files). Such a run ends once the file is read, as IBM's source does."""
        return self.source.file

    @property
    def single_name(self) -> str | None:
        """The base name of :attr:`single_file`."""
        return posixpath.basename(self.single_file) if self.single_file is not None else None

    @property
    def feed_source(self) -> SourceSettings:
        """The source's settings as the engines use them: the scan names its files."""
        return self.source.model_copy(update={"file": None})

    @property
    def scan_directory(self) -> str:
        assert self.scan.directory is not None
        return self.scan.directory

    def locate(self, path: str) -> tuple[FileSystemSettings, str]:
        """The filesystem settings and the path on that filesystem for a configured path: a URI
        names its own filesystem, a plain path is on ``[filesystem]``."""
        fs_uri, on_fs = split_uri(path)
        if fs_uri == "file:///" and not path.startswith("file:"):
            return self.filesystem, on_fs
        return FileSystemSettings(uri=fs_uri), on_fs

    def display(self, path: str) -> str:
        """A configured path as a URI without credentials (for messages and the identity)."""
        settings, on_fs = self.locate(path)
        return settings.display(on_fs)

    def pipeline_id(self) -> str:
        """What every checkpoint of this pipeline is stamped with: ``name`` when given, else a
        digest of where it reads and writes, so a checkpoint directory of another pipeline is
        refused instead of resumed."""
        if self.name is not None:
            return self.name
        paths = self.identity_paths()
        text = f"scan {paths['scan']}\nsink {paths['sink']}"
        return "auto-" + hashlib.sha256(text.encode()).hexdigest()[:16]

    def inert_keys(self) -> list[str]:
        """One line per key given in the settings file that does nothing in this pipeline,
        naming it and why: ``[spark]`` keys when the local engine runs, cluster-only
        ``[filesystem]`` keys when every path is on the local disk."""
        lines = [
            f"[spark] {key}: does nothing with engine = 'local' (the local engine runs no "
            "Spark): remove it, or run on the spark engine"
            for key in sorted(self.spark.model_fields_set)
            if self.engine == "local"
        ]
        if self.filesystem.kind == "local" and not self._any_remote_path():
            lines.extend(
                f"[filesystem] {key}: does nothing: every path of this pipeline is on the local "
                f"disk, and {why}: remove it, or set [filesystem] uri to the cluster"
                for key, why in _CLUSTER_ONLY_KEYS.items()
                if key in self.filesystem.model_fields_set
            )
        return lines

    def _any_remote_path(self) -> bool:
        """Whether a configured path names a filesystem other than the local disk (the
        ``[filesystem]`` table's login and credentials go with it)."""
        paths = [
            self.scan.directory,
            self.source.file,
            self.sink.file,
            self.sink.directory,
            self.region.checkpoint_dir,
            self.scan.archive_dir,
            *(self.scan.roots or ()),
        ]
        return any(p is not None and self.locate(p)[0].kind != "local" for p in paths)

    def identity_paths(self) -> dict[str, str]:
        """What a derived :meth:`pipeline_id` is made of (URIs without credentials): stamped
        beside it, so a refusal can say which one changed."""
        sink = self.sink.template or f"{self.sink.directory}/<{self.sink.file_attribute_name}>"
        scan = self.single_file or self.scan_directory
        return {"scan": self.display(scan), "sink": self.display(sink)}


def _describe(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _secrets_of(data: Any) -> list[str]:
    """Credential values written in the ``[filesystem]`` table (to mask in messages)."""
    table = data.get("filesystem") if isinstance(data, dict) else None
    if not isinstance(table, dict):
        return []
    found = [str(v) for k, v in table.items() if k in _SECRET_KEYS and v not in (None, "")]
    for key in ("credentials",):
        # IBM's connection JSON: its password is a secret of its own (a wrong JSON is masked
        # whole above).
        with contextlib.suppress(ValueError, AttributeError):
            parsed = json.loads(str(table.get(key) or "null"))
            found.extend(str(parsed[k]) for k in ("password", "hdfsPassword") if parsed.get(k))
    for key in ("uri", "hdfsUri"):
        uri = table.get(key)
        if isinstance(uri, str) and "@" in uri and "://" in uri:
            userinfo = uri.split("://", 1)[1].split("@", 1)[0]
            found.extend(part for part in userinfo.split(":", 1)[1:] if part)
    return [s for s in found if len(s) >= 3]


def _mask(text: str, secrets: list[str]) -> str:
    for secret in secrets:
        text = text.replace(secret, "***")
    return text


def format_validation_error(exc: ValidationError, secrets: Sequence[str] = ()) -> list[str]:
    """One line per error: ``[sink] tuples_per_file: <what is wrong> (got 'abc')``.

    The key is spelled as the user wrote it (an IBM alias stays an alias). Values of the
    ``[filesystem]`` table are never shown: they may hold credentials, and ``secrets`` (values
    of credentials) are masked wherever a message would quote them.
    """
    lines: list[str] = []
    for err in exc.errors():
        loc = [str(part) for part in err["loc"]]
        table = loc[0] if loc and loc[0] in _TABLES else None
        keys = loc[1:] if table is not None else loc
        where = f"[{table}]" if table is not None else ""
        key = ".".join(keys)
        message = str(err["msg"]).removeprefix("Value error, ")
        kind = err["type"]
        show_value = table not in _SECRET_TABLES and bool(keys)
        if kind == "extra_forbidden":
            show_value = False
            twin = _alias_of(table, key)
            if twin is not None:
                message = f"the same setting as {twin}, given twice: keep one"
            else:
                message = "unknown key"
                fields = _known_keys(table)
                close = difflib.get_close_matches(key, [*fields, *_aliases(table)], n=1)
                if close:
                    message += f"; did you mean {close[0]!r}?"
                if fields:
                    message += f" (known: {', '.join(fields)})"
        elif kind == "missing":
            message = "required" if keys else "the table is required"
            show_value = False
        elif kind == "model_type" and not keys:
            message = "must be a table ([" + (table or "?") + "] with key = value lines)"
        if not loc and message.startswith("["):
            # A whole-pipeline check: its message already names the table and the key.
            lines.append(_mask(message, list(secrets)))
            continue
        if key:
            line = f"{where} {key}: {message}".lstrip()
        elif kind in ("missing", "model_type"):
            line = f"{where or 'settings'}: {message}"
        else:
            # A check of the whole table: its message names the keys.
            line = f"{where or 'settings:'} {message}"
        if show_value and "input" in err:
            shown = _describe(err["input"])
            if shown not in message:
                line += f" (got {shown})"
        lines.append(_mask(line, list(secrets)))
    return lines


def _alias_of(table: str | None, key: str) -> str | None:
    """The field ``key`` names too (an IBM alias or the field's own name), when it is one: a
    key left over because its twin was taken is a duplicate, not an unknown key."""
    if table is None:
        return None
    annotation = PipelineConfig.model_fields[table].annotation
    for candidate in getattr(annotation, "__args__", (annotation,)):
        if isinstance(candidate, type) and issubclass(candidate, BaseModel):
            for name, field in candidate.model_fields.items():
                alias = field.validation_alias
                choices = getattr(alias, "choices", ())
                if key != name and key in choices:
                    return name
    return None


def _aliases(table: str | None) -> list[str]:
    """The other names (IBM's) the keys of ``table`` may be given by."""
    if table is None:
        return []
    annotation = PipelineConfig.model_fields[table].annotation
    names: list[str] = []
    for candidate in getattr(annotation, "__args__", (annotation,)):
        if isinstance(candidate, type) and issubclass(candidate, BaseModel):
            for name, field in candidate.model_fields.items():
                choices = getattr(field.validation_alias, "choices", ())
                names.extend(c for c in choices if isinstance(c, str) and c != name)
    return names


#: A problem line that names its key: ``[table] key: ...`` or ``key: ...`` (top level).
_NAMED_KEY = re.compile(r"^(?:\[(?P<table>[\w.]+)\] )?(?P<key>[A-Za-z_][\w-]*)[.:]")
_HEADER = re.compile(r"^\s*\[\[?\s*(?P<table>[^\]]+?)\s*\]\]?\s*(?:#.*)?$")


def key_line(text: str, table: str | None, key: str) -> int | None:
    """The line number (from 1) of ``key = ...`` under ``[table]`` (the top level for
    ``None``) in TOML ``text``, or ``None`` when it is not written there."""
    current: str | None = None
    assign = re.compile(rf"""^\s*(["']?){re.escape(key)}\1\s*=""")
    for number, line in enumerate(text.splitlines(), 1):
        header = _HEADER.match(line)
        if header is not None:
            current = header.group("table").replace(" ", "")
        elif current == table and assign.match(line):
            return number
    return None


def with_line_numbers(problems: list[str], path: str | os.PathLike[str]) -> list[str]:
    """``problems`` each prefixed with ``line N:``, the line of the key it names in the
    settings file, where that key is written (a default has no line)."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return problems
    located = []
    for problem in problems:
        named = _NAMED_KEY.match(problem)
        number = None
        if named is not None:
            number = key_line(text, named.group("table"), named.group("key"))
        located.append(problem if number is None else f"line {number}: {problem}")
    return located


def _known_keys(table: str | None) -> list[str]:
    if table is None:
        return ["engine", "name", *_TABLES]
    annotation = PipelineConfig.model_fields[table].annotation
    for candidate in getattr(annotation, "__args__", (annotation,)):
        if isinstance(candidate, type) and issubclass(candidate, BaseModel):
            # A field's name in the file: its alias where it has one (``schema_`` is ``schema``).
            return [f.alias or name for name, f in candidate.model_fields.items()]
    return []


def _is_uri(path: str) -> bool:
    return split_uri(path)[0] != "file:///" or path.startswith("file:")


def _absolute(path: str, base: Path | str) -> str:
    expanded = os.path.expanduser(path)
    return os.path.normpath(os.path.join(base, expanded))


def _hadoop_user(filesystem: FileSystemSettings) -> str:
    """The user whose home Hadoop would take a relative path from (for the example only)."""
    import getpass

    return filesystem.user or os.environ.get("HADOOP_USER_NAME") or getpass.getuser()


def resolve_path(path: str, *, key: str, base: Path | str, filesystem: FileSystemSettings) -> str:
    """A path as written in the settings file (or given to ``switch``), as the job uses it.

    1. A URI (``hdfs://…``, ``file:///…``) names its own filesystem: used as written; a
       relative ``file:`` path (``file:landing``) is taken from ``base`` as in 3.
    2. A plain absolute path is on ``filesystem``.
    3. A relative path (or ``~``) is taken from ``base`` (the settings file's folder) on the
       local disk, when ``filesystem`` is the local disk. On a cluster, given as ``uri`` or
       taken from ``fs.defaultFS``, it is refused: Hadoop would take it from ``/user/<name>``,
       this folder is on another disk, and guessing either way reads or writes somewhere the
       user did not look. ValueError naming ``key``, the value and both ways to write it.
    """
    if _is_uri(path):
        fs_uri, on_fs = split_uri(path)
        if fs_uri == "file:///" and not on_fs.startswith("/"):
            return "file://" + _absolute(on_fs, base)  # ``file:landing``: relative, as rule 3
        return path
    if filesystem.kind != "local" and path.startswith("/"):
        return path
    if filesystem.kind == "local":
        return _absolute(path, base)
    where = filesystem.display()
    origin = filesystem.uri_source or "[filesystem] uri"
    home = posixpath.normpath(f"/user/{_hadoop_user(filesystem)}/{path.lstrip('~/')}")
    msg = (
        f"{key}: {path!r} is a relative path, and plain paths are on {where} ({origin}), where "
        "it would have no folder to start from (relative paths are taken from the settings "
        f"file's folder on the local disk only): write {where + home!r} (or {home!r}) for the "
        f"cluster, or {'file://' + _absolute(path, base)!r} for the local disk"
    )
    raise ValueError(msg)


def check_default_fs_input(config: PipelineConfig) -> None:
    """At start: ConfigError when the input, written as a plain absolute path, is on a cluster
    taken from ``fs.defaultFS`` (no ``[filesystem] uri``), does not exist there, and does exist
    on the local disk. Such a run would read nothing and end "done" while the files the user
    meant sit on this disk; which one was meant is the user's to say, by writing a URI."""
    from operators.fs import open_filesystem

    origin = config.filesystem.uri_source
    key, written = "[scan] directory", config.scan_directory
    if config.single_file is not None:
        key, written = "[source] file", config.single_file
    if origin is None or _is_uri(written) or not os.path.exists(written):
        return
    if open_filesystem(config.filesystem).exists(written):
        return
    cluster = config.filesystem.display(written)
    msg = (
        f"{key}: {written!r} is on {config.filesystem.display()} ({origin}), where "
        f"{cluster} does not exist, while {written} exists on the local disk: write "
        f"{'file://' + written!r} to read the local one, or {cluster!r} to wait for the "
        "cluster's"
    )
    raise ConfigError(msg)


def _resolve_paths(
    config: PipelineConfig, base: Path, *, default_checkpoints: str
) -> PipelineConfig:
    """Resolve the paths as :func:`resolve_path` does; PipelineConfigError-ready problems (one
    line per key) for relative paths on a cluster."""
    local = config.filesystem.kind == "local"
    problems: list[str] = []

    def fix(path: str | None, key: str, *, report: bool = True) -> str | None:
        if path is None:
            return None
        try:
            return resolve_path(path, key=key, base=base, filesystem=config.filesystem)
        except ValueError as exc:
            if report:
                problems.append(str(exc))
            return path

    # With [source] file the scan's directory is derived from it: named once, as written.
    single = config.source.file is not None
    scan_update: dict[str, Any] = {
        "directory": fix(config.scan.directory, "[scan] directory", report=not single)
    }
    source_update: dict[str, Any] = {}
    if single:
        source_update["file"] = fix(config.source.file, "[source] file")
    if config.scan.roots is not None:
        scan_update["roots"] = tuple(fix(r, "[scan] roots") or r for r in config.scan.roots)
    if config.scan.archive_dir is not None:
        scan_update["archive_dir"] = fix(config.scan.archive_dir, "[scan] archive_dir")
    sink_update: dict[str, Any] = {}
    if config.sink.directory is not None:
        sink_update["directory"] = fix(config.sink.directory, "[sink] directory")
    elif config.sink.file is not None:
        sink_update["file"] = fix(config.sink.file, "[sink] file")
    region_update: dict[str, Any] = {}
    if "checkpoint_dir" in config.region.model_fields_set:
        region_update["checkpoint_dir"] = fix(
            config.region.checkpoint_dir, "[region] checkpoint_dir"
        )
    else:
        # On the local disk next to the settings file, whatever [filesystem] says.
        region_update["checkpoint_dir"] = (
            default_checkpoints if local else "file://" + default_checkpoints
        )
    if problems:
        raise ValueError("\n".join(problems))
    fs_update: dict[str, Any] = {}
    if config.filesystem.keytab is not None:
        # A keytab is always a local file, whatever the filesystem.
        keytab = _absolute(config.filesystem.keytab.get_secret_value(), base)
        fs_update["keytab"] = SecretStr(keytab)  # model_copy does not validate
    return config.model_copy(
        update={
            "scan": config.scan.model_copy(update=scan_update),
            "source": config.source.model_copy(update=source_update),
            "sink": config.sink.model_copy(update=sink_update),
            "region": config.region.model_copy(update=region_update),
            "filesystem": config.filesystem.model_copy(update=fs_update),
        }
    )


def default_checkpoint_dir(config_path: Path) -> str:
    """``<settings folder>/checkpoints/<settings file name without .toml>``: next to the
    settings file, one directory per file, so two files in a folder never share one."""
    return str(config_path.parent / "checkpoints" / config_path.stem)


def load_pipeline(path: str | os.PathLike[str], *, engine: Engine | None = None) -> PipelineConfig:
    """Read, validate and resolve a pipeline settings file.

    ``engine`` (the command line's ``--engine``) overrides the file's ``engine`` key. Raises
    :class:`PipelineConfigError` (a :class:`ConfigError`) naming each bad key and value.
    """
    config_path = Path(path).absolute()
    shown = os.fspath(path)
    data = load_toml(config_path)
    if engine is not None:
        data["engine"] = engine
    table = data.get("filesystem")
    if isinstance(table, dict):
        data["filesystem"] = {
            k: _absolute(v, config_path.parent)
            if k in _LOCAL_FILE_KEYS and isinstance(v, str)
            else v
            for k, v in table.items()
        }
    try:
        config = PipelineConfig.model_validate(data)
    except ValidationError as exc:
        problems = format_validation_error(exc, _secrets_of(data))
        raise PipelineConfigError(shown, with_line_numbers(problems, config_path)) from None
    try:
        resolved = _resolve_paths(
            config, config_path.parent, default_checkpoints=default_checkpoint_dir(config_path)
        )
    except ValueError as exc:
        problems = str(exc).splitlines()
        raise PipelineConfigError(shown, with_line_numbers(problems, config_path)) from None
    try:
        resolved.apart_by_identity()
    except ValueError as exc:
        raise PipelineConfigError(shown, with_line_numbers([str(exc)], config_path)) from None
    resolved._folder = str(config_path.parent)
    resolved._path = shown
    if engine is None and "engine" not in data:
        logger.info(
            'engine: %s, the default (%s has no engine key; set engine = "local" or '
            '"spark" there, or give --engine)',
            resolved.engine,
            shown,
        )
    for line in resolved.inert_keys():
        logger.warning("%s: %s", shown, line)
    return resolved
