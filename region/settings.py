"""Region settings (pydantic v2, frozen) and the duration type shared by every settings model.

snake_case names are canonical; the IBM Streams camelCase names are accepted as aliases.
"""

from __future__ import annotations

import codecs
import math
import os
import re
import tomllib
from enum import StrEnum
from typing import Annotated, Any

from pydantic import AliasChoices, BaseModel, BeforeValidator, ConfigDict, Field

from region.errors import ConfigError

__all__ = [
    "Duration",
    "Encoding",
    "FileMode",
    "Permission",
    "RegionSettings",
    "Trigger",
    "load_toml",
    "parse_duration",
    "parse_permission",
]

_DURATION = re.compile(r"^\s*(\d+(?:\.\d*)?|\.\d+)\s*(ms|s|m|h|d)?\s*$")
_UNIT_SECONDS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, None: 1.0}


def parse_duration(value: Any) -> float:
    """Seconds from ``5``, ``2.5``, ``"5s"``, ``"250ms"``, ``"2m"``, ``"1h"`` or ``"1d"``.

    Raises ``ValueError`` naming the value when it is not a non-negative finite duration.
    """
    if isinstance(value, bool):
        raise ValueError(f"duration {value!r} is not a number of seconds or a string like '5s'")
    if isinstance(value, int | float):
        seconds = float(value)
    elif isinstance(value, str):
        match = _DURATION.match(value)
        if match is None:
            raise ValueError(
                f"duration {value!r} is not understood: use a number of seconds or "
                "a number with a unit ms, s, m, h or d (e.g. '250ms', '5s', '2m')"
            )
        seconds = float(match.group(1)) * _UNIT_SECONDS[match.group(2)]
    else:
        raise ValueError(f"duration {value!r} is not a number of seconds or a string like '5s'")
    if not math.isfinite(seconds) or seconds < 0:
        raise ValueError(f"duration {value!r} must be a finite number of seconds >= 0")
    return seconds


Duration = Annotated[float, BeforeValidator(parse_duration)]


def parse_permission(value: Any) -> int | None:
    """A file mode from ``0o640`` (TOML octal), ``"640"``, ``"0640"`` or ``"0o640"``; ``None``
    keeps the filesystem's default. A decimal integer such as ``640`` is refused: it is almost
    always an octal mode written without its ``0o``."""
    if value is None:
        return None
    if isinstance(value, bool):
        raise ValueError(f"permission {value!r} is not a file mode like '640'")
    if isinstance(value, str):
        text = value.strip().lower().removeprefix("0o")
        if not re.fullmatch(r"[0-7]{1,4}", text):
            raise ValueError(f"permission {value!r} is not an octal file mode like '640'")
        mode = int(text, 8)
    elif isinstance(value, int):
        mode = value
    else:
        raise ValueError(f"permission {value!r} is not a file mode like '640'")
    if not 0 <= mode <= 0o777:
        shown = oct(value) if isinstance(value, int) else repr(value)
        raise ValueError(
            f"permission {shown} is not a file mode (0o000..0o777): write octal modes as 0o640 "
            "or '640'"
        )
    return mode


Permission = Annotated[int | None, BeforeValidator(parse_permission)]
#: A file mode that must be given (no filesystem default).
FileMode = Annotated[int, BeforeValidator(parse_permission)]


def parse_encoding(value: Any) -> str:
    """A text encoding Python's codecs know, e.g. ``utf-8``, ``latin-1``."""
    if not isinstance(value, str):
        raise ValueError(f"encoding {value!r} is not the name of a text encoding")
    try:
        codecs.lookup(value)
    except LookupError:
        raise ValueError(f"encoding {value!r} is not known to Python's codecs") from None
    return value


Encoding = Annotated[str, BeforeValidator(parse_encoding)]


