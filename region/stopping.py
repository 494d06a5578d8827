"""Whether this process is stopping its job, for code that could otherwise wait forever.

A filesystem client told to retry a lost connection without end (``InfiniteRetry``) pauses
between attempts; a stop of the job (SIGINT / SIGTERM through :class:`region.signals.StopSignals`,
or ``PipelineRunner.request_stop``) must end that wait, or the graceful stop it asked for would
never come. The runners raise the flag here; such waits read it.

A plain module attribute, not an Event: it is set from signal handlers, where taking a lock could
deadlock. One flag per process: a runner clears it when it starts.
"""

from __future__ import annotations

__all__ = ["clear", "request", "requested"]

_requested = False


def request() -> None:
    """A stop was asked for. Safe from signal handlers (no lock, no logging)."""
    global _requested
    _requested = True


def clear() -> None:
    """A job starts: earlier stops no longer apply."""
    global _requested
    _requested = False


def requested() -> bool:
    return _requested
