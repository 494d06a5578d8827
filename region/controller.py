"""The region controller: consistent cuts, resets, triggers and stop for one consistent region.

Threads and locks. A cut or a reset (a *cycle*) runs on whichever thread asks for it: the periodic
trigger thread, a start operator's thread in :meth:`RegionController.make_consistent`, or a thread
reporting a failure. Cycles are serialised by the cycle lock. Lock order, never reversed:

1. the cycle lock (held for a whole cycle, while operators are called);
2. the permits' internal lock (held only inside :class:`~region.permits.Permits` methods);
3. the state lock and the trigger's condition (held only to read or update status, counters and
   the trigger's due time; nothing is called and nothing else is locked under them).

A thread never waits for the cycle lock while holding a permit: every entry point hands the
caller's permits back first (:meth:`Permits.released`) and takes them back after the cycle. A
cycle waits for permits only with a timeout (drain_timeout, reset_timeout). So no deadlock can
form: the only blocking waits are for the cycle lock (whose holder never waits without a timeout)
and for permits (whose holders never wait for the cycle lock).

A Python call cannot be interrupted: a drain or reset slower than its timeout is detected when
it returns (the deadline is checked after every operator), a permit held too long while waiting.
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import json
import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Literal, TypeVar

from region import activity
from region.checkpoint import CheckpointStore
from region.errors import (
    CheckpointError,
    ConfigError,
    LockUnsafeError,
    RegionError,
    RegionFailedError,
    RegionStoppedError,
    is_permanent,
)
from region.permits import Permits
from region.settings import RegionSettings, Trigger
from region.state import StateHandler

__all__ = [
    "ALLOWED_TRANSITIONS",
    "CUT_SECONDS_BUCKETS",
    "RegionController",
    "RegionSnapshot",
    "RegionStatus",
]

logger = logging.getLogger(__name__)

_T = TypeVar("_T")

#: Longest uninterrupted sleep of a backoff, so an immediate stop is noticed promptly.
_BACKOFF_SLICE = 0.05


class RegionStatus(StrEnum):
    PROCESSING = "processing"
    DRAINING = "draining"
    CHECKPOINTING = "checkpointing"
    RESETTING = "resetting"
    FAILED = "failed"
    STOPPED = "stopped"


_S = RegionStatus

#: Every status change the controller may make. A controller starts in RESETTING: after a
#: (re)start nothing flows until the first reset has restored the operators.
ALLOWED_TRANSITIONS: Mapping[RegionStatus, frozenset[RegionStatus]] = {
    _S.RESETTING: frozenset({_S.PROCESSING, _S.FAILED, _S.STOPPED}),
    _S.PROCESSING: frozenset({_S.DRAINING, _S.RESETTING, _S.FAILED, _S.STOPPED}),
    _S.DRAINING: frozenset({_S.CHECKPOINTING, _S.RESETTING, _S.FAILED, _S.STOPPED}),
    _S.CHECKPOINTING: frozenset({_S.PROCESSING, _S.RESETTING, _S.FAILED, _S.STOPPED}),
    _S.FAILED: frozenset(),
    _S.STOPPED: frozenset(),
}


#: Cuts that record nothing new are logged at DEBUG; one INFO line sums them up per this many
#: seconds of such cuts (an idle job would otherwise log a line per period, all day).
IDLE_SUMMARY_SECONDS = 60.0

#: Upper bounds (seconds) of the cut-duration histogram in :class:`RegionSnapshot`.
CUT_SECONDS_BUCKETS: tuple[float, ...] = (
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
    30.0,
    60.0,
    180.0,
)


@dataclass(frozen=True, slots=True)
class RegionSnapshot:
    """What the region is doing, for progress displays and health checks."""

    status: RegionStatus
    #: Cuts completed by this controller (the recovered cut is not counted).
    cuts: int
    #: Newest durable cut: completed here, or recovered at start. ``None`` before the first.
    last_cut_id: int | None
    #: Duration of the newest cut completed here (block permits → resume).
    last_cut_seconds: float | None
    #: Reset attempts made after failures (the recovery at start counts only when retried).
    resets: int
    #: Reset attempts since the last completed cut (the region fails past the maximum).
    consecutive_resets: int
    #: The newest failure, described (operator, phase, cause); ``None`` when none happened.
    last_error: str | None
    #: Cuts completed here by duration: how many took at most each bound of
    #: :data:`CUT_SECONDS_BUCKETS` (cumulative, as a Prometheus histogram counts them), and the
    #: sum of their durations. Kept per cut (a few additions), read by a metrics scrape.
    cut_seconds_buckets: tuple[int, ...] = ()
    cut_seconds_sum: float = 0.0
    #: Wall-clock time (``time.time()``) the newest cut here completed; ``None`` before.
    last_cut_at: float | None = None
    #: Wall-clock time the region entered ``status``.
    status_since: float = 0.0
    #: Whether the region recovered (reset to its newest cut) and may process.
    started: bool = False


@dataclass(frozen=True, slots=True)
class _Failure:
    """Why a cut or reset could not complete."""

    operator: str | None
    phase: str
    error: BaseException

    def describe(self) -> str:
        cause = f"{type(self.error).__name__}: {self.error}"
        if self.operator is None:
            return f"{cause} (during {self.phase})"
        return f"operator {self.operator!r} raised {cause} (during {self.phase})"


@dataclass(frozen=True, slots=True)
class _RestorePoint:
    cut_id: int
    states: dict[str, dict[str, Any]]
    #: The cut's completion (every on_cut_completed) ran to the end, here or in a process that
    #: recorded it: operators are told before a reset to it (StateHandler.recall_completed).
    completed: bool = False


def _same_states(a: Mapping[str, Any], b: Mapping[str, Any]) -> bool:
    """Whether two cuts' operator states are the same once stored (JSON, as the store writes
    them); states that are not JSON are never the same (the store refuses them, named)."""
    try:
        return json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)
    except (TypeError, ValueError):
        return False


class _StopNow(Exception):
    """An immediate stop was requested while a cycle was running."""


class RegionController:
    """Coordinates the operators of one consistent region (see the module docstring for threads).

    ``operators`` are in topological order (upstream first); their names key their states in the
    region checkpoint. ``clock`` measures cut/reset durations, timeouts and the trigger period.
    """

    def __init__(
        self,
        settings: RegionSettings,
        operators: Sequence[StateHandler],
        store: CheckpointStore,
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        names = [getattr(op, "name", None) for op in operators]
        if not operators:
            raise ConfigError("a consistent region needs at least one operator, got none")
        for op, name in zip(operators, names, strict=True):
            if not isinstance(name, str) or not name:
                raise ConfigError(f"operator {op!r} has no name (attribute 'name' = {name!r})")
        duplicates = sorted({str(n) for n in names if names.count(n) > 1})
        if duplicates:
            raise ConfigError(f"operator names must be unique in a region, repeated: {duplicates}")
        self.settings = settings
        self.operators: tuple[StateHandler, ...] = tuple(operators)
        self.store = store
        self.permits = Permits(blocked=True)
        self._clock = clock

        self._cycle_lock = threading.Lock()
        self._cycle_owner: int | None = None
        self._state_lock = threading.Lock()
        self._status = RegionStatus.RESETTING
        self._status_since = time.time()
        self._started = False
        # The recovery at start: the caller has just taken the directory (the guard's checks
        # apply to resets after failures, when time has passed).
        self._recovered = False
        self._closed = False
        self._restore_point: _RestorePoint | None = None
        self._next_cut_id = 0
        self._retire: list[int] = []
        self._pending: _Failure | None = None
        self._failed_message: str | None = None
        # Plain attribute: set from signal handlers, where taking a lock could deadlock.
        self._stop_now = False

        self._cuts = 0
        self._last_cut_id: int | None = None
        self._last_cut_seconds: float | None = None
        self._cut_buckets = [0] * len(CUT_SECONDS_BUCKETS)
        self._cut_seconds_sum = 0.0
        self._last_cut_at: float | None = None
        self._resets = 0
        self._consecutive_resets = 0
        self._last_error: str | None = None
        self._traced: str | None = None  # the failure whose traceback was logged last
        # Cuts that recorded what the one before recorded, since the last INFO line about cuts.
        self._idle_cuts = 0
        self._idle_since: float | None = None  # the last INFO line about cuts
        self._changed_cut_id: int | None = None

        #: Called (no arguments) when a cut becomes durable and when a reset completes, while
        #: permits are blocked: what was processed since the last durable cut is now covered by
        #: one, or is discarded to be replayed. Must be quick and not raise (a runtime's counts).
        self.on_cut: Callable[[], None] | None = None
        self.on_reset: Callable[[], None] | None = None

        self._trigger_cond = threading.Condition(threading.Lock())
        self._trigger_thread: threading.Thread | None = None
        self._trigger_stop = False
        self._last_cycle_end = clock()

    # ------------------------------------------------------------------ observation

    @property
    def status(self) -> RegionStatus:
        return self._status

    def snapshot(self) -> RegionSnapshot:
        with self._state_lock:
            return RegionSnapshot(
                status=self._status,
                cuts=self._cuts,
                last_cut_id=self._last_cut_id,
                last_cut_seconds=self._last_cut_seconds,
                resets=self._resets,
                consecutive_resets=self._consecutive_resets,
                last_error=self._last_error,
                cut_seconds_buckets=tuple(self._cut_buckets),
                cut_seconds_sum=self._cut_seconds_sum,
                last_cut_at=self._last_cut_at,
                status_since=self._status_since,
                started=self._started,
            )

    def _set_status(self, new: RegionStatus) -> None:
        with self._state_lock:
            old = self._status
            if new is old:
                return
            if new not in ALLOWED_TRANSITIONS[old]:
                msg = f"region status cannot change from {old} to {new}"
                raise RuntimeError(msg)
            self._status = new
            self._status_since = time.time()
        logger.debug("Region status %s -> %s", old, new)

    # ------------------------------------------------------------------ cycles

    def _run_cycle(self, body: Callable[[], _T], stopped: _T) -> _T:
        """Run ``body`` (a cut, reset or stop) exclusively; the caller's permits are handed back
        meanwhile. Returns ``stopped`` when an immediate stop cut the cycle short."""
        me = threading.get_ident()
        if self._cycle_owner == me:
            msg = "the region controller was called from inside its own cut or reset"
            raise RuntimeError(msg)
        with self.permits.released(), self._cycle_lock:
            self._cycle_owner = me
            try:
                return body()
            except _StopNow:
                self._stop_immediately_locked()
                return stopped
            except RegionError:
                raise
            except Exception as exc:
                # A bug in the cycle itself: fail loudly rather than leave permits blocked.
                if self._status is not RegionStatus.FAILED:
                    self._fail_locked(_Failure(None, "controller", exc), why="no_reset")
                raise
            finally:
                self._cycle_owner = None
                self._arm_trigger()

    def _pending_failure(self) -> _Failure | None:
        with self._state_lock:
            return self._pending

    def _check_stop_now(self) -> None:
        if self._stop_now:
            raise _StopNow

    def _raise_if_terminal(self) -> None:
        if self._status is RegionStatus.FAILED:
            raise RegionFailedError(self._failed_message or "the region failed")
        if self._status is RegionStatus.STOPPED:
            raise RegionStoppedError("the region is stopped")

    # ------------------------------------------------------------------ start / recovery

    def start(self) -> None:
        """Recover and let records flow.

        1. Read the newest valid region checkpoint (``CheckpointError`` when files exist but none
           is valid, or when it lacks the state of one of our operators).
        2. Reset every operator to it, or to its initial state when there is none.
        3. Unblock permits; start the periodic trigger.
        """
        if self._started:
            raise RuntimeError("RegionController.start() was already called")
        self._started = True
        if not self._run_cycle(self._recover_locked, False):
            return  # an immediate stop was requested during recovery
        if self.settings.trigger is Trigger.PERIODIC:
            self._trigger_thread = threading.Thread(
                target=self._trigger_loop, name="region-trigger", daemon=True
            )
            self._trigger_thread.start()

    def _recover_locked(self) -> bool:
        try:
            latest = self.store.latest()
            self._next_cut_id = self.store.next_cut_id()
            if latest is not None:
                self._restore_point = self._restore_point_of(
                    latest.cut_id, latest.operators, latest.path, completed=latest.completed
                )
        except Exception as exc:
            self._fail_locked(_Failure(None, "recovery at start", exc), why="no_reset")
            raise
        if self._restore_point is not None:
            self._last_cut_id = self._restore_point.cut_id
            self._retire = [self._restore_point.cut_id]
        self._reset_locked(None)
        self._recovered = True
        return True

    def _restore_point_of(
        self,
        cut_id: int,
        states: Mapping[str, Mapping[str, Any]],
        where: str,
        *,
        completed: bool = False,
    ) -> _RestorePoint:
        names = [op.name for op in self.operators]
        missing = [n for n in names if n not in states]
        if missing:
            msg = (
                f"checkpoint {where or 'of cut ' + str(cut_id)} has no state for operator(s) "
                f"{missing} (it holds {sorted(states)}); an operator was added or renamed: "
                "restore the old names or start with a new checkpoint directory"
            )
            raise CheckpointError(msg)
        extra = sorted(set(states) - set(names))
        if extra:
            logger.warning(
                "Checkpoint of cut %d holds state of unknown operators %s", cut_id, extra
            )
        return _RestorePoint(cut_id, {n: dict(states[n]) for n in names}, completed)

    # ------------------------------------------------------------------ cut

    def cut(self, *, final: bool = False) -> bool:
        """Run one cut now; ``True`` when it completed, ``False`` when the region reset instead.

        ``final``: the cut of a graceful stop; when it completes the operators are closed and
        the region is STOPPED. Raises :class:`RegionFailedError` when the region failed.
        """
        self._require_started()
        trigger = "stop" if final else "request"
        done = self._run_cycle(lambda: self._cut_locked(final=final, trigger=trigger), False)
        if self._status is RegionStatus.STOPPED:
            self._join_trigger()
        return done

    def make_consistent(self) -> bool:
        """Operator-driven trigger: cut now, from a start operator's thread.

        The caller's permit is handed back while the cut runs and taken back before returning.
        ``True``: the cut completed. ``False``: the region was reset instead (to an earlier cut),
        so whatever the caller produced since that cut will be produced again.
        """
        self._require_started()
        return self._run_cycle(
            lambda: self._cut_locked(final=False, trigger="operator_driven"), False
        )

    def _require_started(self) -> None:
        if not self._started:
            raise RuntimeError("call RegionController.start() first")

    def _cut_locked(self, *, final: bool, trigger: str, settled: bool = False) -> bool:
        self._raise_if_terminal()
        self._check_stop_now()
        cut_id = self._next_cut_id
        self._next_cut_id += 1  # never reused, even when this cut fails
        started = self._clock()
        deadline = started + self.settings.drain_timeout

        # 1. Block permits: no start operator begins another batch.
        self._set_status(RegionStatus.DRAINING)
        self.permits.block()
        # 2. Wait until every permit is back (the batches in flight are done).
        if not self.permits.wait_idle(max(0.0, deadline - self._clock())):
            error = TimeoutError(
                f"a start operator still held its permit after drain_timeout "
                f"{self.settings.drain_timeout:g} s: {activity.describe()}"
            )
            return self._cut_failed(cut_id, _Failure(None, f"drain of cut {cut_id}", error))
        # 3. A batch that failed must not be checkpointed: its failure wins over the cut. Nor
        #    may the operators write (drain) while the store's guard says another process may
        #    own the directory by the time they are done (a lock not renewed for a while).
        pending = self._pending_failure() or self._may_write(f"drain of cut {cut_id}")
        if pending is not None:
            return self._cut_failed(cut_id, pending)
        # 4. Drain every operator in topological order, within drain_timeout.
        for op in self.operators:
            self._check_stop_now()
            try:
                op.drain()
            except Exception as exc:
                return self._cut_failed(cut_id, _Failure(op.name, f"drain of cut {cut_id}", exc))
            pending = self._pending_failure()  # reported by a drain, on this thread
            if pending is not None:
                return self._cut_failed(cut_id, pending)
            elapsed = self._clock() - started
            if elapsed > self.settings.drain_timeout:
                error = TimeoutError(
                    f"drain took {elapsed:.3f} s (until operator {op.name!r} finished), "
                    f"over drain_timeout {self.settings.drain_timeout:g} s"
                )
                return self._cut_failed(cut_id, _Failure(op.name, f"drain of cut {cut_id}", error))
        # 5. Checkpoint every operator.
        self._set_status(RegionStatus.CHECKPOINTING)
        states: dict[str, dict[str, Any]] = {}
        for op in self.operators:
            self._check_stop_now()
            try:
                state: object = op.checkpoint(cut_id)
                if not isinstance(state, Mapping):
                    msg = f"checkpoint() returned {type(state).__name__}, expected a dict"
                    raise TypeError(msg)
                states[op.name] = dict(state)
            except Exception as exc:
                phase = f"checkpoint of cut {cut_id}"
                return self._cut_failed(cut_id, _Failure(op.name, phase, exc))
        # 5b. A final cut that records what the last completed cut records (a stop with
        # nothing processed since) writes nothing: on HDFS a checkpoint's close waits for the
        # NameNode. That cut stays the restore point; a restart from it is one from this cut.
        kept = self._restore_point
        if final and kept is not None and kept.completed and _same_states(states, kept.states):
            logger.info(
                "Cut %d not written: nothing changed since cut %d, which stays the last",
                cut_id,
                kept.cut_id,
            )
            self._finish_stop()
            return True
        # Nothing read, written or listed since that cut: this cut is only logged at DEBUG.
        idle = kept is not None and _same_states(states, kept.states)
        # 6. Write one region checkpoint through the store (atomic: temp file, sync, rename).
        self._check_stop_now()
        try:
            self.store.write(cut_id, states, meta={"trigger": trigger})
        except RegionError as exc:
            # Another process owns the directory (lock lost, a newer cut exists) or a state is
            # not JSON: a reset could undo that process's output, and a retry fails the same.
            phase = f"writing the checkpoint of cut {cut_id}"
            raise self._fail_locked(_Failure(None, phase, exc), why="no_reset") from exc
        except Exception as exc:
            self._adopt_if_durable(cut_id, states)
            phase = f"writing the checkpoint of cut {cut_id}"
            return self._cut_failed(cut_id, _Failure(None, phase, exc))
        # From here the cut is durable: a reset or a restart returns to it.
        self._restore_point = _RestorePoint(cut_id, states)
        if self.on_cut is not None:
            self.on_cut()
        with self._state_lock:
            self._cuts += 1
            self._last_cut_id = cut_id
        # 7. Tell every operator: effects the cut covers may become visible (publish).
        for op in self.operators:
            try:
                op.on_cut_completed(cut_id)
            except Exception as exc:
                # The reset goes back to this very cut and finishes what it promised.
                phase = f"completion of cut {cut_id}"
                return self._cut_failed(cut_id, _Failure(op.name, phase, exc))
        # Recorded, so a reset or a restart to this cut does not announce its files again.
        self._restore_point = dataclasses.replace(self._restore_point, completed=True)
        self.store.mark_completed(cut_id)
        # 7b. Output published up to some cut: operators may act on the input behind it.
        failure = self._input_published(cut_id, f"input housekeeping after cut {cut_id}")
        if failure is not None:
            return self._cut_failed(cut_id, failure)
        # 8. Retire older cuts: no reset will return to them.
        for old in self._retire:
            for op in self.operators:
                try:
                    op.retire_checkpoint(old)
                except Exception:
                    logger.warning(
                        "Operator %r could not retire cut %d", op.name, old, exc_info=True
                    )
        self._retire = [cut_id]
        # 9. Clear the reset counter: the region made progress.
        seconds = self._clock() - started
        with self._state_lock:
            self._consecutive_resets = 0
            self._traced = None
            self._last_cut_seconds = seconds
            self._last_cut_at = time.time()
            self._cut_seconds_sum += seconds
            for i, bound in enumerate(CUT_SECONDS_BUCKETS):
                if seconds <= bound:
                    self._cut_buckets[i] += 1
        self._log_cut(cut_id, seconds, trigger, idle=idle and not final)
        # 10. Resume (or, for the final cut of a graceful stop, close and stop).
        if final and not settled and any(op.changed_after_publish() for op in self.operators):
            # 7b changed state after the checkpoint (files archived leave a source's memory):
            # one more cut records it, so that the next run starts from it, not from before.
            self._set_status(RegionStatus.PROCESSING)  # permits stay blocked
            return self._cut_locked(final=True, trigger=trigger, settled=True)
        if final:
            self._finish_stop()
        else:
            self._set_status(RegionStatus.PROCESSING)
            self.permits.unblock()
        return True

    def _log_cut(self, cut_id: int, seconds: float, trigger: str, *, idle: bool) -> None:
        """The cut's line: INFO when it records something new (and for a final cut), else
        DEBUG, with one INFO line per :data:`IDLE_SUMMARY_SECONDS` of such cuts."""
        now = self._clock()
        if not idle:
            if self._idle_cuts:
                self._log_idle(now)
            self._idle_since, self._changed_cut_id = now, cut_id
            logger.info("Cut %d completed in %.3f s (trigger: %s)", cut_id, seconds, trigger)
            return
        logger.debug(
            "Cut %d completed in %.3f s (trigger: %s), nothing new", cut_id, seconds, trigger
        )
        if self._idle_since is None:  # idle from the start (recovered, nothing since)
            self._idle_since = now
        self._idle_cuts += 1
        if now - self._idle_since >= IDLE_SUMMARY_SECONDS:
            self._log_idle(now)
            self._idle_since = now

    def _log_idle(self, now: float) -> None:
        since = "" if self._changed_cut_id is None else f" since cut {self._changed_cut_id}"
        logger.info(
            "idle: %d cut(s) in %.0f s, nothing new%s",
            self._idle_cuts,
            now - (self._idle_since if self._idle_since is not None else now),
            since,
        )
        self._idle_cuts = 0

    def _adopt_if_durable(self, cut_id: int, states: dict[str, dict[str, Any]]) -> None:
        """After a failed write, ask the store whether the cut still became durable (e.g. only
        a later sync failed): a restart would resume from it, so a reset must go there too."""
        try:
            latest = self.store.latest()
        except Exception:
            logger.warning("Cannot read back the checkpoint of cut %d", cut_id, exc_info=True)
            return
        if latest is not None and latest.cut_id == cut_id:
            logger.warning("Cut %d is durable despite the write error; resetting to it", cut_id)
            self._restore_point = _RestorePoint(cut_id, states)
            if self.on_cut is not None:
                self.on_cut()
            with self._state_lock:
                self._last_cut_id = cut_id

    def _cut_failed(self, cut_id: int, failure: _Failure) -> bool:
        logger.warning("Cut %d abandoned: %s", cut_id, failure.describe())
        self._reset_locked(failure)
        return False

    # ------------------------------------------------------------------ failure and reset

    def report_failure(self, operator: str, error: BaseException) -> None:
        """An operator raised while processing: reset the region (returns when it is reset).

        May be called while holding a permit (it is handed back meanwhile): the failure is
        recorded first, so no cut can commit the failed batch's effects. Raises
        :class:`RegionFailedError` when the region gave up.
        """
        self._require_started()
        failure = _Failure(operator, "processing", error)
        with self._state_lock:
            if self._pending is None:
                self._pending = failure
            self._last_error = failure.describe()
            # The traceback once per failure in a row (the user's own code among its frames),
            # not at each reset attempt that meets it again.
            traced = self._traced != self._last_error
            self._traced = self._last_error
        logger.warning("Region failure: %s", failure.describe(), exc_info=error if traced else None)
        if self._cycle_owner == threading.get_ident():
            return  # called from inside a cycle: the cycle sees the pending failure
        self._run_cycle(self._recover_from_pending_locked, None)

    def _recover_from_pending_locked(self) -> None:
        if self._status is RegionStatus.STOPPED:
            return
        self._raise_if_terminal()
        pending = self._pending
        if pending is not None:  # else another cycle already reset for it
            self._reset_locked(pending)

    def _reset_locked(self, failure: _Failure | None) -> None:
        """Reset every operator to the last completed cut (or to the initial state).

        1. Status RESETTING; block permits.
        2. Fail at once (FAILED) when the failure is permanent
           (:func:`~region.errors.is_permanent`): a reset would meet it again.
        3. Give up (FAILED) when max_consecutive_reset_attempts attempts were made since the
           last completed cut.
        4. From the second attempt since the last completed cut on, wait reset_backoff, doubled
           per attempt (:meth:`RegionSettings.backoff`): a transient cause gets time to pass.
        5. Wait for outstanding permits, within reset_timeout.
        6. Reset every operator in topological order; an exception, or the whole reset taking
           longer than reset_timeout, fails the attempt: back to 2.
        7. Clear the pending failure, status PROCESSING, unblock permits.

        ``failure`` is ``None`` for the recovery at start, which counts as a reset attempt only
        when it has to be repeated.
        """
        self._set_status(RegionStatus.RESETTING)
        self.permits.block()
        if failure is not None:
            with self._state_lock:
                self._last_error = failure.describe()
        limit = self.settings.max_consecutive_reset_attempts
        count = failure is not None
        while True:
            self._check_stop_now()
            if count:
                assert failure is not None
                if is_permanent(failure.error):
                    raise self._fail_locked(failure, why="permanent") from failure.error
                if self._consecutive_resets >= limit:
                    raise self._fail_locked(failure) from failure.error
                self._wait_backoff(self._consecutive_resets, failure)
                with self._state_lock:
                    self._consecutive_resets += 1
                    self._resets += 1
            count = True
            started = self._clock()
            problem = self._reset_operators(started + self.settings.reset_timeout)
            if problem is None:
                break
            if failure is None:
                logger.warning("Recovery at start failed: %s", problem.describe())
            else:
                logger.warning(
                    "Reset attempt %d of %d failed: %s",
                    self._consecutive_resets,
                    limit,
                    problem.describe(),
                )
            failure = problem
            with self._state_lock:
                self._last_error = failure.describe()
        seconds = self._clock() - started
        target = self._restore_point
        with self._state_lock:
            self._pending = None
        if self.on_reset is not None:
            self.on_reset()
        where = f"cut {target.cut_id}" if target else "the initial state"
        if failure is None:
            logger.info("Region recovered to %s at start in %.3f s", where, seconds)
        else:
            logger.info(
                "Region reset to %s in %.3f s (attempt %d of %d) after %s",
                where,
                seconds,
                self._consecutive_resets,
                limit,
                failure.describe(),
            )
        self._set_status(RegionStatus.PROCESSING)
        self.permits.unblock()

    def _wait_backoff(self, done: int, failure: _Failure) -> None:
        """Before the reset attempt following ``done`` consecutive ones, sleep
        :meth:`RegionSettings.backoff`, in slices so an immediate stop is noticed.

        A failure that was the lock not renewed for too long (:class:`LockUnsafeError`) ends
        the wait as soon as the store's guard passes again: that cause is known to be gone, and
        a backoff grown during the lock's outage (a DataNode lost mid-pipeline fails heartbeats
        for tens of seconds) would otherwise hold the region up to a minute after it."""
        delay = self.settings.backoff(done)
        if delay <= 0:
            return
        logger.info("Waiting %.1f s before reset attempt %d", delay, done + 1)
        guard = self.store.guard if isinstance(failure.error, LockUnsafeError) else None
        deadline = time.monotonic() + delay
        while (remaining := deadline - time.monotonic()) > 0:
            self._check_stop_now()
            time.sleep(min(remaining, _BACKOFF_SLICE))
            if guard is not None and _passes(guard):
                logger.info("The checkpoint directory lock is safe again: resetting now")
                return

    def _reset_operators(self, deadline: float) -> _Failure | None:
        if not self.permits.wait_idle(max(0.0, deadline - self._clock())):
            error = TimeoutError(
                f"a start operator still held its permit after reset_timeout "
                f"{self.settings.reset_timeout:g} s: {activity.describe()}"
            )
            return _Failure(None, "reset", error)
        # A reset writes too (sinks truncate and delete files): not while another process may
        # own the directory; the next attempt tries again.
        unsafe = self._may_write("reset") if self._recovered else None
        if unsafe is not None:
            return unsafe
        target = self._restore_point
        slowest, slowest_seconds = "", -1.0
        for op in self.operators:
            self._check_stop_now()
            begun = self._clock()
            try:
                if target is None:
                    op.reset_to_initial_state()
                else:
                    if target.completed:
                        op.recall_completed(target.cut_id)
                    op.reset(copy.deepcopy(target.states[op.name]))
            except Exception as exc:
                return _Failure(op.name, "reset", exc)
            took = self._clock() - begun
            if took > slowest_seconds:
                slowest, slowest_seconds = op.name, took
        if target is not None:
            # Every operator is back at the cut, and the sinks finished its publication.
            failure = self._input_published(target.cut_id, "input housekeeping after the reset")
            if failure is not None:
                return failure
        elapsed = self._clock() - (deadline - self.settings.reset_timeout)
        if elapsed > self.settings.reset_timeout:
            error = TimeoutError(
                f"reset took {elapsed:.3f} s, over reset_timeout {self.settings.reset_timeout:g} s "
                f"(slowest: {slowest_seconds:.3f} s)"
            )
            return _Failure(slowest, "reset", error)
        return None

    def _may_write(self, phase: str) -> _Failure | None:
        """The store's guard (the checkpoint lock's check), as a failure of ``phase`` when it
        refuses: the operators must not write now."""
        guard = self.store.guard
        if guard is None:
            return None
        try:
            guard()
        except RegionError as exc:
            # Another process owns the directory now: a reset would undo its output.
            raise self._fail_locked(_Failure(None, phase, exc), why="no_reset") from exc
        except Exception as exc:  # passing (a lock not renewed for a while): try again later
            return _Failure(None, phase, exc)
        return None

    def _input_published(self, cut_id: int, phase: str) -> _Failure | None:
        """Tell every operator up to which cut the output is published (the smallest
        ``published_through`` after ``cut_id``), so they may act on the input behind it."""
        published = min(op.published_through(cut_id) for op in self.operators)
        for op in self.operators:
            try:
                op.on_cut_published(published)
            except Exception as exc:
                return _Failure(op.name, phase, exc)
        return None

    def _fail_locked(
        self, failure: _Failure, *, why: Literal["gave_up", "permanent", "no_reset"] = "gave_up"
    ) -> RegionFailedError:
        """Give up: status FAILED, every permit waiter raises RegionFailedError (returned).

        ``why``: ``"gave_up"`` after max_consecutive_reset_attempts resets; ``"permanent"``
        for an error no retry can repair (bad data or settings, refused access); ``"no_reset"``
        when a reset could do harm or cannot run (the checkpoint directory was taken over, the
        checkpoints cannot be read, a bug in the controller). The message carries the whole
        cause and what to do.
        """
        cause = failure.describe()
        if why == "permanent":
            message = (
                f"consistent region stopped: {cause}. A retry would fail the same way, so none "
                "was tried: remove the cause and run again (the job resumes from its last "
                "completed cut)"
            )
        elif why == "no_reset":
            message = f"consistent region stopped without a reset: {cause}"
        else:
            limit = self.settings.max_consecutive_reset_attempts
            message = (
                f"consistent region failed after {self._consecutive_resets} consecutive reset "
                f"attempt(s) (max_consecutive_reset_attempts={limit}, reset_backoff="
                f"{self.settings.reset_backoff:g} s): {cause}"
            )
        with self._state_lock:
            self._failed_message = message
            self._last_error = cause
        if self._status is not RegionStatus.FAILED:
            self._set_status(RegionStatus.FAILED)
        logger.error("%s", message)
        self.permits.cancel(lambda: RegionFailedError(message))
        return RegionFailedError(message)

    # ------------------------------------------------------------------ stop

    def request_stop_now(self) -> None:
        """Ask for an immediate stop; safe to call from a signal handler (takes no lock).

        A cut or reset running now gives up at its next step, closes the operators and stops
        the region; otherwise the next cycle does (call :meth:`stop` to make it happen now).
        """
        self._stop_now = True

    def stop(self, *, graceful: bool = True) -> bool:
        """Stop the region; ``True`` when it stopped on a final cut covering everything.

        Graceful: wait for the batches in flight, run one final cut, close the operators. If the
        final cut fails the region resets to its last cut and closes: work after that cut is
        redone at the next start. Immediate (``graceful=False``): no final cut; the operators
        are closed, publishing nothing the last completed cut does not cover.
        """
        if not graceful:
            self._stop_now = True
        # The caller's permit is not taken back: no batch follows a stop.
        self.permits.release_all()
        self._signal_trigger_stop()
        self._join_trigger()
        return self._run_cycle(lambda: self._stop_locked(graceful), False)

    def _stop_locked(self, graceful: bool) -> bool:
        if self._status is RegionStatus.STOPPED:
            return False
        if self._status is RegionStatus.FAILED:
            self._close_operators()
            return False
        if graceful and not self._stop_now and self._status is RegionStatus.PROCESSING:
            try:
                if self._cut_locked(final=True, trigger="stop"):
                    return True
            except RegionFailedError:
                self._close_operators()
                raise
        self._stop_immediately_locked()
        return False

    def _stop_immediately_locked(self) -> None:
        self.permits.block()
        if not self.permits.wait_idle(self.settings.drain_timeout):
            logger.warning("Stopping while a start operator still holds its permit")
        self._close_operators()
        if self._status not in (RegionStatus.STOPPED, RegionStatus.FAILED):
            self._set_status(RegionStatus.STOPPED)
        self.permits.cancel(_stopped_error)
        logger.info("Region stopped without a final cut (last cut: %s)", self._last_cut_id)

    def _finish_stop(self) -> None:
        """After the final cut of a graceful stop: close the operators and stop."""
        self._close_operators()
        self._set_status(RegionStatus.STOPPED)
        self.permits.cancel(_stopped_error)
        self._signal_trigger_stop()

    def _close_operators(self) -> None:
        if self._closed:
            return
        self._closed = True
        for op in self.operators:
            try:
                op.close()
            except Exception:
                logger.warning("Operator %r failed to close", op.name, exc_info=True)

    # ------------------------------------------------------------------ periodic trigger

    def _arm_trigger(self) -> None:
        """A cycle ended: the next periodic cut is due one period from now."""
        with self._trigger_cond:
            self._last_cycle_end = self._clock()
            self._trigger_cond.notify_all()

    def _join_trigger(self) -> None:
        """Wait for the trigger thread to end (never from inside a cycle: it may need one)."""
        thread = self._trigger_thread
        if thread is not None and thread is not threading.current_thread():
            thread.join()

    def _signal_trigger_stop(self) -> None:
        with self._trigger_cond:
            self._trigger_stop = True
            self._trigger_cond.notify_all()

    def _trigger_loop(self) -> None:
        period = self.settings.period
        while True:
            with self._trigger_cond:
                while not self._trigger_stop:
                    remaining = self._last_cycle_end + period - self._clock()
                    if remaining <= 0:
                        break
                    self._trigger_cond.wait(remaining)
                if self._trigger_stop:
                    return
                armed_at = self._last_cycle_end
            if self._status in (RegionStatus.FAILED, RegionStatus.STOPPED):
                return
            try:
                self._run_cycle(functools.partial(self._tick_locked, armed_at), False)
            except RegionError:
                return  # failed or stopped: the pipeline sees it through its permits
            except Exception:
                logger.exception("Periodic trigger stopped by an unexpected error")
                return

    def _tick_locked(self, armed_at: float) -> bool:
        # Ignore the tick when the region is not processing, or when another cycle ended
        # meanwhile (the period counts from the end of that one).
        due = self._last_cycle_end == armed_at or (
            self._clock() >= self._last_cycle_end + self.settings.period
        )
        if self._status is RegionStatus.PROCESSING and due:
            return self._cut_locked(final=False, trigger="periodic")
        return False


def _passes(check: Callable[[], None]) -> bool:
    """Whether ``check`` returns without raising."""
    try:
        check()
    except Exception:
        return False
    return True


def _stopped_error() -> BaseException:
    return RegionStoppedError("the region is stopped: no more records are accepted")
