"""Filesystem backends behind the :class:`region.fs.FileSystem` contract.

Turn a configured string into a filesystem and a path on it::

    fs, path = open_path("webhdfs://nn:9870/landing")   # WebHdfsFileSystem, "/landing"
    fs, path = open_path("/tmp/x")                       # LocalFileSystem, "/tmp/x"
    fs, path = open_path("/landing", settings)           # on the filesystem of ``settings``

``open_filesystem(settings_or_uri)`` gives the filesystem alone.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from region.fs import FileStatus, FileSystem, FileWriter

from .errors import UnsupportedOperationError
from .local import LocalFileSystem

if TYPE_CHECKING:
    from .native import NativeHdfsFileSystem
    from .settings import FileSystemSettings, split_uri
    from .webhdfs import WebHdfsFileSystem

__all__ = [
    "FileStatus",
    "FileSystem",
    "FileSystemSettings",
    "FileWriter",
    "LocalFileSystem",
    "NativeHdfsFileSystem",
    "UnsupportedOperationError",
    "WebHdfsFileSystem",
    "open_filesystem",
    "open_path",
    "split_uri",
]


def __getattr__(name: str) -> object:
    # Imported when first used: the settings need pydantic, the remote backends their client
    # libraries; Spark's Python workers only need the local backend and start faster without.
    if name in ("FileSystemSettings", "split_uri"):
        from . import settings

        return getattr(settings, name)
    if name == "WebHdfsFileSystem":
        from .webhdfs import WebHdfsFileSystem

        return WebHdfsFileSystem
    if name == "NativeHdfsFileSystem":
        from .native import NativeHdfsFileSystem

        return NativeHdfsFileSystem
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _settings(settings_or_uri: FileSystemSettings | str | None) -> FileSystemSettings:
    from .settings import FileSystemSettings

    if settings_or_uri is None:
        # Said explicitly: settings without a uri follow fs.defaultFS of HADOOP_CONF_DIR.
        return FileSystemSettings(uri="file:///")
    if isinstance(settings_or_uri, str):
        return FileSystemSettings(uri=settings_or_uri)
    return settings_or_uri


def open_filesystem(settings_or_uri: FileSystemSettings | str | None = None) -> FileSystem:
    """The filesystem named by the settings or URI (``None``: the local disk).

    The path part of a URI is ignored here; use :func:`open_path` to keep it.
    """
    settings = _settings(settings_or_uri)
    if settings.kind == "webhdfs":
        from .webhdfs import WebHdfsFileSystem

        return WebHdfsFileSystem(settings)
    if settings.kind == "hdfs":
        from .native import NativeHdfsFileSystem

        return NativeHdfsFileSystem(settings)
    return LocalFileSystem()


def open_path(
    uri_or_path: str,
    settings: FileSystemSettings | str | None = None,
    *,
    opened: list[tuple[FileSystemSettings, FileSystem]] | None = None,
) -> tuple[FileSystem, str]:
    """``(filesystem, path on it)`` for a configured path.

    A URI (``webhdfs://nn:9870/landing``, ``file:///tmp/x``) names its own filesystem; the other
    ``settings`` (user, Kerberos, timeouts) still apply, but a password or token only when the
    URI names the same filesystem as ``settings``. A plain path (``/landing``) is on the
    filesystem of ``settings`` (the local disk when ``None``).

    ``opened``: the filesystems opened so far by the caller, with their settings; one opened
    with equal settings is returned again (an ``hdfs://`` one connects and tries its WebHDFS
    at start), a new one is added.
    """
    from .settings import FileSystemSettings, split_uri

    base = _settings(settings)
    fs_uri, path = split_uri(uri_or_path)
    if fs_uri == "file:///" and not uri_or_path.startswith("file:"):
        return _open(base, opened), path  # a plain path
    named = FileSystemSettings(uri=fs_uri)
    if named.kind == base.kind and named.display() == base.display():
        return _open(base, opened), path
    # Never send this filesystem's password or token (or their references) to another one.
    secrets = {"password", "token", "password_env", "token_env"}
    fields = base.model_dump(exclude={"uri", *secrets}, exclude_unset=True)
    if named.user is not None:
        fields["user"] = named.user
    merged = FileSystemSettings.model_validate(
        {**fields, "uri": fs_uri, **({"password": named.password} if named.password else {})}
    )
    return _open(merged, opened), path


def _open(
    settings: FileSystemSettings, opened: list[tuple[FileSystemSettings, FileSystem]] | None
) -> FileSystem:
    for known, fs in opened or ():
        if known == settings:
            return fs
    fs = open_filesystem(settings)
    if opened is not None:
        opened.append((settings, fs))
    return fs
