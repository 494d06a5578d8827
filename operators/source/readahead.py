"""The read of a file's next chunk on a thread of its own, shared by both engines' readers."""

from __future__ import annotations

from collections.abc import Callable

from operators.common.background import Background

__all__ = ["ReadAhead"]


class ReadAhead:
    """``read(offset, length)`` of the file ``path`` on a thread of its own, started now, while
    the chunk before it is decoded and written: on HDFS a read waits on the DataNodes with the
    interpreter free, so reading and writing overlap. ``key`` says which read it is: a reader
    uses it only for a read at exactly that position and length.

    ``head``: then ``read(0, head)`` too, right after the chunk, for a reader that checks the
    file still begins as it did (a file written over while read): on HDFS each read is a
    NameNode call and a DataNode read, made here instead of on the reader's thread."""

    def __init__(
        self,
        read: Callable[[int, int], bytes],
        path: str,
        offset: int,
        length: int,
        *,
        head: int = 0,
    ) -> None:
        self.key = (path, offset, length)
        self.head_length = head

        def both() -> tuple[bytes, bytes | OSError | None]:
            data = read(offset, length)
            if not head:
                return data, None
            try:
                return data, read(0, head)
            except OSError as exc:  # raised by head(), where the reader asks for it
                return data, exc

        self._read = Background(both, name=f"read-ahead {path}")

    @classmethod
    def ready(cls, path: str, offset: int, length: int, data: bytes) -> ReadAhead:
        """A read already done (``data``): handed on to the reader as if read ahead."""
        done = cls.__new__(cls)
        done.key = (path, offset, length)
        done.head_length = 0
        done._read = Background.done((data, None))
        return done

    def result(self) -> bytes:
        """The bytes read, or raise what the read raised, as the reader's own read would."""
        return self._read.result()[0]

    def head(self) -> bytes:
        """The ``head`` bytes read after the chunk, or raise what that read raised (after
        :meth:`result`)."""
        head = self._read.result()[1]
        if head is None:
            raise ValueError(f"{self.key[0]}: no head was read ahead")
        if isinstance(head, OSError):
            raise head
        return head
