"""The in-process engine: scan -> source -> transform -> sink in one consistent region, no JVM.

Wiring (see :func:`run_local`):

1. open the filesystems of the scanned directory, the sink and the checkpoint directory;
2. build the operators. The source owns the scan (file-name-input mode: the scan's state is
   nested in the source's), so only the source and the sink are region operators;
3. lock the checkpoint directory for the whole run (a second process fails, naming the holder)
   and claim it for this pipeline and engine (see :mod:`operators.app.engines`);
4. run the region on this thread, recovering from the newest cut of *this* pipeline (a
   checkpoint stamped with another pipeline identity is refused);
5. on a graceful stop (SIGINT, SIGTERM, or the end of an ``available_now`` run) the runtime
   tells the sink to finish before the final cut, so everything read is published before the
   process exits.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass

from operators.app.config import PipelineConfig
from operators.app.console import LOG_CONTEXT
from operators.app.engines import (
    JobOutput,
    check_after_read,
    check_single_file,
    claim_checkpoint_dir,
    load_function,
    read_identity,
    warn_files_left,
)
from operators.app.metrics import Histogram, JobView, health, period_of
from operators.app.progress import Progress, ProgressDisplay
from operators.app.switch import check_pending_switch, control_path
from operators.common.columns import OverColumns
from operators.common.plugins import load_callable
from operators.fs import FileSystemSettings, open_path
from operators.scan import HDFS2DirectoryScan
from operators.scan.control import ControlFile
from operators.sink import HDFS2FileSink
from operators.source import HDFS2FileSource
from region.checkpoint import CheckpointStore
from region.controller import CUT_SECONDS_BUCKETS
from region.errors import ConfigError, LockLostError
from region.fs import FileSystem
from region.lock import CheckpointLock
from region.runtime import Pipeline, PipelineRunner, PipelineStats

__all__ = ["LocalRun", "build_local", "run_local"]

logger = logging.getLogger(__name__)

#: Records per batch of rows with columns (see run_local).
COLUMNS_BATCH = 16384
#: Lines per batch when they go to the sink as blocks of bytes: enough for a read chunk's
#: complete lines (4 MiB of lines of 64 bytes), so that a chunk is one block, one write.
BLOCK_BATCH = 1 << 16


@dataclass
class LocalRun:
    """A built, not yet started, local pipeline."""

    config: PipelineConfig
    scan: HDFS2DirectoryScan
    source: HDFS2FileSource
    sink: HDFS2FileSink
    store: CheckpointStore
    lock: CheckpointLock
    runner: PipelineRunner
    checkpoint_fs: FileSystem
    checkpoint_dir: str

    def progress(self) -> Progress:
        return progress_of(self.runner.stats(), self.scan, self.sink)

    def view(self) -> JobView:
        """What a metrics scrape reports (reads only: counters and snapshots)."""
        stats = self.runner.stats()
        region = stats.region
        waiting = list(self.scan.waiting())
        reading = self.source.reading()
        if reading is not None:
            waiting.append(reading)
        scan = self.scan.metrics()
        now = time.time()
        status = region.status.value
        return JobView(
            progress=progress_of(stats, self.scan, self.sink),
            waiting=waiting,
            files_listed=self.scan.files_scanned,
            files_archived=scan["files_archived"],
            files_deleted=scan["files_deleted"],
            bytes_out=self.sink.metrics.bytes_written,
            records_published=self.sink.metrics.tuples_published,
            bytes_published=self.sink.metrics.bytes_published,
            records_unpublished=self.sink.records_unpublished,
            unpublished_since=self.sink.unpublished_since,
            consecutive_resets=region.consecutive_resets,
            period_seconds=period_of(self.config.region),
            cut_seconds=Histogram(
                CUT_SECONDS_BUCKETS,
                region.cut_seconds_buckets or (0,) * len(CUT_SECONDS_BUCKETS),
                region.cut_seconds_sum,
            ),
            last_cut_at=region.last_cut_at,
            checkpoint_bytes=self.store.last_size,
            lock_renewed_at=self.lock.renewed_at,
            ready=region.started and status in ("processing", "draining", "checkpointing"),
            stuck=health(
                status,
                region.status_since,
                region.last_cut_at,
                now,
                self.config.metrics.bound(self.config.region),
            ),
        )


def progress_of(stats: PipelineStats, scan: HDFS2DirectoryScan, sink: HDFS2FileSink) -> Progress:
    region = stats.region
    bad = sink.metrics
    return Progress(
        status=region.status.value,
        files_in=scan.files_emitted,
        files_out=sink.files_published,
        files_passed_over=scan.passed_over,
        files_modified=scan.modified,
        records_in=stats.records_in - stats.replayed_in,
        # Records the sink routed to its rejects (or skipped) are not output.
        records_out=max(0, stats.records_out - stats.replayed_out - bad.records_not_written),
        records_rejected=bad.records_rejected,
        records_skipped=bad.bad_records - bad.records_rejected,
        records_replayed=stats.replayed_in,
        records_unpublished=sink.records_unpublished,
        records_after_cut=stats.uncovered_in,
        final_cut=stats.final_cut,
        bytes_in=stats.bytes_in,
        cuts=region.cuts,
        resets=region.resets,
        last_cut_id=region.last_cut_id,
        elapsed=stats.elapsed,
    )


def build_local(config: PipelineConfig) -> LocalRun:
    """Open the filesystems and build the operators, the checkpoint store and the lock (nothing
    is locked or read yet). Raises ConfigError for settings the operators refuse."""
    # 1. Filesystems: a URI names its own, a plain path is on [filesystem]; one connection
    #    per filesystem (each hdfs:// one connects and tries its WebHDFS for truncate).
    opened: list[tuple[FileSystemSettings, FileSystem]] = []
    scan_fs, scan_dir = open_path(config.scan_directory, config.filesystem, opened=opened)
    check_single_file(scan_fs, scan_dir, config.single_name)
    sink_settings = config.sink
    if sink_settings.directory is not None:
        sink_fs, sink_dir = open_path(sink_settings.directory, config.filesystem, opened=opened)
        sink_settings = sink_settings.model_copy(update={"directory": sink_dir})
    else:
        assert sink_settings.file is not None
        sink_fs, sink_file = open_path(sink_settings.file, config.filesystem, opened=opened)
        sink_settings = sink_settings.model_copy(update={"file": sink_file})
    cp_fs, cp_dir = open_path(config.region.checkpoint_dir, config.filesystem, opened=opened)

    # 2. Operators: only the source and the sink are region operators (the source owns the scan).
    transforms = []
    if config.transform is not None:
        if config.transform.sql is not None:
            msg = (
                "[transform] sql: SQL transforms need the spark engine; with engine = 'local' "
                "use function = 'module:function' (a per-record Python function)"
            )
            raise ConfigError(msg)
        function = config.transform.function
        assert function is not None
        if not config.transform.vectorized:
            transforms.append(load_function(function, config.folder))
        elif config.source.schema_ is None:
            msg = (
                "[transform] vectorized = true: the function takes the records' columns, which "
                "records have with [source] format = 'csv' or 'jsonl' and a [source.schema]"
            )
            raise ConfigError(msg)
        else:
            loaded = load_function(function, config.folder)
            transforms.append(OverColumns(loaded, f"[transform] function {function!r}"))
    # The scan's control input: switch requests (hdfs-region switch) in the checkpoints.
    control = ControlFile(cp_fs, control_path(cp_dir))
    check_pending_switch(config, control, scan_fs)
    scan_update: dict[str, object] = {"directory": scan_dir}
    if config.scan.archive_dir is not None:
        archive_fs, archive_dir = open_path(
            config.scan.archive_dir, config.filesystem, opened=opened
        )
        if archive_fs.display("/") != scan_fs.display("/"):
            msg = (
                f"[scan] archive_dir: {config.scan.archive_dir!r} is not on the filesystem of "
                f"the watched directory ({scan_fs.display('/')}): files are moved by rename"
            )
            raise ConfigError(msg)
        scan_update["archive_dir"] = archive_dir
    scan = HDFS2DirectoryScan(config.scan.model_copy(update=scan_update), scan_fs, control=control)
    on_published = None
    if config.sink.on_published is not None:
        on_published = load_callable(config.sink.on_published, "[sink] on_published", config.folder)
    sink = HDFS2FileSink(sink_settings, sink_fs, on_published=on_published)
    # Without a transform the sink is the only reader of the lines: in its encoding they go as
    # bytes, checked to decode but not decoded and encoded again.
    encoded_for = None if transforms else sink.line_encoding
    source = HDFS2FileSource(
        config.feed_source,
        scan_fs,
        files=scan,
        on_modified=config.scan.on_modified,
        encoded_for=encoded_for,
        remember_files=config.scan.remember_files,
        remember_for=config.scan.remember_for,
        content_check=config.scan.content_check,
        hold_partial_line=config.scan.hold_partial_line,
    )

    # 3. Checkpoints of this pipeline only, in a directory only this process uses.
    region = config.region
    pipeline_id = config.pipeline_id()
    store = CheckpointStore(
        cp_fs,
        cp_dir,
        retain=region.retain,
        pipeline_id=pipeline_id,
        permission=region.checkpoint_permission,
        start_fresh=region.start_fresh,
    )
    # Rows with a schema are parsed, partitioned and written a block at a time, as columns:
    # batches of about a megabyte of rows keep the work per batch small beside the work per row.
    # Lines as bytes go a read chunk's worth at a time, as one block (LineBlock).
    batch_size = 1024
    if config.source.schema_ is not None:
        batch_size = COLUMNS_BATCH
    elif encoded_for is not None and config.source.format == "line":
        batch_size = BLOCK_BATCH
    pipeline = Pipeline(source, sinks=[sink], transforms=transforms, batch_size=batch_size)

    def lost(reason: str) -> None:
        # Another process owns the directory now: writing one more cut would corrupt its run.
        runner.request_stop(immediate=True)

    # Taken before the directory is stamped (run_local), then held by the runner.
    lock = CheckpointLock(
        cp_fs,
        cp_dir,
        ttl=region.lock_ttl,
        permission=region.checkpoint_permission,
        on_lost=lost,
    )
    runner = PipelineRunner(
        pipeline, region, store, install_signal_handlers=True, lock=lock, exit_if_stop_blocked=True
    )
    logger.info(
        "Pipeline %s: %s -> %s, checkpoints in %s (local engine, %s trigger)",
        pipeline_id,
        scan_fs.display(scan_dir),
        sink_fs.display(sink_settings.template or sink_settings.directory or ""),
        cp_fs.display(cp_dir),
        region.trigger.value,
    )
    return LocalRun(config, scan, source, sink, store, lock, runner, cp_fs, cp_dir)


def _moved(metrics: dict[str, int]) -> bool:
    """Whether the run's after_read archived or deleted a file."""
    return metrics["files_archived"] + metrics["files_deleted"] > 0


