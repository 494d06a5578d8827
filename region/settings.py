"""Region settings (pydantic v2, frozen) and the duration type shared by every settings model.

snake_case names are canonical; the IBM Streams camelCase names are accepted as aliases.
"""

from __future__ import annotations

import math
import re
from enum import StrEnum
from typing import Annotated, Any

from pydantic import AliasChoices, BaseModel, BeforeValidator, ConfigDict, Field

__all__ = ["Duration", "RegionSettings", "Trigger", "parse_duration"]

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


class Trigger(StrEnum):
    PERIODIC = "periodic"
    OPERATOR_DRIVEN = "operator_driven"

    @classmethod
    def _missing_(cls, value: object) -> Trigger | None:
        # IBM spells it operatorDriven.
        if isinstance(value, str) and value.replace("_", "").lower() == "operatordriven":
            return cls.OPERATOR_DRIVEN
        return None


class RegionSettings(BaseModel):
    """How a consistent region cuts and recovers."""

    model_config = ConfigDict(frozen=True, extra="forbid", populate_by_name=True)

    trigger: Trigger = Trigger.PERIODIC
    #: Seconds between the end of one cut (or reset) and the start of the next (periodic).
    period: Duration = Field(1.0, gt=0)
    drain_timeout: Duration = Field(
        180.0, validation_alias=AliasChoices("drain_timeout", "drainTimeout")
    )
    reset_timeout: Duration = Field(
        180.0, validation_alias=AliasChoices("reset_timeout", "resetTimeout")
    )
    max_consecutive_reset_attempts: int = Field(
        5,
        ge=1,
        validation_alias=AliasChoices(
            "max_consecutive_reset_attempts", "maxConsecutiveResetAttempts"
        ),
    )
    checkpoint_dir: str = Field(
        "checkpoints", validation_alias=AliasChoices("checkpoint_dir", "checkpointDir")
    )
    #: How many region checkpoints to keep (the newest ones).
    retain: int = Field(10, ge=1)
