"""The state-handler protocol every operator of a consistent region implements.

Lifecycle (the controller is the only caller of these methods):

1. After construction the operator is *not* ready: the controller first calls either
   :meth:`StateHandler.reset` (a checkpoint exists) or :meth:`StateHandler.reset_to_initial_state`
   (none does). Start operators get no permit before that call returns.
2. While the region is PROCESSING, tuples flow; the state-handler methods are never called
   concurrently with tuple processing of the same region (the controller holds every permit).
3. A cut calls, in topological order, :meth:`drain` on every operator, then :meth:`checkpoint` on
   every operator, then writes one region checkpoint, then :meth:`on_cut_completed` on every
   operator (and records that they all returned), then :meth:`retire_checkpoint` for cuts no
   longer needed.
4. A failure anywhere calls :meth:`reset` (or :meth:`reset_to_initial_state`) on every operator,
   preceded by :meth:`recall_completed` when the cut's completion is known to have finished.

State is a small plain value: a ``dict`` of JSON primitives (str, int, float, bool, None, lists
and dicts of those), written to the checkpoint store. Spark does not use these states: its
offsets (``operators.spark.source``) carry only the scan cursor's part, in Spark's offset log.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

__all__ = ["Batch", "SinkOperator", "StartOperator", "State", "StateHandler"]

State = Mapping[str, Any]


class StateHandler(ABC):
    """An operator whose state is captured by consistent cuts."""

    #: Unique within a region; keys the operator's state in the region checkpoint.
    name: str

    @abstractmethod
    def drain(self) -> None:
        """Push everything buffered to its destination and make it durable.

        Called at the start of a cut, after every permit is back. May be called before the first
        tuple and must then do nothing. For a sink: write buffers and *sync* (not only flush).
        Raising resets the region.
        """

    @abstractmethod
    def checkpoint(self, cut_id: int) -> State:
        """Return the state to restore on reset. Called after every operator drained.

        Must not crash before the first tuple, before the first file is open, or twice in a row.
        The returned value is owned by the caller: return a fresh dict, not internal state.
        """

    @abstractmethod
    def reset(self, state: State) -> None:
        """Return to ``state`` (a value this operator's :meth:`checkpoint` returned, possibly in an
        earlier process). Undo every effect made after that checkpoint (a sink in exactly-once mode
        truncates and deletes), redo any effect the cut promised but did not finish (publishing),
        and drop in-flight work. Must be idempotent: a reset may be repeated after a failed reset.
        """

    @abstractmethod
    def reset_to_initial_state(self) -> None:
        """Like :meth:`reset` when no cut has ever completed: back to the state at construction,
        undoing effects of earlier attempts. Idempotent."""

    def on_cut_completed(self, cut_id: int) -> None:  # noqa: B027 - optional hook
        """The region checkpoint of ``cut_id`` is durable: effects it covers may be made visible
        (a sink publishes files closed before the cut). A crash before or during this call is
        repaired by :meth:`reset` with that cut's state, so it must be safe to run twice."""

    def published_through(self, cut_id: int) -> int:
        """After the completion of ``cut_id`` (or a reset to it): the greatest cut id ``p`` such
        that every record this operator received before cut ``p`` is published (readers see
        it). Default ``cut_id``; a sink whose open file holds records gives an earlier one."""
        return cut_id

    def on_cut_published(self, cut_id: int) -> None:  # noqa: B027 - optional hook
        """Every record that reached the sinks before cut ``cut_id`` is published: the smallest
        :meth:`published_through` of the operators after a completed cut, or after a reset to
        a cut (the reset finished what it promised). Effects on the *input* those records came
        from may happen now (a source archives the files it read before that cut). Not called
        again for the same id when it raises: the next completed cut, or the next reset, calls
        it again, so an operator keeps what it still owes in its state. Must be safe to run
        twice, and with an id smaller than one before."""

    def changed_after_publish(self) -> bool:
        """Whether :meth:`on_cut_published` changed the state since the last :meth:`checkpoint`
        (a source that archived a file forgets its name). The final cut of a graceful stop is
        then followed by one more, so that the next run starts from that state."""
        return False

    def recall_completed(self, cut_id: int) -> None:  # noqa: B027 - optional hook
        """Called just before :meth:`reset` to the state of ``cut_id`` when that cut's
        :meth:`on_cut_completed` is known to have run to the end, in this process or in one
        that recorded it before crashing: what it announced (``on_published``) must not be
        announced again. A reset without this call knows nothing either way."""

    def bind_job(self, checkpoints: str, job_id: str | None = None) -> None:  # noqa: B027
        """Optional hook, called once before the region first resets with where the job keeps
        its checkpoints (a URI) and their id when the runner knows it: an operator that writes
        output claims it for this job, so that a second job writing the same place is refused
        (ConfigError) before anything is written."""

    def retire_checkpoint(self, cut_id: int) -> None:  # noqa: B027 - optional hook
        """The checkpoint of ``cut_id`` will never be restored again: drop anything kept for it."""

    def close(self) -> None:  # noqa: B027 - optional hook
        """Release resources at stop (after the final cut of a graceful stop). Not a cut:
        must not publish or delete anything the last cut does not cover."""


