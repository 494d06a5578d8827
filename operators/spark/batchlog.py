"""Spark's streaming checkpoint layout, read and written as Spark does, for fused execution.

A Structured Streaming checkpoint keeps, per micro-batch ``N``::

    metadata     {"id": "<query uuid>"}                          written once
    offsets/N    v1 / {"batchWatermarkMs": ..., "conf": {...}} / <source offset JSON>
    commits/N    v1 / {"nextBatchWatermarkMs": 0}                 batch N is done

``offsets/N`` is the write-ahead record: once it exists, batch ``N`` reads exactly the data
between the offsets of ``N - 1`` and ``N``, whatever runs it. Fused execution keeps its progress
in the same files, so a pipeline can move between fused execution and a streaming query (a SQL
transform) on one checkpoint and each continues where the other stopped. Files are published by
:func:`region.atomic.write_atomically`; Spark skips the hidden temporary names when it lists.

``offsets/N`` and ``commits/N`` are renamed into place once synced and closed in the background
(on HDFS a small file's close waits until a DataNode reports its block: 500 ms a batch each on a
small cluster). Fused execution lists the names and reads entries with
:func:`region.atomic.read_whole`, which also reads one whose writer was killed before its close
landed. Spark's own client cannot read such a file after a DataNode restart (it asks the
DataNodes for an open block's length), so :meth:`BatchLog.seal` closes the newest entries before
a streaming query takes the checkpoint over.
"""

from __future__ import annotations

import contextlib
import json
import logging
import posixpath
import time
import uuid
from collections.abc import Mapping
from typing import Any

from region.atomic import dir_permission, read_whole, write_atomically
from region.fs import FileSystem, LeaseRecoverer

__all__ = ["PLANS_DIR", "SPARK_CONFS", "SPARK_DIR", "BatchLog"]

#: A pipeline checkpoint on the Spark engine holds Spark's checkpoint (the log above) in this
#: folder, and the scan's plans, unless the scan names its own, in this one.
SPARK_DIR = "spark"
PLANS_DIR = "plans"

logger = logging.getLogger(__name__)

_VERSION = "v1"
#: The session settings Spark records with every batch (``OffsetSeqMetadata``): a query
#: restarted from the checkpoint runs with these values, not the session's.
SPARK_CONFS = (
    "spark.sql.shuffle.partitions",
    "spark.sql.streaming.stateStore.providerClass",
    "spark.sql.streaming.multipleWatermarkPolicy",
    "spark.sql.streaming.flatMapGroupsWithState.stateFormatVersion",
    "spark.sql.streaming.aggregation.stateFormatVersion",
    "spark.sql.streaming.join.stateFormatVersion",
    "spark.sql.streaming.stateStore.compression.codec",
)


