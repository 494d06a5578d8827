"""The Spark engine's run loop: the same pipeline as a Structured Streaming query or as fused
batches (local mode by default), until stopped or, ``--available-now``, until the input is done.

``hdfs_scan`` (scan + file source) -> optional transform (SQL over the view ``input``, or a
per-record Python function as a UDF) -> ``hdfs_sink``. Spark's own checkpoint (offsets and
commits) lives in ``<checkpoint_dir>/spark``; the scan's batch plans in ``<checkpoint_dir>/plans``
when the checkpoint directory is on the scanned filesystem. The region settings map to Spark:
``periodic`` -> a processing-time trigger of ``period``; ``operator_driven`` -> batches end at
file boundaries; ``--available-now`` -> ``Trigger.AvailableNow``. What runs is planned in
:mod:`operators.app.spark_plan` (no JVM), the session started in :mod:`operators.app.spark_session`.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import os
import posixpath
import time
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from operators.app.config import PipelineConfig
from operators.app.console import LOG_CONTEXT
from operators.app.engines import (
    JobOutput,
    check_after_read,
    check_single_file,
    claim_checkpoint_dir,
    load_function,
    warn_files_left,
)
from operators.app.metrics import Histogram, JobView, period_of
from operators.app.progress import Progress, ProgressDisplay
from operators.app.spark_plan import (
    SECRET_ENV,
    SparkPlan,
    check_jvm_environment,
    check_streaming_on_yarn,
    fused,
    plan_spark,
)
from operators.app.spark_session import check_jvm_user, check_remote, hand_token, start_session
from operators.common.columns import Columns, OverColumns
from operators.fs import open_path
from operators.spark.batchlog import SPARK_DIR
from region.errors import ConfigError, LockLostError
from region.lock import CheckpointLock
from region.signals import StopSignals

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.streaming.readwriter import DataStreamWriter

    from operators.fs.tokens import DelegationToken
    from operators.spark.fused import FusedRunner
    from operators.spark.supervisor import BatchProgress, SparkSupervisor
    from region.fs import FileSystem

__all__ = ["run_spark"]

logger = logging.getLogger(__name__)


def _transformed(spark: SparkSession, frame: DataFrame, config: PipelineConfig) -> DataFrame:
    transform = config.transform
    if transform is None:
        return frame
    if transform.sql is not None:
        from operators.spark.fused import sql_frame

        return sql_frame(spark, frame, transform.sql)
    assert transform.function is not None
    from pyspark.sql.functions import col, udf

    func = _function(config)
    binary = config.source.format == "binary"
    sink_schema = config.sink.schema_ if config.sink.format not in ("line", "binary") else None
    if isinstance(func, OverColumns):
        # vectorized: each Arrow batch of the rows through the function, as on the local
        # engine; its columns are written as the sink's schema says (spark_plan checks it).
        from operators.spark.tables import arrow_columns, spark_columns

        assert sink_schema is not None
        columns = spark_columns(sink_schema)
        target = arrow_columns(columns)
        batches = functools.partial(_over_batches, func, target)
        return frame.mapInArrow(batches, columns)
    if config.source.schema_ is not None:
        # Records with columns: the function gets each as a dict, as on the local engine.
        from pyspark.sql.functions import struct

        # (A lambda: pyspark reads a function's type hints to choose a pandas UDF.)
        records = struct(*[col(f"`{name}`") for name in config.source.schema_])
        if sink_schema is not None:  # it returns a mapping of the sink's columns
            from operators.spark.tables import spark_columns

            mapped = udf(lambda row: func(row.asDict()), spark_columns(sink_schema))
            out = frame.select(mapped(records).alias("out")).where(col("out").isNotNull())
            return out.select("out.*")
        apply = udf(lambda row: func(row.asDict()), "string")
        return frame.select(apply(records).alias("value")).where(col("value").isNotNull())
    apply = udf(func, "binary" if binary else "string")
    return frame.select(apply(col("value")).alias("value")).where(col("value").isNotNull())


def _function(config: PipelineConfig) -> Callable[..., Any]:
    """The ``[transform] function``, over a batch's columns when it is ``vectorized``."""
    transform = config.transform
    assert transform is not None and transform.function is not None
    function = load_function(transform.function, config.folder)
    if transform.vectorized:
        return OverColumns(function, f"[transform] function {transform.function!r}")
    return function


