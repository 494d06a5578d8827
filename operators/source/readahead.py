"""The read of a file's next chunk on a thread of its own, shared by both engines' readers."""

from __future__ import annotations

from collections.abc import Callable

from operators.common.background import Background

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
        self._read = Background(lambda: read(offset, length), name=f"read-ahead {path}")

    @classmethod
    def ready(cls, path: str, offset: int, length: int, data: bytes) -> ReadAhead:
        """A read already done (``data``): handed on to the reader as if read ahead."""
        done = cls.__new__(cls)
        done.key = (path, offset, length)
        done._read = Background.done(data)
        return done

    def result(self) -> bytes:
        """The bytes read, or raise what the read raised, as the reader's own read would."""
        return self._read.result()
