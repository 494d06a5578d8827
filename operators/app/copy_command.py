"""``hdfs-region copy SRC DST``: one file between the local disk and a filesystem (either way,
or within one), through the copy operator's atomic, repeatable copy.

A plain path (or ``file://``) is on the local disk; a URI (``hdfs://nn:8020/x``,
``webhdfs://nn:9870/x``) names the other filesystem, reached with the ``[filesystem]`` table of
``--config`` (user, Kerberos, ``config_dir``, timeouts; other tables are ignored, so a pipeline's
settings file serves). The direction follows: local -> remote is IBM's ``copyFromLocalFile``,
remote -> local ``copyToLocalFile``; local -> local and remote -> remote are copies too.

Exit codes: :mod:`operators.app.exit_codes` (3 SRC and DST are one file, 4 not copied).
"""

from __future__ import annotations

import logging
import os
import time
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, SecretStr, ValidationError

from operators.app.config import (
    PipelineConfigError,
    format_validation_error,
    with_line_numbers,
)
from operators.app.console import config_error, error
from operators.app.exit_codes import EXIT_FAILURE, EXIT_NOT_COPIED, EXIT_OK, EXIT_SAME_FILE
from operators.copy import copy_file, result_message
from operators.copy.transfer import SameFileError, SourceGoneError
from operators.fs import open_path
from operators.fs.settings import FileSystemSettings, split_uri
from region.errors import ConfigError
from region.fs import FileSystem
from region.settings import load_toml

__all__ = ["EXIT_NOT_COPIED", "EXIT_SAME_FILE", "direction_of", "load_filesystem", "run_copy"]

logger = logging.getLogger(__name__)


class _FilesystemTable(BaseModel):
    """The one table ``copy`` reads from a settings file."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    filesystem: FileSystemSettings = Field(default_factory=FileSystemSettings)


def load_filesystem(path: str | os.PathLike[str]) -> FileSystemSettings:
    """The ``[filesystem]`` table of a settings file; :class:`PipelineConfigError` names each
    bad key (never a credential's value)."""
    config_path = Path(path).absolute()
    data = load_toml(config_path)
    try:
        settings = _FilesystemTable.model_validate(data).filesystem
    except ValidationError as exc:
        problems = with_line_numbers(format_validation_error(exc), config_path)
        raise PipelineConfigError(os.fspath(path), problems) from None
    if settings.keytab is not None:
        # A keytab is a local file, relative to the settings file as in a pipeline.
        keytab = os.path.join(config_path.parent, settings.keytab.get_secret_value())
        settings = settings.model_copy(update={"keytab": SecretStr(os.path.normpath(keytab))})
    return settings


def _is_local(path: str) -> bool:
    return split_uri(path)[0] == "file:///"


def direction_of(src: str, dst: str) -> str:
    """IBM's name for the direction of ``src`` -> ``dst`` (for messages)."""
    local_src, local_dst = _is_local(src), _is_local(dst)
    if local_src and not local_dst:
        return "copyFromLocalFile"
    if local_dst and not local_src:
        return "copyToLocalFile"
    return "local copy" if local_src else "copy on the filesystem"


def _open(path: str, settings: FileSystemSettings | None) -> tuple[FileSystem, str]:
    try:
        return open_path(path, settings if not _is_local(path) else None)
    except ValueError as exc:  # an unknown scheme, a bad host:port
        raise ConfigError(f"{path!r}: {exc}") from None


def run_copy(
    src: str,
    dst: str,
    *,
    delete_source: bool = False,
    overwrite: bool = False,
    config: str | None = None,
    chunk_size: int | None = None,
) -> int:
    """Copy ``src`` to ``dst`` and print IBM's result line; the exit code."""
    try:
        if chunk_size is not None and chunk_size < 1:
            raise ConfigError(f"--chunk-size {chunk_size} must be at least 1 byte")
        settings = load_filesystem(config) if config is not None else None
        src_fs, src_path = _open(src, settings)
        dst_fs, dst_path = _open(dst, settings)
    except ConfigError as exc:
        return config_error(exc)
    except OSError as exc:  # connecting to the filesystem
        error(f"{type(exc).__name__}: {exc}")
        return EXIT_FAILURE
    started = time.monotonic()
    extra = {"chunk": chunk_size} if chunk_size is not None else {}
    try:
        done = copy_file(
            src_fs,
            src_path,
            dst_fs,
            dst_path,
            overwrite=overwrite,
            delete_source=delete_source,
            **extra,
        )
    except SameFileError as exc:
        error(f"{type(exc).__name__}: {exc}")
        return EXIT_SAME_FILE
    except SourceGoneError as exc:
        error(f"not copied: {exc}")
        return EXIT_NOT_COPIED
    except ValueError as exc:  # a bad setting
        return config_error(ConfigError(str(exc)))
    except OSError as exc:
        error(f"{type(exc).__name__}: {exc}")
        return EXIT_FAILURE
    elapsed_ms = int((time.monotonic() - started) * 1000)
    logger.info(
        "%s: %s --> %s, %d bytes in %d ms%s%s",
        direction_of(src, dst),
        done.source,
        done.destination,
        done.size,
        elapsed_ms,
        "" if done.written else " (already there)",
        ", source deleted" if done.source_deleted else "",
    )
    # IBM's result tuple keeps its "<destination> ." (result_message). The line ends with the
    # destination's URI instead: a period after it, spaced or not, reads as part of it (a
    # file name may end in '.'), and the URIs are meant to be given back.
    print(result_message(done).removesuffix(" ."), flush=True)
    return EXIT_OK
