"""``hdfs_sink``: the file sink as an exactly-once Spark streaming sink.

``df.writeStream.format("hdfs_sink").option("file", "/out/part-%FILENUM.txt")`` writes the
``value`` column (or the only column): lines (``string``/``binary`` + LF) or, with
``format=binary``, raw bytes. Tasks write hidden in-progress files next to the final ones; the
driver publishes them by rename in :meth:`HdfsSinkStreamWriter.commit`, through the write-ahead
sink log of :mod:`operators.spark.commit` (``log_dir``, default ``<output dir>/_hdfs_sink``).
Plain directory readers (``spark.read.text``, ``hdfs dfs -cat``) see only complete,
committed files, each record once. ``%FILENUM`` is assigned at commit, in partition order.

Files roll by the in-process sink's rolling policy (:mod:`operators.sink.rolling`). With
``span_batches`` and ``tuples_per_file``, ``bytes_per_file`` or ``time_per_file``, a file that
is not full at the end of a batch stays open, and the next batch's task of the same slot
(partition id) continues it (:meth:`operators.spark.commit.SinkLog.carried`): a slow stream
makes files of the configured size or age, not one per batch and task. The open files are
published when they are full, when they reach ``time_per_file`` (at a commit), or when the
query stops (:func:`close_open_files`).
Otherwise every batch closes its files.

Records with columns (``format`` ``jsonl``, ``csv``, ``parquet``, ``orc``; ``compression``,
``partition_by``): the DataFrame's typed columns are written as a table by the in-process
sink's encoder and partitioner (:mod:`operators.spark.tables`), each partition's files
published into ``<output dir>/<column>=<value>/``; they span batches as lines do (a Parquet or
ORC file as its Arrow stream until it is complete).
"""

from __future__ import annotations

import codecs
import json
import logging
import os
import posixpath
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from pyspark import TaskContext
from pyspark.sql.datasource import (
    DataSource,
    DataSourceStreamArrowWriter,
    WriterCommitMessage,
)
from pyspark.sql.types import BinaryType, StringType, StructField, StructType

from operators.common.faults import FAULT_ENV, stop_here
from operators.common.plugins import load_callable
from operators.common.safepath import name_problem, numbered_name
from operators.sink.formats import form_format  # imported by operators.spark.commit anyway
from operators.sink.manifest import Published, manifest_dir, write_manifest
from operators.sink.owner import Owner
from operators.sink.templating import FileNameTemplate
from operators.spark.commit import (
    CommitResult,
    SinkLog,
    WrittenFile,
    complete,
    continues,
    cut_back,
    in_progress_name,
    lines_form,
)
from operators.spark.config import SinkConfig, open_config_fs
from region.errors import ConfigError
from region.fs import FileSystem, FileWriter

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = [
    "FAULT_ENV",
    "PUNCTUATION",
    "EncodedLines",
    "HdfsSinkDataSource",
    "HdfsSinkStreamWriter",
    "SinkTaskMessage",
    "TaskIds",
    "close_open_files",
]

logger = logging.getLogger(__name__)

_SINK = "hdfs_sink"

#: Crash tests stop the sink at a point (:mod:`operators.common.faults`, ``<point>[:<batch id>]``):
#: ``task_write`` (a task wrote its first file), ``before_wal`` (the batch's tasks are done),
#: ``after_wal``, ``after_first_rename``, ``after_renames``.


def _fault(point: str, batch_id: int | None = None) -> None:
    stop_here(point, batch_id, who=_SINK)


class Punctuation:
    """The end of an input file, between records (fused execution): with ``close_on_punct``
    the current file closes here."""


#: The one punctuation marker.
PUNCTUATION = Punctuation()


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
    #: The file left open for the next batch of this slot (synced), if any.
    open: list[WrittenFile] = field(default_factory=list)
    #: Rejects files of the batch (fused execution, :mod:`operators.spark.rejects`).
    rejects: list[WrittenFile] = field(default_factory=list)