class BatchLog:
    """``offsets/`` and ``commits/`` of one Spark checkpoint directory."""

    def __init__(
        self,
        fs: FileSystem,
        directory: str,
        *,
        retain: int = 100,
        permission: int | None = 0o640,
    ) -> None:
        self.fs = fs
        self.directory = directory.rstrip("/") or "/"
        self.retain = max(1, retain)
        self.permission = permission
        #: The offsets this object wrote, by batch id: read back from here, never from a file
        #: whose background close may not have landed (reading it could end this writer's
        #: own lease).
        self._written: dict[int, bytes] = {}

    def _path(self, kind: str, batch_id: int | None = None) -> str:
        base = posixpath.join(self.directory, kind)
        return base if batch_id is None else posixpath.join(base, str(batch_id))

    def _ids(self, kind: str) -> list[int]:
        try:
            listing = self.fs.list_dir(self._path(kind))
        except FileNotFoundError:
            return []
        return sorted(int(s.name) for s in listing if s.name.isdigit() and not s.is_dir)

    def newest(self) -> tuple[int | None, int | None]:
        """The newest batch with an offset, and the newest committed batch (``None``: none)."""
        offsets, commits = self._ids("offsets"), self._ids("commits")
        return (offsets[-1] if offsets else None, commits[-1] if commits else None)

    def _lines(self, batch_id: int) -> list[str]:
        path = self._path("offsets", batch_id)
        body = self._written.get(batch_id)
        if body is None:
            body = read_whole(self.fs, path)
        lines = body.decode("utf-8").split("\n")
        if lines[0] != _VERSION or len(lines) < 3:
            shown = self.fs.display(path)
            msg = f"{shown}: not a Spark offset log entry {_VERSION} (first line {lines[0]!r})"
            raise ValueError(msg)
        return lines

    def offset(self, batch_id: int) -> dict[str, Any]:
        """The source offset at the end of batch ``batch_id`` (one source per query)."""
        lines = self._lines(batch_id)
        try:
            value = json.loads(lines[2])
        except ValueError as exc:
            shown = self.fs.display(self._path("offsets", batch_id))
            raise ValueError(f"{shown}: the source offset is not JSON: {exc}") from None
        if not isinstance(value, dict):
            shown = self.fs.display(self._path("offsets", batch_id))
            raise ValueError(f"{shown}: the source offset is not an hdfs_scan offset: {lines[2]!r}")
        return value

    def _metadata(self, batch_id: int | None, conf: Mapping[str, str]) -> str:
        """The batch metadata line: Spark's own, copied from the previous entry, when there is
        one (so a streaming query resumes with the settings it recorded)."""
        if batch_id is not None:
            try:
                meta = json.loads(self._lines(batch_id)[1])
                meta["batchTimestampMs"] = int(time.time() * 1000)
                return json.dumps(meta, separators=(",", ":"))
            except (OSError, ValueError):
                pass  # an entry Spark cannot read either: write a fresh one
        now_ms = int(time.time() * 1000)
        meta = {"batchWatermarkMs": 0, "batchTimestampMs": now_ms, "conf": dict(conf)}
        return json.dumps(meta, separators=(",", ":"))

    def write_offset(
        self, batch_id: int, offset: Mapping[str, Any], conf: Mapping[str, str]
    ) -> None:
        """Record the end offset of batch ``batch_id`` (never replacing an existing entry)."""
        self._ensure_metadata()
        previous = self.newest()[0]
        body = "\n".join([_VERSION, self._metadata(previous, conf), json.dumps(dict(offset))])
        self._mkdirs("offsets")
        write_atomically(
            self.fs,
            self._path("offsets", batch_id),
            body.encode(),
            permission=self.permission,
            close_later=True,
        )
        self._written[batch_id] = body.encode()

    def write_commit(self, batch_id: int) -> None:
        """Record that batch ``batch_id`` is done; drop entries older than ``retain`` batches."""
        self._mkdirs("commits")
        body = f'{_VERSION}\n{{"nextBatchWatermarkMs":0}}'
        write_atomically(
            self.fs,
            self._path("commits", batch_id),
            body.encode(),
            permission=self.permission,
            close_later=True,
        )
        oldest = batch_id - self.retain + 1
        for kind in ("offsets", "commits"):
            for old in self._ids(kind):
                if old < oldest:
                    self.fs.delete(self._path(kind, old))
        for old in [b for b in self._written if b < oldest]:
            del self._written[old]

    def seal(self) -> None:
        """Close the entries a streaming query reads first (the newest commit, the two newest
        offsets: it runs a batch again from the one before) where a killed writer left them
        open, so that Spark's client reads them whatever happened to the DataNodes since. Call
        before a streaming query starts on this checkpoint, holding the checkpoint's lock (a
        live writer would lose its file). One NameNode call for each closed entry."""
        if not isinstance(self.fs, LeaseRecoverer):
            return  # its files close with their writer
        for kind, newest in (("offsets", 2), ("commits", 1)):
            for batch_id in self._ids(kind)[-newest:]:
                self.fs.recover_lease(self._path(kind, batch_id))

    def _mkdirs(self, kind: str) -> None:
        path = self._path(kind)
        if not self.fs.exists(path):
            self.fs.mkdirs(path, permission=dir_permission(self.permission))

    def _ensure_metadata(self) -> None:
        path = self._path("metadata")
        if self.fs.exists(path):
            return
        if not self.fs.exists(self.directory):
            self.fs.mkdirs(self.directory, permission=dir_permission(self.permission))
        with contextlib.suppress(FileExistsError):  # written meanwhile: that id stays
            write_atomically(
                self.fs,
                path,
                json.dumps({"id": str(uuid.uuid4())}).encode(),
                permission=self.permission,
            )
