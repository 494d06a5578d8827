"""``hdfs_scan``: the directory scan and the file source as a Spark streaming source.

``spark.readStream.format("hdfs_scan").option("directory", d).load()`` gives a DataFrame with a
``value`` column (``string`` in line mode, ``binary`` in binary mode) and, with
``include_file_info``, ``file`` (URI) and ``offset`` (byte offset of the record in the file).

Offset (JSON, written by Spark to ``<checkpoint>/offsets/N``)::

    {"v": 1, "seq": 7, "key": {"mtime_ns": ..., "name": ...} | null, "pos": int | null,
     "late": {name: mtime_ns}, "plan": "<digest>" | null}

``key`` is the greatest file planned so far in the scan order (mtime_ns, name); ``pos`` is where
the next batch continues that file when a batch ended inside it (``null``: the file is done);
``late`` the names planned within ``late_window`` below the key; ``seq`` counts batches.

Plan log (``plan_dir``, by default ``<directory>/_hdfs_scan``): ``<seq:020d>-<digest>.json``
holds the exact byte ranges (path, start, end, size when planned) of the batch that ends at the
offset with that ``seq`` and ``plan``. A batch Spark replays after a crash is read from its plan,
so it is the same batch even if files arrived late, grew, or the listing changed since.
"""

from __future__ import annotations

import hashlib
import json
import logging
import posixpath
import re
import time
import uuid
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import pyarrow as pa
from pydantic import AliasChoices, BaseModel, ConfigDict, Field
from pyspark.sql.datasource import (
    DataSource,
    DataSourceStreamReader,
    InputPartition,
)
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxBytes,
    ReadMaxFiles,
    SupportsTriggerAvailableNow,
)

from operators.fs.settings import FileSystemSettings
from operators.listing import ScanKey, list_ready
from operators.scan import ScanSettings
from operators.source import SourceSettings
from operators.spark.arrow_io import read_blocks, read_lines
from operators.spark.options import FS_FIELDS, build, open_fs, resolve, route_options
from region.errors import ConfigError
from region.fs import FileStatus, FileSystem

__all__ = [
    "HdfsScanDataSource",
    "HdfsScanStreamReader",
    "ScanConfig",
    "ScanOptions",
    "ScanPartition",
]

logger = logging.getLogger(__name__)

_NS = 1_000_000_000
_SOURCE = "hdfs_scan"
_SCAN_FIELDS = ("directory", "pattern", "strict_mode", "min_file_age", "late_window")
_FILE_FIELDS = ("format", "encoding", "on_decode_error", "block_size", "read_chunk")


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
    #: Where the per-batch plans are kept (one query per plan_dir). Default
    #: ``<directory>/_hdfs_scan``.
    plan_dir: str | None = Field(None, validation_alias=AliasChoices("plan_dir", "planDir"))
    #: Plans of this many committed batches are kept.
    plan_retain: int = Field(100, ge=1, validation_alias=AliasChoices("plan_retain", "planRetain"))


