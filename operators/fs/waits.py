"""Waiting out a condition the cluster ends by itself (a NameNode in safe mode, a lease being
recovered): doubling pauses, never past a deadline."""

from __future__ import annotations

import time

__all__ = ["Patience"]


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
