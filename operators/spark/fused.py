"""Fused execution: the scan and the commit on the driver, each batch one Spark job whose tasks
read, transform and write in Python.

A streaming query with a Python source and a Python sink pays twice per batch: the source's
planning runs in a Python process Spark starts afresh for every query, and every record crosses
the JVM as a row (Arrow from the source, copied into Spark rows, then Arrow again for the sink).
Here only the plan goes to the tasks and only a manifest of the written files comes back:
``spark.range(n, numPartitions=n).mapInArrow(task)`` runs one task per planned partition, and the
task reads its byte ranges, applies the transform and writes in-progress files with the same
code as ``hdfs_scan`` / ``hdfs_sink`` (and the same rules as the in-process engine: cursor,
decoding, rolling, file names). ``mapInArrow`` is plain DataFrame API (it works through Spark
Connect as well) and gives each task its Spark task context (partition, attempt), which the
in-progress names need. A DataFrame transform (a SQL one, :func:`sql_transform`, or a user's
function, :mod:`operators.spark.query`) runs between two such halves in one stage (read by
``mapInArrow``, the transform, write by ``mapInArrow``) when it keeps no state across batches
(:func:`stateful_part`); one that does (an aggregation, a deduplication) needs a streaming query.

Batch ``N`` (the region's cut), numbered steps as in :mod:`operators.spark.commit`:

1. Plan: ``end = latestOffset(start)``; the scan writes the plan (the exact byte ranges).
2. Write ahead: ``offsets/N`` in Spark's checkpoint (:class:`BatchLog`). From here the batch is
   decided: a restart runs it again over the same plan.
3. Run the job: tasks write hidden in-progress files and return their manifests.
4. Commit: the sink log publishes the files exactly once (its own write-ahead entry, renames),
   with the rows the tasks could not read when the sink has a ``rejects_file``
   (:mod:`operators.spark.rejects`).
5. Record ``commits/N``; the scan drops old plans.

A restart finds ``offsets/N`` without ``commits/N`` and runs batch ``N`` again (skipping the job
when the sink log already published it). A failed batch is retried by the same rule as a failed
streaming query (:class:`operators.spark.supervisor.SparkSupervisor`).
"""

from __future__ import annotations

import codecs
import contextlib
import dataclasses
import functools
import gc
import json
import logging
import posixpath
import re
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from operators.common.columns import Columns
from operators.common.errors import short
from operators.source.compressed import codec_of
from operators.source.ledger import Expected
from operators.spark.batchlog import SPARK_CONFS, SPARK_DIR, BatchLog
from operators.spark.commit import CommitResult, WrittenFile
from operators.spark.rejects import TaskRejects, batch_rejects, delete_leftovers
from operators.spark.sink import (
    PUNCTUATION,
    EncodedLines,
    HdfsSinkStreamWriter,
    Punctuation,
    SinkTaskMessage,
    TaskIds,
)
from operators.spark.source import HdfsScanStreamReader, PlannedRange, ScanPartition
from operators.spark.supervisor import BatchProgress, RestartPolicy, source_options
from region.fs import FileSystem
from region.settings import RegionSettings, Trigger

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.types import StructType

    from operators.source.rows import Rejected

__all__ = [
    "FrameTransform",
    "FusedRunner",
    "Transform",
    "sql_frame",
    "sql_transform",
    "stateful_part",
]

logger = logging.getLogger(__name__)

#: A per-record transform: the value (``str``, or ``bytes`` in binary mode) to the value to
#: write, or ``None`` to drop the record.
Transform = Callable[[Any], Any]
#: A DataFrame transform: the batch's records (the columns ``hdfs_scan`` gives) to the records
#: to write (a ``value`` column, and the ``file_attribute_name`` column when the sink has one).
FrameTransform = Callable[["DataFrame"], "DataFrame"]

#: One row per written file, each a JSON object (:func:`_manifest`).
_MANIFEST = "entry string"

#: ``[spark] driver_batch_bytes``'s default: a batch without a transform that reads at most
#: this many bytes runs in the driver's Python on a local master (about a tenth of a second).
DRIVER_BATCH_BYTES = 4 << 20

#: How often an idle operator-driven run looks for new files.
_IDLE_POLL = 0.5


