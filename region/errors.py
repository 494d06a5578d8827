"""Exceptions of the region runtime: one root, each message names what failed."""

from __future__ import annotations

import builtins
from typing import TypeVar

__all__ = [
    "PERMANENT_TYPES",
    "CheckpointError",
    "ConfigError",
    "LockLostError",
    "LockUnsafeError",
    "LockedError",
    "RegionError",
    "RegionFailedError",
    "RegionStoppedError",
    "is_permanent",
    "is_permanent_name",
    "permanent",
]


class RegionError(Exception):
    """Root of every error raised by the region runtime."""


class ConfigError(RegionError, ValueError):
    """A setting is missing or has a bad value; the message names the field and the value."""


class CheckpointError(RegionError):
    """No usable checkpoint: the message names the directory and why each file was rejected."""


class RegionFailedError(RegionError):
    """The region gave up after ``max_consecutive_reset_attempts`` resets.

    The message names the failing operator, the cause and the attempt count.
    """


class LockedError(RegionError):
    """Another live process holds the checkpoint directory; the message names it (host, pid,
    start time, last heartbeat) and when the lock would expire if that process stopped."""


class LockLostError(RegionError):
    """This process held the checkpoint directory lock but another process has taken it over
    (this process stalled longer than the lock's ttl); it must stop writing checkpoints."""


class LockUnsafeError(ConnectionError):
    """This process still holds the checkpoint directory lock, but could not renew it for so
    long (half its ttl) that another process may take it over before the next write lands: no
    batch is written and no cut is taken until a heartbeat gets through again. A
    ``ConnectionError``, not a :class:`RegionError`: it passes (the cause is a filesystem that
    did not answer), and a cut it stops is retried like any cut that met a passing error. When
    another process did take the lock, the next heartbeat finds it and :class:`LockLostError`
    follows."""


class RegionStoppedError(RegionError):
    """The region was stopped: no permit will be granted and no cut will run any more."""


_E = TypeVar("_E", bound=BaseException)

#: Built-in errors that come back the same however often the step is retried: bad settings,
#: refused access, a path of the wrong kind, undecodable bytes. Anything else (connections,
#: timeouts, leases, I/O) may pass, so the region retries it with backoff.
PERMANENT_TYPES: tuple[type[BaseException], ...] = (
    ConfigError,
    PermissionError,
    NotADirectoryError,
    IsADirectoryError,
    UnicodeError,
)


def permanent(error: _E) -> _E:
    """Mark ``error`` as one no reset can repair, and return it: ``raise permanent(Error(...))``.

    Used where a built-in type is ambiguous (a missing directory the settings require, a file
    that exists and is never overwritten) but the situation is not.
    """
    error.permanent = True  # type: ignore[attr-defined]
    return error


def is_permanent(error: BaseException) -> bool:
    """Whether retrying cannot help: an explicit ``permanent`` attribute (instance or class)
    decides, else the type (:data:`PERMANENT_TYPES`). The one rule every engine applies."""
    marked = getattr(error, "permanent", None)
    if marked is not None:
        return bool(marked)
    return isinstance(error, PERMANENT_TYPES)


def is_permanent_name(name: str) -> bool:
    """:func:`is_permanent` for an error known only by its class name (a Python error that
    crossed a process boundary as text, e.g. inside a Spark task failure): a built-in or a
    :class:`RegionError` subclass of that name. Marks set on an instance do not cross, so those
    errors count as transient here (retried, never wrongly given up on)."""
    short = name.rpartition(".")[2]
    builtin = getattr(builtins, short, None)
    if isinstance(builtin, type) and issubclass(builtin, BaseException):
        return issubclass(builtin, PERMANENT_TYPES)
    pending: list[type[BaseException]] = [RegionError]
    while pending:
        cls = pending.pop()
        if cls.__name__ == short:
            return bool(getattr(cls, "permanent", False)) or issubclass(cls, PERMANENT_TYPES)
        pending.extend(cls.__subclasses__())
    return False
