"""When an output file is complete: one rolling policy for both engines' sinks.

A file rolls (closes, to be published) after ``tuples`` records; or once it holds ``bytes``
bytes, the record that reaches the limit being its last (a file never ends inside a record, and
a record larger than the limit makes a file of its own); or ``seconds`` after it was opened
(checked when records arrive and on timer ticks: an idle sink still rolls); or at a punctuation
(the end of an input file) with ``on_punctuation``; and, whatever the limits, once no record
came for ``idle`` seconds: records read are published within a bounded time when the input
pauses (Flink's FileSink rolls an inactive part file after 60 s too). Every file holds at
least one record: files are opened lazily, when a record is about to be written.

The in-process sink asks with Python lists, the Spark sink with numpy arrays of sizes; the
questions take any sorted sequence, so both ask the same object.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass
from typing import Any, Protocol

__all__ = ["RollingPolicy", "Sizes"]


class Sizes(Protocol):
    """Ascending cumulative sizes: a list, or a numpy array."""

    def __len__(self) -> int: ...

    def __getitem__(self, index: int, /) -> Any: ...


@dataclass(frozen=True, slots=True)
class RollingPolicy:
    tuples: int | None = None
    bytes: int | None = None
    seconds: float | None = None
    on_punctuation: bool = False
    idle: float | None = None

    def room(self, tuples: int) -> int | None:
        """How many more records a file holding ``tuples`` records may take by count (``None``:
        no count limit). 0 or less: it must roll first (a run restored from a checkpoint taken
        with a larger limit)."""
        return None if self.tuples is None else self.tuples - tuples

    def fitting(self, cumulative: Sizes, size: int) -> int:
        """How many of the next records go into a file holding ``size`` bytes, given their
        cumulative encoded sizes (``cumulative[i]``: the bytes of records 0..i): all of them, or
        up to and including the one that reaches the byte limit. At least one."""
        if self.bytes is None or not len(cumulative):
            return len(cumulative)
        reach = bisect.bisect_left(cumulative, self.bytes - size)
        return max(1, min(len(cumulative), reach + 1))

    def crosses(self, size: int, added: int) -> bool:
        """Whether ``added`` bytes written to a file of ``size`` bytes reach the byte limit (then
        :meth:`fitting` says where, record by record)."""
        return self.bytes is not None and size + added >= self.bytes

    def full(self, tuples: int, size: int) -> bool:
        """Whether a file holding ``tuples`` records and ``size`` bytes is complete."""
        return (self.tuples is not None and tuples >= self.tuples) or (
            self.bytes is not None and size >= self.bytes
        )

    def expired(self, opened_at: float, now: float) -> bool:
        """Whether a file opened at ``opened_at`` (seconds) is due at ``now``."""
        return self.seconds is not None and now - opened_at >= self.seconds

    def quiet(self, written_at: float, now: float) -> bool:
        """Whether a file last written at ``written_at`` (seconds) has waited ``idle``."""
        return self.idle is not None and now - written_at >= self.idle