@dataclass(frozen=True)
class ScanConfig:
    """Everything the reader needs, parsed once from the options (picklable)."""

    scan: ScanSettings
    file: SourceSettings
    spark: ScanOptions
    fs: FileSystemSettings
    directory: str
    plan_dir: str

    @classmethod
    def from_options(cls, options: Mapping[str, str]) -> ScanConfig:
        routed = route_options(
            options,
            {
                "scan": (ScanSettings, _SCAN_FIELDS),
                "file": (SourceSettings, _FILE_FIELDS),
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
        if spark.plan_dir is not None:
            plan_fs, plan_dir = resolve(spark.plan_dir, routed["fs"], source=_SOURCE)
            if plan_fs.display() != fs_settings.display():
                msg = f"{_SOURCE}: plan_dir {spark.plan_dir!r} must be on the scanned filesystem"
                raise ConfigError(msg)
        else:
            plan_dir = posixpath.join(directory, "_hdfs_scan")
        return cls(
            scan=scan,
            file=build(SourceSettings, routed["file"], source=_SOURCE),
            spark=spark,
            fs=fs_settings,
            directory=directory,
            plan_dir=plan_dir,
        )

    @property
    def binary(self) -> bool:
        return self.file.format == "binary"

    def schema(self) -> str:
        value = "value binary" if self.binary else "value string"
        return value + (", file string, offset bigint" if self.spark.include_file_info else "")


class ScanPartition(InputPartition):
    """Byte ranges ``(path, start, end, size when planned)`` read by one Spark task."""

    def __init__(self, ranges: list[tuple[str, int, int, int]]) -> None:
        super().__init__(ranges)
        self.ranges = ranges


def _initial_offset() -> dict[str, Any]:
    return {"v": 1, "seq": 0, "key": None, "pos": None, "late": {}, "plan": None}


@dataclass(frozen=True, slots=True)
class _Range:
    status: FileStatus
    start: int
    end: int


class HdfsScanStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Plans batches on the driver (listing + plan log); reads byte ranges on the executors."""

    def __init__(self, config: ScanConfig) -> None:
        self.config = config
        self._fs: FileSystem | None = None
        self._pattern = re.compile(config.scan.pattern) if config.scan.pattern else None
        #: availableNow: the files (name -> (mtime_ns, size)) present when the run started.
        self._target: dict[str, tuple[int, int]] | None = None
        self._missing_warned = False

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_fs"] = None  # opened again where it is used
        return state

    @property
    def fs(self) -> FileSystem:
        if self._fs is None:
            self._fs = open_fs(self.config.fs)
        return self._fs

    # -- driver: offsets and plans --------------------------------------------------------

    def initialOffset(self) -> dict[str, Any]:
        return _initial_offset()

    def getDefaultReadLimit(self) -> ReadLimit:
        spark = self.config.spark
        if spark.max_files_per_trigger is not None:
            return ReadMaxFiles(spark.max_files_per_trigger)
        if spark.max_bytes_per_trigger is not None:
            return ReadMaxBytes(spark.max_bytes_per_trigger)
        return ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        self._target = {s.name: (s.mtime_ns, s.size) for s in self._list()}
        logger.info(
            "%s: availableNow run over the %s files present now",
            self.fs.display(self.config.directory),
            len(self._target),
        )

    def _list(self) -> list[FileStatus]:
        try:
            listing = list_ready(
                self.fs,
                self.config.directory,
                pattern=self._pattern,
                min_file_age_ns=round(self.config.scan.min_file_age * _NS),
                now_ns=time.time_ns(),
            )
        except FileNotFoundError:
            where = self.fs.display(self.config.directory)
            if self.config.scan.strict_mode:
                raise FileNotFoundError(f"{_SOURCE}: directory {where} does not exist") from None
            if not self._missing_warned:
                logger.warning("%s: directory %s does not exist yet; empty", _SOURCE, where)
                self._missing_warned = True
            return []
        if self._target is not None:
            target = self._target
            listing = [
                FileStatus(s.path, min(s.size, target[s.name][1]), s.mtime_ns)
                for s in listing
                if s.name in target and target[s.name][0] == s.mtime_ns
            ]
        return listing

    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, Any]:
        start = start or _initial_offset()
        key = ScanKey.from_dict(start["key"]) if start.get("key") else None
        pos: int | None = start.get("pos")
        late: dict[str, int] = {str(k): int(v) for k, v in (start.get("late") or {}).items()}
        window_ns = round(self.config.scan.late_window * _NS)
        # 1. Candidates in scan order: late files (whole), the rest of a file cut by the last
        #    batch, then the files after the key.
        candidates: list[tuple[FileStatus, int, bool]] = []  # (file, from byte, is late)
        for status in self._list():
            k = ScanKey.of(status)
            if key is not None and k == key:
                if pos is not None and pos < status.size:
                    candidates.append((status, pos, False))
            elif key is None or k > key:
                candidates.append((status, 0, False))
            elif window_ns and status.mtime_ns >= key.mtime_ns - window_ns and k.name not in late:
                candidates.append((status, 0, True))
        # 2. Admission control: the engine's limit (ReadAllAvailable ignores the options).
        max_files = max_bytes = None
        if not isinstance(limit, ReadAllAvailable):
            max_files = self.config.spark.max_files_per_trigger
            max_bytes = self.config.spark.max_bytes_per_trigger
            if isinstance(limit, ReadMaxFiles):
                max_files = limit.max_files
            elif isinstance(limit, ReadMaxBytes):
                max_bytes = limit.max_bytes
        whole_files = self.config.spark.batch_boundary == "file"
        planned: list[_Range] = []
        used = 0
        for status, begin, is_late in candidates:
            if max_files is not None and len(planned) >= max_files:
                break
            rest = status.size - begin
            room = rest if max_bytes is None else max_bytes - used
            if rest <= room or (not planned and (whole_files or is_late)):
                planned.append(_Range(status, begin, status.size))
                used += rest
                continue
            if not whole_files and not is_late and room > 0:
                planned.append(_Range(status, begin, begin + room))
            break
        if not planned:
            return start
        # 3. The new offset and its plan.
        new_key, new_pos = key, pos
        for r in planned:
            k = ScanKey.of(r.status)
            if new_key is None or k >= new_key:
                new_key = k
                new_pos = r.end if r.end < r.status.size else None
            if window_ns and r.end == r.status.size:
                late[k.name] = k.mtime_ns
        if new_key is not None and window_ns:
            floor = new_key.mtime_ns - window_ns
            late = {n: m for n, m in late.items() if m >= floor}
        seq = int(start["seq"]) + 1
        plan = {
            "v": 1,
            "seq": seq,
            "start": start,
            "ranges": [[r.status.path, r.start, r.end, r.status.size] for r in planned],
        }
        body = json.dumps(plan, sort_keys=True).encode()
        digest = hashlib.sha256(body).hexdigest()[:16]
        self._write_plan(seq, digest, body)
        return {
            "v": 1,
            "seq": seq,
            "key": new_key.to_dict() if new_key is not None else None,
            "pos": new_pos,
            "late": late,
            "plan": digest,
        }

    def _plan_path(self, seq: int, digest: str) -> str:
        return posixpath.join(self.config.plan_dir, f"{seq:020d}-{digest}.json")

    def _write_plan(self, seq: int, digest: str, body: bytes) -> None:
        # 1. unique temporary name, 2. write + sync, 3. rename; an identical plan may exist.
        path = self._plan_path(seq, digest)
        if self.fs.exists(path):
            return
        self.fs.mkdirs(self.config.plan_dir)
        tmp = posixpath.join(self.config.plan_dir, f".{seq:020d}-{uuid.uuid4().hex}.tmp")
        writer = self.fs.create(tmp)
        try:
            writer.write(body)
            writer.sync()
        finally:
            writer.close()
        self.fs.rename(tmp, path, overwrite=True)

    def _read_plan(self, end: Mapping[str, Any]) -> list[tuple[str, int, int, int]]:
        path = self._plan_path(int(end["seq"]), str(end["plan"]))
        try:
            plan = json.loads(self.fs.read(path))
        except FileNotFoundError:
            msg = (
                f"{_SOURCE}: the plan of batch offset {end['seq']} ({self.fs.display(path)}) is "
                "missing: the plan_dir was deleted or another query shares it"
            )
            raise FileNotFoundError(msg) from None
        return [(str(p), int(s), int(e), int(z)) for p, s, e, z in plan["ranges"]]

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> Sequence[InputPartition]:
        if not end.get("plan") or end.get("seq") == (start or {}).get("seq"):
            return []
        ranges = self._read_plan(end)
        total = sum(e - s for _, s, e, _ in ranges)
        spark = self.config.spark
        target = max(1 << 20, -(-total // spark.min_partitions))
        target = min(spark.split_size, target)
        # Any cut is fine: a piece owns the lines (blocks) that start inside it.
        parts: list[InputPartition] = []
        current: list[tuple[str, int, int, int]] = []
        size = 0
        for path, s, e, file_size in ranges:
            at = s
            while at < e:
                take = min(e - at, target - size)
                current.append((path, at, at + take, file_size))
                at += take
                size += take
                if size >= target:
                    parts.append(ScanPartition(current))
                    current, size = [], 0
        if current:
            parts.append(ScanPartition(current))
        return parts

    def commit(self, end: dict[str, Any]) -> None:
        """Drop plans of batches older than ``plan_retain`` committed ones."""
        oldest = int(end.get("seq", 0)) - self.config.spark.plan_retain
        if oldest <= 0:
            return
        try:
            listing = self.fs.list_dir(self.config.plan_dir)
        except FileNotFoundError:
            return
        for status in listing:
            head = status.name.split("-", 1)[0]
            if head.isdigit() and int(head) < oldest:
                self.fs.delete(status.path)

    # -- executors: reading ----------------------------------------------------------------

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, ScanPartition)
        file_info = self.config.spark.include_file_info
        settings = self.config.file
        for path, start, end, size in partition.ranges:
            if self.config.binary:
                yield from read_blocks(
                    self.fs,
                    path,
                    start,
                    end,
                    size=size,
                    block_size=settings.block_size,
                    chunk_size=settings.read_chunk,
                    file_info=file_info,
                )
            else:
                yield from read_lines(
                    self.fs,
                    path,
                    start,
                    end,
                    size=size,
                    encoding=settings.encoding,
                    on_decode_error=settings.on_decode_error,
                    chunk_size=settings.read_chunk,
                    file_info=file_info,
                )


class HdfsScanDataSource(DataSource):
    """The ``hdfs_scan`` streaming source (register with :func:`operators.spark.register`)."""

    @classmethod
    def name(cls) -> str:
        return _SOURCE

    def schema(self) -> str:
        return ScanConfig.from_options(self.options).schema()

    def streamReader(self, schema: Any) -> HdfsScanStreamReader:
        return HdfsScanStreamReader(ScanConfig.from_options(self.options))
