"""``hdfs_sink``: the file sink as an exactly-once Spark streaming sink.

``df.writeStream.format("hdfs_sink").option("file", "/out/part-%FILENUM.txt")`` writes the
``value`` column (or the only column): lines (``string``/``binary`` + LF) or, with
``format=binary``, raw bytes. Tasks write hidden in-progress files next to the final ones; the
driver publishes them by rename in :meth:`HdfsSinkStreamWriter.commit`, through the write-ahead
sink log of :mod:`operators.spark.commit` (``log_dir``, default ``<output dir>/_hdfs_sink``).
Plain directory readers (``spark.read.text``, ``hdfs dfs -cat``) see only complete,
committed files, each record once. ``%FILENUM`` is assigned at commit, in partition order.

Files never span micro-batches: ``tuples_per_file`` / ``bytes_per_file`` roll within one task's
output of one batch, by the in-process sink's rolling policy (:mod:`operators.rolling`).
"""

from __future__ import annotations

import codecs
import json
import logging
import os
import posixpath
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from pyspark import TaskContext
from pyspark.sql.datasource import (
    DataSource,
    DataSourceStreamArrowWriter,
    WriterCommitMessage,
)
from pyspark.sql.types import BinaryType, StringType, StructType

from operators.fs.settings import split_uri
from operators.owner import Owner
from operators.spark.commit import SinkLog, WrittenFile, in_progress_name
from operators.spark.config import SinkConfig, open_config_fs
from operators.templating import FileNameTemplate
from region.errors import ConfigError
from region.fs import FileSystem, FileWriter

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = [
    "FAULT_ENV",
    "EncodedLines",
    "HdfsSinkDataSource",
    "HdfsSinkStreamWriter",
    "SinkTaskMessage",
]

logger = logging.getLogger(__name__)

_SINK = "hdfs_sink"

#: ``<point>[:<batch id>]``: stop at that point of the sink (crash tests): ``task_write`` (a task
#: wrote its first file), ``after_wal``, ``after_first_rename``, ``after_renames``. The process
#: writes a file named after the point into ``$HDFS_REGION_FAULT_DIR`` and waits to be killed.
FAULT_ENV = "HDFS_REGION_FAULT"
_FAULT_DIR_ENV = "HDFS_REGION_FAULT_DIR"


def _fault(point: str, batch_id: int | None = None) -> None:
    wanted = os.environ.get(FAULT_ENV)
    if not wanted:
        return
    name, _, batch = wanted.partition(":")
    if name != point or (batch and batch_id is not None and int(batch) != batch_id):
        return
    directory = os.environ.get(_FAULT_DIR_ENV, ".")
    with open(os.path.join(directory, point), "w") as marker:
        marker.write(str(os.getpid()))
    logger.warning("%s: stopped at %s (batch %s) until killed", _SINK, point, batch_id)
    parent = os.getppid()
    deadline = time.monotonic() + 300
    while os.getppid() == parent and time.monotonic() < deadline:
        time.sleep(0.2)
    os._exit(1)  # the engine died without killing us: do not linger


@dataclass(frozen=True, slots=True)
class EncodedLines:
    """``count`` records already as the sink writes them: UTF-8 lines, each ending in LF."""

    data: bytes
    count: int


@dataclass
class SinkTaskMessage(WriterCommitMessage):
    """The in-progress files one task attempt wrote (complete and synced)."""

    partition: int
    attempt: int
    files: list[WrittenFile] = field(default_factory=list)


class _TaskOutput:
    """The rolling in-progress files of one task attempt."""

    def __init__(self, writer: HdfsSinkStreamWriter, fs: FileSystem) -> None:
        ctx = TaskContext.get()
        self.partition = ctx.partitionId() if ctx is not None else 0
        self.attempt = ctx.attemptNumber() if ctx is not None else 0
        task_id = ctx.taskAttemptId() if ctx is not None else os.getpid()
        self.task = f"p{self.partition:05d}-t{task_id}-a{self.attempt}"
        self._config = writer.config
        self._fs = fs
        self.files: list[WrittenFile] = []
        self._out: FileWriter | None = None
        self._rows = 0
        self._size = 0
        self._opened_ns = 0

    def write(self, data: list[Any], rows: int, size: int) -> None:
        if self._out is None:
            path = posixpath.join(
                self._config.output_dir, in_progress_name(self.task, len(self.files))
            )
            self._out = self._fs.create(path, permission=self._config.permission)
            self._opened_ns = time.time_ns()
            self._rows = self._size = 0
        for buf in data:
            self._out.write(buf)
        self._rows += rows
        self._size += size

    @property
    def rows(self) -> int:
        return self._rows if self._out is not None else 0

    @property
    def size(self) -> int:
        return self._size if self._out is not None else 0

    def close(self) -> None:
        out, self._out = self._out, None
        if out is None:
            return
        try:
            out.sync()  # durable before the driver may publish it
        finally:
            out.close()
        self.files.append(
            WrittenFile(
                out.path, self.partition, len(self.files), self._rows, self._size, self._opened_ns
            )
        )
        if len(self.files) == 1:
            _fault("task_write")

    def discard(self) -> None:
        out, self._out = self._out, None
        if out is not None:
            out.close()
            self._fs.delete(out.path)
        for f in self.files:
            self._fs.delete(f.path)


