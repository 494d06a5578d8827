"""Run a Spark streaming query with the region settings: trigger, restarts, progress, stop.

Region settings map to Spark as follows:

- ``periodic``: a processing-time trigger every ``period`` (a micro-batch is Spark's cut);
- ``operator_driven``: batches run back to back and every batch ends at a file boundary (the
  ``hdfs_scan`` option ``batch_boundary=file``, from :func:`source_options`);
- ``available_now``: everything present at start, in as many batches as the limits allow, then
  the query ends.

A failed query is started again from its checkpoint (Spark replays the unfinished batch; the
sink publishes it once) up to ``max_consecutive_reset_attempts`` times in a row, waiting
``reset_backoff`` (doubled per attempt) from the second restart on; the count is cleared by every
batch that completes. Then :class:`region.errors.RegionFailedError`. An error no restart can
repair (:func:`region.errors.is_permanent_name`: undecodable input under ``fail``, refused access)
ends the run at once, as it does on the local engine.
"""

from __future__ import annotations

import json
import logging
import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from region.errors import ConfigError, RegionFailedError, is_permanent_name
from region.settings import RegionSettings, Trigger

if TYPE_CHECKING:
    from pyspark.sql.streaming.query import StreamingQuery
    from pyspark.sql.streaming.readwriter import DataStreamWriter

__all__ = [
    "BatchProgress",
    "RestartPolicy",
    "SparkSupervisor",
    "apply_trigger",
    "failure_cause",
    "source_options",
]

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class BatchProgress:
    """One completed micro-batch, from Spark's query progress."""

    batch_id: int
    num_input_rows: int
    duration_ms: int
    timestamp: str
    #: 1 for the first start of the query, +1 for each restart.
    attempt: int
    #: Files the hdfs_scan source passed over so far, and files that changed after they were
    #: read (its offset says; ``None``: no such source).
    passed_over: int | None = None
    modified: int | None = None
    #: The batch's Spark job and its commit, in ms (``None`` where Spark does not say).
    job_ms: int | None = None
    commit_ms: int | None = None
    #: Records, bytes and files the batch published (fused execution; ``None``: not known).
    records_out: int | None = None
    bytes_out: int | None = None
    files_out: int | None = None
    #: Rows the source could not read, published to the rejects file with the batch.
    records_rejected: int = 0


def source_options(settings: RegionSettings) -> dict[str, str]:
    """Options for ``hdfs_scan`` that the region's trigger needs."""
    if settings.trigger == Trigger.OPERATOR_DRIVEN:
        return {"batch_boundary": "file"}
    return {}


def apply_trigger(
    writer: DataStreamWriter, settings: RegionSettings, *, available_now: bool = False
) -> DataStreamWriter:
    """Set the Spark trigger of ``writer`` for the region settings."""
    if available_now:
        return writer.trigger(availableNow=True)
    if settings.trigger == Trigger.PERIODIC:
        return writer.trigger(processingTime=f"{round(settings.period * 1000)} milliseconds")
    return writer  # operator_driven: the next batch starts as soon as one ends


class RestartPolicy:
    """When a failed query (or batch) runs again: after ``reset_backoff`` (doubled per attempt,
    from the second on), up to ``max_consecutive_reset_attempts`` failures in a row; never after
    an error no restart can repair (:func:`region.errors.is_permanent_name`)."""

    def __init__(
        self,
        settings: RegionSettings,
        *,
        on_restart: Callable[[int, BaseException], None] | None = None,
    ) -> None:
        self.settings = settings
        self._on_restart = on_restart
        self.failures = 0

    def succeeded(self) -> None:
        """Some work completed: the count of failures in a row starts again."""
        self.failures = 0

    def failed(self, error: BaseException, what: str) -> float:
        """Count a failure of ``what``; raise :class:`RegionFailedError` when it may not run
        again, else call ``on_restart`` and return the seconds to wait before it does."""
        self.failures += 1
        limit = self.settings.max_consecutive_reset_attempts
        name, cause = failure_cause(error)
        if self.failures == 1:
            # The traceback once per failure in a row: a Python worker's (the user's function
            # among its frames) is in a PythonException's text.
            logger.warning("%s failed: %s", what, cause, exc_info=error)
        if is_permanent_name(name):
            msg = (
                f"{what} stopped: {cause}. A restart would fail the same way, so none was "
                "tried: remove the cause and run again (it resumes from its checkpoint)"
            )
            raise RegionFailedError(msg) from error
        if self.failures >= limit:
            msg = (
                f"{what} failed {self.failures} time(s) in a row "
                f"(max_consecutive_reset_attempts={limit}, reset_backoff="
                f"{self.settings.reset_backoff:g} s); last error: {cause}"
            )
            raise RegionFailedError(msg) from error
        delay = self.settings.backoff(self.failures - 1)
        logger.warning(
            "%s failed (%s of %s in a row), restarting from its checkpoint%s: %s",
            what,
            self.failures,
            limit,
            f" in {delay:.1f} s" if delay else "",
            cause,
        )
        if self._on_restart is not None:
            self._on_restart(self.failures, error)
        return delay


