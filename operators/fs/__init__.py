"""Filesystem backends behind the :class:`region.fs.FileSystem` contract."""

from __future__ import annotations

from region.fs import FileStatus, FileSystem, FileWriter

from .local import LocalFileSystem

__all__ = ["FileStatus", "FileSystem", "FileWriter", "LocalFileSystem"]
