"""A call run on a thread of its own, its result or error handed back to whoever waits for it:
the read of a source's next chunk while the chunk before is decoded, a sink's HDFS close while
the next file is written."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Generic, TypeVar

__all__ = ["Background"]

T = TypeVar("T")


class Background(Generic[T]):
    """``call()`` started now on a daemon thread named ``name``. :meth:`result` waits and gives
    its value or raises what it raised, as the call made in place would; :meth:`error` waits and
    gives the error instead of raising it. ``BaseException`` is caught too, so that nothing the
    call raises is lost on its thread."""

    def __init__(self, call: Callable[[], T], name: str) -> None:
        self._value: T | None = None
        self._error: BaseException | None = None
        self._thread: threading.Thread | None = threading.Thread(
            target=self._run, args=(call,), name=name, daemon=True
        )
        self._thread.start()

    @classmethod
    def done(cls, value: T) -> Background[T]:
        """A call already made, with ``value``: no thread."""
        ready: Background[T] = cls.__new__(cls)
        ready._value, ready._error, ready._thread = value, None, None
        return ready

    def _run(self, call: Callable[[], T]) -> None:
        try:
            self._value = call()
        except BaseException as exc:  # handed to the thread that waits
            self._error = exc

    def error(self) -> BaseException | None:
        """Wait for the call to end; what it raised, if anything."""
        if self._thread is not None:
            self._thread.join()
        return self._error

    def result(self) -> T:
        """Wait for the call to end; its value, or raise what it raised."""
        error = self.error()
        if error is not None:
            raise error
        return self._value  # type: ignore[return-value]