#: Builds the query's writer (with its checkpointLocation) from the ``hdfs_scan`` options the
#: region needs (merge them into the reader's options).
QueryBuilder = Callable[[dict[str, str]], "DataStreamWriter"]


class SparkSupervisor:
    """Starts, watches and restarts one streaming query.

    ``on_progress`` is called (in the thread running :meth:`run`) once per completed batch;
    ``on_restart(attempt, error)`` before each restart.
    """

    def __init__(
        self,
        build: QueryBuilder,
        settings: RegionSettings,
        *,
        available_now: bool = False,
        on_progress: Callable[[BatchProgress], None] | None = None,
        on_restart: Callable[[int, BaseException], None] | None = None,
        poll_interval: float = 0.25,
    ) -> None:
        self._build = build
        self.settings = settings
        self._available_now = available_now
        self._on_progress = on_progress
        self._poll = poll_interval
        self._restarts = RestartPolicy(settings, on_restart=on_restart)
        # Plain attributes, polled: set from signal handlers, where taking a lock could deadlock.
        self._stopping = False
        self._now = False
        self._query: StreamingQuery | None = None
        self.attempt = 0
        self.progress: list[BatchProgress] = []

    @property
    def query(self) -> StreamingQuery | None:
        return self._query

    def run(self) -> None:
        """Run until the query ends (available_now), :meth:`stop` is called, or it failed
        ``max_consecutive_reset_attempts`` times in a row (RegionFailedError)."""
        while not self._stopping:
            self.attempt += 1
            writer = apply_trigger(
                self._build(source_options(self.settings)),
                self.settings,
                available_now=self._available_now,
            )
            try:
                query = writer.start()
            except Exception as exc:
                if type(exc).__name__ != "AnalysisException":
                    raise
                # A query Spark refuses to start (an output mode it cannot give): no restart
                # helps, and the JVM stack trace says nothing more than its first line.
                first = str(exc).strip().splitlines()[0] if str(exc).strip() else "refused"
                raise ConfigError(f"the streaming query cannot start: {first}") from None
            self._query = query
            error, completed = self._watch(query)
            if error is None:
                return
            if completed:
                self._restarts.succeeded()
            self._pause(self._restarts.failed(error, f"query {query.name or query.id}"))

    def _watch(self, query: StreamingQuery) -> tuple[BaseException | None, bool]:
        """Wait for the query to end; report progress. Returns (error, any batch completed)."""
        seen = {p.batch_id for p in self.progress if p.attempt == self.attempt}
        completed = False
        error: BaseException | None = None
        while True:
            try:
                finished = bool(query.awaitTermination(self._poll))  # type: ignore[arg-type]
            except Exception as exc:  # StreamingQueryException, or the JVM went away
                error, finished = exc, True
            completed |= self._report(query, seen)
            if finished:
                if error is None:
                    error = _exception(query)
                return error, completed
            if self._stopping:
                self._stop_query(query)
                self._report(query, seen)
                return None, completed

    def _report(self, query: StreamingQuery, seen: set[int]) -> bool:
        new = False
        for raw in query.recentProgress:
            progress = _progress(raw, self.attempt)
            if progress is None or progress.batch_id in seen:
                continue
            seen.add(progress.batch_id)
            self.progress.append(progress)
            new = True
            logger.info(
                "batch %s: %s rows in %s ms",
                progress.batch_id,
                progress.num_input_rows,
                progress.duration_ms,
            )
            if self._on_progress is not None:
                self._on_progress(progress)
        return new

    def _stop_query(self, query: StreamingQuery, timeout: float = 600.0) -> None:
        """Let the running batch finish, then stop (an interrupted batch would be replayed on
        the next start anyway; this only avoids the wasted work); at once when asked to."""
        deadline = time.monotonic() + timeout
        while (
            not self._now
            and query.isActive
            and query.status.get("isTriggerActive")
            and time.monotonic() < deadline
        ):
            time.sleep(0.05)
        query.stop()

    def stop(self, *, immediate: bool = False) -> None:
        """Ask :meth:`run` to stop the query after its current batch, or at once (the batch
        is replayed at the next start). Callable from any thread and from signal handlers."""
        if immediate:
            self._now = True
        self._stopping = True

    def _pause(self, seconds: float) -> None:
        """Sleep ``seconds`` unless asked to stop meanwhile."""
        deadline = time.monotonic() + seconds
        while not self._stopping and (left := deadline - time.monotonic()) > 0:
            time.sleep(min(left, 0.05))