def _over_batches(
    function: OverColumns, target: pa.Schema, batches: Iterator[pa.RecordBatch]
) -> Iterator[pa.RecordBatch]:
    """A streaming query's ``mapInArrow`` of a vectorized function: its output as the columns
    the query declared, by the sink's rule (a value that does not fit fails the batch, naming
    its column and value)."""
    import pyarrow as pa

    from operators.common.schema import cast

    for batch in batches:
        out = function(Columns(batch)).table
        extra = [n for n in out.schema.names if n not in target.names]
        if extra:
            msg = (
                f"{function!r} returned column {extra[0]!r}, which is not in the sink's schema "
                f"(columns: {', '.join(target.names)})"
            )
            raise ValueError(msg)
        columns = [
            cast(out.column(f.name).combine_chunks(), f)
            if f.name in out.schema.names
            else pa.nulls(out.num_rows, f.type)  # as a record without the key: a null
            for f in target
        ]
        yield pa.RecordBatch.from_arrays(columns, schema=target)


class _Stop:
    """Stop requests that may come before the supervisor exists (a signal while the session
    starts, the lock lost): remembered, then passed on. Plain attributes, as signal handlers
    call it. (PySpark starts the JVM ignoring SIGINT, so Ctrl-C reaches only this process.)"""

    def __init__(self) -> None:
        self.target: SparkSupervisor | FusedRunner | None = None
        self.requested = False
        self.now = False

    def request(self, *, immediate: bool = False) -> None:
        self.requested = True
        self.now = self.now or immediate
        if self.target is not None:
            self.target.stop(immediate=self.now)

    def attach(self, target: SparkSupervisor | FusedRunner) -> None:
        self.target = target
        if self.requested:
            target.stop(immediate=self.now)


class _Totals:
    """Progress of the query, fed by the supervisor's per-batch callback."""

    def __init__(self, has_transform: bool) -> None:
        self.started = time.monotonic()
        self.records = 0
        self.batches = 0
        self.restarts = 0
        self.last_batch: int | None = None
        self.status = "starting"
        self.has_transform = has_transform
        self.passed_over = 0
        self.modified = 0
        self.replayed = 0
        #: The query stopped at once: the batch in flight (if any) was not committed.
        self.stopped_now = False
        #: Published by the batches (fused execution says; ``None`` until a batch does).
        self.records_out: int | None = None
        self.bytes_out: int | None = None
        self.files_out: int | None = None
        #: Rows the source could not read that commits published to the rejects file.
        self.rejected = 0
        self.consecutive_restarts = 0
        self.last_batch_at: float | None = None
        self.status_since = time.time()
        self.batch_seconds = Histogram.empty()
        self.job_seconds = Histogram.empty()
        self.commit_seconds = Histogram.empty()

    def on_batch(self, batch: BatchProgress) -> None:
        # Histograms are values replaced whole: a scrape on another thread sees one or the other.
        self.batch_seconds = self.batch_seconds.observe(batch.duration_ms / 1000)
        if batch.job_ms is not None:
            self.job_seconds = self.job_seconds.observe(batch.job_ms / 1000)
        if batch.commit_ms is not None:
            self.commit_seconds = self.commit_seconds.observe(batch.commit_ms / 1000)
        self.last_batch_at = time.time()
        self.consecutive_restarts = 0
        if self.status != "processing":
            self.status_since = time.time()
        if self.last_batch is not None and batch.batch_id <= self.last_batch:
            # A batch run again after a restart (its commit was not recorded): counted once.
            self.replayed += batch.num_input_rows
        else:
            self.records += batch.num_input_rows
        # What a batch published is published once, whichever attempt's commit did it.
        if batch.records_out is not None:
            self.records_out = (self.records_out or 0) + batch.records_out
        if batch.bytes_out is not None:
            self.bytes_out = (self.bytes_out or 0) + batch.bytes_out
        if batch.files_out is not None:
            self.files_out = (self.files_out or 0) + batch.files_out
        self.rejected += batch.records_rejected
        if batch.passed_over is not None:
            self.passed_over = batch.passed_over
        if batch.modified is not None:
            self.modified = batch.modified
        self.batches += 1
        self.last_batch = max(batch.batch_id, self.last_batch or 0)
        self.status = "processing"

    def on_restart(self, attempt: int, error: BaseException) -> None:
        self.restarts += 1
        self.consecutive_restarts += 1
        if self.status != "restarting":
            self.status_since = time.time()
        self.status = "restarting"

    def view(
        self,
        runner: SparkSupervisor | FusedRunner | None,
        lock: CheckpointLock,
        config: PipelineConfig,
    ) -> JobView:
        """What a metrics scrape reports: the driver's view of the job (reads only)."""
        from operators.spark.fused import FusedRunner

        # Fused execution plans on this process; a streaming query plans in a Python worker
        # of the JVM, out of reach: no lag then (not a lag of 0).
        waiting = list(runner.reader.waiting) if isinstance(runner, FusedRunner) else None
        now = time.time()
        stuck = None
        stuck_after = config.metrics.bound(config.region)
        # A restarted query stays "restarting" until its next batch; in fused execution a plan
        # that found nothing waiting says it runs again and is idle, not stuck.
        idle = waiting is not None and not waiting
        if self.status == "restarting" and not idle and now - self.status_since > stuck_after:
            stuck = f"restarting for {now - self.status_since:.0f} s (bound {stuck_after:g} s)"
        # A batch in progress is never judged stuck: nothing bounds its length (a backlog
        # read in one batch may rightly take long), and a restart would run it again.
        # Fused execution knows what its batches wrote, published and left waiting in open
        # files; of a streaming query only what its commits published.
        out: dict[str, Any] = {"records_out": self.records_out, "bytes_out": self.bytes_out}
        progress = self.progress()
        if isinstance(runner, FusedRunner):
            (rows, size, files), (open_rows, open_size) = runner.published, runner.unpublished
            progress = dataclasses.replace(progress, files_out=files)
            out = {
                "records_out": rows + open_rows,
                "bytes_out": size + open_size,
                "records_published": rows,
                "bytes_published": size,
                "records_unpublished": open_rows,
                "unpublished_since": runner.unpublished_since,
            }
        return JobView(
            progress=progress,
            waiting=waiting,
            **out,
            consecutive_resets=self.consecutive_restarts,
            period_seconds=period_of(config.region),
            cut_seconds=self.batch_seconds,
            last_cut_at=self.last_batch_at,
            lock_renewed_at=lock.renewed_at,
            job_seconds=self.job_seconds,
            commit_seconds=self.commit_seconds,
            ready=self.status == "processing" or (self.status == "starting" and runner is not None),
            stuck=stuck,
        )

    def progress(self) -> Progress:
        return Progress(
            status=self.status,
            files_in=None,
            files_out=self.files_out,
            files_passed_over=self.passed_over,
            files_modified=self.modified,
            records_in=self.records,
            records_out=None if self.has_transform else self.records,
            records_rejected=self.rejected,
            records_replayed=self.replayed,
            records_unpublished=None if self.stopped_now else 0,
            final_cut=not self.stopped_now,
            bytes_in=None,
            cuts=self.batches,
            resets=self.restarts,
            last_cut_id=self.last_batch,
            elapsed=time.monotonic() - self.started,
        )


