from __future__ import annotations

import pytest
from pydantic import ValidationError

from region.settings import RegionSettings, Trigger, parse_duration


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("5s", 5.0), ("250ms", 0.25), ("2m", 120.0), (3, 3.0), (1.5, 1.5), ("1h", 3600.0), ("7", 7.0)],
)
def test_durations_accept_units_and_numbers(text: object, seconds: float) -> None:
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("bad", ["5x", "", "-1s", True, None, "nan", float("inf")])
def test_bad_durations_name_the_value(bad: object) -> None:
    with pytest.raises(ValueError, match="duration"):
        parse_duration(bad)


def test_ibm_names_are_aliases_and_defaults_match_ibm() -> None:
    s = RegionSettings.model_validate(
        {"trigger": "operatorDriven", "drainTimeout": "250ms", "maxConsecutiveResetAttempts": 2}
    )
    assert s.trigger is Trigger.OPERATOR_DRIVEN
    assert s.drain_timeout == 0.25
    assert s.max_consecutive_reset_attempts == 2
    assert RegionSettings().reset_timeout == 180.0
    assert RegionSettings().retain == 10


def test_config_error_names_field_and_value() -> None:
    with pytest.raises(ValidationError) as info:
        RegionSettings.model_validate({"period": "soon"})
    text = str(info.value)
    assert "period" in text and "'soon'" in text


def test_unknown_keys_are_rejected() -> None:
    with pytest.raises(ValidationError, match="perod"):
        RegionSettings.model_validate({"perod": 5})