#: The local property Spark sets for the tasks of a streaming micro-batch (the fused runner
#: sets it too): the batch a task writes for.
BATCH_ID_PROPERTY = "streaming.sql.batchId"


@dataclass(frozen=True, slots=True)
class TaskIds:
    """Who a task is: its partition (the slot whose open file it continues), attempt, task
    attempt id, and the micro-batch it writes for (``None``: not known, files end with it)."""

    partition: int
    attempt: int
    task_id: int
    batch_id: int | None

    @classmethod
    def current(cls) -> TaskIds:
        """The running Spark task's (outside a task: partition 0 of no batch)."""
        ctx = TaskContext.get()
        if ctx is None:
            return cls(0, 0, os.getpid(), None)
        batch = ctx.getLocalProperty(BATCH_ID_PROPERTY)
        return cls(
            ctx.partitionId(),
            ctx.attemptNumber(),
            ctx.taskAttemptId(),
            int(batch) if batch is not None else None,
        )


class _TaskOutput:
    """The rolling in-progress files of one task attempt. ``carried``: the files an earlier
    batch left open for this task's slot; when the first record comes, the one of this sink's
    form is continued (after its recorded size), any other (the settings changed) is
    published as it was written."""

    def __init__(
        self,
        writer: HdfsSinkStreamWriter,
        fs: FileSystem,
        ids: TaskIds,
        carried: list[WrittenFile] | None = None,
    ) -> None:
        self.partition = ids.partition
        self.attempt = ids.attempt
        self.task = f"p{self.partition:05d}-t{ids.task_id}-a{self.attempt}"
        self._config = writer.config
        self._fs = fs
        self.form = writer.form
        self.files: list[WrittenFile] = []
        #: The file left open at the end of the task (``None``: every file closed).
        self.open: WrittenFile | None = None
        self._carried = list(carried or ())
        #: Never deleted by this task: they hold earlier batches' records.
        self._carried_paths = {f.path for f in self._carried}
        self._out: FileWriter | None = None
        self._rows = 0
        self._size = 0
        self._opened_ns = 0

    def write(self, data: list[Any], rows: int, size: int) -> None:
        if self._out is None:
            self._start()
        assert self._out is not None
        data, size = _compressed(self._config.compression, data, size)
        for buf in data:
            self._out.write(buf)
        self._rows += rows
        self._size += size

    def ready(self) -> None:
        """A record is about to be written: continue the carried file now, if there is one."""
        if self._out is None and self._carried:
            self._start()

    def _start(self) -> None:
        carried: WrittenFile | None = None
        for f in self._carried:
            # 1. Back to the size the log recorded, whatever the file's age: an attempt that
            # died after appending, before the commit wrote its entry, left more in it.
            cut_back(self._fs, f, self._config.permission)
            if carried is None and f.subdir is None and continues(f, self.form):
                carried = f
            else:  # another form: published as it is (a Parquet one converted)
                done = complete(self._fs, f, self._config.permission, form_format(self.form))
                self.files.append(replace(done, index=len(self.files)))
        self._carried = []
        rolling = self._config.rolling
        if carried is not None and not rolling.expired(carried.opened_ns / 1e9, time.time()):
            # 2. Append after it.
            self._out = self._fs.append(carried.path)
            self._opened_ns = carried.opened_ns
            self._rows, self._size = carried.rows, carried.size
            if not rolling.full(self._rows, self._size):
                return
            self._out.close()  # a run with a smaller limit: full already, publish it as it is
            self._out = None
            self.files.append(replace(carried, index=len(self.files)))
        elif carried is not None:
            # Past time_per_file (a restart slower than it): published as the log recorded it.
            self.files.append(replace(carried, index=len(self.files)))
        path = posixpath.join(self._config.output_dir, in_progress_name(self.task, len(self.files)))
        self._out = self._fs.create(path, permission=self._config.permission)
        self._opened_ns = time.time_ns()
        self._rows = self._size = 0

    @property
    def rows(self) -> int:
        return self._rows if self._out is not None else 0

    @property
    def size(self) -> int:
        return self._size if self._out is not None else 0

    def close(self, *, keep_open: bool = False) -> None:
        """Close the current file: complete (the driver publishes it), or, ``keep_open``,
        synced and recorded as this slot's open file (the next batch continues it)."""
        out, self._out = self._out, None
        if out is None:
            return
        try:
            out.sync()  # durable before the driver may publish or record it
        finally:
            out.close()
        written = WrittenFile(
            out.path,
            self.partition,
            len(self.files),
            self._rows,
            self._size,
            self._opened_ns,
            form=self.form,
        )
        if keep_open:
            self.open = written
            return
        self.files.append(written)
        if len(self.files) == 1:
            _fault("task_write")

    def finish(self, *, carry: bool) -> None:
        """The end of the task's input: the last file stays open when files span batches and
        it is neither full nor past its age."""
        rolling = self._config.rolling
        keep = (
            carry
            and self._out is not None
            and not rolling.full(self._rows, self._size)
            and not rolling.expired(self._opened_ns / 1e9, time.time())
        )
        self.close(keep_open=keep)

    def discard(self) -> None:
        """The task failed: drop what it wrote. A carried file stays: it holds earlier
        batches' records, and the next attempt cuts it back to its recorded size."""
        out, self._out = self._out, None
        if out is not None:
            out.close()
        paths = [f.path for f in self.files]
        paths += [w.path for w in (out, self.open) if w is not None]
        for path in dict.fromkeys(paths):
            if path not in self._carried_paths:
                self._fs.delete(path)


