"""The pyspark the project declares, the one installed, and what an older one gets."""

from __future__ import annotations

import re
import tomllib
from importlib.metadata import version
from pathlib import Path

import pytest

from operators.spark import MIN_PYSPARK, check_pyspark

ROOT = Path(__file__).resolve().parents[2]


def declared_minimum() -> tuple[int, ...]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    (spec,) = [d for d in project["dependencies"] if d.startswith("pyspark")]
    found = re.search(r">=\s*([\d.]+)", spec)
    assert found, spec
    return tuple(int(p) for p in found.group(1).split("."))


def test_the_declared_minimum_is_the_one_the_data_sources_need() -> None:
    assert declared_minimum() == MIN_PYSPARK


def test_the_installed_pyspark_is_new_enough() -> None:
    # Fails on pyspark 4.0 / 4.1, where the scan's imports (ReadLimit,
    # SupportsTriggerAvailableNow) do not exist.
    check_pyspark()
    installed = tuple(int(p) for p in version("pyspark").split(".")[:2])
    assert installed >= MIN_PYSPARK
    from operators.spark.source import HdfsScanDataSource  # the imports that need it

    assert HdfsScanDataSource.name() == "hdfs_scan"


@pytest.mark.parametrize("older", ["4.0.1", "4.1.0", "3.5.3"])
def test_an_older_pyspark_gets_one_line_naming_it_and_the_fix(older: str) -> None:
    with pytest.raises(ImportError) as info:
        check_pyspark(older)
    message = str(info.value)
    assert f"pyspark {older} is installed" in message
    assert "pip install 'pyspark>=4.2,<5'" in message
    assert "--engine local" in message


def test_newer_pyspark_releases_are_accepted() -> None:
    for newer in ("4.2.0", "4.3.0", "4.10.1"):
        check_pyspark(newer)