def run_spark(
    config: PipelineConfig,
    *,
    available_now: bool = False,
    display: ProgressDisplay | None = None,
) -> Progress:
    """Run the pipeline as a Spark streaming query until stopped (or, with ``available_now``,
    until everything present is processed); return the final progress.

    1. Check the settings for Spark and find Java (ConfigError, before anything is written).
    2. Lock the checkpoint directory and check (or stamp) its pipeline identity.
    3. Start the session and run the query under the supervisor, which restarts it from its
       checkpoint after a failure, up to ``max_consecutive_reset_attempts`` in a row.
    """
    plan = plan_spark(config)
    from operators.spark import check_pyspark
    from operators.spark.session import find_java

    check_pyspark()  # ImportError naming the version, before anything is written

    remote = config.spark.remote
    if remote is None:
        try:
            find_java()
        except ConfigError as exc:
            raise ConfigError(f"{exc}; or run without Spark: --engine local") from None
        check_jvm_environment(plan.jvm_env)
    else:
        check_remote(plan, remote)
    scan_fs, scan_dir = open_path(config.scan_directory, config.filesystem)
    check_single_file(scan_fs, scan_dir, config.single_name)
    cp_fs, cp_dir = open_path(config.region.checkpoint_dir, config.filesystem)
    region = config.region
    stopper = _Stop()
    lock = CheckpointLock(
        cp_fs,
        cp_dir,
        ttl=region.lock_ttl,
        permission=region.checkpoint_permission,
        # Another process may own the directory: no batch may commit after this. Spark's
        # tasks cannot be paused while the lock is unsafe (not renewed for half its ttl), so
        # the query stops then too; the next run resumes from its checkpoint.
        on_lost=lambda reason: stopper.request(immediate=True),
        on_unsafe=lambda reason: stopper.request(immediate=True),
    )
    totals = _Totals(config.transform is not None)
    runner: list[SparkSupervisor | FusedRunner] = []
    metrics = None
    if config.metrics.port is not None:
        # Before the lock: a port already taken is a configuration error, nothing has started.
        from operators.app.metrics_server import MetricsServer  # only when metrics are served

        metrics = MetricsServer(
            lambda: totals.view(runner[0] if runner else None, lock, config),
            port=config.metrics.port,
            host=config.metrics.host,
            labels={"pipeline": config.pipeline_id(), "engine": "spark"},
        ).start()
    LOG_CONTEXT["cut"] = lambda: totals.last_batch
    try:
        lock.acquire()
    except BaseException:
        if metrics is not None:
            metrics.stop()
        raise
    tokens: DelegationToken | None = None
    try:
        job_id = claim_checkpoint_dir(
            cp_fs,
            cp_dir,
            pipeline_id=config.pipeline_id(),
            engine="spark",
            permission=region.checkpoint_permission,
            foreign_engine_files=lambda: any(
                s.name.startswith("cut-") for s in cp_fs.list_dir(cp_dir)
            ),
            own_engine_files=lambda: cp_fs.exists(posixpath.join(cp_dir, SPARK_DIR, "offsets")),
            details={**config.identity_paths(), "sink_log": plan.sink_log},
            output=JobOutput(*open_path(plan.output_dir, config.filesystem), plan.spark_checkpoint),
        )
        if config.scan.archive_dir is not None:
            archive_fs, archive_dir = open_path(config.scan.archive_dir, config.filesystem)
            watched_fs, watched = open_path(config.scan_directory, config.filesystem)
            same_fs = watched_fs.display("/") == archive_fs.display("/")
            check_after_read(
                archive_fs, config.scan.after_read, archive_dir, watched if same_fs else None
            )
        # The sink log tells this job's batches from another's by its id (operators.sink.owner).
        plan.sink_options.update(job_id=job_id, checkpointLocation=plan.spark_checkpoint)
        logger.info(
            "Pipeline %s: %s -> %s, checkpoints in %s (spark engine, %s trigger)",
            config.pipeline_id(),
            config.display(config.scan_directory),
            config.display(config.sink.template or plan.output_dir),
            config.display(config.region.checkpoint_dir),
            region.trigger.value,
        )
        if plan.delegates:
            from operators.fs.tokens import DelegationToken

            tokens = DelegationToken(config.filesystem)
            plan.secret_env[SECRET_ENV["token"]] = tokens.token
            # A replaced token reaches this process's tasks (by reference) before they run,
            # and the session's environment when it starts.
            tokens.on_new = functools.partial(hand_token, None, plan.secret_env)
        if plan.secret_env:
            # Inherited by the JVM and its Python workers (local mode); executors of a cluster
            # get them through the session's environment (see start_session and SECRET_ENV).
            os.environ.update(plan.secret_env)
        if remote is None:
            # Before the JVM starts: it inherits them (see spark_plan._jvm_environment).
            os.environ.update(plan.jvm_env)
        signals = StopSignals(stopper.request, lambda: stopper.request(immediate=True))
        with signals.installed():
            spark = start_session(config, plan.secret_env)
            if tokens is not None:
                tokens.on_new = functools.partial(hand_token, spark, plan.secret_env)
                hand_token(spark, plan.secret_env, tokens.token)  # one replaced meanwhile
            check_jvm_user(spark, plan.jvm_env.get("HADOOP_USER_NAME"))
            # The session's conf holds the SparkConf too (classic and Spark Connect alike).
            if str(spark.conf.get("spark.speculation", "false")).lower() == "true":
                # Files span batches: two attempts of one task would append to one file.
                msg = (
                    "[spark] conf: spark.speculation = true is not supported: the sink's files "
                    "span micro-batches, and a speculative attempt would write into the file "
                    "its twin is writing"
                )
                raise ConfigError(msg)
            restarting = functools.partial(_restarting, totals, tokens)
            supervisor = _runner(spark, plan, available_now, totals, (cp_fs, cp_dir), restarting)
            runner.append(supervisor)
            stopper.attach(supervisor)
            if display is not None:
                display.start(totals.progress)
            try:
                supervisor.run()
                totals.stopped_now = stopper.now  # before a late signal could change it
                if not stopper.now:
                    from operators.spark.fused import FusedRunner
                    from operators.spark.sink import close_open_files

                    # Files a limit kept open across batches: no batch continues them now.
                    if close_open_files(plan.sink_options) and isinstance(supervisor, FusedRunner):
                        supervisor.housekeep()  # the input behind them may leave now
                if available_now:
                    warn_files_left(
                        scan_fs,
                        config.scan,
                        scan_dir,
                        config.single_name,
                        read_any=totals.batches > 0,
                    )
            finally:
                totals.status = "stopped"
                final = totals.progress()
                if display is not None:
                    display.finish(final)
        if lock.lost is not None:
            raise LockLostError(lock.lost)
        return final
    finally:
        if tokens is not None:
            tokens.close()
        lock.release()
        if metrics is not None:
            metrics.stop()