class HdfsSinkStreamWriter(DataSourceStreamArrowWriter):
    """Executors: :meth:`write` (Arrow batches to in-progress files). Driver: :meth:`commit` /
    :meth:`abort` through the sink log (each call may run in a fresh process)."""

    def __init__(self, config: SinkConfig, schema: StructType | None) -> None:
        """``schema``: the input DataFrame's columns (``None``: a writer that only commits,
        publishes and closes files: :func:`close_open_files`)."""
        self.config = config
        #: Lines and blocks: the column written.
        self.column = ""
        #: Records with columns: the Arrow schema of the input's columns.
        self.columns: pa.Schema | None = None
        if schema is not None and config.table is not None:
            self.columns = _table_columns(config, schema)
        elif schema is not None:
            self.column = _pick_column(config, schema)
        self._fs: FileSystem | None = None
        #: What the newest :meth:`commit` in this process published (fused execution reads it
        #: for its metrics: records and bytes out).
        self.last_commit: CommitResult | None = None

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
    def form(self) -> str:
        """The form of this sink's files of lines or blocks (:func:`lines_form`)."""
        sink = self.config
        encoding = codecs.lookup(sink.encoding).name
        return lines_form(binary=sink.binary, compression=sink.compression, encoding=encoding)

    @property
    def accepts_lines(self) -> bool:
        """Whether :meth:`write` may be given :class:`EncodedLines`: UTF-8 lines, and no
        record or byte limit that could end a file inside them."""
        sink = self.config
        utf8 = codecs.lookup(sink.encoding).name == "utf-8"
        plain = sink.attribute is None and not sink.binary
        return utf8 and plain and sink.rolling.room(0) is None and not sink.rolling.bytes

    def write(
        self, iterator: Iterator[pa.RecordBatch | EncodedLines | Punctuation]
    ) -> SinkTaskMessage:
        return self.write_task(iterator, TaskIds.current())

    def write_task(
        self, iterator: Iterator[pa.RecordBatch | EncodedLines | Punctuation], ids: TaskIds
    ) -> SinkTaskMessage:
        """One task's records to in-progress files (:meth:`write` with the task named)."""
        # Imported here: the driver-side processes (schema, commit) never write records.
        from operators.spark.arrow_io import encode_records

        sink = self.config
        carry, published, carried = self._carried(ids)
        if published:
            # exactly_once, and the log already holds this batch: a replay after a crash that
            # took Spark's commit record. Its files are published; writing would add to them.
            for _ in iterator:
                pass
            return SinkTaskMessage(ids.partition, ids.attempt)
        if sink.attribute is not None:
            return self._write_named(iterator, ids)
        if sink.table is not None:
            return self._write_table(iterator, ids, carry, carried)
        out = _TaskOutput(self, self.fs, ids, carried)
        binary = sink.binary
        try:
            for batch in iterator:
                if isinstance(batch, Punctuation):
                    if sink.rolling.on_punctuation:
                        out.close()
                    continue
                if isinstance(batch, EncodedLines):
                    if not self.accepts_lines:
                        raise ValueError(f"{_SINK}: encoded lines given to a sink that rolls")
                    out.write([batch.data], batch.count, len(batch.data))
                    continue
                values = batch.column(self.column)
                start = 0
                while start < len(values):
                    out.ready()  # the carried file's records count toward its limit
                    take = self._room(values, start, out.rows, out.size)
                    piece = values.slice(start, take)
                    data = encode_records(piece, binary=binary, encoding=sink.encoding)
                    size = sum(len(b) for b in data)
                    out.write(data, take, size)
                    start += take
                    if sink.rolling.full(out.rows, out.size):
                        out.close()
            out.finish(carry=carry)
        except BaseException:
            out.discard()
            raise
        return SinkTaskMessage(
            out.partition, out.attempt, out.files, [out.open] if out.open is not None else []
        )

    def _write_named(
        self, iterator: Iterator[pa.RecordBatch | EncodedLines | Punctuation], ids: TaskIds
    ) -> SinkTaskMessage:
        """``file_attribute_name``: each record to an in-progress file of the name in its
        name column (one per name and task, closed at the end of the task, or earlier when
        ``max_open_files`` are open and another name comes: the least recently written); the
        commit gives each its name, or the next numbered one when the name is taken."""
        from operators.spark.arrow_io import encode_records

        sink = self.config
        attribute = sink.attribute
        assert attribute is not None
        task = f"p{ids.partition:05d}-t{ids.task_id}-a{ids.attempt}"
        # name -> (writer, [rows, size]), least recently written first.
        writers: dict[str, tuple[FileWriter, list[int]]] = {}
        files: list[WrittenFile] = []
        opened_ns = time.time_ns()

        def close(name: str) -> None:
            writer, (rows, size) = writers[name]
            writer.sync()
            writer.close()
            del writers[name]  # only now: a failure leaves it to the clean-up below
            files.append(
                WrittenFile(writer.path, ids.partition, len(files), rows, size, opened_ns, name)
            )

        try:
            for batch in iterator:
                if isinstance(batch, Punctuation):
                    continue  # files end with the task: nothing to close early
                if isinstance(batch, EncodedLines):
                    raise ValueError(f"{_SINK}: encoded lines given to a sink naming its files")
                names = batch.column(attribute).to_pylist()
                values = batch.column(self.column)
                # The records of each name, in order: one encode and write per name and batch.
                rows_of: dict[str, list[int]] = {}
                for index, name in enumerate(names):
                    problem = name_problem(name, visible=True)
                    if problem is not None:
                        msg = (
                            f"{_SINK}: record {index} of a batch: file name {name!r} in "
                            f"{attribute!r} {problem}; names must be relative paths inside "
                            f"{self.fs.display(sink.output_dir)}"
                        )
                        raise ValueError(msg)
                    rows_of.setdefault(name, []).append(index)
                for name, picked in rows_of.items():
                    entry = writers.pop(name, None)
                    if entry is None:
                        while len(writers) >= sink.max_open_files:
                            close(next(iter(writers)))
                        number = len(files) + len(writers)
                        path = posixpath.join(sink.output_dir, in_progress_name(task, number))
                        entry = (self.fs.create(path, permission=sink.permission), [0, 0])
                    writers[name] = entry  # the end of the order: written last
                    data = encode_records(
                        values.take(picked), binary=sink.binary, encoding=sink.encoding
                    )
                    data, size = _compressed(sink.compression, data, sum(len(b) for b in data))
                    for buf in data:
                        entry[0].write(buf)
                    entry[1][0] += len(picked)
                    entry[1][1] += size
            for name in list(writers):
                close(name)
        except BaseException:
            for writer, _ in writers.values():
                writer.close()
            for path in [f.path for f in files] + [w.path for w, _ in writers.values()]:
                self.fs.delete(path)
            raise
        return SinkTaskMessage(ids.partition, ids.attempt, files)

    def _write_table(
        self,
        iterator: Iterator[pa.RecordBatch | EncodedLines | Punctuation],
        ids: TaskIds,
        carry: bool,
        carried: list[WrittenFile],
    ) -> SinkTaskMessage:
        """Records with columns to in-progress files, one per partition directory the task
        sees (:class:`operators.spark.tables.TableFiles`), continuing the ones ``carried``
        from earlier batches; with ``carry`` the ones not full stay open."""
        from operators.spark.tables import TableFiles

        if self.columns is None:
            msg = f"{_SINK}: this writer was made without the input's columns; it cannot write"
            raise TypeError(msg)
        task = f"p{ids.partition:05d}-t{ids.task_id}-a{ids.attempt}"
        out = TableFiles(
            self.config,
            self.fs,
            task,
            ids.partition,
            self.columns,
            _fault,
            spans=carry,
            carried=carried,
        )
        try:
            for batch in iterator:
                if isinstance(batch, Punctuation):
                    continue  # files end with the task
                if isinstance(batch, EncodedLines):
                    msg = f"{_SINK}: encoded lines given to a sink of records with columns"
                    raise ValueError(msg)
                if batch.num_rows:
                    out.write(batch)
            out.finish(carry=carry)
        except BaseException:
            out.discard()
            raise
        return SinkTaskMessage(ids.partition, ids.attempt, out.files, out.open)

    @property
    def spans_batches(self) -> bool:
        """Whether files stay open across batches (asked for, and a limit says when a file is
        complete)."""
        rolling = self.config.rolling
        limits = (rolling.tuples, rolling.bytes, rolling.seconds)
        return self.config.span_batches and any(v is not None for v in limits)

    def _carried(self, ids: TaskIds) -> tuple[bool, bool, list[WrittenFile]]:
        """``(carry, published, files)``: whether this task's last files may stay open;
        whether its batch is already published (write nothing); the files earlier batches left
        open for its slot. Files span batches only when the task knows its batch."""
        if not self.spans_batches:
            return False, False, []
        if ids.batch_id is None:
            logger.debug("%s: no batch id in the task; its files end with it", _SINK)
            return False, False, []
        published, open_files = self._log(owner=False).carried(ids.batch_id)
        return True, published, open_files.get(ids.partition, [])

    def _room(self, values: pa.Array, start: int, rows: int, size: int) -> int:
        """How many records from ``start`` go into the current file before it rolls (the rule
        is :class:`operators.sink.rolling.RollingPolicy`'s, the in-process sink's)."""
        rolling = self.config.rolling
        n = len(values) - start
        room = rolling.room(rows)
        if room is not None:
            n = min(n, max(1, room))
        if rolling.bytes is None or self.config.compression is not None:
            # A compressed file rolls after the write that reaches the limit (the in-process
            # rule: its size is known only once the piece is compressed).
            return n
        import numpy as np
        import pyarrow.compute as pc

        # Sizes of the records as written (UTF-8 + LF).
        piece = values.slice(start, n)
        lengths = pc.binary_length(piece).fill_null(0).to_numpy(zero_copy_only=False)
        cumulative = np.cumsum(lengths.astype(np.int64) + (0 if self.config.binary else 1))
        return rolling.fitting(cumulative, size)

    def _log(self, *, owner: bool = True) -> SinkLog:
        """The sink log (``owner``: with the job that writes, claimed when first used; tasks
        only read it)."""
        config = self.config
        renumber = None
        if config.attribute is not None:

            def namer(f: WrittenFile, filenum: int) -> str:
                assert f.name is not None
                return posixpath.join(config.output_dir, f.name)

            renumber = numbered_name
        else:
            template = FileNameTemplate(config.template, config.time_format)

            def namer(f: WrittenFile, filenum: int) -> str:
                now = f.opened_ns / 1e9
                final = template.render(filenum=filenum, now=now, partition=f.partition)
                if f.subdir is None:
                    return final
                # partition_by: the template's name inside the partition's directory.
                rel = posixpath.relpath(final, config.output_dir)
                return posixpath.normpath(posixpath.join(config.output_dir, f.subdir, rel))

        rejects_namer: Callable[[WrittenFile, int], str] | None = None
        if config.rejects is not None:
            rejects = FileNameTemplate(config.rejects, config.time_format)

            def reject_name(f: WrittenFile, filenum: int) -> str:
                return rejects.render(filenum=filenum, now=time.time(), partition=f.partition)

            rejects_namer = reject_name

        return SinkLog(
            self.fs,
            self.config.output_dir,
            self.config.log_dir,
            namer,
            exactly_once=self.config.exactly_once,
            retain=self.config.log_retain,
            fault=_fault,
            permission=self.config.permission,
            owner=self._owner() if owner else None,
            rolling=self.config.rolling,
            on_publish=self._announce if owner else None,
            renumber=renumber,
            rejects_namer=rejects_namer,
            into=self._format(),
        )

    def _format(self) -> tuple[str, str | None]:
        """This run's ``(format, codec)`` of its files (:func:`form_format`)."""
        table = self.config.table
        if table is not None:
            return table.format, table.compression_codec
        return form_format(self.form)

    def _announce(self, batch_id: int, files: list[dict[str, Any]], stop: bool) -> None:
        """The manifest of a batch's published files, then ``on_published`` for each (driver)."""
        config = self.config
        partitioned = config.table is not None and bool(config.table.partition_by)
        if partitioned:
            # Imported here: numpy and pyarrow.compute, which only a partitioned table's
            # commit needs, would slow every start of the driver's commit process.
            from operators.sink.partitions import partition_of
        if config.manifest:
            write_manifest(
                self.fs,
                manifest_dir(config.output_dir),
                batch_id,
                [
                    Published(
                        str(f["path"]),
                        int(f["size"]),
                        batch_id,
                        partition_of(str(f["path"]), config.output_dir) if partitioned else None,
                    )
                    for f in files
                ],
                stop=stop,
                retain=config.manifest_retain,
                permission=config.permission,
            )
        if config.on_published is not None:
            callback = load_callable(config.on_published, f"{_SINK} on_published")
            for f in files:
                callback(str(f["path"]), int(f["size"]))

    def _owner(self) -> Owner | None:
        """The job writing, as the options name it, with the id Spark gave the query's
        checkpoint (its ``metadata`` file) when that is on the output's filesystem: checkpoints
        deleted and made afresh in the same place are then another job, as they are."""
        owner = self.config.owner
        if owner is None or owner.id is not None:
            return owner
        # Imported here: the filesystem settings models (pydantic) are not needed to write.
        from operators.fs.settings import split_uri

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
        tasks = [m for m in messages if isinstance(m, SinkTaskMessage)]
        files = [f for m in tasks for f in m.files]
        rejects = [f for m in tasks for f in m.rejects]
        result = self._log().commit(
            batchId, files, [f for m in tasks for f in m.open], rejects=rejects
        )
        self.last_commit = result
        logger.info(
            "%s: batch %s published %s file(s)%s%s",
            _SINK,
            batchId,
            len(result.published),
            f" and {result.rejected} rejected row(s)" if result.rejected else "",
            " (already published before)" if result.replayed else "",
        )

    def close_open(self) -> list[str]:
        """Publish the files left open for later batches (the query stopped); their names."""
        result = self._log().close_open()
        return list(result.published) if result is not None else []

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        files = [f for m in messages if isinstance(m, SinkTaskMessage) for f in m.files]
        self._log().abort(batchId, files)