class HdfsSinkStreamWriter(DataSourceStreamArrowWriter):
    """Executors: :meth:`write` (Arrow batches to in-progress files). Driver: :meth:`commit` /
    :meth:`abort` through the sink log (each call may run in a fresh process)."""

    def __init__(self, config: SinkConfig, schema: StructType) -> None:
        self.config = config
        self.column = _pick_column(config, schema)
        self._fs: FileSystem | None = None

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_fs"] = None
        return state

    @property
    def fs(self) -> FileSystem:
        if self._fs is None:
            self._fs = open_config_fs(self.config.fs)
        return self._fs

    @property
    def accepts_lines(self) -> bool:
        """Whether :meth:`write` may be given :class:`EncodedLines`: UTF-8 lines, and no
        record or byte limit that could end a file inside them."""
        sink = self.config
        utf8 = codecs.lookup(sink.encoding).name == "utf-8"
        return utf8 and not sink.binary and sink.rolling.room(0) is None and not sink.rolling.bytes

    def write(self, iterator: Iterator[pa.RecordBatch | EncodedLines]) -> SinkTaskMessage:
        # Imported here: the driver-side processes (schema, commit) never write records.
        from operators.spark.arrow_io import encode_records

        out = _TaskOutput(self, self.fs)
        sink = self.config
        binary = sink.binary
        try:
            for batch in iterator:
                if isinstance(batch, EncodedLines):
                    if not self.accepts_lines:
                        raise ValueError(f"{_SINK}: encoded lines given to a sink that rolls")
                    out.write([batch.data], batch.count, len(batch.data))
                    continue
                values = batch.column(self.column)
                start = 0
                while start < len(values):
                    take = self._room(values, start, out.rows, out.size)
                    piece = values.slice(start, take)
                    data = encode_records(piece, binary=binary, encoding=sink.encoding)
                    size = sum(len(b) for b in data)
                    out.write(data, take, size)
                    start += take
                    if sink.rolling.full(out.rows, out.size):
                        out.close()
            out.close()
        except BaseException:
            out.discard()
            raise
        return SinkTaskMessage(out.partition, out.attempt, out.files)

    def _room(self, values: pa.Array, start: int, rows: int, size: int) -> int:
        """How many records from ``start`` go into the current file before it rolls (the rule
        is :class:`operators.rolling.RollingPolicy`'s, the in-process sink's)."""
        rolling = self.config.rolling
        n = len(values) - start
        room = rolling.room(rows)
        if room is not None:
            n = min(n, max(1, room))
        if rolling.bytes is None:
            return n
        import numpy as np
        import pyarrow.compute as pc

        # Sizes of the records as written (UTF-8 + LF).
        piece = values.slice(start, n)
        lengths = pc.binary_length(piece).fill_null(0).to_numpy(zero_copy_only=False)
        cumulative = np.cumsum(lengths.astype(np.int64) + (0 if self.config.binary else 1))
        return rolling.fitting(cumulative, size)

    def _log(self) -> SinkLog:
        template = FileNameTemplate(self.config.template, self.config.time_format)

        def namer(f: WrittenFile, filenum: int) -> str:
            return template.render(filenum=filenum, now=f.opened_ns / 1e9, partition=f.partition)

        return SinkLog(
            self.fs,
            self.config.output_dir,
            self.config.log_dir,
            namer,
            exactly_once=self.config.exactly_once,
            retain=self.config.log_retain,
            fault=_fault,
            permission=self.config.permission,
            owner=self._owner(),
        )

    def _owner(self) -> Owner | None:
        """The job writing, as the options name it, with the id Spark gave the query's
        checkpoint (its ``metadata`` file) when that is on the output's filesystem: checkpoints
        deleted and made afresh in the same place are then another job, as they are."""
        owner = self.config.owner
        if owner is None or owner.id is not None:
            return owner
        base, path = split_uri(owner.checkpoint)
        if split_uri(self.fs.display("/"))[0] != base:
            return owner
        try:
            query_id = json.loads(self.fs.read(posixpath.join(path, "metadata")))["id"]
        except (OSError, ValueError, KeyError, TypeError) as exc:
            logger.debug("%s: no query id in %s (%s)", _SINK, owner.checkpoint, exc)
            return owner
        return Owner(owner.checkpoint, str(query_id))

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        files = [f for m in messages if isinstance(m, SinkTaskMessage) for f in m.files]
        result = self._log().commit(batchId, files)
        logger.info(
            "%s: batch %s published %s file(s)%s",
            _SINK,
            batchId,
            len(result.published),
            " (already published before)" if result.replayed else "",
        )

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        files = [f for m in messages if isinstance(m, SinkTaskMessage) for f in m.files]
        self._log().abort(batchId, files)


def _pick_column(config: SinkConfig, schema: StructType) -> str:
    names = schema.fieldNames()
    wanted = config.column or ("value" if "value" in names or len(names) != 1 else names[0])
    if wanted not in names:
        msg = f"{_SINK}: the input has no column {wanted!r} (columns: {', '.join(names)})"
        raise ConfigError(msg)
    dtype = schema[wanted].dataType
    if not isinstance(dtype, StringType | BinaryType):
        msg = (
            f"{_SINK}: column {wanted!r} is {dtype.simpleString()}; it must be string or binary "
            "(cast it, e.g. selectExpr('CAST(x AS STRING) AS value'))"
        )
        raise ConfigError(msg)
    if config.binary and not isinstance(dtype, BinaryType):
        raise ConfigError(f"{_SINK}: format=binary needs a binary column, {wanted!r} is string")
    return wanted


class HdfsSinkDataSource(DataSource):
    """The ``hdfs_sink`` streaming sink (register with :func:`operators.spark.register`)."""

    @classmethod
    def name(cls) -> str:
        return _SINK

    def streamWriter(self, schema: StructType, overwrite: bool) -> HdfsSinkStreamWriter:
        config: SinkConfig | None = self.__dict__.get("_parsed")
        if config is None:
            from operators.spark.options import sink_config

            config = sink_config(self.options)
            self.__dict__["_parsed"] = config
        return HdfsSinkStreamWriter(config, schema)
