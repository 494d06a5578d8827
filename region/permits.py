"""Permits: how start operators and the region controller take turns.

A start operator's thread holds a permit while it produces and delivers one *batch* of records
(``with permits.hold(): ...``); a permit per record would cost more than the record in Python.
The controller :meth:`~Permits.block`\\ s new permits, waits until every outstanding one is back
(:meth:`~Permits.wait_idle`), runs a cut or a reset while no record moves, then
:meth:`~Permits.unblock`\\ s. Permits start blocked: after a (re)start nothing flows until the first
reset has restored the operators.

When the region fails or stops for good, :meth:`~Permits.cancel` makes every waiting and future
:meth:`~Permits.acquire` raise, so no thread waits forever for a region that will not resume.

Each thread's permits are counted, so a thread that must wait for the controller while holding a
permit (``make_consistent()``, a failure report) can hand them back meanwhile with
:meth:`~Permits.released`. That is the rule that keeps the region free of deadlocks: *no thread
waits for the controller while holding a permit*.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

__all__ = ["Permits"]


class Permits:
    """A gate that start operators pass per batch and the controller closes for cuts and resets."""

    def __init__(self, *, blocked: bool = True) -> None:
        self._cond = threading.Condition(threading.Lock())
        self._blocked = blocked
        self._outstanding = 0
        self._cancelled: Callable[[], BaseException] | None = None
        self._local = threading.local()

    # ------------------------------------------------------------------ start-operator side

    def _held(self) -> int:
        held: int = getattr(self._local, "held", 0)
        return held

    @property
    def held_by_current_thread(self) -> int:
        """How many permits the calling thread holds (0 or 1 in the in-process runtime)."""
        return self._held()

    def acquire(self, timeout: float | None = None) -> bool:
        """Take a permit, waiting while permits are blocked. ``False`` when ``timeout`` passed.

        Raises the region's error (see :meth:`cancel`) when the region will never resume.
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._cond:
            while self._blocked and self._cancelled is None:
                remaining = None if deadline is None else deadline - time.monotonic()
                if remaining is not None and remaining <= 0:
                    return False
                self._cond.wait(remaining)
            if self._cancelled is not None:
                raise self._cancelled()
            self._outstanding += 1
            self._local.held = self._held() + 1
        return True

    def release(self) -> None:
        """Give back a permit taken by this thread with :meth:`acquire`."""
        held = self._held()
        if held <= 0:
            raise RuntimeError("release() without a permit held by this thread")
        self._local.held = held - 1
        with self._cond:
            self._outstanding -= 1
            if self._outstanding == 0:
                self._cond.notify_all()

    @contextmanager
    def hold(self) -> Iterator[None]:
        """Hold a permit for the block (one batch). Waits while a cut or reset runs."""
        self.acquire()
        try:
            yield
        finally:
            # A released() block inside may have failed to take the permit back (region failed).
            if self._held() > 0:
                self.release()

    @contextmanager
    def released(self) -> Iterator[None]:
        """Give back the calling thread's permits for the block and take them back after it.

        Taking them back waits for the controller to unblock; when the region failed meanwhile
        the error of :meth:`cancel` is raised and the thread holds no permit.
        """
        count = self._held()
        for _ in range(count):
            self.release()
        try:
            yield
        finally:
            for _ in range(count):
                self.acquire()

    def release_all(self) -> int:
        """Give back every permit of the calling thread for good (at stop); how many."""
        count = self._held()
        for _ in range(count):
            self.release()
        return count

    # ------------------------------------------------------------------ controller side

    @property
    def blocked(self) -> bool:
        return self._blocked

    @property
    def outstanding(self) -> int:
        """Permits currently held by any thread."""
        return self._outstanding

    def block(self) -> None:
        """Refuse new permits (those held stay valid until given back)."""
        with self._cond:
            self._blocked = True

    def wait_idle(self, timeout: float | None = None) -> bool:
        """Wait until no permit is held; ``False`` when ``timeout`` seconds passed first.

        Call after :meth:`block`, never while the calling thread holds a permit itself.
        """
        if self._held() > 0:
            raise RuntimeError("wait_idle() from a thread that holds a permit would never return")
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._cond:
            while self._outstanding > 0:
                remaining = None if deadline is None else deadline - time.monotonic()
                if remaining is not None and remaining <= 0:
                    return False
                self._cond.wait(remaining)
            return True

    def unblock(self) -> None:
        """Let start operators take permits again."""
        with self._cond:
            if self._cancelled is None:
                self._blocked = False
                self._cond.notify_all()

    def cancel(self, error: Callable[[], BaseException]) -> None:
        """Block for good: every waiting and later :meth:`acquire` raises ``error()``."""
        with self._cond:
            self._blocked = True
            self._cancelled = error
            self._cond.notify_all()