def _compressed(codec: str | None, data: list[Any], size: int) -> tuple[list[Any], int]:
    """The buffers of one write as one gzip member or zstd frame (``codec``), so that a file
    cut back to any recorded size is still one valid stream; as they are without a codec."""
    if codec is None or not data:
        return data, size
    from operators.sink.formats import compress_piece

    piece = compress_piece(codec, b"".join(data))
    return [piece], len(piece)


def _table_columns(config: SinkConfig, schema: StructType) -> pa.Schema:
    """The Arrow schema of the input's columns for a sink of records with columns; ConfigError
    when a partition column is missing, or when the input
    has a column the given schema lacks (it would be dropped without a word)."""
    from operators.spark.tables import arrow_columns

    spec = config.table
    assert spec is not None
    names = schema.fieldNames()
    try:
        columns = arrow_columns(schema)
    except Exception as exc:  # a Spark type Arrow has no match for
        msg = f"{_SINK}: format={spec.format!r}: the input's columns cannot be written: {exc}"
        raise ConfigError(msg) from None
    for part in spec.partition_by:
        source = spec.derived[part][0] if part in spec.derived else part
        if source not in names:
            msg = (
                f"{_SINK}: partition_by: the input has no column {source!r} "
                f"(columns: {', '.join(names)})"
            )
            raise ConfigError(msg)
    if spec.schema_ is not None:
        extra = [n for n in names if n not in spec.schema_ and n not in spec.partition_by]
        if extra:
            msg = (
                f"{_SINK}: the input's column {extra[0]!r} is not in the schema option "
                f"(columns of the schema: {', '.join(spec.schema_)}): select the columns to write"
            )
            raise ConfigError(msg)
    written = [n for n in names if n not in spec.partition_by]
    if not written:
        parts = list(spec.partition_by)
        msg = f"{_SINK}: the input has no column to write besides partition_by={parts}"
        raise ConfigError(msg)
    if spec.format == "csv":
        import pyarrow as pa

        nested = [f for f in columns if pa.types.is_nested(f.type) and f.name in written]
        if nested:
            msg = (
                f"{_SINK}: format='csv': column {nested[0].name!r} is {nested[0].type}, which "
                "CSV cannot hold (write it as jsonl, parquet or orc, or flatten it)"
            )
            raise ConfigError(msg)
    return columns


