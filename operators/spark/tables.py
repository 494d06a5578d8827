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
directory. A bulk file is written as Parquet or ORC directly (:class:`~operators.sink.bulk.
BulkWriter`, the writer the in-process sink converts with): a task's file is never cut back (a
failed attempt's files are deleted whole), so it needs no appendable Arrow stream first. It is
closed and synced before the task reports it: every file the commit renames is whole.

Files of records with columns end with their micro-batch on Spark, whatever ``span_batches``
says: a Parquet or ORC file cannot be appended to, so carrying one across batches would mean
carrying its Arrow stream and converting it at a later commit, on the driver, with steps of its
own in the sink log's recovery; that is not built (yet). Within a batch, files still roll by
the policy (``tuples_per_file``, ``bytes_per_file``, ``time_per_file``). The local engine sizes
bulk files by the policy across cuts.
"""

from __future__ import annotations

import logging
import posixpath
import time
from collections.abc import Callable
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.ipc as ipc

from operators.common.columns import Columns
from operators.common.errors import BadRecordError
from operators.sink.bulk import BulkWriter
from operators.sink.formats import TableEncoder, form_format
from operators.sink.partitions import Partitioner
from operators.spark.commit import WrittenFile, in_progress_name
from operators.spark.config import SinkConfig
from region.fs import FileSystem, FileWriter

__all__ = ["TableFiles", "arrow_columns", "note_batch_files"]

logger = logging.getLogger(__name__)

_SINK = "hdfs_sink"


def arrow_columns(schema: object) -> pa.Schema:
    """The Arrow schema of a Spark ``StructType`` (timestamps as UTC instants, as the Arrow
    batches Spark hands the sink carry them)."""
    from pyspark.sql.pandas.types import to_arrow_schema

    return to_arrow_schema(schema, timezone="UTC")  # type: ignore[arg-type]


def note_batch_files(config: SinkConfig) -> None:
    """Say (WARNING, once per query or run) that files of records with columns end with each
    micro-batch when files were asked to span batches with a limit: they are smaller than the
    limit when a batch holds fewer records."""
    spec, rolling = config.table, config.rolling
    limits = {
        "tuples_per_file": rolling.tuples,
        "bytes_per_file": rolling.bytes,
        "time_per_file": rolling.seconds,
    }
    given = {k: v for k, v in limits.items() if v is not None}
    if spec is None or not config.span_batches or not given:
        return
    name, value = next(iter(given.items()))
    logger.warning(
        "%s: format=%r on Spark: files end with each micro-batch (%s=%s rolls them within a "
        "batch only; files do not span batches, as Parquet and ORC cannot be appended to); "
        "the local engine sizes them by the limit across cuts",
        _SINK,
        spec.format,
        name,
        value,
    )


@dataclass
class _File:
    """One open in-progress file; ``bulk`` writes a Parquet or ORC one."""

    work: str
    writer: FileWriter
    subdir: str
    opened_ns: int
    bulk: BulkWriter | None = None
    rows: int = 0
    #: Bytes written: of a bulk file, its Arrow batches' (what ``bytes_per_file`` counts).
    size: int = 0


class TableFiles:
    """The in-progress files of one task attempt writing records with columns (see the module
    doc). ``fault`` is called with ``"task_write"`` once the first file is complete."""

    def __init__(
        self,
        config: SinkConfig,
        fs: FileSystem,
        task: str,
        partition: int,
        columns: pa.Schema,
        fault: Callable[[str], None] | None = None,
    ) -> None:
        spec = config.table
        assert spec is not None
        self._config = config
        self._fs = fs
        self._task = task
        self._partition = partition
        self._fault = fault
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
            if f.bulk is not None:  # the encoder's bytes are one Arrow record batch message
                f.bulk.add(ipc.read_record_batch(pa.py_buffer(data), f.bulk.schema))
            else:
                f.writer.write(data)
            f.rows += take
            f.size += len(data)
            start += take
            if rolling.full(f.rows, f.size) or rolling.expired(f.opened_ns / 1e9, time.time()):
                self._close(where)

    def _file(self, where: str) -> _File:
        """The open file of partition ``where`` (last in the order: written last), opened
        after closing the least recently written ones beyond ``max_open_files``."""
        found = self._open.pop(where, None)
        if found is None:
            limit = self._config.max_open_files if self._parts is not None else 1
            while len(self._open) >= limit:
                self._close(next(iter(self._open)))
            path = posixpath.join(
                self._config.output_dir, in_progress_name(self._task, len(self._created))
            )
            self._created.append(path)
            writer = self._fs.create(path, permission=self._config.permission)
            found = _File(path, writer, where, time.time_ns())
            header = self._encoder.header
            if self._encoder.bulk:  # the header is the Arrow schema
                fmt, codec = form_format(self._encoder.form)
                schema = ipc.read_schema(pa.py_buffer(header))
                found.bulk = BulkWriter(writer, fmt, codec, schema)
            elif header:
                writer.write(header)
            found.size = len(header)
        self._open[where] = found
        return found

    def _close(self, where: str) -> None:
        """Close the file of ``where``: a bulk file's last row group and footer written, then
        synced and closed."""
        f = self._open[where]
        try:
            size = f.bulk.close() if f.bulk is not None else f.size
            f.writer.sync()
        finally:
            f.writer.close()
        del self._open[where]  # only now: a failure leaves it to discard()
        self.files.append(
            WrittenFile(
                f.work,
                self._partition,
                len(self.files),
                f.rows,
                size,
                f.opened_ns,
                subdir=where or None,
            )
        )
        if len(self.files) == 1 and self._fault is not None:
            self._fault("task_write")

    # -- end of the task --------------------------------------------------------------------

    def finish(self) -> None:
        """Close every open file (files of records with columns end with the batch)."""
        for where in list(self._open):
            self._close(where)

    def discard(self) -> None:
        """The task failed: drop everything it wrote."""
        for f in self._open.values():
            try:
                f.writer.close()
            except OSError as exc:
                logger.debug("%s: closing %s failed: %s", _SINK, f.work, exc)
        self._open = {}
        for path in self._created:
            self._fs.delete(path)