def _progress(raw: Any, attempt: int) -> BatchProgress | None:
    """A completed batch from one progress event (idle triggers have no ``addBatch``)."""
    durations = dict(raw.durationMs or {})
    if "addBatch" not in durations:
        return None
    return BatchProgress(
        batch_id=int(raw.batchId),
        num_input_rows=int(raw.numInputRows),
        duration_ms=int(durations.get("triggerExecution", 0)),
        timestamp=str(raw.timestamp),
        attempt=attempt,
        passed_over=_scan_count(raw, "passed_over"),
        modified=_scan_count(raw, "modified"),
        # addBatch is the job with the sink's commit inside it; walCommit and commitOffsets
        # are Spark's own logs around it.
        job_ms=int(durations["addBatch"]),
        commit_ms=int(durations.get("walCommit", 0)) + int(durations.get("commitOffsets", 0)),
    )


def _scan_count(raw: Any, name: str) -> int | None:
    """A count of the scan cursor's state, from the first source whose end offset has it."""
    for source in raw.sources or ():
        try:
            offset = json.loads(source.endOffset)
        except (TypeError, ValueError):
            continue
        if isinstance(offset, dict) and isinstance(offset.get(name), int):
            return int(offset[name])
    return None


def _exception(query: StreamingQuery) -> BaseException | None:
    try:
        return query.exception()
    except Exception as exc:  # the session is gone
        return exc


_CAUSE = re.compile(r"^([A-Za-z_][\w.]*(?:Error|Exception)): (.+)$")
_WRAPPERS = ("org.", "java.", "scala.", "py4j.", "pyspark.")


def _with_java_causes(error: BaseException) -> str:
    """``error``'s text, then its Java causes' (a sink's commit fails the query as "Writing job
    failed"; the Python error is only in a cause)."""
    texts = [str(error).strip()]
    origin = getattr(error, "_origin", None)
    try:
        for _ in range(10):
            if origin is None:
                break
            texts.append(str(origin.toString()))
            origin = origin.getCause()
    except Exception as exc:  # the JVM is gone: what str() said is all there is
        logger.debug("no Java causes of %s: %s", type(error).__name__, exc)
    return "\n".join(texts)


def failure_cause(error: BaseException) -> tuple[str, str]:
    """The Python error that failed the query (Spark wraps it in Java stack traces and causes):
    its class name, and ``"Name: message"``."""
    text = _with_java_causes(error)
    for line in text.splitlines():
        match = _CAUSE.match(line.strip())
        if match is not None and not match.group(1).startswith(_WRAPPERS):
            name = match.group(1).rsplit(".", 1)[-1]
            return name, f"{name}: {match.group(2)}"
    name = type(error).__name__
    return name, text.splitlines()[0] if text else name