@dataclass(slots=True)
class Batch:
    """Records moving through an in-process pipeline, with the punctuation that follows them.

    ``records`` are ``str`` (line mode) or ``bytes`` (binary mode) for the file source, mappings
    (rows with columns; a sequence that keeps them as columns), or paths
    for the directory scan. ``punctuation`` marks the end of a window (the end of a file).
    ``origin`` names the file the records came from, when there is one. ``size`` is the number
    of input bytes the records were read from, when the source counts them (line ends included).
    ``rejected`` are what the source read and could not make a record of (each naming where and
    why): the transforms never see them, and each sink routes them to its rejects, covered by
    the same cut as the records.
    """

    records: Sequence[Any] = field(default_factory=list)
    punctuation: bool = False
    origin: str | None = None
    size: int | None = None
    rejected: list[Any] = field(default_factory=list)


class StartOperator(StateHandler):
    """An operator that starts the region: the runtime pulls batches from it under a permit."""

    @abstractmethod
    def next_batch(self, max_records: int) -> Batch | None:
        """Return up to ``max_records`` records, or ``None`` when nothing is available now.

        Called only while the caller holds a permit, so no cut or reset runs meanwhile: whatever
        this call returns is covered by the next cut. Returning a batch with ``punctuation`` marks
        a point where an operator-driven region cuts (the end of a file).
        """

    def exhausted(self) -> bool:
        """``True`` once no more input can ever come (a single-file source at its end).

        A directory scan is never exhausted; ``available_now`` runs stop when
        :meth:`next_batch` returns ``None`` instead.
        """
        return False

    def holding(self) -> bool:
        """``True`` while input read is held back for a bounded time (a last line waiting
        for its newline): an ``available_now`` run waits for it instead of ending."""
        return False

    def poll_interval(self) -> float:
        """Seconds the runtime waits after ``next_batch`` returned ``None``."""
        return 0.05


class SinkOperator(StateHandler):
    """An operator at the end of a pipeline."""

    @abstractmethod
    def write(self, batch: Batch) -> None:
        """Write the batch's records, then handle its punctuation (e.g. close the file).

        Called while the caller holds a permit. A record that cannot be written raises an error
        naming the record and the file; the region then resets.
        """

    def on_tick(self, now: float) -> None:
        """Called regularly (also when idle, under a permit) so timers such as ``time_per_file``
        fire without new data. ``now`` is ``time.time()``."""

    def finish(self) -> None:
        """The input has ended (a graceful stop, or the end of an ``available_now`` run): close
        open outputs so the final cut, which follows under the same rules as any cut, covers and
        publishes them. Called under a permit; may be called again if that cut is reset."""
