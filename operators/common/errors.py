"""Exceptions of the operators: one root, each message names the file, offset or field at fault."""

from __future__ import annotations

from typing import Any

from region.errors import RegionError

__all__ = ["BadRecordError", "OperatorError", "short"]


def short(value: Any, limit: int = 80) -> str:
    """``repr(value)``, cut to ``limit`` characters for a log line or an error."""
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


class OperatorError(RegionError):
    """Root of every error raised by the operators (besides the filesystem's built-in errors)."""


class BadRecordError(OperatorError, ValueError):
    """A record (or a byte range of an input file) cannot be processed.

    ``file`` is the file being read or written, ``offset`` the byte offset in that file (source)
    or the record's index in its batch (sink), ``field`` the attribute at fault when there is one.
    Permanent: the same bytes fail the same way after a reset.
    """

    permanent = True

    def __init__(
        self,
        message: str,
        *,
        file: str | None = None,
        offset: int | None = None,
        field: str | None = None,
    ) -> None:
        super().__init__(message)
        self.file = file
        self.offset = offset
        self.field = field
