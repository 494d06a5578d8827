"""The in-process pipeline: a start operator, stateless transforms and sinks on one thread.

Records never cross a queue: the thread that pulls a batch from the source runs the transforms
over it and hands it to every sink, all under one permit. Backpressure is therefore natural (a
slow sink slows the source down), and a cut only has to wait for the one batch in flight.

One iteration (:meth:`PipelineRunner.step`):

1. take a permit (waits while a cut or reset runs);
2. ``batch = source.next_batch(batch_size)``;
3. each transform over the whole batch (``None`` drops a record; a transform whose
   ``over_batch`` attribute is true is called once with the batch's records and returns them);
4. ``sink.write(batch)`` for every sink, then ``sink.on_tick(now)`` for every sink;
5. give the permit back; in an operator-driven region, a batch ending in punctuation is followed
   by ``make_consistent()``.

An exception from any of them is reported to the controller, which resets the region to the last
cut; the loop then continues from there (the source replays), until the region gives up.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import time
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from enum import Enum
from typing import Any

from region import activity, stopping
from region.activity import doing
from region.checkpoint import CheckpointStore
from region.controller import RegionController, RegionSnapshot, RegionStatus
from region.errors import ConfigError, LockUnsafeError, RegionStoppedError
from region.lock import CheckpointLock
from region.settings import RegionSettings, Trigger
from region.signals import StopSignals
from region.state import Batch, SinkOperator, StartOperator, StateHandler

__all__ = ["Pipeline", "PipelineRunner", "PipelineStats", "StepOutcome", "run_pipeline"]

logger = logging.getLogger(__name__)

#: A record's function (its result, or ``None`` to drop it); with a true ``over_batch``
#: attribute, the function of a batch's records (a sequence) returning the new records.
Transform = Callable[[Any], Any]

#: Longest uninterrupted sleep while idle, so a stop request is noticed promptly.
_SLEEP_SLICE = 0.05
#: How often the stop watchdog looks whether a stop was requested (a signal handler can only
#: set a plain attribute: waking a thread takes a lock the interrupted code may hold).
_WATCH_SLICE = 0.1
#: How long an immediate stop lets the operator call in progress at the request end by itself.
_IMMEDIATE_GRACE = 1.0
#: The exit status of a process ended because its stop could not complete.
EXIT_STOP_BLOCKED = 1


class Pipeline:
    """What runs: ``[*upstream, source, *sinks]`` in topological order, plus the transforms.

    ``upstream`` are state handlers the source pulls from (e.g. a directory scan whose file
    names the source reads); they take part in cuts and resets but run no loop of their own.
    ``transforms`` are stateless per-record functions returning the new record, or ``None`` to
    drop it.
    """

    def __init__(
        self,
        source: StartOperator,
        *,
        upstream: Sequence[StateHandler] = (),
        transforms: Sequence[Transform] = (),
        sinks: Sequence[SinkOperator],
        batch_size: int = 1024,
    ) -> None:
        if not sinks:
            raise ConfigError("a pipeline needs at least one sink, got none")
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
            raise ConfigError(f"batch_size must be an integer >= 1, got {batch_size!r}")
        self.source = source
        self.upstream = tuple(upstream)
        self.transforms = tuple(transforms)
        self.sinks = tuple(sinks)
        self.batch_size = batch_size

    @property
    def operators(self) -> tuple[StateHandler, ...]:
        """Every state handler, in topological order."""
        return (*self.upstream, self.source, *self.sinks)


@dataclass(frozen=True, slots=True)
class PipelineStats:
    """Progress of a run: the region's snapshot plus the runtime's own counters.

    ``records_in``, ``records_out`` and ``batches`` include records replayed after a reset (they
    count work done); ``replayed_*`` say how many of them a reset discarded (read again later),
    ``uncovered_*`` how many no durable cut covers yet (the next run reads them again if the
    process ends now). What a cut covers is therefore ``records_* - replayed_* - uncovered_*``.
    """

    region: RegionSnapshot
    #: Records the source returned.
    records_in: int
    #: Records handed to the sinks (after the transforms dropped some).
    records_out: int
    #: Batches the source returned.
    batches: int
    #: Input bytes the source read, as it reports them in ``Batch.size``; for a source that does
    #: not, ``len()`` of the records when they are ``bytes`` or ``str`` (characters for text).
    bytes_in: int
    #: Seconds since :meth:`PipelineRunner.run` started (0 before).
    elapsed: float
    #: Records read (handed to the sinks) that a reset discarded.
    replayed_in: int = 0
    replayed_out: int = 0
    #: Records read (handed to the sinks) since the newest durable cut.
    uncovered_in: int = 0
    uncovered_out: int = 0
    #: The run ended on a completed final cut: everything read is covered (and published).
    final_cut: bool = False


class StepOutcome(Enum):
    BATCH = "batch"  # a batch went through
    IDLE = "idle"  # the source had nothing now
    RESET = "reset"  # an operator failed; the region was reset


class _Stop(Enum):
    GRACEFUL = "graceful"
    IMMEDIATE = "immediate"


class PipelineRunner:
    """Runs a :class:`Pipeline` in one consistent region on the calling thread.

    ``store`` holds the region checkpoints (a restart on the same store resumes from the newest
    valid cut). ``install_signal_handlers``: SIGINT / SIGTERM stop gracefully (a final cut), a
    second signal stops immediately; only possible on the main thread, ignored elsewhere.

    One job per checkpoint directory: the runner holds the directory's
    :class:`~region.lock.CheckpointLock` from :meth:`start` to the end of :meth:`run` (another
    runner, in this process or another, gets :class:`~region.errors.LockedError` naming the
    holder), and stops at once if the lock is taken over. ``lock``: ``True`` (default) for a lock
    of its own; a :class:`~region.lock.CheckpointLock` the caller holds (or the runner acquires);
    ``False`` only where processes are simulated in one interpreter (replay tests).

    ``exit_if_stop_blocked`` (for a runner that owns its process, as ``hdfs-region run``): a
    stop must end the process even when an operator call never returns (a read of a named pipe
    or of a hung mount blocks in the kernel, and Python cannot interrupt a thread). A watchdog
    thread then ends the process with :data:`EXIT_STOP_BLOCKED` and an ERROR naming the call:

    1. a graceful stop that has not completed ``drain_timeout`` seconds after it was asked for
       (or a run whose region failed, that many seconds after the failure);
    2. an immediate stop (a second signal, a lost lock) whose operator call in progress at the
       request is still the same one :data:`_IMMEDIATE_GRACE` seconds later.

    Ending there is a crash as far as the output is concerned, and as safe: nothing after the
    last completed cut was published or checkpointed, and the next run resumes from that cut.
    The checkpoint lock is not released (the blocked thread could still write in the instant
    before the exit); the kernel drops its local lease, so the next run on this host takes it
    over at once, and one elsewhere after ``lock_ttl``.
    """

    def __init__(
        self,
        pipeline: Pipeline,
        settings: RegionSettings,
        store: CheckpointStore,
        *,
        install_signal_handlers: bool = False,
        clock: Callable[[], float] = time.monotonic,
        wall_clock: Callable[[], float] = time.time,
        lock: CheckpointLock | bool = True,
        exit_if_stop_blocked: bool = False,
    ) -> None:
        self.pipeline = pipeline
        self.exit_if_stop_blocked = exit_if_stop_blocked
        #: ``threading.get_ident()`` of the thread in :meth:`run`, while it runs.
        self._thread_ident: int | None = None
        self.settings = settings
        if lock is True:
            lock = CheckpointLock(
                store.fs,
                store.directory,
                ttl=settings.lock_ttl,
                permission=settings.checkpoint_permission,
                on_lost=lambda reason: self.request_stop(immediate=True),
            )
        self.lock: CheckpointLock | None = lock or None
        self._acquired = False
        if self.lock is not None and store.guard is None:
            store.guard = self.lock.check  # a cut is never written once the lock is lost
        self.controller = RegionController(settings, pipeline.operators, store, clock=clock)
        self._checkpoints = store.fs.display(store.directory)
        #: The id of the checkpoints, when whoever stamped them made one (``hdfs-region run``).
        self.job_id: str | None = None
        self.install_signal_handlers = install_signal_handlers
        self._clock = clock
        self._wall = wall_clock
        self._operator_driven = settings.trigger is Trigger.OPERATOR_DRIVEN
        # Plain attributes: written from signal handlers, where taking a lock could deadlock.
        self._stop: _Stop | None = None
        self._started_at: float | None = None
        self._records_in = 0
        self._records_out = 0
        self._batches = 0
        self._bytes_in = 0
        # Records since the newest durable cut, and those a reset discarded (see PipelineStats).
        self._pending_in = self._pending_out = 0
        self._replayed_in = self._replayed_out = 0
        self._final_cut = False
        self.controller.on_cut = self._on_cut
        self.controller.on_reset = self._on_reset

    # ------------------------------------------------------------------ observation and control

    def stats(self) -> PipelineStats:
        """Safe to call from any thread (e.g. a progress display)."""
        started = self._started_at
        return PipelineStats(
            region=self.controller.snapshot(),
            records_in=self._records_in,
            records_out=self._records_out,
            batches=self._batches,
            bytes_in=self._bytes_in,
            elapsed=0.0 if started is None else self._clock() - started,
            replayed_in=self._replayed_in,
            replayed_out=self._replayed_out,
            uncovered_in=self._pending_in,
            uncovered_out=self._pending_out,
            final_cut=self._final_cut,
        )

    def _on_cut(self) -> None:
        # Called with permits blocked: no batch is being counted meanwhile.
        self._pending_in = self._pending_out = 0

    def _on_reset(self) -> None:
        self._replayed_in += self._pending_in
        self._replayed_out += self._pending_out
        self._pending_in = self._pending_out = 0

    def request_stop(self, *, immediate: bool = False) -> None:
        """Ask :meth:`run` to stop: gracefully after the batch in flight (one final cut), or
        immediately (no final cut). Safe from any thread and from signal handlers."""
        stopping.request()  # a filesystem retrying without end gives up (InfiniteRetry)
        if immediate:
            self._stop = _Stop.IMMEDIATE
            self.controller.request_stop_now()
        elif self._stop is None:
            self._stop = _Stop.GRACEFUL

    # ------------------------------------------------------------------ the loop

    def start(self) -> None:
        """Recover the region (reset to the newest cut); :meth:`run` calls it when needed."""
        if self._started_at is None:
            if self.lock is not None and not self.lock.held:
                self.lock.acquire()  # LockedError: another job uses this checkpoint directory
                self._acquired = True
            for operator in self.pipeline.operators:
                operator.bind_job(self._checkpoints, self.job_id)  # ConfigError: another job's
            self._started_at = self._clock()
            self.controller.start()

    def step(self) -> StepOutcome:
        """Move one batch from the source through the transforms to the sinks."""
        source, sinks = self.pipeline.source, self.pipeline.sinks
        punctuation = False
        with self.controller.permits.hold():
            stage: object = source  # what runs now, named only if it fails
            try:
                with doing(f"operator {source.name}: next batch"):
                    batch = source.next_batch(self.pipeline.batch_size)
                if batch is not None:
                    records = batch.records
                    self._batches += 1
                    self._records_in += len(records)
                    self._pending_in += len(records)
                    if batch.size is not None:
                        self._bytes_in += batch.size  # counted by the source, where it is cheap
                    elif records and isinstance(records[0], bytes | str):
                        self._bytes_in += sum(map(len, records))
                    of_batch = f"a batch of {len(records)} record(s) from {batch.origin}"
                    for transform in self.pipeline.transforms:
                        stage = transform
                        with doing(f"{_stage_name(transform)} over {of_batch}"):
                            if getattr(transform, "over_batch", False):
                                records = transform(records)
                            else:
                                records = [r for r in map(transform, records) if r is not None]
                    self._records_out += len(records)
                    self._pending_out += len(records)
                    if records is not batch.records:
                        batch = Batch(
                            records, batch.punctuation, batch.origin, batch.size, batch.rejected
                        )
                    if records or batch.punctuation or batch.rejected:
                        for sink in sinks:
                            stage = sink
                            with doing(f"operator {sink.name}: writing {of_batch}"):
                                sink.write(batch)
                    punctuation = batch.punctuation
                now = self._wall()
                for sink in sinks:
                    stage = sink
                    with doing(f"operator {sink.name}: on_tick"):
                        sink.on_tick(now)
            except Exception as exc:
                # Reported while the permit is still held, so no cut can commit this batch.
                self.controller.report_failure(_stage_name(stage), exc)
                return StepOutcome.RESET
        if batch is None:
            return StepOutcome.IDLE
        if punctuation and self._operator_driven:
            self.controller.make_consistent()
        return StepOutcome.BATCH

    def _finish_sinks(self) -> bool:
        """Tell every sink the input ended, under a permit so no cut runs meanwhile; ``False``
        when a sink failed and the region was reset instead."""
        with self.controller.permits.hold():
            for sink in self.pipeline.sinks:
                try:
                    sink.finish()
                except Exception as exc:
                    self.controller.report_failure(sink.name, exc)
                    return False
        return True

    def run(self, available_now: bool = False) -> PipelineStats:
        """Run until stopped; return the final stats.

        ``available_now``: stop (gracefully, with a final cut) as soon as the source has nothing
        more right now, like Spark's ``Trigger.AvailableNow``; a source that is exhausted stops
        the run the same way. Otherwise an idle source is polled every ``poll_interval()``.
        Raises :class:`~region.errors.RegionFailedError` when the region gives up, and
        :class:`~region.errors.LockLostError` when the checkpoint directory lock was lost or
        went unrenewed; the operators are closed whichever way the run ends.
        """
        signals = StopSignals(self.request_stop, lambda: self.request_stop(immediate=True))
        installed: AbstractContextManager[None] = (
            signals.installed() if self.install_signal_handlers else nullcontext()
        )
        finished = threading.Event()
        self._thread_ident = threading.get_ident()
        if self.exit_if_stop_blocked:
            watchdog = threading.Thread(
                target=self._watch_stop, args=(finished,), name="stop-watchdog", daemon=True
            )
            watchdog.start()
        try:
            with installed:
                return self._run(available_now)
        finally:
            finished.set()
            self._thread_ident = None

    def _watch_stop(self, finished: threading.Event) -> None:
        """End the process when a stop cannot complete (see ``exit_if_stop_blocked``)."""
        bound = self.settings.drain_timeout
        asked: float | None = None  # when a stop was first seen
        warned = False
        immediate: tuple[float, activity.Doing | None] | None = None
        while not finished.wait(_WATCH_SLICE):
            # A failed region ends the run too, once the pipeline thread comes back.
            failed = self.controller.status is RegionStatus.FAILED
            if self._stop is None and not failed:
                continue
            now = time.monotonic()
            current = activity.of(self._thread_ident)
            if asked is None:
                asked = now
            if immediate is None and self._stop is _Stop.IMMEDIATE:
                immediate = (now, current)
            if now - asked >= bound:
                what = "The stop" if self._stop is not None else "After the region failed, the run"
                self._exit_blocked(current, f"{what} did not end within drain_timeout {bound:g} s")
            if immediate is not None:
                if (
                    current is not None
                    and current is immediate[1]
                    and now - immediate[0] >= _IMMEDIATE_GRACE
                ):
                    self._exit_blocked(
                        current,
                        f"The immediate stop did not end within {_IMMEDIATE_GRACE:g} s",
                    )
            elif (
                not warned
                and current is not None
                and now - max(asked, current.since) >= _IMMEDIATE_GRACE
            ):
                warned = True
                logger.warning(
                    "Stopping: the pipeline thread is still in %s; the process ends %.0f s "
                    "after the stop request if it does not return (drain_timeout), a second "
                    "after a second signal",
                    current.describe(now),
                    bound,
                )

    def _exit_blocked(self, current: activity.Doing | None, why: str) -> None:
        last = self.controller.snapshot().last_cut_id
        cut = "the start" if last is None else f"cut {last}"
        logger.error(
            "%s: %s. Exiting now without a final cut: the output of what was read after %s is "
            "left unpublished; the next run resumes from %s and writes it again",
            why,
            "the pipeline thread is still in " + current.describe()
            if current is not None
            else "the pipeline thread did not come back (" + activity.describe() + ")",
            cut,
            cut,
        )
        for handler in logging.getLogger().handlers:
            with contextlib.suppress(Exception):  # a broken handler must not keep us alive
                handler.flush()
        os._exit(EXIT_STOP_BLOCKED)

    def _run(self, available_now: bool) -> PipelineStats:
        if self._stop is None:
            stopping.clear()  # a stop of an earlier job of this process
        try:
            self.start()
            while True:
                if self.lock is not None:
                    # Lost (LockLostError ends the run), or not renewed for so long that another
                    # process may take it over before this batch lands: write nothing until a
                    # heartbeat gets through again (a stop asked for meanwhile ends at once).
                    try:
                        self.lock.check()
                    except LockUnsafeError:
                        if self._stop is not None:
                            self._stop = _Stop.IMMEDIATE
                        elif self.controller.status is not RegionStatus.FAILED:
                            self._sleep(_SLEEP_SLICE)
                            continue
                        # FAILED (cuts and resets refused meanwhile): step() raises why.
                if self._stop is _Stop.IMMEDIATE:
                    logger.info("Stopping immediately (no final cut)")
                    self.controller.stop(graceful=False)
                    break
                if self._stop is _Stop.GRACEFUL:
                    logger.info("Stopping gracefully: final cut, then close")
                    if not self._finish_sinks():
                        continue  # the region was reset; the sinks finish again next time
                    self._final_cut = self.controller.stop(graceful=True)
                    if not self._final_cut:
                        logger.warning("The final cut did not complete: the next run redoes it")
                    break
                outcome = self.step()
                if outcome is not StepOutcome.IDLE:
                    continue
                source = self.pipeline.source
                if (available_now and not source.holding()) or source.exhausted():
                    # The final cut; if it resets instead, the source replays and we retry.
                    if self._finish_sinks() and self.controller.cut(final=True):
                        self._final_cut = True
                        break
                    continue
                self._sleep(source.poll_interval())
        except RegionStoppedError:
            logger.info("Region stopped")
        finally:
            if self.controller.status not in (RegionStatus.STOPPED,):
                self.controller.stop(graceful=False)  # closes the operators, also when failed
            if self._acquired and self.lock is not None:
                self.lock.release()
                self._acquired = False
        stats = self.stats()
        logger.info(
            "Pipeline finished: %d records in, %d out, %d batches, %d cuts, %d resets "
            "(%d records replayed after them), %d records read after the last cut",
            stats.records_in,
            stats.records_out,
            stats.batches,
            stats.region.cuts,
            stats.region.resets,
            stats.replayed_in,
            stats.uncovered_in,
        )
        return stats

    def _sleep(self, seconds: float) -> None:
        deadline = time.monotonic() + seconds
        while self._stop is None:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return
            time.sleep(min(remaining, _SLEEP_SLICE))


def _stage_name(stage: object) -> str:
    """An operator's name, or ``transform <qualified name>`` for a transform function."""
    if isinstance(stage, StateHandler):
        return stage.name
    return f"transform {getattr(stage, '__qualname__', stage)!s}"


def run_pipeline(
    pipeline: Pipeline,
    settings: RegionSettings,
    store: CheckpointStore,
    *,
    available_now: bool = False,
    install_signal_handlers: bool = True,
) -> PipelineStats:
    """Run ``pipeline`` in a consistent region until it stops; see :meth:`PipelineRunner.run`.
    With ``install_signal_handlers`` the run owns the process: a stop that cannot complete ends
    it (``exit_if_stop_blocked``)."""
    runner = PipelineRunner(
        pipeline,
        settings,
        store,
        install_signal_handlers=install_signal_handlers,
        exit_if_stop_blocked=install_signal_handlers,
    )
    return runner.run(available_now=available_now)
