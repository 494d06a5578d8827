"""Spark data-source options to the operators' settings models.

Spark hands options over as a case-insensitive dict of strings (keys lower-cased), so an option
is matched by its name without case and underscores: ``max_files_per_trigger``,
``maxFilesPerTrigger`` and ``MAXFILESPERTRIGGER`` are the same option. Every field name and IBM
alias of the settings models is accepted; an unknown option is a :class:`ConfigError` that names it.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterable, Mapping
from typing import Any, TypeVar

from pydantic import AliasChoices, BaseModel, ValidationError

from operators.fs.local import LocalFileSystem
from operators.fs.settings import FileSystemSettings, split_uri
from region.errors import ConfigError
from region.fs import FileSystem

__all__ = ["FS_FIELDS", "build", "open_fs", "resolve", "route_options"]

M = TypeVar("M", bound=BaseModel)

#: Options Spark itself may pass along to a data source.
_SPARK_OWN = frozenset({"path", "checkpointlocation", "queryname"})

#: FileSystemSettings fields accepted as data-source options.
FS_FIELDS = (
    "uri",
    "user",
    "password",
    "kerberos_principal",
    "keytab",
    "token",
    "timeout",
    "lease_recovery_timeout",
    "retries",
    "retry_backoff",
)


def _norm(name: str) -> str:
    return name.replace("_", "").replace("-", "").lower()


def _names(model: type[BaseModel], field: str) -> list[str]:
    info = model.model_fields[field]
    names = [field]
    alias = info.validation_alias
    if isinstance(alias, AliasChoices):
        names += [c for c in alias.choices if isinstance(c, str)]
    elif isinstance(alias, str):
        names.append(alias)
    return names


def route_options(
    options: Mapping[str, str],
    targets: Mapping[str, tuple[type[BaseModel], Iterable[str]]],
    *,
    source: str,
) -> dict[str, dict[str, str]]:
    """Split ``options`` by target: ``{target: {field: value}}``. ``targets`` maps a target name
    to a settings model and the fields of it that are accepted as options."""
    lookup: dict[str, tuple[str, str]] = {}
    for target, (model, fields) in targets.items():
        for field in fields:
            for name in _names(model, field):
                lookup.setdefault(_norm(name), (target, field))
    routed: dict[str, dict[str, str]] = {target: {} for target in targets}
    for key, value in options.items():
        norm = _norm(key)
        if norm in _SPARK_OWN:
            continue
        if norm not in lookup:
            known = sorted({field for _, fields in targets.values() for field in fields})
            msg = f"{source}: unknown option {key!r} (known: {', '.join(known)})"
            raise ConfigError(msg)
        target, field = lookup[norm]
        routed[target][field] = value
    return routed


def build(model: type[M], values: Mapping[str, Any], *, source: str) -> M:
    """``model(**values)`` with validation errors turned into one ConfigError naming the option."""
    try:
        return model.model_validate(dict(values))
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in err['loc']) or 'options'}: {err['msg']}"
            for err in exc.errors(include_input=False)
        )
        raise ConfigError(f"{source}: bad option value: {problems}") from None


def resolve(
    path_or_uri: str, fs_values: Mapping[str, str], *, source: str
) -> tuple[FileSystemSettings, str]:
    """The filesystem settings and the path on it for a ``directory`` / ``file`` option, which
    may be a local path or a URI such as ``webhdfs://namenode:9870/landing``."""
    fs_uri, path = split_uri(path_or_uri)
    values = dict(fs_values)
    explicit = values.get("uri")
    if fs_uri != "file:///":
        if explicit is not None and split_uri(explicit)[0] != fs_uri:
            msg = f"{source}: {path_or_uri!r} names another filesystem than uri={explicit!r}"
            raise ConfigError(msg)
        values["uri"] = fs_uri
    return build(FileSystemSettings, values, source=source), path


def open_fs(settings: FileSystemSettings) -> FileSystem:
    """The filesystem named by ``settings`` (local, WebHDFS or HDFS)."""
    if settings.kind == "local":
        return LocalFileSystem()
    factory = getattr(importlib.import_module("operators.fs"), "open_filesystem", None)
    if factory is None:
        raise ConfigError(f"filesystem {settings.display()}: no backend for {settings.kind!r}")
    fs: FileSystem = factory(settings)
    return fs