def use_jemalloc() -> bool:
    """Arrow's buffers from jemalloc, unless ``ARROW_DEFAULT_MEMORY_POOL`` chose a pool (or
    this build has none): mimalloc, pyarrow's default, gives freed pages back to the system
    at once, and a run that reads, splits and encodes one batch after another had the kernel
    fault them in (and zero them) again for each, about a twentieth of a curated run's CPU.
    Whether it was switched."""
    import os

    import pyarrow as pa

    if os.environ.get("ARROW_DEFAULT_MEMORY_POOL"):
        return False
    try:
        pool = pa.jemalloc_memory_pool()
    except NotImplementedError:
        return False
    pa.set_memory_pool(pool)
    return True


def run_local(
    config: PipelineConfig,
    *,
    available_now: bool = False,
    display: ProgressDisplay | None = None,
) -> Progress:
    """Run the pipeline until it is stopped (or, with ``available_now``, until everything
    present was processed); return the final progress.

    Raises ConfigError, :class:`~region.errors.LockedError` (another process holds the
    checkpoint directory), :class:`~region.errors.CheckpointError`,
    :class:`~region.errors.RegionFailedError` (the region gave up) or
    :class:`~region.errors.LockLostError`.
    """
    # A job of lines or blocks end to end never imports pyarrow (a fifth of a start).
    text_only = config.source.format in ("line", "binary") and config.source.schema_ is None
    if not (text_only and config.sink.format in ("line", "binary")) and use_jemalloc():
        logger.debug("Arrow's buffers come from jemalloc")
    run = build_local(config)
    LOG_CONTEXT["cut"] = lambda: run.runner.controller.snapshot().last_cut_id
    # Before the lock: a port already taken is a configuration error, nothing has started.
    metrics = None
    if config.metrics.port is not None:
        labels = {"pipeline": config.pipeline_id(), "engine": "local"}
        from operators.app.metrics_server import MetricsServer  # only when metrics are served

        metrics = MetricsServer(
            run.view, port=config.metrics.port, host=config.metrics.host, labels=labels
        ).start()
    try:
        return _run_locked(run, config, available_now=available_now, display=display)
    finally:
        if metrics is not None:
            metrics.stop()


