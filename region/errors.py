"""Exceptions of the region runtime: one root, each message names what failed."""

from __future__ import annotations

__all__ = [
    "CheckpointError",
    "ConfigError",
    "RegionError",
    "RegionFailedError",
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
