"""User functions named ``"module:function"`` (a transform, an ``on_published`` callback): one
loader for the settings file, the Spark options and the Python API."""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable
from typing import Any

from region.errors import ConfigError

__all__ = ["load_callable"]


def load_callable(spec: str, key: str, folder: str | None = None) -> Callable[..., Any]:
    """The function ``spec`` names (``folder``, e.g. the settings file's, is importable first).
    ConfigError naming ``key`` and the value when it cannot be imported or is not callable."""
    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name or not attr:
        raise ConfigError(f"{key}: {spec!r} must name a function as 'module:function'")
    if folder is not None and folder not in sys.path:
        sys.path.insert(0, folder)
    try:
        module = importlib.import_module(module_name)
    except Exception as exc:
        msg = f"{key}: cannot import module {module_name!r} of {spec!r} ({exc})"
        raise ConfigError(msg) from None
    func = getattr(module, attr, None)
    if not callable(func):
        raise ConfigError(f"{key}: {spec!r}: module {module_name!r} has no function {attr!r}")
    return func  # type: ignore[no-any-return]
