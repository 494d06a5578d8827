from __future__ import annotations

import logging
import logging.config
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from region.errors import ConfigError
from region.settings import RegionSettings, load_toml, parse_permission

CONF = Path(__file__).resolve().parents[2] / "conf"


def test_the_region_example_documents_the_defaults() -> None:
    table = load_toml(CONF / "region.toml")["region"]
    assert RegionSettings.model_validate(table) == RegionSettings()
    # Every field is shown in the example.
    assert set(table) == set(RegionSettings.model_fields)


@pytest.fixture
def restore_logging() -> Iterator[None]:
    names = ["", "region", "py4j", "urllib3"]
    saved = {n: (logging.getLogger(n).level, list(logging.getLogger(n).handlers)) for n in names}
    yield
    for name, (level, handlers) in saved.items():
        logger = logging.getLogger(name)
        logger.setLevel(level)
        logger.handlers[:] = handlers


def test_the_logging_example_configures_logging(restore_logging: None) -> None:
    logging.config.dictConfig(load_toml(CONF / "logging.toml"))
    assert logging.getLogger("region.checkpoint").getEffectiveLevel() == logging.INFO
    assert logging.getLogger("urllib3").level == logging.WARNING
    assert any(isinstance(h, logging.StreamHandler) for h in logging.getLogger().handlers)


def test_load_toml_errors_name_the_file_and_line(tmp_path: Path) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text("[region]\nperiod = 5s\n")
    with pytest.raises(ConfigError, match=r"bad\.toml.*line 2"):
        load_toml(bad)
    with pytest.raises(ConfigError, match=r"missing\.toml"):
        load_toml(tmp_path / "missing.toml")


@pytest.mark.parametrize(
    ("value", "mode"), [(0o640, 0o640), ("640", 0o640), ("0640", 0o640), ("0o750", 0o750)]
)
def test_permissions_are_octal_modes(value: Any, mode: int) -> None:
    assert parse_permission(value) == mode
    assert RegionSettings.model_validate({"checkpointPermission": value}).checkpoint_permission == (
        mode
    )


@pytest.mark.parametrize("bad", [640, "648", "rw-r-----", True, -1, 1.5])
def test_bad_permissions_name_field_and_value(bad: Any) -> None:
    with pytest.raises(ValidationError) as err:
        RegionSettings.model_validate({"checkpoint_permission": bad})
    assert "checkpoint_permission" in str(err.value) and repr(bad) in str(err.value)


def test_checkpoint_permission_none_keeps_the_filesystem_default() -> None:
    assert (
        RegionSettings.model_validate({"checkpoint_permission": None}).checkpoint_permission is None
    )
    assert RegionSettings.model_validate({"lockTtl": "5s"}).lock_ttl == 5.0