@dataclass(frozen=True)
class _Task:
    """What every task of one batch gets: the reader, the writer and the transform (small:
    settings only; each opens its filesystem where it runs) and the plan."""

    reader: HdfsScanStreamReader
    writer: HdfsSinkStreamWriter
    transform: Transform | None
    binary: bool
    plan: tuple[tuple[PlannedRange, ...], ...]
    #: The batch the tasks write for (files spanning batches), carried here rather than as a
    #: local property, which a Spark Connect client cannot set.
    batch_id: int

    @property
    def rows(self) -> bool:
        """Whether the records are CSV or JSON rows with columns (not a ``value``)."""
        return self.reader.config.rows is not None

    def rejects(self, partition: int) -> TaskRejects | None:
        """Where the rows of ``partition`` that do not fit go: the sink's rejects file, when
        it has one (``None``: the task logs them)."""
        template = self.writer.config.rejects
        if template is None or not self.rows:
            return None
        return TaskRejects(
            self.writer.fs, template, self.batch_id, partition, self.writer.config.permission
        )


def _transformed(
    batches: Iterator[pa.RecordBatch], task: _Task, counted: list[int]
) -> Iterator[pa.RecordBatch]:
    import pyarrow as pa

    kind = pa.binary() if task.binary else pa.string()
    attribute = task.writer.config.attribute
    table = task.writer.config.table is not None
    for batch in batches:
        counted[0] += batch.num_rows
        if task.transform is None:
            yield batch
            continue
        name = getattr(task.transform, "__qualname__", repr(task.transform))
        if getattr(task.transform, "over_batch", False):
            # vectorized: the rows' columns in, the columns to write out (OverColumns, as on
            # the local engine); the sink converts them to its schema.
            yield from task.transform(Columns(batch)).table.to_batches()
            continue
        if task.rows:  # records with columns: each a dict, as the local engine hands them on
            values = [task.transform(r) for r in batch.to_pylist()]
        else:
            values = [task.transform(v) for v in batch.column(0).to_pylist()]
        kept = [v for v in values if v is not None]
        if table:  # a mapping per record, of the sink's columns
            if kept:
                yield _mappings(kept, name)
            continue
        wanted = "bytes" if task.binary else "str"
        try:
            if attribute is None:
                yield pa.RecordBatch.from_arrays([pa.array(kept, kind)], ["value"])
                continue
            # file_attribute_name: the transform gives (file name, value) pairs.
            names = pa.array([pair[0] for pair in kept], pa.string())
            column = pa.array([pair[1] for pair in kept], kind)
        except (TypeError, IndexError, pa.ArrowException) as exc:
            shape = wanted if attribute is None else f"a (str, {wanted}) pair"
            msg = f"transform {name} must return {shape} or None: {exc}"
            raise TypeError(msg) from None
        yield pa.RecordBatch.from_arrays([names, column], [attribute, "value"])


def _mappings(records: list[Any], name: str) -> pa.RecordBatch:
    """The mappings a transform returned, as columns (a key a record lacks: null); the sink
    converts each column to its schema, naming a record whose value does not fit."""
    import pyarrow as pa

    bad = next((r for r in records if not isinstance(r, Mapping)), None)
    if bad is not None:
        msg = (
            f"transform {name} must return a mapping of the [sink.schema] columns or None, "
            f"not {short(bad)}"
        )
        raise TypeError(msg)
    try:
        return pa.RecordBatch.from_pylist(records)
    except pa.ArrowException as exc:
        msg = f"transform {name} returned values of one column that have no common type: {exc}"
        raise TypeError(msg) from None


def _verbatim(task: _Task) -> bool:
    """Whether lines go from the input files to the output files as bytes (checked, not
    decoded): UTF-8 lines in and out, no transform, nothing added, no file limits."""
    scan = task.reader.config
    utf8 = codecs.lookup(scan.encoding).name == "utf-8"
    plain = (
        not scan.binary
        and scan.rows is None
        and not scan.include_file_info
        and task.transform is None
    )
    return utf8 and plain and task.writer.accepts_lines


def _records(
    task: _Task,
    ranges: list[PlannedRange],
    counted: list[int],
    bad: Callable[[Rejected], None] | None = None,
) -> Iterator[pa.RecordBatch | EncodedLines | Punctuation]:
    """The partition's records for the sink: as bytes where they can be, else decoded; with
    ``close_on_punct``, a punctuation after each range that ends its file. Rows that do not
    fit go to ``bad`` when given."""
    reader = task.reader
    marks = task.writer.config.rolling.on_punctuation
    if not _verbatim(task):
        if not marks:
            yield from _transformed(reader.read(ScanPartition(ranges), bad), task, counted)
            return
        for item in ranges:
            yield from _transformed(reader.read(ScanPartition([item]), bad), task, counted)
            if item[2] >= item[3]:
                yield PUNCTUATION
        return
    from operators.spark.arrow_io import NotVerbatim, copy_lines

    for item in ranges:
        _, start, end, size = item[:4]
        if codec_of(item[0], reader.config.compression) is not None:  # type: ignore[arg-type]
            # A compressed file's lines are decompressed, never copied as its bytes.
            yield from _transformed(reader.read(ScanPartition([item])), task, counted)
            if marks:
                yield PUNCTUATION
            continue

        def copy(
            path: str,
            expected: Expected | None,
            start: int = start,
            end: int = end,
            size: int = size,
        ) -> Iterator[pa.RecordBatch | EncodedLines]:
            try:
                for data, count in copy_lines(
                    reader.fs,
                    path,
                    start,
                    end,
                    size=size,
                    chunk_size=reader.config.read_chunk,
                    expected=expected,
                ):
                    counted[0] += count
                    yield EncodedLines(data, count)
            except NotVerbatim as at:
                # A CR or bytes that are not UTF-8 from here: the decoding rule decides.
                rest = ScanPartition([(path, at.offset, end, size, None)])
                yield from _transformed(reader.read(rest), task, counted)

        yield from reader.relocating(item, copy)
        if marks and end >= size:
            yield PUNCTUATION


