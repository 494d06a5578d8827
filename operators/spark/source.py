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
from typing import TYPE_CHECKING, Any

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

from operators.listing import ScanKey, list_ready
from operators.spark.config import ScanConfig, open_config_fs
from region.checkpoint import dir_permission
from region.fs import FileStatus, FileSystem

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = [
    "HdfsScanDataSource",
    "HdfsScanStreamReader",
    "ScanPartition",
]

logger = logging.getLogger(__name__)

_SOURCE = "hdfs_scan"
#: Mode of the batch plans (checkpoint data: readable by the group, never world-writable).
_PLAN_PERMISSION = 0o640


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
        self._pattern = re.compile(config.pattern) if config.pattern else None
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
            self._fs = open_config_fs(self.config.fs)
        return self._fs

    # -- driver: offsets and plans --------------------------------------------------------

    def initialOffset(self) -> dict[str, Any]:
        return _initial_offset()

    def getDefaultReadLimit(self) -> ReadLimit:
        config = self.config
        if config.max_files_per_trigger is not None:
            return ReadMaxFiles(config.max_files_per_trigger)
        if config.max_bytes_per_trigger is not None:
            return ReadMaxBytes(config.max_bytes_per_trigger)
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
                min_file_age_ns=self.config.min_file_age_ns,
                now_ns=time.time_ns(),
            )
        except FileNotFoundError:
            where = self.fs.display(self.config.directory)
            if self.config.strict_mode:
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
        window_ns = self.config.late_window_ns
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
            max_files = self.config.max_files_per_trigger
            max_bytes = self.config.max_bytes_per_trigger
            if isinstance(limit, ReadMaxFiles):
                max_files = limit.max_files
            elif isinstance(limit, ReadMaxBytes):
                max_bytes = limit.max_bytes
        whole_files = self.config.whole_files
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
        if not self.fs.exists(self.config.plan_dir):
            self.fs.mkdirs(self.config.plan_dir, permission=dir_permission(_PLAN_PERMISSION))
        tmp = posixpath.join(self.config.plan_dir, f".{seq:020d}-{uuid.uuid4().hex}.tmp")
        writer = self.fs.create(tmp, permission=_PLAN_PERMISSION)
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
        target = max(1 << 20, -(-total // self.config.min_partitions))
        target = min(self.config.split_size, target)
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
        oldest = int(end.get("seq", 0)) - self.config.plan_retain
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
        # Imported here: the driver's reader process (a new one per query) never reads.
        from operators.spark.arrow_io import read_blocks, read_lines

        assert isinstance(partition, ScanPartition)
        config = self.config
        file_info = config.include_file_info
        for path, start, end, size in partition.ranges:
            if config.binary:
                yield from read_blocks(
                    self.fs,
                    path,
                    start,
                    end,
                    size=size,
                    block_size=config.block_size,
                    chunk_size=config.read_chunk,
                    file_info=file_info,
                )
            else:
                yield from read_lines(
                    self.fs,
                    path,
                    start,
                    end,
                    size=size,
                    encoding=config.encoding,
                    on_decode_error=config.on_decode_error,
                    chunk_size=config.read_chunk,
                    file_info=file_info,
                )


class HdfsScanDataSource(DataSource):
    """The ``hdfs_scan`` streaming source (register with :func:`operators.spark.register`)."""

    @classmethod
    def name(cls) -> str:
        return _SOURCE

    def _config(self) -> ScanConfig:
        # Parsed once, where Spark first asks for the schema; the parsed values travel with
        # this object to the query's reader process.
        config: ScanConfig | None = self.__dict__.get("_parsed")
        if config is None:
            from operators.spark.options import scan_config

            config = scan_config(self.options)
            self.__dict__["_parsed"] = config
        return config

    def schema(self) -> str:
        return self._config().schema()

    def streamReader(self, schema: Any) -> HdfsScanStreamReader:
        return HdfsScanStreamReader(self._config())
