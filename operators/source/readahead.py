"""The read of a file's next chunk on a thread of its own, shared by both engines' readers."""

from __future__ import annotations

import threading
from collections.abc import Callable

__all__ = ["ReadAhead"]


class ReadAhead:
    """``read(offset, length)`` of the file ``path`` on a thread of its own, started now, while
    the chunk before it is decoded and written: on HDFS a read waits on the DataNodes with the
    interpreter free, so reading and writing overlap. ``key`` says which read it is: a reader
    uses it only for a read at exactly that position and length."""

    def __init__(
        self, read: Callable[[int, int], bytes], path: str, offset: int, length: int
    ) -> None:
        self.key = (path, offset, length)
        self._data = b""
        self._error: BaseException | None = None
        self._thread: threading.Thread | None = threading.Thread(
            target=self._run, args=(read,), name=f"read-ahead {path}", daemon=True
        )
        self._thread.start()

    @classmethod
    def ready(cls, path: str, offset: int, length: int, data: bytes) -> ReadAhead:
        """A read already done (``data``): handed on to the reader as if read ahead."""
        done = cls.__new__(cls)
        done.key = (path, offset, length)
        done._data = data
        done._error = None
        done._thread = None
        return done

    def _run(self, read: Callable[[int, int], bytes]) -> None:
        try:
            self._data = read(*self.key[1:])
        except BaseException as exc:  # raised to the reader, as its own read would
            self._error = exc

    def result(self) -> bytes:
        if self._thread is not None:
            self._thread.join()
        if self._error is not None:
            raise self._error
        return self._data
