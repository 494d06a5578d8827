"""What the wheel carries (``pyproject.toml``): every module and every other file of the two
packages, so that an installed ``hdfs-region`` works without a checkout. setuptools takes the
``.py`` files of each package it finds, and of the other files only those
``[tool.setuptools.package-data]`` names; a file left out would be missing only in installs
from the wheel (CI installs one and runs the demo from it: ``.ci/run``)."""

from __future__ import annotations

import glob
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
PACKAGES = ("region", "operators")


def _files(package: str) -> set[str]:
    root = ROOT / package
    return {
        path.relative_to(root).as_posix()
        for path in root.rglob("*")
        if path.is_file() and "__pycache__" not in path.parts and path.suffix != ".pyc"
    }


def test_every_file_that_is_not_a_module_is_package_data() -> None:
    data = PYPROJECT["tool"]["setuptools"]["package-data"]
    left_out = []
    for package in PACKAGES:
        # setuptools globs each pattern in the package's directory, as here.
        covered = {
            name
            for pattern in data.get(package, [])
            for name in glob.glob(pattern, root_dir=ROOT / package)
        }
        left_out += [
            f"{package}/{name}"
            for name in sorted(_files(package))
            if not name.endswith(".py") and name not in covered
        ]
    assert left_out == [], (
        "not in the wheel: add them to [tool.setuptools.package-data] in pyproject.toml"
    )


def test_every_directory_of_modules_is_a_package() -> None:
    """``packages.find`` takes only directories with an ``__init__.py``: the modules of any
    other directory would be left out of the wheel."""
    include = PYPROJECT["tool"]["setuptools"]["packages"]["find"]["include"]
    assert sorted(include) == sorted([*PACKAGES, *(f"{p}.*" for p in PACKAGES)])
    without = sorted(
        str(directory.relative_to(ROOT))
        for package in PACKAGES
        for directory in {p.parent for p in (ROOT / package).rglob("*.py")}
        if not (directory / "__init__.py").is_file()
    )
    assert without == []