def _manifest(message: SinkTaskMessage, records_in: int) -> pa.RecordBatch:
    """One row per written file (``open``: left open for the next batch), and one (no path)
    with the count of records read: JSON objects in one string column, built from its buffers
    (``pa.array`` would import pandas into every Python worker, for a few rows)."""
    import numpy as np
    import pyarrow as pa

    rows: list[dict[str, Any]] = [
        {**f.to_dict(), "records_in": 0, "open": still_open}
        for still_open, files in ((False, message.files), (True, message.open))
        for f in files
    ]
    rows.append({"path": None, "partition": message.partition, "records_in": records_in})
    encoded = [json.dumps(row).encode() for row in rows]
    offsets = np.zeros(len(encoded) + 1, dtype=np.int32)
    np.cumsum([len(e) for e in encoded], out=offsets[1:])
    entries = pa.Array.from_buffers(
        pa.string(), len(encoded), [None, pa.py_buffer(offsets), pa.py_buffer(b"".join(encoded))]
    )
    return pa.RecordBatch.from_arrays([entries], ["entry"])


def _written(rows: list[dict[str, Any]]) -> tuple[list[WrittenFile], list[WrittenFile], int]:
    """``(files written, files left open, records read)`` from a batch's manifests' rows."""
    written = sorted(
        (r for r in rows if r["path"] is not None), key=lambda r: (r["partition"], r["index"])
    )
    files, open_files = (
        [WrittenFile.from_dict(r) for r in written if r["open"] is still_open]
        for still_open in (False, True)
    )
    return files, open_files, sum(r.get("records_in", 0) for r in rows)


