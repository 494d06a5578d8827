"""Fused execution from a user's own PySpark code, with the user's own DataFrame transform.

``hdfs_scan`` -> transform -> ``hdfs_sink`` as a streaming query pays for every record twice
(Arrow to rows and back) and for a fresh Python planner per query; :func:`start_fused` runs the
same pipeline as ``hdfs-region run`` does (:class:`operators.spark.fused.FusedRunner`: each
batch one Spark job whose tasks read, transform and write) with ``transform`` between the
reading and the writing half of each task. The options are those of ``hdfs_scan`` and
``hdfs_sink``, so a query moves from one to the other by its call, not its settings.

It returns a :class:`FusedQuery`, the shape of Spark's ``StreamingQuery`` (``stop``,
``awaitTermination``, ``isActive``, ``exception``, ``recentProgress``): the batches run on a
thread of their own, as a streaming query's do, and the caller's thread stays free.

Start, numbered:

1. Build the runner (options checked, ConfigError naming the option; a transform that keeps
   state across batches refused, naming its plan node).
2. Lock the checkpoint directory (:class:`region.lock.CheckpointLock`): a second query on the
   same checkpoint is refused, and a lock lost or left unrenewed stops the query at once.
3. Run the batches on a thread; at a stop that is not immediate, publish the files a limit kept
   open across batches and let ``[scan] after_read`` act on the input behind them.
"""

from __future__ import annotations

import logging
import os
import posixpath
import threading
from collections.abc import Mapping
from typing import TYPE_CHECKING

from operators.fs import open_filesystem
from operators.fs.settings import FileSystemSettings, split_uri
from operators.spark.batchlog import PLANS_DIR, SPARK_DIR
from operators.spark.fused import DRIVER_BATCH_BYTES, FrameTransform, FusedRunner
from operators.spark.options import sink_config
from region.lock import CheckpointLock
from region.settings import RegionSettings

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from operators.spark.supervisor import BatchProgress

__all__ = ["FusedQuery", "start_fused"]

logger = logging.getLogger(__name__)


class FusedQuery:
    """A running fused pipeline: the handle :func:`start_fused` returns."""

    def __init__(
        self, runner: FusedRunner, lock: CheckpointLock, sink: Mapping[str, str], name: str
    ) -> None:
        self.name = name
        self._runner = runner
        self._lock = lock
        self._sink = dict(sink)
        self._error: BaseException | None = None
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"fused-{name}", daemon=True)

    def _start(self) -> FusedQuery:
        self._thread.start()
        return self

    def _run(self) -> None:
        from operators.spark.sink import close_open_files

        try:
            self._runner.run()
            # Files a limit kept open across batches: no batch continues them now.
            closing = not self._runner._now and self._lock.lost is None
            if closing and close_open_files(self._sink):
                self._runner.housekeep()  # the input behind them may leave now
            if self._lock.lost is not None:
                from region.errors import LockLostError

                raise LockLostError(self._lock.lost)
        except BaseException as exc:
            logger.error("fused query %s failed: %s", self.name, exc)
            self._error = exc
        finally:
            self._lock.release()
            self._done.set()

    @property
    def isActive(self) -> bool:
        return not self._done.is_set()

    @property
    def recentProgress(self) -> list[BatchProgress]:
        """One entry per committed batch (a batch run again after a restart counts again)."""
        return list(self._runner.progress)

    @property
    def lastProgress(self) -> BatchProgress | None:
        return self._runner.progress[-1] if self._runner.progress else None

    def exception(self) -> BaseException | None:
        """Why the query ended, or ``None`` (running, stopped or done)."""
        return self._error

    def awaitTermination(self, timeout: float | None = None) -> bool | None:
        """Wait until the query ends (``available_now``: everything present at start is
        published) and raise what ended it; with ``timeout``, whether it ended in time."""
        ended = self._done.wait(timeout)
        if ended and self._error is not None:
            raise self._error
        return ended if timeout is not None else None

    def stop(self, *, immediate: bool = False) -> None:
        """Stop after the running batch is published and publish the files kept open (the
        default), or at once (``immediate``: the running job is cancelled and its batch runs
        again at the next start); return when stopped. Safe from any thread."""
        self._runner.stop(immediate=immediate)
        self._done.wait()


