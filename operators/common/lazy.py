"""A module imported on first use: pyarrow and numpy for the parts that need them; a package's
public names imported on first use (:func:`lazy_exports`).

A run that moves lines (no schema, no columns) uses neither, and importing them was a fifth
of the time a process takes to start (pyarrow with numpy, pyarrow.compute, csv and ipc). The
modules of rows and columns name them as usual (``pa.array``); the import happens at the
first attribute looked up, once.
"""

from __future__ import annotations

import importlib
from types import ModuleType
from typing import Any

__all__ = ["lazy_exports", "lazy_module"]


class _LazyModule:
    """Stands for the module ``name`` until an attribute of it is needed."""

    __slots__ = ("_module", "_name")

    def __init__(self, name: str) -> None:
        self._name = name
        self._module: ModuleType | None = None

    def _load(self) -> ModuleType:
        module = self._module
        if module is None:
            module = self._module = importlib.import_module(self._name)
        return module

    def __getattr__(self, attr: str) -> Any:
        return getattr(self._load(), attr)

    def __setattr__(self, attr: str, value: Any) -> None:
        if attr in _LazyModule.__slots__:
            object.__setattr__(self, attr, value)
        else:  # on the module itself, as for the module imported plainly (a test's patch)
            setattr(self._load(), attr, value)

    def __delattr__(self, attr: str) -> None:
        delattr(self._load(), attr)

    def __reduce__(self) -> tuple[Any, tuple[str]]:
        # A function pickled by value (a Spark task's) carries the module by its name.
        return lazy_module, (self._name,)

    def __repr__(self) -> str:
        state = "imported" if self._module is not None else "not imported yet"
        return f"<module {self._name!r}, {state}>"


def lazy_module(name: str) -> Any:
    """The module ``name``, imported when one of its attributes is first looked up. Modules
    name it under ``if TYPE_CHECKING: import name`` too, for the type checker."""
    return _LazyModule(name)


def lazy_exports(package: str, where: dict[str, str]) -> Any:
    """A package's module ``__getattr__`` that imports each public name from its module
    (``where``: name -> module) when first used, so that a process needing one submodule (Spark's
    planning process for a query unpickles the data source: the cursor, not the operator and
    its settings models) does not import the whole operator."""

    def __getattr__(name: str) -> Any:
        module = where.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        return getattr(importlib.import_module(module), name)

    return __getattr__