def load_toml(path: str | os.PathLike[str]) -> dict[str, Any]:
    """The tables of a TOML settings file; :class:`ConfigError` names the file (and the line)."""
    try:
        with open(path, "rb") as f:
            return tomllib.load(f)
    except OSError as exc:
        raise ConfigError(f"cannot read settings file {os.fspath(path)}: {exc.strerror}") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"settings file {os.fspath(path)} is not valid TOML: {exc}") from None


class Trigger(StrEnum):
    PERIODIC = "periodic"
    OPERATOR_DRIVEN = "operator_driven"

    @classmethod
    def _missing_(cls, value: object) -> Trigger | None:
        # IBM spells it operatorDriven.
        if isinstance(value, str) and value.replace("_", "").lower() == "operatordriven":
            return cls.OPERATOR_DRIVEN
        return None


#: Longest wait between two reset attempts, however many failed before.
_MAX_BACKOFF = 60.0


class RegionSettings(BaseModel):
    """How a consistent region cuts and recovers."""

    model_config = ConfigDict(frozen=True, extra="forbid", populate_by_name=True)

    #: "periodic": a cut every `period`; "operator_driven": when the source asks (after each file).
    trigger: Trigger = Trigger.PERIODIC
    #: Seconds between the end of one cut (or reset) and the start of the next (periodic).
    period: Duration = Field(1.0, gt=0)
    #: Seconds a cut may wait for the batch in flight and for every operator to drain; past it
    #: the region resets.
    drain_timeout: Duration = Field(
        180.0, validation_alias=AliasChoices("drain_timeout", "drainTimeout")
    )
    #: Seconds a reset may take (outstanding permits back, every operator reset); past it,
    #: another attempt.
    reset_timeout: Duration = Field(
        180.0, validation_alias=AliasChoices("reset_timeout", "resetTimeout")
    )
    #: Resets in a row without a completed cut before the region fails (the run exits 1,
    #: resuming at the last cut next time).
    max_consecutive_reset_attempts: int = Field(
        5,
        ge=1,
        validation_alias=AliasChoices(
            "max_consecutive_reset_attempts", "maxConsecutiveResetAttempts"
        ),
    )
    #: Wait before the second reset attempt since the last completed cut, doubled for each
    #: further one (at most 60 s): transient causes (a NameNode failing over, a DataNode
    #: restarting) get time to pass. Permanent errors are not retried at all. 0: no wait.
    reset_backoff: Duration = Field(
        1.0, ge=0, validation_alias=AliasChoices("reset_backoff", "resetBackoff")
    )
    #: Where the region keeps its cuts and its lock (relative: the pipeline file's folder); one
    #: directory per pipeline.
    checkpoint_dir: str = Field(
        "checkpoints", validation_alias=AliasChoices("checkpoint_dir", "checkpointDir")
    )
    #: How many region checkpoints to keep (the newest ones).
    retain: int = Field(10, ge=1)
    #: Mode of checkpoint files (directories get the matching traversal bits); None: fs default.
    checkpoint_permission: Permission = Field(
        0o640,
        validation_alias=AliasChoices("checkpoint_permission", "checkpointPermission"),
    )
    #: A process holding the checkpoint directory lock that stops heartbeating for this long is
    #: presumed dead and may be replaced.
    lock_ttl: Duration = Field(30.0, gt=0, validation_alias=AliasChoices("lock_ttl", "lockTtl"))
    #: When checkpoint files exist but none is valid, start from the initial state (logging why)
    #: instead of failing. Leave off in settings files; use it once, deliberately.
    start_fresh: bool = Field(False, validation_alias=AliasChoices("start_fresh", "startFresh"))

    def backoff(self, done: int) -> float:
        """Seconds to wait before the next reset (or query restart) after ``done`` consecutive
        ones: none before the first, then reset_backoff doubled per attempt, at most 60 s. The
        one rule both engines follow."""
        if done < 1:
            return 0.0
        return min(float(self.reset_backoff) * 2.0 ** (done - 1), _MAX_BACKOFF)
