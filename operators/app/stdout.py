"""Standard output whose reader may go away (``hdfs-region inspect job.toml | head -1``).

A write to a closed pipe raises :class:`BrokenPipeError`, an :class:`OSError`: a command that
catches ``OSError`` around its work (an HDFS call, a checkpoint read) would report the closed
pipe as its own failure. While :func:`guarded` holds, writes to standard output raise
:class:`StdoutClosed` instead, which no ``except OSError`` catches; the command line's entry
ends quietly on it (the Unix convention: 128 + SIGPIPE, no message, as ``cat | head`` does).
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterable, Iterator
from typing import Any, TextIO, cast

__all__ = ["StdoutClosed", "guarded", "silence"]


class StdoutClosed(Exception):
    """The reader of standard output closed it (a broken pipe)."""


class _Guard:
    """``stream`` whose writes raise :class:`StdoutClosed` on a broken pipe."""

    def __init__(self, stream: TextIO) -> None:
        self._stream = stream

    def write(self, text: str) -> int:
        try:
            return self._stream.write(text)
        except BrokenPipeError:
            raise StdoutClosed from None

    def writelines(self, lines: Iterable[str]) -> None:
        for line in lines:
            self.write(line)

    def flush(self) -> None:
        try:
            self._stream.flush()
        except BrokenPipeError:
            raise StdoutClosed from None

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


@contextlib.contextmanager
def guarded() -> Iterator[None]:
    """``sys.stdout`` guarded for the block, then restored."""
    original = sys.stdout
    sys.stdout = cast(TextIO, _Guard(original))
    try:
        yield
    finally:
        sys.stdout = original


def silence() -> None:
    """Point the process's standard output at the null device, so that the flush at exit does
    not fail again on the closed pipe (what Python's documentation of SIGPIPE recommends)."""
    with contextlib.suppress(OSError, ValueError, AttributeError):
        null = os.open(os.devnull, os.O_WRONLY)
        os.dup2(null, sys.__stdout__.fileno())  # type: ignore[union-attr]
        os.close(null)