def _read_tasks(task: _Task, ids: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """The source half of a task whose transform is a DataFrame's: the partition's records
    (counted by an observation of the frame: the write half sees only the transform's output)."""
    for id_batch in ids:
        for partition in id_batch.column(0).to_pylist():
            with _rejecting(task, partition) as bad:
                yield from task.reader.read(ScanPartition(list(task.plan[partition])), bad)


@contextlib.contextmanager
def _rejecting(task: _Task, partition: int) -> Iterator[Callable[[Rejected], None] | None]:
    """Where the rows of ``partition`` that do not fit go while it is read (``None``: the task
    logs them): its rejects file, finished when the reading ends, dropped when it fails."""
    rejects = task.rejects(partition)
    if rejects is None:
        yield None
        return
    try:
        yield rejects.add
    except BaseException:
        rejects.discard()
        raise
    rejects.finish()


def _freeze_once() -> None:
    """After a Python worker's first task: its objects (the modules it imported, pyarrow's and
    the filesystem client's among them) left out of the garbage collections that the worker
    runs after every task, which would otherwise go through them all each time."""
    global _frozen
    if not _frozen:
        _frozen = True
        gc.freeze()


_frozen = False


def _task_ids(batch_id: int, partition: int | None = None) -> TaskIds:
    ids = dataclasses.replace(TaskIds.current(), batch_id=batch_id)
    return ids if partition is None else dataclasses.replace(ids, partition=partition)


def _write_tasks(
    writer: HdfsSinkStreamWriter, batch_id: int, batches: Iterator[pa.RecordBatch]
) -> Iterator[pa.RecordBatch]:
    """The sink half of a task whose transform is a DataFrame's: its output to in-progress
    files."""
    yield _manifest(writer.write_task(batches, _task_ids(batch_id)), 0)
    _freeze_once()


def _run_tasks(task: _Task, ids: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """One Spark task: read the partition's byte ranges, transform, write in-progress files;
    yield the manifest (one row per file, one with the count of records read)."""
    for id_batch in ids:
        yield from _partition_tasks(task, id_batch.column(0).to_pylist())
    _freeze_once()


def _partition_tasks(task: _Task, partitions: list[int]) -> Iterator[pa.RecordBatch]:
    """The work of the tasks of ``partitions``, one after the other, where this runs: a Spark
    task's (:func:`_run_tasks`) or, for a small batch, the driver's (``driver_batch_bytes``)."""
    for partition in partitions:
        counted = [0]
        with _rejecting(task, partition) as bad:
            records = _records(task, list(task.plan[partition]), counted, bad)
            message = task.writer.write_task(records, _task_ids(task.batch_id, partition))
        yield _manifest(message, counted[0])


#: Logical plan nodes a DataFrame transform may use to run fused: each batch's output is then
#: what a streaming query would append for it. Anything else (aggregation, deduplication, sorting,
#: limits, windows...) keeps state across batches in a streaming query: it runs as one.
_STATELESS_NODES = frozenset(
    {
        "Project",
        "Filter",
        "Generate",
        "SubqueryAlias",
        "View",
        "MapInArrow",
        "PythonMapInArrow",
        "MapInPandas",
        # Python UDFs: row by row (or Arrow batch by batch), nothing kept between rows.
        "BatchEvalPython",
        "ArrowEvalPython",
        "Range",
        "LocalRelation",
    }
)
_NODE = re.compile(r"^[\s:|+\-]*(\w+)")


def sql_frame(spark: SparkSession, source: DataFrame, sql: str) -> DataFrame:
    """``sql`` over the view ``input`` of ``source``; ``ConfigError`` naming what is wrong."""
    from region.errors import ConfigError

    source.createOrReplaceTempView("input")
    try:
        return spark.sql(sql)
    except Exception as exc:  # AnalysisException / ParseException: the SQL is wrong
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ConfigError(f"[transform] sql: {first} (got {sql!r})") from None


def sql_transform(spark: SparkSession, sql: str) -> FrameTransform:
    """The DataFrame transform of ``[transform] sql``: ``sql`` over the view ``input``."""
    return functools.partial(_sql_over, spark, sql)


def _sql_over(spark: SparkSession, sql: str, source: DataFrame) -> DataFrame:
    return sql_frame(spark, source, sql)


def stateful_part(
    spark: SparkSession,
    transform: str | FrameTransform,
    *,
    binary: bool,
    schema: str | None = None,
) -> str | None:
    """The first plan node of ``transform`` (SQL over the view ``input``, or a DataFrame
    function) that keeps state across streaming batches (its name), or ``None`` when it can
    run fused, batch by batch. ``schema``: the columns it gets (default: ``value`` alone)."""

    for node in _plan_nodes(spark, transform, binary=binary, schema=schema)[0]:
        if node not in _STATELESS_NODES:
            return node
    return None


def _plan_nodes(
    spark: SparkSession, transform: str | FrameTransform, *, binary: bool, schema: str | None
) -> tuple[list[str], StructType]:
    """The node names of ``transform``'s optimized plan over an input of ``schema``, and the
    columns it returns."""

    def nothing(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        yield from ()

    if isinstance(transform, str):
        transform = sql_transform(spark, transform)
    if schema is None:
        schema = "value binary" if binary else "value string"
    frame = transform(spark.range(0).mapInArrow(nothing, schema))
    plan = str(frame._jdf.queryExecution().optimizedPlan().toString())
    nodes = [m.group(1) for m in map(_NODE.match, plan.splitlines()) if m is not None]
    return nodes, frame.schema


#: The observation that counts a SQL transform's input records.
_OBSERVED = "hdfs-region-read"


class FusedRunner:
    """Runs the pipeline batch after batch until stopped (or, ``available_now``, until what was
    present at start is done). The same surface as :class:`SparkSupervisor`: :meth:`run`,
    :meth:`stop`, ``on_progress`` once per completed batch, ``on_restart`` before a retry."""

    @classmethod
    def on_checkpoint(
        cls,
        spark: SparkSession,
        scan_options: dict[str, str],
        sink_options: dict[str, str],
        checkpoint: tuple[FileSystem, str],
        settings: RegionSettings,
        **kwargs: Any,
    ) -> FusedRunner:
        """The runner of the pipeline checkpoint ``(fs, folder)``: Spark's checkpoint in its
        ``spark/`` folder, written with the region's checkpoint permission. The one way both
        :func:`~operators.spark.query.start_fused` and ``hdfs-region run`` make a runner."""
        fs, folder = checkpoint
        log_dir = posixpath.join(folder, SPARK_DIR)
        kwargs["permission"] = settings.checkpoint_permission
        return cls(spark, scan_options, sink_options, fs, log_dir, settings, **kwargs)

    def __init__(
        self,
        spark: SparkSession,
        scan_options: dict[str, str],
        sink_options: dict[str, str],
        log_fs: FileSystem,
        log_dir: str,
        settings: RegionSettings,
        *,
        transform: Transform | None = None,
        frame: FrameTransform | None = None,
        available_now: bool = False,
        on_progress: Callable[[BatchProgress], None] | None = None,
        on_restart: Callable[[int, BaseException], None] | None = None,
        permission: int | None = 0o640,
        driver_batch_bytes: int = DRIVER_BATCH_BYTES,
    ) -> None:
        from pyspark.sql.types import BinaryType, StringType, StructField, StructType

        from operators.spark.options import rows_need_transform, scan_config, sink_config
        from operators.spark.registration import is_connect
        from region.errors import ConfigError

        if frame is not None and is_connect(spark):
            # A SQL transform reads the observed frame through the view ``input``, and a Spark
            # Connect server reports an observation only of a frame in the plan the client sent.
            msg = (
                "fused execution of a DataFrame transform needs a classic SparkSession (over "
                "Spark Connect the batch's input count cannot be observed): run it as a "
                "streaming query"
            )
            raise ValueError(msg)
        self.spark = spark
        self.settings = settings
        #: A batch that reads at most this many bytes runs in the driver (see _job): only on a
        #: local master, whose tasks would run on this machine anyway; on a cluster the
        #: executors do the work, and a Spark Connect client is not where Spark runs.
        local = not is_connect(spark) and (spark.sparkContext.master or "").startswith("local")
        self._driver_batch_bytes = driver_batch_bytes if local and driver_batch_bytes > 0 else -1
        scan = scan_config({**scan_options, **source_options(settings)})
        sink = sink_config(sink_options)
        self.binary = scan.binary
        value = BinaryType() if scan.binary else StringType()
        self.reader = HdfsScanStreamReader(scan)
        self.reader.housekeep_on_commit = False  # behind the sink's open files: housekeep()
        columns = [StructField("value", value)]
        if sink.attribute is not None:
            columns.insert(0, StructField(sink.attribute, StringType()))
        if sink.table is not None and frame is None and scan.rows is None:
            # The tasks read lines or blocks: a DataFrame transform gives the columns.
            msg = (
                f"hdfs_sink format={sink.table.format!r} writes records with columns: read "
                "rows ([source] format = 'csv' or 'jsonl' with a schema) or give a DataFrame "
                "transform ([transform] sql); a fused run without either has only lines"
            )
            raise ConfigError(msg)
        if sink.table is not None and transform is not None and sink.table.schema_ is None:
            msg = (
                f"hdfs_sink format={sink.table.format!r} after a function: the columns it "
                "returns are known only once it runs; give them as the sink's schema "
                "([sink.schema])"
            )
            raise ConfigError(msg)
        # Records with columns: each batch's writer is made with the columns it gets, which
        # are the rows' as read when no transform is between the two halves, and the sink's
        # schema after a function.
        schema = StructType(columns) if sink.table is None else None
        if sink.table is not None and frame is None and transform is None:
            schema = spark.createDataFrame([], scan.schema()).schema
        elif sink.table is not None and transform is not None:
            from operators.spark.tables import spark_columns

            assert sink.table.schema_ is not None
            schema = spark_columns(sink.table.schema_)
        self.writer = HdfsSinkStreamWriter(sink, schema)
        if scan.rows is not None and sink.table is None and transform is None and frame is None:
            raise ConfigError(rows_need_transform(scan.rows.format))
        self.transform = transform
        #: A DataFrame transform between the reading and the writing half of each task.
        self.frame = frame
        if frame is not None:
            self._check_stateless(frame)
        self.log = BatchLog(log_fs, log_dir, permission=permission)
        self.available_now = available_now
        self._on_progress = on_progress
        self._restarts = RestartPolicy(settings, on_restart=on_restart)
        # Plain attributes, polled: set from signal handlers.
        self._stopping = False
        self._now = False
        self._group = f"hdfs-region-{id(self):x}"
        self.progress: list[BatchProgress] = []
        self.attempt = 0
        #: When a batch last wrote records into files left open (monotonic seconds; ``None``:
        #: none open), for the sink's ``close_idle_after``.
        self._written_at: float | None = None
        #: What this runner published: records, bytes and files (its batches' commits and the
        #: sink's idle closes); what waits in files left open after the newest batch, and when
        #: the oldest of them was opened (``time.time()``). Read by metrics scrapes.
        self.published = (0, 0, 0)
        self.unpublished = (0, 0)
        self.unpublished_since: float | None = None

    def _check_stateless(self, frame: FrameTransform) -> None:
        """Refuse a transform that keeps state across batches (ConfigError naming it and the
        plan node): run batch by batch it would aggregate, deduplicate or sort each batch
        alone, where a streaming query carries its state from one batch to the next."""
        from region.errors import ConfigError

        schema = self.reader.config.schema()
        nodes, out = _plan_nodes(self.spark, frame, binary=self.binary, schema=schema)
        columns = list(out.fieldNames())
        name = getattr(frame, "__qualname__", None) or repr(frame)
        if isinstance(frame, functools.partial) and frame.func is _sql_over:
            name = f"[transform] sql {frame.args[1]!r}"
        sink = self.writer.config
        wanted = [sink.column or "value", *([sink.attribute] if sink.attribute else [])]
        if sink.table is not None:
            # Records with columns: the transform's columns are the table's (checked as the
            # writer of each batch checks them: partition columns, the schema's columns).
            HdfsSinkStreamWriter(sink, out)
        elif sorted(columns) != sorted(wanted):
            # The sink would pick one column and drop the rest without a word (a single
            # column of another name was written as the value).
            msg = (
                f"transform {name} returns the columns {', '.join(columns) or '(none)'}; the "
                f"sink writes {' and '.join(wanted)}, each record's "
                + ("value and its file name" if sink.attribute else "value")
                + ": return exactly those (select or alias them, e.g. "
                "df.select(upper('value').alias('value')))"
            )
            raise ConfigError(msg)
        stateful = [node for node in nodes if node not in _STATELESS_NODES]
        if stateful:
            msg = (
                f"transform {name}: its plan keeps state across batches ({stateful[0]}), which "
                "fused execution runs one batch at a time: give a transform of projections, "
                "filters and generators only, or run it as a streaming query (hdfs_scan -> "
                "hdfs_sink)"
            )
            raise ConfigError(msg)
        if not {"MapInArrow", "PythonMapInArrow"} & set(nodes):
            # Nothing would read the batch (nor count it): its records would be skipped.
            msg = (
                f"transform {name}: its plan does not read its input (Spark's optimizer "
                "removed it, e.g. for a filter that is always false), so every batch would "
                "be lost uncounted: give a transform of its input DataFrame"
            )
            raise ConfigError(msg)

    # -- control --------------------------------------------------------------------------

    def stop(self, *, immediate: bool = False) -> None:
        """Stop after the running batch, or at once (its job is cancelled; the next start runs
        the batch again). Callable from any thread and from signal handlers."""
        self._now = self._now or immediate
        self._stopping = True

    def run(self) -> None:
        """Run until stopped, done (available_now), or failed as the restart rule says
        (:class:`region.errors.RegionFailedError`)."""
        while not self._stopping:
            self.attempt += 1
            try:
                self._run_batches()
                return
            except _Cancelled:
                return
            except Exception as error:
                self._pause(self._restarts.failed(error, "the pipeline's Spark job"))

    # -- batches --------------------------------------------------------------------------

    def _run_batches(self) -> None:
        if self.available_now:
            self.reader.prepareForTriggerAvailableNow()
        limit = self.reader.getDefaultReadLimit()
        # 0. Recovery: a batch with an offset and no commit runs again over the same plan.
        newest, committed = self.log.newest()
        if newest is not None and newest != committed:
            start = self._offset_before(newest)
            self._run_batch(newest, start, self.log.offset(newest))
        elif committed is not None:
            self.housekeep()  # a crash may have come between a commit and its after_read
        next_tick = self._written_at = time.monotonic()  # a restart may carry open files
        while not self._stopping:
            newest, _ = self.log.newest()
            start = self.log.offset(newest) if newest is not None else self.reader.initialOffset()
            batch_id = 0 if newest is None else newest + 1
            # 1. Plan.
            end = self.reader.latestOffset(start, limit)
            if end == start:
                if self.available_now:
                    return
                self._close_if_idle()
                next_tick = self._wait_for_trigger(next_tick)
                continue
            # 2. Write ahead.
            self.log.write_offset(batch_id, end, self._spark_conf())
            self._run_batch(batch_id, start, end)
            if self.settings.trigger == Trigger.PERIODIC and not self.available_now:
                next_tick = self._wait_for_trigger(next_tick)

    def _offset_before(self, batch_id: int) -> dict[str, Any]:
        if batch_id == 0:
            return self.reader.initialOffset()
        try:
            return self.log.offset(batch_id - 1)
        except FileNotFoundError:
            shown = self.log.fs.display(self.log.directory)
            msg = (
                f"{shown}: batch {batch_id} has to run again, but the offset of batch "
                f"{batch_id - 1} it starts from is gone"
            )
            raise FileNotFoundError(msg) from None

    def _run_batch(self, batch_id: int, start: dict[str, Any], end: dict[str, Any]) -> None:
        started = time.monotonic()
        # Only exactly_once numbers the sink log's entries by batch id: at_least_once gives a
        # re-run batch a fresh one, so there a newer entry says nothing about this batch.
        published = self.writer._log().recover()["batch_id"]
        records_in = 0
        if self.writer.config.exactly_once and published is not None and published >= batch_id:
            # Published before a crash took the commit record: 4. would change nothing.
            logger.info("batch %s was already published; recording it", batch_id)
            files: list[WrittenFile] = []
            open_files: list[WrittenFile] = []
            rejects: list[WrittenFile] = []
        else:
            # 3. Run the job.
            files, open_files, records_in = self._job(batch_id, start, end)
            rejects = self._rejects(batch_id)
        ran = time.monotonic()
        if not open_files:
            self._written_at = None
        elif records_in:
            self._written_at = time.monotonic()
        # 4. Commit through the sink log.
        self.writer.last_commit = None
        self.writer.commit([SinkTaskMessage(0, 0, files, open_files, rejects)], batch_id)
        commit = self.writer.last_commit
        self._count(commit)
        if self.writer.config.rejects is not None:
            # Those of tasks that failed, or of a run of the batch a crash cut short.
            delete_leftovers(self.writer.fs, self.writer.config.rejects)
        self.unpublished = (sum(f.rows for f in open_files), sum(f.size for f in open_files))
        self.unpublished_since = min(f.opened_ns for f in open_files) / 1e9 if open_files else None
        # 5. Record.
        self.log.write_commit(batch_id)
        # 6. after_read: the input behind every published record leaves the landing directory.
        self.housekeep()
        self.reader.commit(end)
        self._restarts.succeeded()
        progress = BatchProgress(
            batch_id=batch_id,
            num_input_rows=records_in,
            duration_ms=round((time.monotonic() - started) * 1000),
            timestamp=datetime.now(UTC).isoformat(timespec="milliseconds"),
            attempt=self.attempt,
            passed_over=end.get("passed_over"),
            modified=end.get("modified"),
            job_ms=round((ran - started) * 1000),
            commit_ms=round((time.monotonic() - ran) * 1000),
            records_out=commit.rows if commit is not None else None,
            bytes_out=commit.size if commit is not None else None,
            files_out=len(commit.published) if commit is not None else None,
            records_rejected=commit.rejected if commit is not None else 0,
        )
        self.progress.append(progress)
        logger.info(
            "batch %s: %s records in %s ms (job %s ms, commit %s ms)",
            batch_id,
            records_in,
            progress.duration_ms,
            progress.job_ms,
            progress.commit_ms,
        )
        if self._on_progress is not None:
            self._on_progress(progress)

    def _close_if_idle(self) -> None:
        """Publish the files the sink keeps open across batches once no batch wrote to them for
        ``close_idle_after`` (between batches: no task continues them meanwhile), so that
        records read are published within a bounded time when the input pauses."""
        idle = self.writer.config.rolling.idle
        written = self._written_at
        if idle is None or written is None or time.monotonic() - written < idle:
            return
        self._written_at = None
        result = self.writer._log().close_open()
        self._count(result)
        self.unpublished, self.unpublished_since = (0, 0), None
        published = list(result.published) if result is not None else []
        if published:
            logger.info(
                "published %s files no record reached for %.0f s (close_idle_after): %s",
                len(published),
                idle,
                ", ".join(published[:5]) + (" ..." if len(published) > 5 else ""),
            )
            self.housekeep()  # the input behind them may leave now

    def _rejects(self, batch_id: int) -> list[WrittenFile]:
        """The rejects files the tasks of ``batch_id`` wrote (none without a rejects file)."""
        template = self.writer.config.rejects
        if template is None:
            return []
        return batch_rejects(self.writer.fs, template, batch_id)

    def _count(self, commit: CommitResult | None) -> None:
        if commit is not None:
            rows, size, files = self.published
            self.published = (rows + commit.rows, size + commit.size, files + len(commit.published))

    def housekeep(self) -> None:
        """``[scan] after_read`` for the batches whose records are all published (a file the
        sink keeps open across batches holds back the input behind it)."""
        if self.reader.config.after_read == "keep":
            return
        through = self.writer._log().published_through()
        if through is not None:
            self.reader.housekeep(int(self.log.offset(through)["seq"]))

    def _job(
        self, batch_id: int, start: dict[str, Any], end: dict[str, Any]
    ) -> tuple[list[WrittenFile], list[WrittenFile], int]:
        """``(files written, files left open, records read)`` of batch ``batch_id``."""
        parts = self.reader.partitions(start, end)
        if not parts:
            return [], [], 0
        plan = tuple(
            tuple((str(a), int(b), int(c), int(d), e) for a, b, c, d, e in p.ranges)
            for p in parts
            if isinstance(p, ScanPartition)
        )
        task = _Task(self.reader, self.writer, self.transform, self.binary, plan, batch_id)
        planned = sum(r[2] - r[1] for ranges in plan for r in ranges)
        if self.frame is None and self.transform is None and planned <= self._driver_batch_bytes:
            # A small batch on a local master: its tasks' work runs here, in the driver's
            # Python, with the same code and the same names and manifests. As a Spark job it
            # would cost more than its records: a Python worker's start and imports, the
            # tasks' scheduling (a run from cron over a few small files, a trickle). Not with a
            # user's function, which may take any time: only a Spark job can be cancelled.
            logger.debug("batch %s: %s bytes planned, run in the driver", batch_id, planned)
            entries = [
                entry
                for manifest in _partition_tasks(task, list(range(len(plan))))
                for entry in manifest.column(0).to_pylist()
            ]
            return _written([json.loads(entry) for entry in entries])
        ids = self.spark.range(0, len(plan), 1, len(plan))
        observed = None
        if self.frame is None:
            frame = ids.mapInArrow(functools.partial(_run_tasks, task), _MANIFEST)
        else:
            from pyspark.sql import Observation
            from pyspark.sql.functions import count, lit

            # One stage: read (Python), the transform (Spark), write (Python), task by task.
            observed = Observation(_OBSERVED)
            source = ids.mapInArrow(
                functools.partial(_read_tasks, task), self.reader.config.schema()
            ).observe(observed, count(lit(1)).alias("records"))
            out = self.frame(source)
            writer = HdfsSinkStreamWriter(self.writer.config, out.schema)
            frame = out.mapInArrow(functools.partial(_write_tasks, writer, batch_id), _MANIFEST)
        rows = [json.loads(row.entry) for row in self._collect(frame)]
        files, open_files, records_in = _written(rows)
        if observed is not None:
            return files, open_files, int(observed.get["records"])
        return files, open_files, records_in

    def _collect(self, frame: Any) -> list[Any]:
        """``frame.collect()`` in a thread of its own, so an immediate stop can cancel it. A
        classic session cancels its job group with the tasks' threads interrupted: Spark then
        kills a Python worker still inside a user's function (``spark.python.task.killTimeout``
        after the interrupt, 2 s by default), where a cancel without interrupt waited for the
        function to return (a UDF of a minute per record held the stop for minutes). Spark
        Connect, which has no ``sparkContext``, cancels by an operation tag."""
        from operators.spark.registration import is_connect

        result: list[Any] = []
        failure: list[BaseException] = []
        connect = is_connect(self.spark)

        def run() -> None:
            try:
                if connect:
                    self.spark.addTag(self._group)  # this thread's operations only
                else:  # this thread's jobs only (a local property of its JVM thread)
                    self.spark.sparkContext.setJobGroup(
                        self._group, "hdfs-region batch", interruptOnCancel=True
                    )
                result.extend(frame.collect())
            except BaseException as exc:
                failure.append(exc)

        thread = threading.Thread(target=run, name="hdfs-region-job", daemon=True)
        thread.start()
        while thread.is_alive():
            thread.join(0.1)
            if self._now:
                if connect:
                    self.spark.interruptTag(self._group)
                else:
                    self.spark.sparkContext.cancelJobGroup(self._group)
                thread.join()
                raise _Cancelled
        if failure:
            raise failure[0]
        return result

    def _spark_conf(self) -> dict[str, str]:
        conf: dict[str, str] = {}
        for key in SPARK_CONFS:
            value = self.spark.conf.get(key, None)
            if value is not None:
                conf[key] = value
        return conf

    def _wait_for_trigger(self, tick: float) -> float:
        """Sleep to the next trigger time (``period`` apart; ``_IDLE_POLL`` when idle and
        operator-driven); return the one after."""
        step = self.settings.period if self.settings.trigger == Trigger.PERIODIC else _IDLE_POLL
        tick = max(tick + step, time.monotonic())
        self._pause(tick - time.monotonic())
        return tick

    def _pause(self, seconds: float) -> None:
        deadline = time.monotonic() + seconds
        while not self._stopping and (left := deadline - time.monotonic()) > 0:
            time.sleep(min(left, 0.05))


class _Cancelled(Exception):
    """An immediate stop cancelled the running job."""
