"""Publish by rename, safe to repeat: one rule for both engines' sinks.

A sink plans its renames (in-progress name -> final name) and records the plan where a restart
finds it (the in-process sink in its checkpoint, the Spark sink in its write-ahead log), then
runs them. Running a plan again after a crash anywhere in it does each rename at most once:

1. the source exists and the target does not: rename (never over an existing file);
2. the source is gone and the target exists: done before the crash; nothing to do;
3. neither exists: ``FileNotFoundError`` naming both (someone removed the in-progress file),
   or, while recovering, a WARNING (most likely published before the crash and moved away
   since by a reader: failing forever would not bring it back);
4. both exist: ``FileExistsError`` naming the target: a file is never overwritten — unless the
   caller was told to (``overwrite``: a file-attribute sink with ``on_returning_name =
   "overwrite"``), then the rename replaces it.
"""

from __future__ import annotations

import logging

from region.errors import permanent
from region.fs import FileSystem

__all__ = ["publish"]

logger = logging.getLogger(__name__)


def publish(
    fs: FileSystem,
    source: str,
    target: str,
    *,
    who: str,
    recovering: bool = False,
    overwrite: bool = False,
) -> bool:
    """Rename ``source`` to ``target`` by the rule above; whether the rename happened now
    (``False``: done before, or, recovering, both gone). ``who`` starts the messages."""
    try:
        fs.rename(source, target, overwrite=overwrite)
    except FileNotFoundError:
        if fs.exists(target):
            return False  # 2. renamed before a crash
        msg = (
            f"{who}: cannot publish {fs.display(target)}: neither it nor its in-progress file "
            f"{fs.display(source)} exists"
        )
        if not recovering:
            raise FileNotFoundError(msg) from None
        logger.warning("%s (published before the crash and moved away since?)", msg)
        return False
    except FileExistsError:
        if fs.exists(source):
            msg = (
                f"{who}: cannot publish {fs.display(source)}: {fs.display(target)} exists and is "
                "never overwritten"
            )
            raise permanent(FileExistsError(msg)) from None
        return False  # 2. renamed before (the target's check raced the rename)
    return True
