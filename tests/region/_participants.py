"""Small region participants for the region tests (not the product operators).

- :class:`ListSource`: a replayable start operator over a fixed list; state = next index.
- :class:`FileSink`: appends each record as a line to a real file with ``os.write``; state = file
  size. exactly_once: a reset truncates to the checkpointed size; at_least_once: a reset keeps
  what was written and appends (the IBM behaviour).
- :class:`Probe`: a state handler that journals every call and fails on demand.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Sequence
from typing import Any

from operators.testing import ManualClock
from region.settings import RegionSettings
from region.state import Batch, SinkOperator, StartOperator, State, StateHandler

__all__ = [
    "Crash",
    "FileSink",
    "ListSource",
    "Probe",
    "expected_lines",
    "region_settings",
    "wait_until",
]

Journal = list[tuple[str, str]]


class Crash(BaseException):
    """Simulates the death of the process at a point inside a call (not an operator error)."""


def expected_lines(records: Sequence[str]) -> bytes:
    return "".join(f"{r}\n" for r in records).encode()


class _Faults:
    """``arm(method, error)``: the next call of ``method`` raises ``error`` (once, or ``times``)."""

    def __init__(self) -> None:
        self._armed: dict[str, tuple[BaseException | Callable[[], None], int]] = {}

    def arm(self, method: str, error: BaseException | Callable[[], None], times: int = 1) -> None:
        self._armed[method] = (error, times)

    def fire(self, method: str) -> None:
        armed = self._armed.get(method)
        if armed is None:
            return
        error, times = armed
        if times <= 1:
            del self._armed[method]
        else:
            self._armed[method] = (error, times - 1)
        if isinstance(error, BaseException):
            raise error
        error()


class ListSource(StartOperator):
    """Records from a fixed list. ``punctuate_every``: batches end at multiples of it, with
    punctuation (a "file" boundary). ``finite``: :meth:`exhausted` once the list is done."""

    def __init__(
        self,
        records: Sequence[str],
        *,
        name: str = "source",
        punctuate_every: int = 0,
        finite: bool = True,
        journal: Journal | None = None,
        on_batch: Callable[[int], None] | None = None,
    ) -> None:
        self.name = name
        self.records = list(records)
        self.index = 0
        self.punctuate_every = punctuate_every
        self.finite = finite
        self.journal = journal
        self.on_batch = on_batch
        self.faults = _Faults()
        self.polls = 0

    def _log(self, call: str) -> None:
        if self.journal is not None:
            self.journal.append((self.name, call))

    def next_batch(self, max_records: int) -> Batch | None:
        self.faults.fire("next_batch")
        if self.index >= len(self.records):
            self.polls += 1
            if self.on_batch is not None:
                self.on_batch(self.index)
            return None
        end = min(self.index + max_records, len(self.records))
        punctuation = False
        if self.punctuate_every:
            boundary = (self.index // self.punctuate_every + 1) * self.punctuate_every
            if end >= boundary:
                end, punctuation = boundary, True
        batch = Batch(self.records[self.index : end], punctuation)
        self.index = end
        if self.on_batch is not None:
            self.on_batch(self.index)
        return batch

    def exhausted(self) -> bool:
        return self.finite and self.index >= len(self.records)

    def poll_interval(self) -> float:
        return 0.001

    def drain(self) -> None:
        self._log("drain")
        self.faults.fire("drain")

    def checkpoint(self, cut_id: int) -> State:
        self._log("checkpoint")
        self.faults.fire("checkpoint")
        return {"index": self.index}

    def reset(self, state: State) -> None:
        self._log("reset")
        self.faults.fire("reset")
        self.index = int(state["index"])

    def reset_to_initial_state(self) -> None:
        self._log("reset_to_initial_state")
        self.faults.fire("reset")
        self.index = 0

    def on_cut_completed(self, cut_id: int) -> None:
        self._log("on_cut_completed")
        self.faults.fire("on_cut_completed")

    def retire_checkpoint(self, cut_id: int) -> None:
        self._log(f"retire {cut_id}")

    def close(self) -> None:
        self._log("close")


class FileSink(SinkOperator):
    """Each record becomes one line of ``path``, written with ``os.write`` (so a crash of the
    process loses nothing already written, like a real sink's flushed bytes).

    ``torn_writes``: each line is written in two ``os.write`` calls, so a kill can tear a record.
    ``fsync``: drain syncs the file (off for the cheap in-memory-filesystem property tests).
    """

    def __init__(
        self,
        path: str,
        *,
        mode: str = "exactly_once",
        name: str = "sink",
        torn_writes: bool = False,
        fsync: bool = True,
        journal: Journal | None = None,
    ) -> None:
        if mode not in ("exactly_once", "at_least_once"):
            raise ValueError(f"mode {mode!r}")
        self.name = name
        self.path = path
        self.mode = mode
        self.torn_writes = torn_writes
        self.fsync = fsync
        self.journal = journal
        self.faults = _Faults()
        self.ticks = 0
        self.closed = False
        self.written = 0
        self._fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)

    def _log(self, call: str) -> None:
        if self.journal is not None:
            self.journal.append((self.name, call))

    def write(self, batch: Batch) -> None:
        for record in batch.records:
            data = f"{record}\n".encode()
            if self.torn_writes:
                half = len(data) // 2
                os.write(self._fd, data[:half])
                self.faults.fire("write")  # a failure here leaves half a record behind
                os.write(self._fd, data[half:])
            else:
                self.faults.fire("write")
                os.write(self._fd, data)
            self.written += 1

    def on_tick(self, now: float) -> None:
        self.ticks += 1

    def finish(self) -> None:
        self._log("finish")
        self.faults.fire("finish")

    def size(self) -> int:
        return os.fstat(self._fd).st_size

    def drain(self) -> None:
        self._log("drain")
        self.faults.fire("drain")
        if self.fsync:
            os.fsync(self._fd)

    def checkpoint(self, cut_id: int) -> State:
        self._log("checkpoint")
        self.faults.fire("checkpoint")
        return {"size": self.size()}

    def reset(self, state: State) -> None:
        self._log("reset")
        self.faults.fire("reset")
        if self.mode == "exactly_once":
            os.ftruncate(self._fd, int(state["size"]))

    def reset_to_initial_state(self) -> None:
        self._log("reset_to_initial_state")
        self.faults.fire("reset")
        if self.mode == "exactly_once":
            os.ftruncate(self._fd, 0)

    def on_cut_completed(self, cut_id: int) -> None:
        self._log("on_cut_completed")
        self.faults.fire("on_cut_completed")

    def retire_checkpoint(self, cut_id: int) -> None:
        self._log(f"retire {cut_id}")

    def close(self) -> None:
        self._log("close")
        if not self.closed:
            self.closed = True
            os.close(self._fd)

    def crash(self) -> None:
        """Die: the descriptor goes away as with a killed process; nothing else happens."""
        if not self.closed:
            self.closed = True
            os.close(self._fd)


class Probe(StateHandler):
    """Journals every call into a shared list; ``faults`` makes a call fail; ``clock`` and
    ``drain_seconds`` make a drain take (fake) time. State = number of checkpoints taken."""

    def __init__(
        self,
        name: str,
        journal: Journal,
        *,
        clock: ManualClock | None = None,
        drain_seconds: float = 0.0,
    ) -> None:
        self.name = name
        self.journal = journal
        self.clock = clock
        self.drain_seconds = drain_seconds
        self.faults = _Faults()
        self.counter = 0
        self.restored: Any = None
        #: Cut ids of recall_completed calls (kept out of the journal of calls).
        self.recalled: list[int] = []

    def drain(self) -> None:
        self.journal.append((self.name, "drain"))
        if self.clock is not None:
            self.clock.advance(self.drain_seconds)
        self.faults.fire("drain")

    def checkpoint(self, cut_id: int) -> State:
        self.journal.append((self.name, f"checkpoint {cut_id}"))
        self.faults.fire("checkpoint")
        self.counter += 1
        return {"counter": self.counter, "cut": cut_id}

    def reset(self, state: State) -> None:
        self.journal.append((self.name, f"reset {state['cut']}"))
        self.faults.fire("reset")
        self.counter = int(state["counter"])
        self.restored = dict(state)

    def reset_to_initial_state(self) -> None:
        self.journal.append((self.name, "reset_to_initial_state"))
        self.faults.fire("reset")
        self.counter = 0
        self.restored = None

    def on_cut_completed(self, cut_id: int) -> None:
        self.journal.append((self.name, f"on_cut_completed {cut_id}"))
        self.faults.fire("on_cut_completed")

    def recall_completed(self, cut_id: int) -> None:
        self.recalled.append(cut_id)

    def retire_checkpoint(self, cut_id: int) -> None:
        self.journal.append((self.name, f"retire {cut_id}"))

    def close(self) -> None:
        self.journal.append((self.name, "close"))


def region_settings(**kwargs: Any) -> RegionSettings:
    """Operator-driven by default: the tests decide when cuts happen. No wait between resets
    (the tests of reset_backoff set it)."""
    values: dict[str, Any] = {"trigger": "operator_driven", "retain": 3, "reset_backoff": 0}
    values.update(kwargs)
    return RegionSettings(**values)


def wait_until(condition: Callable[[], bool], what: str, limit: float = 30.0) -> None:
    """Wait for a condition another thread or process makes true (the limit only prevents a
    hung test run; it is not an assertion about speed)."""
    deadline = time.monotonic() + limit
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"gave up waiting for {what}")
        time.sleep(0.002)
