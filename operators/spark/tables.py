"""``hdfs_sink`` writing records with columns: JSON lines, CSV, Parquet and ORC, compressed,
in Hive-style partitions, by the in-process sink's rules.

One rule, written once, for both engines: the bytes come from the in-process sink's
:class:`~operators.sink.formats.TableEncoder` (lossless conversion to the columns' types,
a gzip member or zstd frame per write, the CSV header, an Arrow IPC stream for the bulk
formats), Parquet and ORC from :class:`~operators.sink.bulk.BulkWriter`, the partition
directory of each record from :class:`~operators.sink.partitions.Partitioner` (values that
would leave their directory are refused, naming the value). The columns are the DataFrame's
(Spark types to Arrow types), or ``[sink.schema]`` when given.

A task writes one hidden in-progress file per partition it sees (at most ``max_open_files`` at
once: the least recently written closes when another partition needs a place), each rolling by
the roll policy; the commit (:mod:`operators.spark.commit`) publishes each into its partition
directory. Every file the commit renames is whole, closed and synced before the task reports it.

Files that end with their task (no ``span_batches``, or no limit): a bulk file is written as
Parquet or ORC directly (:class:`~operators.sink.bulk.BulkWriter`, the writer the in-process
sink converts with), since a failed attempt's files are deleted whole.

Files that span micro-batches (``span_batches`` with ``tuples_per_file``, ``bytes_per_file`` or
``time_per_file``), so that a slow stream makes files of the configured size, not one per batch,
task and partition: a file not full at the end of a task stays open, synced, and the sink log
records its size; the next batch's task of the same slot continues it (cut back to that size
first: a failed attempt may have appended). Parquet and ORC cannot be appended to or cut back,
so their open form is an Arrow IPC stream (the encoder's schema, then one record batch message
per write: appendable, and whole at every recorded size), converted to Parquet or ORC when the
file is complete (:func:`operators.spark.commit.complete`): by the task that fills it or finds
it past ``time_per_file``, by the commit that finds it past its age, or by the stop. The stream
stays until the commit publishing its conversion deletes it: a crash before then finds it as the
log recorded it. A carried file of another form (the settings changed between runs) is
published as it was written, never appended to.
"""

from __future__ import annotations

import logging
import posixpath
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.ipc as ipc

from operators.common.columns import Columns
from operators.common.errors import BadRecordError
from operators.sink.bulk import BulkWriter
from operators.sink.formats import TableEncoder, form_format
from operators.sink.partitions import Partitioner
from operators.spark.commit import (
    WrittenFile,
    complete,
    continues,
    cut_back,
    in_progress_name,
)
from operators.spark.config import SinkConfig
from region.fs import FileSystem, FileWriter

if TYPE_CHECKING:
    from pyspark.sql.types import StructType

__all__ = ["TableFiles", "arrow_columns", "spark_columns"]

logger = logging.getLogger(__name__)

_SINK = "hdfs_sink"


def spark_columns(schema: Mapping[str, str]) -> StructType:
    """The Spark columns of a schema of type names (``[sink.schema]``): what a function's
    records are written as."""
    from pyspark.sql.pandas.types import from_arrow_schema

    from operators.common.schema import arrow_schema

    return from_arrow_schema(arrow_schema(dict(schema)), prefer_timestamp_ntz=True)


def arrow_columns(schema: object) -> pa.Schema:
    """The Arrow schema of a Spark ``StructType`` (timestamps as UTC instants, as the Arrow
    batches Spark hands the sink carry them)."""
    from pyspark.sql.pandas.types import to_arrow_schema

    return to_arrow_schema(schema, timezone="UTC")  # type: ignore[arg-type]


