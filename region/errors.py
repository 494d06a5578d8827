"""Exceptions of the region runtime: one root, each message names what failed."""

from __future__ import annotations

__all__ = [
    "CheckpointError",
    "ConfigError",
    "LockLostError",
    "LockedError",
    "RegionError",
    "RegionFailedError",
    "RegionStoppedError",
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


class RegionStoppedError(RegionError):
    """The region was stopped: no permit will be granted and no cut will run any more."""