def start_fused(
    spark: SparkSession,
    transform: FrameTransform | None = None,
    *,
    scan: Mapping[str, str],
    sink: Mapping[str, str],
    checkpoint_location: str,
    region: RegionSettings | Mapping[str, object] | None = None,
    available_now: bool = False,
    driver_batch_bytes: int = DRIVER_BATCH_BYTES,
) -> FusedQuery:
    """Start the fused pipeline ``hdfs_scan(scan)`` -> ``transform`` -> ``hdfs_sink(sink)``.

    ``transform`` gets each batch's records as a DataFrame (``value``, plus ``file`` and
    ``offset`` with ``include_file_info``: the columns of ``hdfs_scan``) and returns the records
    to write (``value``, and the ``file_attribute_name`` column when the sink has one). It runs
    inside each batch's one Spark job and must keep no state across batches (projections,
    filters, ``explode``; an aggregation, a deduplication, a sort or a limit is refused with
    a ConfigError naming it: run those as a streaming query). ``checkpoint_location``: the
    directory of the query's progress (``spark/``, Spark's offsets and commits) and of the
    scan's plans (``plans/``, unless ``scan`` gives ``plan_dir``), locked while the query
    runs; a plain path is on the sink's filesystem, a URI names its own. ``region``: the
    ``[region]`` settings (trigger, period, restarts, lock). ``available_now``: end once
    what was present at start is published. ``driver_batch_bytes``: on a local master, a batch
    without a ``transform`` that reads at most this many bytes runs in this process rather than
    as a Spark job (``[spark] driver_batch_bytes``; ``0``: never).
    """
    settings = region if isinstance(region, RegionSettings) else RegionSettings(**(region or {}))
    sink_fs = sink_config(sink).fs  # ConfigError naming a bad option

    fs_uri, cp_dir = split_uri(checkpoint_location)
    if fs_uri == "file:///" and not checkpoint_location.startswith("file:"):
        cp_settings = sink_fs or FileSystemSettings(uri="file:///")  # plain: the sink's
    else:
        cp_settings = FileSystemSettings(uri=fs_uri)
    cp_fs = open_filesystem(cp_settings)
    if cp_settings.kind == "local":
        cp_dir = os.path.abspath(cp_dir)
    scan_options = dict(scan)
    if not any(k.lower().replace("_", "") == "plandir" for k in scan_options):
        scan_options["plan_dir"] = cp_settings.display(posixpath.join(cp_dir, PLANS_DIR))
    spark_dir = posixpath.join(cp_dir, SPARK_DIR)
    # The sink log records which query writes the output: this checkpoint (operators.sink.owner).
    sink_options = {"span_batches": "true", **sink}
    sink_options["checkpointLocation"] = cp_settings.display(spark_dir)
    # 1. The runner.
    runner = FusedRunner.on_checkpoint(
        spark,
        scan_options,
        sink_options,
        (cp_fs, cp_dir),
        settings,
        frame=transform,
        available_now=available_now,
        driver_batch_bytes=driver_batch_bytes,
    )
    # 2. The lock: another process on this checkpoint would commit the same batches.
    lock = CheckpointLock(
        cp_fs,
        cp_dir,
        ttl=settings.lock_ttl,
        permission=settings.checkpoint_permission,
        on_lost=lambda reason: runner.stop(immediate=True),
        on_unsafe=lambda reason: runner.stop(immediate=True),
    )
    lock.acquire()
    # 3. The batches.
    name = posixpath.basename(cp_dir.rstrip("/")) or cp_dir
    logger.info(
        "fused query %s: %s -> %s, checkpoint %s",
        name,
        runner.reader.config.directory,
        runner.writer.config.template or runner.writer.config.output_dir,
        cp_settings.display(cp_dir),
    )
    return FusedQuery(runner, lock, sink_options, name)._start()