def _run_locked(
    run: LocalRun, config: PipelineConfig, *, available_now: bool, display: ProgressDisplay | None
) -> Progress:
    run.lock.acquire()
    try:
        if read_identity(run.checkpoint_fs, run.checkpoint_dir) is None:
            # Unstamped (pipeline.json removed, or written before it existed): the identity in
            # the cuts decides (CheckpointError for another pipeline's) before this run stamps
            # the directory as its own.
            run.store.latest()
        run.runner.job_id = claim_checkpoint_dir(
            run.checkpoint_fs,
            run.checkpoint_dir,
            pipeline_id=config.pipeline_id(),
            engine="local",
            permission=config.region.checkpoint_permission,
            foreign_engine_files=lambda: run.checkpoint_fs.exists(
                run.checkpoint_dir.rstrip("/") + "/spark"
            ),
            own_engine_files=lambda: run.store.latest() is not None,
            details=config.identity_paths(),
            output=JobOutput(*run.sink.output, run.checkpoint_fs.display(run.checkpoint_dir)),
        )
        scan = run.scan.settings
        check_after_read(run.scan.fs, scan.after_read, scan.archive_dir, scan.directory)
        if display is not None:
            display.start(run.progress)
        try:
            run.runner.run(available_now=available_now)
            if available_now and run.scan.directory is not None:
                warn_files_left(
                    run.scan.fs,
                    run.scan.settings,
                    run.scan.directory,
                    config.single_name,
                    read_any=run.scan.files_emitted > 0 or _moved(run.scan.metrics()),
                )
        finally:
            final = run.progress()
            if display is not None:
                display.finish(final)
        if run.lock.lost is not None:
            raise LockLostError(run.lock.lost)
        return final
    finally:
        run.lock.release()
