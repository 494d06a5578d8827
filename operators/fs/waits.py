"""Waiting out a condition the cluster ends by itself (a NameNode in safe mode, a lease being
recovered): doubling pauses, never past a deadline. And the pauses between connection attempts
(``reconnection_policy``), which a stop of the job ends when they would go on without end."""

from __future__ import annotations

import errno
import time

from region import stopping

__all__ = ["Patience", "reconnect_pause", "retry_delay"]


class Patience:
    """Pauses of ``first`` seconds, doubled up to ``most``, until ``timeout`` seconds after
    construction."""

    def __init__(self, timeout: float, *, first: float = 0.05, most: float = 2.0) -> None:
        self.timeout = timeout
        self._deadline = time.monotonic() + timeout
        self._delay = first
        self._most = most

    def pause(self) -> bool:
        """Sleep the next pause and return ``True``; ``False`` (no sleep) once the deadline has
        passed, when the caller gives up."""
        left = self._deadline - time.monotonic()
        if left <= 0:
            return False
        time.sleep(min(self._delay, left))
        self._delay = min(self._delay * 2, self._most)
        return True


#: Pauses are slept in slices this long, so that a stop ends them promptly.
_SLICE = 0.1


def retry_delay(backoff: float, attempt: int) -> float:
    """The pause before retry ``attempt`` (1, 2, ...): ``backoff`` doubled per attempt, at most
    :data:`~operators.fs.settings.MAX_RETRY_DELAY`."""
    from .settings import MAX_RETRY_DELAY

    doublings = attempt - 1
    if backoff <= 0:
        return 0.0
    if doublings >= 1024 or backoff * 2.0**doublings >= MAX_RETRY_DELAY:  # 2.0**1024 overflows
        return MAX_RETRY_DELAY
    return backoff * 2.0**doublings


def reconnect_pause(seconds: float, *, interruptible: bool, what: str, where: str) -> None:
    """Sleep ``seconds`` before a connection is tried again.

    ``interruptible`` (a retry without end, ``InfiniteRetry``): a stop of the job
    (:mod:`region.stopping`) ends the pause with ``InterruptedError`` naming ``where`` and
    ``what`` was being retried. A bounded retry ends by itself and is never cut short: a
    graceful stop's final cut still gets its retries. Ctrl-C without the runners' handlers
    raises ``KeyboardInterrupt`` from here as from any sleep.
    """
    deadline = time.monotonic() + seconds
    while True:
        if interruptible and stopping.requested():
            msg = f"{what}: stopped while retrying the connection"
            raise InterruptedError(errno.EINTR, msg, where)
        left = deadline - time.monotonic()
        if left <= 0:
            return
        time.sleep(min(left, _SLICE))
