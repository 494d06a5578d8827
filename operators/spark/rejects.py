"""The rejects file on the Spark engine: rows the source could not read, kept exactly once.

A batch's byte ranges are fixed by its plan (written ahead, read again identically after a
crash), so the rows of a batch that do not fit are fixed too. Each task of a fused batch that
meets such rows writes them, one JSON line each as the local engine's rejects
(:func:`operators.sink.records.rejected_line`), to a hidden file in the rejects directory named
by the batch and the plan's partition (:func:`task_name`): first under a name of its own
attempt, renamed over that name when the task's reading is done. A retried or speculative
attempt, or a run of the batch again after a crash, replaces the file with the same rows; a
task that meets no bad row removes it (an earlier run may have left one). The driver then finds
the batch's files (:func:`batch_rejects`) and the sink's commit publishes them with the batch's
output, under the ``rejects_file`` template with its own ``%FILENUM`` count, through the same
write-ahead entry (:meth:`operators.spark.commit.SinkLog.commit`): every bad row is in the
published rejects once, exactly when the batch's records are in the output.
"""

from __future__ import annotations

import logging
import posixpath
import re
import uuid
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from operators.sink.records import rejected_line
from operators.spark.commit import WrittenFile

if TYPE_CHECKING:
    from operators.source.rows import Rejected
    from region.fs import FileSystem, FileWriter

__all__ = ["TaskRejects", "batch_rejects", "delete_leftovers", "rejects_dir", "task_name"]

logger = logging.getLogger(__name__)

#: The ``sink`` of each reject: the name the local engine gives the pipeline's sink.
SINK_NAME = "sink"
#: Hidden names (plain directory readers skip a leading ``.``).
_PREFIX = ".hdfs_rejects-"  # not the sink's in-progress prefix: never its orphans
_DONE = ".inprogress"
_ATTEMPT = ".tmp"
_TASK_NAME = re.compile(r"^\.hdfs_rejects-b(\d+)-p(\d+)\.inprogress$")


def rejects_dir(template: str) -> str:
    """The directory of the rejects files (the template's, which holds no variable)."""
    return posixpath.dirname(template) or "."


def task_name(template: str, batch_id: int, partition: int) -> str:
    """The hidden file of the rejects of one partition of the plan of ``batch_id``."""
    return posixpath.join(rejects_dir(template), f"{_PREFIX}b{batch_id}-p{partition}{_DONE}")


@dataclass
class TaskRejects:
    """The rejects of one task (see the module doc): :meth:`add` each row, then :meth:`finish`
    (or :meth:`discard` when the task fails)."""

    fs: FileSystem
    template: str
    batch_id: int
    partition: int
    permission: int | None = None
    rows: int = 0
    _writer: FileWriter | None = field(default=None, repr=False)

    def add(self, rejected: Rejected) -> None:
        if self._writer is None:
            # An attempt's own name: two attempts of one task never write the same file.
            name = f"{_PREFIX}b{self.batch_id}-p{self.partition}-{uuid.uuid4().hex}{_ATTEMPT}"
            path = posixpath.join(rejects_dir(self.template), name)
            self._writer = self.fs.create(path, permission=self.permission)
        self._writer.write((rejected_line(SINK_NAME, rejected) + "\n").encode())
        self.rows += 1
        logger.warning(
            "hdfs_scan: rejected the row of %s at byte %d: %s",
            rejected.file,
            rejected.offset,
            rejected.reason,
        )

    def finish(self) -> None:
        """The rows in place under the task's name (synced first: the commit publishes it);
        without rows, no file of an earlier run of the task stays."""
        final = task_name(self.template, self.batch_id, self.partition)
        writer, self._writer = self._writer, None
        if writer is None:
            self.fs.delete(final)
            return
        writer.sync()
        writer.close()
        self.fs.rename(writer.path, final, overwrite=True)

    def discard(self) -> None:
        writer, self._writer = self._writer, None
        if writer is not None:
            writer.close()
            self.fs.delete(writer.path)


def batch_rejects(fs: FileSystem, template: str, batch_id: int) -> list[WrittenFile]:
    """The rejects files the tasks of ``batch_id`` left (driver, after the batch's job), in
    partition order, each with its count of rows."""
    try:
        listing = fs.list_dir(rejects_dir(template))
    except FileNotFoundError:
        return []
    found: list[WrittenFile] = []
    for status in listing:
        match = _TASK_NAME.match(status.name)
        if match is None or int(match.group(1)) != batch_id:
            continue
        rows = fs.read(status.path).count(b"\n")
        found.append(WrittenFile(status.path, int(match.group(2)), 0, rows, status.size, 0))
    return sorted(found, key=lambda f: f.partition)


def delete_leftovers(fs: FileSystem, template: str) -> None:
    """Delete the hidden rejects files no commit will publish (of killed, failed or replayed
    tasks). Run only when no task writes, after a commit."""
    try:
        listing = fs.list_dir(rejects_dir(template))
    except FileNotFoundError:
        return
    for status in listing:
        if status.name.startswith(_PREFIX) and fs.delete(status.path):
            logger.info("deleted the rejects left by a task: %s", fs.display(status.path))
