"""What each pipeline thread is doing right now, for messages about a thread that does not come
back: a read that blocks (a named pipe, a hung NFS mount or DataNode), a sink write that hangs.

The thread running the operators wraps each operator call in :func:`doing` (the runtime names the
stage, an operator may name the step more precisely inside it: which file, at which byte). The
controller names the activity when a permit is held past a timeout, and the runtime when a stop
cannot complete (see :class:`region.runtime.PipelineRunner`).

A plain dict keyed by thread id, no lock: a single item's assignment is atomic in CPython, and
readers only copy it.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

__all__ = ["Doing", "describe", "doing", "of"]


@dataclass(frozen=True, slots=True, eq=False)
class Doing:
    """One call in progress: what it is, since when (``time.monotonic()``), on which thread."""

    what: str
    since: float
    thread: str

    def describe(self, now: float | None = None) -> str:
        seconds = (time.monotonic() if now is None else now) - self.since
        return f"{self.what} (thread {self.thread}, for {seconds:.1f} s)"


_now: dict[int, Doing] = {}


@contextmanager
def doing(what: str) -> Iterator[None]:
    """Record ``what`` as the calling thread's activity for the block; the enclosing one (if
    any) is restored after it."""
    ident = threading.get_ident()
    outer = _now.get(ident)
    _now[ident] = Doing(what, time.monotonic(), threading.current_thread().name)
    try:
        yield
    finally:
        if outer is None:
            _now.pop(ident, None)
        else:
            _now[ident] = outer


def of(ident: int | None) -> Doing | None:
    """The activity of the thread ``ident`` (``threading.get_ident()``), if it is in one."""
    return None if ident is None else _now.get(ident)


def describe() -> str:
    """Every activity in progress, or ``"no operator call in progress"``."""
    now = time.monotonic()
    current = list(_now.values())
    if not current:
        return "no operator call in progress"
    return "; ".join(d.describe(now) for d in current)