def _pick_column(config: SinkConfig, schema: StructType) -> str:
    names = schema.fieldNames()
    if config.attribute is not None:
        if config.attribute not in names:
            msg = (
                f"{_SINK}: file_attribute_name={config.attribute!r}: the input has no such "
                f"column (columns: {', '.join(names)})"
            )
            raise ConfigError(msg)
        if not isinstance(schema[config.attribute].dataType, StringType):
            raise ConfigError(f"{_SINK}: the file name column {config.attribute!r} must be string")
        names = [n for n in names if n != config.attribute]
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
        if config.rejects is not None:
            msg = (
                f"{_SINK}: rejects_file keeps the rows the source of a fused run could not "
                "read, which a streaming query's source does not pass to its sink (it logs "
                "them): use hdfs-region run without a stateful transform (fused execution)"
            )
            raise ConfigError(msg)
        if config.rolling.on_punctuation:
            msg = (
                f"{_SINK}: close_on_punct needs the end of each input file, which a streaming "
                "query does not pass to its sink: use hdfs-region run without a SQL transform "
                "(fused execution), or a file limit"
            )
            raise ConfigError(msg)
        return HdfsSinkStreamWriter(config, schema)


def close_open_files(options: Mapping[str, str]) -> list[str]:
    """Publish what an ``hdfs_sink`` query with a file limit left open, after the query stopped
    (``query.stop()``, or its end with ``availableNow``): the same options as the query's
    ``writeStream`` (with its ``checkpointLocation``). Returns the published paths. Running it
    while the query runs would publish files a running task continues: stop the query first."""
    from operators.spark.options import sink_config

    config = sink_config(options)
    columns = [
        StructField(config.column or "value", BinaryType() if config.binary else StringType())
    ]
    if config.attribute is not None:
        columns.append(StructField(config.attribute, StringType()))
    schema = StructType(columns) if config.table is None else None
    return HdfsSinkStreamWriter(config, schema).close_open()