@dataclass
class _File:
    """One open in-progress file; ``bulk`` writes a Parquet or ORC one (files that end with
    their task), ``stream`` marks one whose bytes are the Arrow stream of one (files that span
    batches); ``carried``: an earlier batch's file this task continues."""

    work: str
    writer: FileWriter
    subdir: str
    opened_ns: int
    bulk: BulkWriter | None = None
    stream: bool = False
    carried: bool = False
    rows: int = 0
    #: Bytes written: of a bulk file, its Arrow batches' (what ``bytes_per_file`` counts).
    size: int = 0


class TableFiles:
    """The in-progress files of one task attempt writing records with columns (see the module
    doc). ``fault`` is called with ``"task_write"`` once the first file is complete. ``spans``:
    files may stay open for the next batch (:meth:`finish`); ``carried``: the files earlier
    batches left open for this task's slot."""

    def __init__(
        self,
        config: SinkConfig,
        fs: FileSystem,
        task: str,
        partition: int,
        columns: pa.Schema,
        fault: Callable[[str], None] | None = None,
        *,
        spans: bool = False,
        carried: Sequence[WrittenFile] = (),
    ) -> None:
        spec = config.table
        assert spec is not None
        self._config = config
        self._fs = fs
        self._task = task
        self._partition = partition
        self._fault = fault
        self._spans = spans
        self._encoder = TableEncoder(spec, fs, config.rolling, columns=columns)
        self._parts = (
            Partitioner(spec.partition_by, spec.schema_, spec.derived)
            if spec.partition_by
            else None
        )
        #: Open files by partition directory (``""``: not partitioned), least recently
        #: written first.
        self._open: dict[str, _File] = {}
        #: Complete files, in the order they closed (the commit numbers them so).
        self.files: list[WrittenFile] = []
        #: Files left open for the next batch (:meth:`finish`).
        self.open: list[WrittenFile] = []
        #: Earlier batches' open files by partition directory, until a record comes for it.
        self._carried = {f.subdir or "": f for f in carried}
        #: Every file this attempt created (deleted when it fails).
        self._created: list[str] = []

    # -- records ----------------------------------------------------------------------------

    def write(self, batch: pa.RecordBatch) -> None:
        """One Arrow batch of the DataFrame to the files of its partitions."""
        records = Columns(batch)
        if self._parts is None:
            self._write_run("", records)
            return
        groups, bad = self._parts.split(records)
        if bad:
            # The Spark sink rejects no record: one that cannot be written fails its batch.
            error = bad[0][1]
            msg = f"{_SINK}: {error} (partition_by={list(self._parts.columns)})"
            raise ValueError(msg) from None
        for where, group in groups.items():
            self._write_run(where, group)

    def _write_run(self, where: str, records: Columns) -> None:
        rolling = self._config.rolling
        start, n = 0, len(records)
        while start < n:
            f = self._file(where)
            take = n - start
            room = rolling.room(f.rows)
            if room is not None:
                take = min(take, max(1, room))
            shown = posixpath.join(self._config.output_dir, where)
            try:
                data, take = self._encoder.encode(records, start, take, shown, f.size)
            except BadRecordError as exc:
                raise ValueError(f"{_SINK}: {exc}") from None
            if f.bulk is not None:  # the encoder's bytes are its record batch's IPC message
                assert self._encoder.batch is not None
                f.bulk.add(self._encoder.batch)
            else:
                f.writer.write(data)
            f.rows += take
            f.size += len(data)
            start += take
            if rolling.full(f.rows, f.size) or rolling.expired(f.opened_ns / 1e9, time.time()):
                self._close(where)

    def _file(self, where: str) -> _File:
        """The open file of partition ``where`` (last in the order: written last): an earlier
        batch's, continued, or a new one, opened after closing the least recently written ones
        beyond ``max_open_files``."""
        found = self._open.pop(where, None)
        if found is None:
            limit = self._config.max_open_files if self._parts is not None else 1
            while len(self._open) >= limit:
                self._close(next(iter(self._open)))
            found = self._continue(where) or self._create(where)
        self._open[where] = found
        return found

    def _continue(self, where: str) -> _File | None:
        """The file an earlier batch left open for ``where``, cut back to the size the log
        recorded and opened for appending; ``None`` when there is none, or it is complete
        (full, past its age, or of another form: then it is published, converted if a bulk
        file's stream)."""
        carried = self._carried.pop(where, None)
        if carried is None:
            return None
        cut_back(self._fs, carried, self._config.permission)
        rolling = self._config.rolling
        if (
            continues(carried, self._encoder.form)
            and not rolling.full(carried.rows, carried.size)
            and not rolling.expired(carried.opened_ns / 1e9, time.time())
        ):
            return _File(
                carried.path,
                self._fs.append(carried.path),
                where,
                carried.opened_ns,
                stream=self._encoder.bulk,
                carried=True,
                rows=carried.rows,
                size=carried.size,
            )
        into = form_format(self._encoder.form)
        done = complete(self._fs, carried, self._config.permission, into)
        if done.path != carried.path:
            self._created.append(done.path)
        self._completed(replace(done, index=len(self.files)))
        return None

    def _create(self, where: str) -> _File:
        path = posixpath.join(
            self._config.output_dir, in_progress_name(self._task, len(self._created))
        )
        self._created.append(path)
        writer = self._fs.create(path, permission=self._config.permission)
        found = _File(path, writer, where, time.time_ns())
        header = self._encoder.header
        if self._encoder.bulk and self._spans:
            # The open form of a file that may span batches: its Arrow stream, whose header is
            # the schema (see the module doc).
            found.stream = True
            writer.write(header)
        elif self._encoder.bulk:  # the header is the Arrow schema
            fmt, codec = form_format(self._encoder.form)
            schema = ipc.read_schema(pa.py_buffer(header))
            found.bulk = BulkWriter(writer, fmt, codec, schema)
        elif header:
            writer.write(header)
        found.size = len(header)
        return found

    def _close(self, where: str, *, keep_open: bool = False) -> None:
        """Close the file of ``where``: a bulk file's last row group and footer written (a
        stream converted), then synced and closed; ``keep_open``: synced, closed and left open
        for the next batch as it is."""
        f = self._open[where]
        try:
            size = f.bulk.close() if f.bulk is not None else f.size
            f.writer.sync()
        finally:
            f.writer.close()
        del self._open[where]  # only now: a failure leaves it to discard()
        written = WrittenFile(
            f.work,
            self._partition,
            len(self.files) + len(self.open),
            f.rows,
            size,
            f.opened_ns,
            subdir=where or None,
            form=self._encoder.form,
        )
        if keep_open:
            self.open.append(written)
            return
        if f.stream:
            done = complete(self._fs, written, self._config.permission)
            self._created.append(done.path)
            if not f.carried:
                self._fs.delete(f.work)  # this attempt's own: no log entry names it
                done = replace(done, stream=None)
            written = done
        self._completed(written)

    def _completed(self, written: WrittenFile) -> None:
        self.files.append(written)
        if len(self.files) == 1 and self._fault is not None:
            self._fault("task_write")

    # -- end of the task --------------------------------------------------------------------

    def finish(self, *, carry: bool = False) -> None:
        """The end of the task's input: every open file closed, but, with ``carry``, those
        neither full nor past their age stay open for the next batch."""
        rolling = self._config.rolling
        now = time.time()
        for where in list(self._open):
            f = self._open[where]
            keep = (
                carry
                and not rolling.full(f.rows, f.size)
                and not rolling.expired(f.opened_ns / 1e9, now)
            )
            self._close(where, keep_open=keep)

    def discard(self) -> None:
        """The task failed: drop everything it wrote, but the files earlier batches left open
        (the next attempt cuts them back to their recorded size)."""
        for f in self._open.values():
            try:
                f.writer.close()
            except OSError as exc:
                logger.debug("%s: closing %s failed: %s", _SINK, f.work, exc)
        self._open = {}
        for path in self._created:  # never a carried file: it holds earlier batches' records
            self._fs.delete(path)