def _restarting(
    totals: _Totals, tokens: DelegationToken | None, attempt: int, error: BaseException
) -> None:
    """Before a failed batch or query runs again: count it, and give the tasks a new
    delegation token (the failure may be the token's: expired or cancelled)."""
    totals.on_restart(attempt, error)
    if tokens is None:
        return
    try:
        tokens.refresh()
    except OSError as err:  # the retry fails the same way and says so
        logger.error("no new delegation token before the restart: %s", err)


def _runner(
    spark: SparkSession,
    plan: SparkPlan,
    available_now: bool,
    totals: _Totals,
    checkpoint: tuple[FileSystem, str],
    on_restart: Callable[[int, BaseException], None],
) -> SparkSupervisor | FusedRunner:
    config = plan.config
    transform = config.transform
    sql = transform.sql if transform is not None else None
    if fused(config) and sql is not None:
        from operators.spark.fused import stateful_part
        from operators.spark.registration import is_connect

        if is_connect(spark):
            reason: str | None = (
                "over Spark Connect the input count of a fused batch is not observable"
            )
        else:
            node = stateful_part(
                spark,
                sql,
                binary=config.source.format == "binary",
                schema=_input_schema(config),
            )
            reason = None if node is None else f"it keeps state across batches ({node})"
        if reason is not None:
            check_streaming_on_yarn(config, f"[transform] sql: {reason}, a streaming query")
            logger.info("[transform] sql: %s: it runs as a streaming query", reason)
            from operators.spark import register

            register(spark)
            return _streaming(spark, plan, available_now, totals, checkpoint, on_restart)
    if not fused(config):
        return _streaming(spark, plan, available_now, totals, checkpoint, on_restart)
    from operators.spark.fused import FusedRunner, sql_transform

    function = None
    if transform is not None and transform.function is not None:
        function = _function(config)
    return FusedRunner.on_checkpoint(
        spark,
        plan.source_options,
        plan.sink_options,
        checkpoint,
        config.region,
        transform=function,
        frame=None if sql is None else sql_transform(spark, sql),
        available_now=available_now,
        on_progress=totals.on_batch,
        on_restart=on_restart,
        driver_batch_bytes=config.spark.driver_batch_bytes,
    )


