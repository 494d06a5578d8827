"""SIGINT / SIGTERM for a running job, one rule for every runner: the first signal asks for a
graceful stop (a final cut), the second for an immediate one (no final cut: the next start
resumes from the last cut), a third gets the default action (KeyboardInterrupt, termination).

The handlers only call the two callbacks given, which must take no lock and not log: the
interrupted code may hold any lock. They are installed only on the main thread (Python allows
no other) and restored when the ``with`` block ends. A program that ends with its job (the
command line) runs it inside :func:`held_until_exit`: a run a signal stopped then leaves them in
place, and the count goes on, so a second signal that comes after the run ended (nothing is
left to stop) does not kill a process whose stop completed; a third still gets the default
action. :func:`last_signal` says which signal stopped the run.
"""

from __future__ import annotations

import logging
import signal
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import FrameType
from typing import Any

from region import stopping

__all__ = ["StopSignals", "held_until_exit", "last_signal"]

logger = logging.getLogger(__name__)

_SIGNALS = (signal.SIGINT, signal.SIGTERM)

#: The newest stop signal received in this process (a plain attribute: set from the handler).
_last: int | None = None
#: Handlers stay in place after a run a signal stopped (see the module doc).
_hold = False


@contextmanager
def held_until_exit() -> Iterator[None]:
    """Run a job whose end ends the process (see the module doc). When the block ends after a
    signal stopped the job, SIGINT and SIGTERM are ignored from then on: the process only says
    how the job ended and exits (the interpreter's exit would put the default actions back, and
    a late signal would make a stop that completed look like a crash)."""
    global _hold, _last
    _hold, _last = True, None
    try:
        yield
    finally:
        _hold = False
        if last_signal() is not None and threading.current_thread() is threading.main_thread():
            for signum in _SIGNALS:
                signal.signal(signum, signal.SIG_IGN)


def last_signal() -> int | None:
    """The number of the newest SIGINT / SIGTERM a :class:`StopSignals` received, or ``None``."""
    return _last


class StopSignals:
    """``with StopSignals(graceful, immediate).installed(): ...`` — see the module doc."""

    def __init__(self, graceful: Callable[[], None], immediate: Callable[[], None]) -> None:
        self._graceful = graceful
        self._immediate = immediate
        #: Signals received so far (a plain attribute: written from the handler).
        self.received = 0
        self._previous: dict[int, Any] = {}

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        global _last
        _last = signum
        self.received += 1
        stopping.request()  # ends waits that would last forever (region.stopping)
        if self.received == 1:
            self._graceful()
            return
        self._immediate()
        self._restore()  # the next one gets the default action

    @contextmanager
    def installed(self) -> Iterator[None]:
        global _last
        stopping.clear()
        _last = None
        if threading.current_thread() is threading.main_thread():
            for signum in _SIGNALS:
                self._previous[signum] = signal.signal(signum, self._on_signal)
        else:
            logger.debug("Not on the main thread: SIGINT/SIGTERM handlers not installed")
        try:
            yield
        finally:
            if not (self.received and _hold):
                self._restore()

    def _restore(self) -> None:
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)
        self._previous = {}