def _input_schema(config: PipelineConfig) -> str | None:
    """The columns ``hdfs_scan`` gives a transform (``None``: ``value`` alone)."""
    if config.source.schema_ is None:
        return None
    from operators.spark.config import spark_columns

    return spark_columns(config.source.schema_)


def _streaming(
    spark: SparkSession,
    plan: SparkPlan,
    available_now: bool,
    totals: _Totals,
    checkpoint: tuple[FileSystem, str],
    on_restart: Callable[[int, BaseException], None],
) -> SparkSupervisor:
    """A streaming query on the checkpoint, once the batch log's newest entries are closed: a
    fused run before, killed, may have left them open, which Spark's client cannot read after
    a DataNode restart (:meth:`~operators.spark.batchlog.BatchLog.seal`; the lock is held)."""
    from operators.spark.batchlog import BatchLog

    cp_fs, cp_dir = checkpoint
    BatchLog(cp_fs, posixpath.join(cp_dir, SPARK_DIR)).seal()
    return _supervisor(spark, plan, available_now, totals, on_restart)


def _supervisor(
    spark: SparkSession,
    plan: SparkPlan,
    available_now: bool,
    totals: _Totals,
    on_restart: Callable[[int, BaseException], None],
) -> SparkSupervisor:
    from operators.spark.supervisor import SparkSupervisor

    config = plan.config

    def build(region_options: dict[str, str]) -> DataStreamWriter:
        reader = spark.readStream.format("hdfs_scan").options(
            **{**plan.source_options, **region_options}
        )
        frame = _transformed(spark, reader.load(), config)
        return (
            frame.writeStream.format("hdfs_sink")
            .options(**plan.sink_options)
            .option("checkpointLocation", plan.spark_checkpoint)
            .queryName(plan.query_name)
        )

    return SparkSupervisor(
        build,
        config.region,
        available_now=available_now,
        on_progress=totals.on_batch,
        on_restart=on_restart,
    )
