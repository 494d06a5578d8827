"""The Spark sink's commit protocol: publish a micro-batch's files exactly once, by rename.

Tasks write hidden in-progress files (``.hdfs_sink-<task attempt>-<uuid>.inprogress``) in the
output directory; the driver publishes them here. Plain directory readers skip names starting
with ``.`` or ``_``, so they see a file only once it has its final name, and they need no
metadata log to read the output.

Sink log (``log_dir``, by default ``<output>/_hdfs_sink``), one entry per committed batch:

- ``<batch_id:020d>.json`` — the write-ahead entry: the planned renames (in order) and the sink
  state after the batch (``next_filenum``, and the ``open`` files: in-progress files that are not
  full yet, one per task slot, which the next batch's task of that slot continues). Written to a
  temporary name, synced, renamed.
- ``<batch_id:020d>.done`` — every rename of the entry is done.

The rows of a batch the source could not read (``rejects_file``, fused execution:
:mod:`operators.spark.rejects`) are published by the same entry: their renames follow the
output's, named by the rejects template with a ``%FILENUM`` count of their own
(``next_rejects`` in the state), and the entry lists them under ``rejects`` (not ``files``,
the output that manifests and ``on_published`` announce).

Files span micro-batches when the sink rolls by a limit (``tuples_per_file``, ``bytes_per_file``,
``time_per_file``): a task's last file, synced, stays open at the end of its batch, and the entry
records its size. The next batch's task of the same slot (partition id) cuts it back to that size
(a failed attempt may have appended to it), whatever its age, and appends, or hands it over to be
published when it is past ``time_per_file`` (:meth:`SinkLog.carried`). A file published by a
commit is never written again; an open file past ``time_per_file`` is published by the next
commit even when no record reaches it, and :meth:`SinkLog.close_open` publishes every open file
when the query stops.

A complete entry wins over anything else: Spark may re-run a batch after a crash (with new task
files), and the renames of the first complete entry are the batch's output; the new files are
orphans and get deleted. Everything here is plain Python over :class:`region.fs.FileSystem`.
"""

from __future__ import annotations

import json
import logging
import posixpath
import time
import uuid
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from typing import Any

from operators.sink.formats import BULK_FORMATS, convert, form_format
from operators.sink.owner import Owner, claim_output
from operators.sink.publish import publish
from operators.sink.rolling import RollingPolicy
from region.atomic import cut_to, dir_permission, read_whole, write_atomically
from region.errors import permanent
from region.fs import FileSystem, LeaseRecoverer

__all__ = [
    "IN_PROGRESS_PREFIX",
    "IN_PROGRESS_SUFFIX",
    "CommitResult",
    "PublishHook",
    "SinkLog",
    "WrittenFile",
    "complete",
    "continues",
    "cut_back",
    "in_progress_name",
    "lines_form",
]

logger = logging.getLogger(__name__)

IN_PROGRESS_PREFIX = ".hdfs_sink-"
IN_PROGRESS_SUFFIX = ".inprogress"
_VERSION = 1
_ENTRY_SUFFIX = ".json"
_DONE_SUFFIX = ".done"
#: Threads converting open Parquet or ORC files on the driver (a stop, ``time_per_file``).
_CONVERTERS = 4

#: Called at named points of the commit sequence (tests stop the process there).
FaultHook = Callable[[str, int], None]
#: Final path of a file: (the file, its %FILENUM) -> path.
Namer = Callable[["WrittenFile", int], str]
#: (batch id, the entry's published files ``{"path", "rows", "size"}``, whether they are the
#: files a stop published) -> None.
PublishHook = Callable[[int, list[dict[str, Any]], bool], None]


def in_progress_name(task: str, index: int) -> str:
    """A hidden name unique across task attempts and retries of the same attempt id."""
    return f"{IN_PROGRESS_PREFIX}{task}-{uuid.uuid4().hex}-{index}{IN_PROGRESS_SUFFIX}"


@dataclass(frozen=True, slots=True)
class WrittenFile:
    """One complete, synced in-progress file a task wrote. ``index`` orders a task's files."""

    path: str
    partition: int
    index: int
    rows: int
    size: int
    opened_ns: int
    #: The file name the records asked for (``file_attribute_name``), relative to the output.
    name: str | None = None
    #: The partition directory of its records (``partition_by``, e.g. ``k=v/dt=2026-11-30``),
    #: relative to the output: the file is published into it.
    subdir: str | None = None
    #: What its bytes are (:func:`file_form`): a task continues an open file only of its own
    #: form, and an open Parquet or ORC file is an Arrow stream until :func:`complete`.
    #: ``None``: lines or blocks, uncompressed (entries written before forms were recorded).
    form: str | None = None
    #: A file :func:`complete` converted from an open file's Arrow stream: that stream, no
    #: longer open once this file is published (then deleted as an orphan).
    stream: str | None = None

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "path": self.path,
            "partition": self.partition,
            "index": self.index,
            "rows": self.rows,
            "size": self.size,
            "opened_ns": self.opened_ns,
        }
        for key in ("name", "subdir", "form", "stream"):
            if getattr(self, key) is not None:
                out[key] = getattr(self, key)
        return out

    @classmethod
    def from_dict(cls, value: dict[str, Any]) -> WrittenFile:
        return cls(
            str(value["path"]),
            int(value["partition"]),
            int(value["index"]),
            int(value["rows"]),
            int(value["size"]),
            int(value["opened_ns"]),
            value.get("name"),
            value.get("subdir"),
            value.get("form"),
            value.get("stream"),
        )


@dataclass(frozen=True, slots=True)
class CommitResult:
    """What one commit published (empty for a replayed batch)."""

    batch_id: int
    published: tuple[str, ...]
    replayed: bool = False
    #: In-progress files left open for the next batches (their slot's task continues them).
    open: tuple[str, ...] = ()
    #: Records and bytes in the files published (for metrics).
    rows: int = 0
    size: int = 0
    #: Rejects files published, and the rows they hold.
    rejects: tuple[str, ...] = ()
    rejected: int = 0


def cut_back(fs: FileSystem, carried: WrittenFile, permission: int | None) -> None:
    """The open file ``carried`` back to the size its log entry recorded: a task attempt that
    failed after appending leaves more (a permanent error when it has less: it was cut outside
    the sink, or is gone, with records no replay brings back)."""
    try:
        if isinstance(fs, LeaseRecoverer):
            # A task killed while appending keeps HDFS's lease, the file's length unsettled:
            # end it first. Nothing else writes a carried file when this runs (its slot's next
            # attempt, the commit, the stop), and speculation is off (see operators.spark.sink).
            fs.recover_lease(carried.path)
        actual = fs.status(carried.path).size
    except FileNotFoundError:
        msg = (
            f"hdfs_sink: {fs.display(carried.path)}, left open by an earlier batch with "
            f"{carried.size} bytes, is missing: the records it held went with it"
        )
        raise permanent(FileNotFoundError(msg)) from None
    if actual < carried.size:
        msg = (
            f"hdfs_sink: {fs.display(carried.path)} has {actual} bytes, fewer than the "
            f"{carried.size} an earlier batch left in it (cut short outside the sink)"
        )
        raise permanent(OSError(msg))
    if actual > carried.size:
        temp = posixpath.join(posixpath.dirname(carried.path), in_progress_name("cut", 0))
        cut_to(fs, carried.path, carried.size, temp=temp, permission=permission)
        logger.info(
            "hdfs_sink: cut %s back from %s to %s bytes", carried.path, actual, carried.size
        )


def lines_form(*, binary: bool, compression: str | None, encoding: str) -> str:
    """The form of a file of lines (``binary``: blocks): how its bytes are encoded."""
    return f"{'binary' if binary else 'line'}/{compression or 'none'}/{encoding}"


#: The form of an open file an entry recorded without one: lines, UTF-8, uncompressed.
_UNRECORDED_FORM = lines_form(binary=False, compression=None, encoding="utf-8")


def continues(carried: WrittenFile, form: str) -> bool:
    """Whether a task writing files of ``form`` may append to ``carried`` (an open file of an
    earlier batch): only one of the same form, so a run whose settings changed (format, codec,
    columns, encoding) never mixes two kinds of bytes in one file; the other is completed
    (:func:`complete`, which says so when its format or codec differs; this says so when only
    its columns or encoding do)."""
    was = carried.form or _UNRECORDED_FORM
    if was != form and form_format(was) == form_format(form):
        logger.warning(
            "hdfs_sink: %s was written as %s, and this run writes %s: it is published as it "
            "is, and the records go on in a new file",
            carried.path,
            was,
            form,
        )
    return was == form


def complete(
    fs: FileSystem,
    f: WrittenFile,
    permission: int | None,
    into: tuple[str, str | None] | None = None,
) -> WrittenFile:
    """An open file, ready to publish: a Parquet or ORC file's Arrow stream converted into a
    new in-progress file beside it (whole, synced); any other file as it is. The stream itself
    stays until the commit that publishes the result deletes it (an orphan then), so a crash
    before that commit finds it as the log left it. Call it on a file cut back to its size.

    ``into``: this run's ``(format, codec)`` (:func:`form_format`). The file is named by this
    run's template, so a stream an earlier run of another Parquet or ORC format or codec left
    open (the settings changed between runs) becomes a file of this run's format and codec,
    with its own columns: a Parquet file never gets an ``.orc`` name. A file of lines, or of
    another kind of format, is published as it was written (WARNING: its name may not say
    what it holds)."""
    was = f.form or _UNRECORDED_FORM
    form = f.form
    if into is not None and form_format(was) != into:
        convertible = form_format(was)[0] in BULK_FORMATS and into[0] in BULK_FORMATS
        if convertible:
            form = f"{into[0]}/{into[1] or 'none'}/{was.split('/', 2)[2]}"
        logger.warning(
            "hdfs_sink: %s was left open as %s by a run of other settings: %s",
            fs.display(f.path),
            was,
            f"it is completed as {form}, this run's format"
            if convertible
            else "it is published as it was written, named by this run's template",
        )
    if form is None or form_format(form)[0] not in BULK_FORMATS:
        return f
    target = posixpath.join(posixpath.dirname(f.path), in_progress_name("converted", f.partition))
    out, size = convert(fs, f.path, target, form, permission)
    out.close()
    return replace(f, path=target, size=size, stream=f.path, form=form)


def _slot(f: WrittenFile) -> tuple[int, str]:
    """What an open file is kept for: its task slot (partition id) and partition directory."""
    return f.partition, f.subdir or ""


def _open_files(entry: dict[str, Any]) -> list[WrittenFile]:
    """The files an entry leaves open (entries written before files spanned batches have none)."""
    return [WrittenFile.from_dict(f) for f in entry["state"].get("open", ())]


def _entry_name(batch_id: int, suffix: str) -> str:
    return f"{batch_id:020d}{suffix}"


class SinkLog:
    """The write-ahead log of one sink: commit, abort and recovery of micro-batches
    (``namer`` is needed only to commit), and what it says about a batch (:meth:`entry`).

    ``exactly_once``: a batch id is published once, whatever happens between the tasks'
    writes and Spark recording the commit. ``at_least_once``: no batch-id check; a batch
    re-run after a crash is published again (the file numbers are still never reused).
    """

    def __init__(
        self,
        fs: FileSystem,
        output_dir: str,
        log_dir: str,
        namer: Namer | None = None,
        *,
        exactly_once: bool = True,
        retain: int = 100,
        fault: FaultHook | None = None,
        permission: int | None = 0o640,
        owner: Owner | None = None,
        rolling: RollingPolicy | None = None,
        clock: Callable[[], float] = time.time,
        on_publish: PublishHook | None = None,
        renumber: Callable[[str, int], str] | None = None,
        rejects_namer: Namer | None = None,
        into: tuple[str, str | None] | None = None,
    ) -> None:
        #: This run's ``(format, codec)``: a file left open by a run of other settings is
        #: completed in it where it can be (:func:`complete`).
        self._into = into
        #: The final names of rejects files (``rejects_file``), by their own %FILENUM.
        self._rejects_namer = rejects_namer
        #: Names asked for by records (``file_attribute_name``): a name taken (published
        #: before, or by another file of the batch) goes to ``renumber(name, 1)``, ``2``...
        self._renumber = renumber
        #: Called once an entry's renames are done, before it is marked done: a crash in
        #: between calls it again for the same files (a manifest written again, the same).
        self._on_publish = on_publish
        self._fs = fs
        #: ``time_per_file``: an open file past its age is published by the next commit.
        self._rolling = rolling or RollingPolicy()
        self._clock = clock
        #: The job writing the output; claimed (operators.sink.owner) before the log is first used.
        self._owner = owner
        self._claimed = owner is None
        #: Mode of log entries (the log directory gets the matching traversal bits).
        self._permission = permission
        self.output_dir = output_dir.rstrip("/") or "/"
        self.log_dir = log_dir.rstrip("/") or "/"
        self._namer = namer
        self._exactly_once = exactly_once
        self._retain = max(1, retain)
        self._fault = fault

    # -- log entries ----------------------------------------------------------------------

    def _path(self, batch_id: int, suffix: str) -> str:
        return posixpath.join(self.log_dir, _entry_name(batch_id, suffix))

    def _listing(self, *, clean: bool = True) -> tuple[dict[int, str], set[int]]:
        """Entries (batch id -> path) and done markers; leftovers of torn writes are removed
        (``clean``; a task only reads)."""
        entries: dict[int, str] = {}
        done: set[int] = set()
        try:
            listing = self._fs.list_dir(self.log_dir)
        except FileNotFoundError:
            return entries, done
        for status in listing:
            name = status.name
            stem, dot, suffix = name.partition(".")
            if name.startswith(".") and name.endswith(".tmp"):
                # A crash before an entry's rename: the entry never existed.
                if clean:
                    self._fs.delete(status.path)
                continue
            if not stem.isdigit() or not dot:
                continue
            if "." + suffix == _ENTRY_SUFFIX:
                entries[int(stem)] = status.path
            elif "." + suffix == _DONE_SUFFIX:
                done.add(int(stem))
        return entries, done

    def _read_entry(self, path: str) -> dict[str, Any]:
        raw = read_whole(self._fs, path)  # its writer's close may not have landed
        try:
            entry = json.loads(raw)
        except ValueError as exc:
            msg = f"sink log entry {self._fs.display(path)} is not valid JSON: {exc}"
            raise ValueError(msg) from None
        if not isinstance(entry, dict) or entry.get("version") != _VERSION:
            msg = (
                f"sink log entry {self._fs.display(path)} has an unknown format "
                f"(version {entry.get('version') if isinstance(entry, dict) else None!r})"
            )
            raise ValueError(msg)
        return entry

    def _write_entry(self, batch_id: int, entry: dict[str, Any]) -> None:
        """Write (or replace) the entry of ``batch_id``: whole or not at all, and durable once
        renamed into place. Its close is left to the background (on HDFS a small file's close
        waits until a DataNode reports its block, 500 ms on a small cluster: once a batch);
        :meth:`_read_entry` reads an entry whose close has not landed."""
        if not self._fs.exists(self.log_dir):
            self._fs.mkdirs(self.log_dir, permission=dir_permission(self._permission))
        write_atomically(
            self._fs,
            self._path(batch_id, _ENTRY_SUFFIX),
            json.dumps(entry, indent=1).encode(),
            overwrite=True,
            permission=self._permission,
            close_later=True,
        )

    def _mark_done(self, batch_id: int) -> None:
        writer = self._fs.create(
            self._path(batch_id, _DONE_SUFFIX), overwrite=True, permission=self._permission
        )
        try:
            writer.sync()
        finally:
            writer.close()

    def _apply(self, batch_id: int, renames: Sequence[Sequence[str]]) -> None:
        """Perform the planned renames by the publish rule (:mod:`operators.sink.publish`): each is
        skipped when already done, so a crash anywhere in here is repaired by running it
        again, and no rename ever overwrites a file."""
        for i, (src, dst) in enumerate(renames):
            parent = posixpath.dirname(dst)
            if parent != self.output_dir and not self._fs.exists(parent):
                # A name from a record may name a folder below the output.
                self._fs.mkdirs(parent, permission=dir_permission(self._permission))
            publish(self._fs, src, dst, who=f"sink batch {batch_id}")
            if i == 0:
                self._fault_at("after_first_rename", batch_id)

    def _published(self, batch_id: int, entry: dict[str, Any]) -> None:
        """Tell the hook what the entry published: its batch's files; or, for an entry amended
        by :meth:`close_open` (only done entries are amended: their batch's files were told),
        the files the stop published."""
        if self._on_publish is None:
            return
        files = list(entry["files"])
        stop = int(entry.get("stop_files", 0))
        batch_files, stop_files = files[: len(files) - stop], files[len(files) - stop :]
        if batch_files and "stop_files" not in entry:
            self._on_publish(batch_id, batch_files, False)
        if stop_files:
            self._on_publish(batch_id, stop_files, True)

    def _fault_at(self, point: str, batch_id: int) -> None:
        if self._fault is not None:
            self._fault(point, batch_id)

    # -- recovery -------------------------------------------------------------------------

    def recover(self) -> dict[str, Any]:
        """Finish every entry not marked done (in batch order); return the newest sink state
        (``{"next_filenum": n, "batch_id": id | None}``). ConfigError when the log belongs to
        another job (its entries would be taken for this job's batches)."""
        if not self._claimed:
            assert self._owner is not None
            claim_output(self._fs, self.log_dir, self._owner, permission=self._permission)
            self._claimed = True
        entries, done = self._listing()
        state: dict[str, Any] = {
            "next_filenum": 0,
            "next_rejects": 0,
            "batch_id": None,
            "open": [],
            "open_since": {},
        }
        newest = max(entries, default=None)
        for batch_id in sorted(entries):
            if batch_id in done and batch_id != newest:
                continue
            entry = self._read_entry(entries[batch_id])
            if batch_id not in done:
                logger.info(
                    "sink %s: finishing batch %s from its log entry (%s renames)",
                    self._fs.display(self.output_dir),
                    batch_id,
                    len(entry["renames"]),
                )
                self._apply(batch_id, entry["renames"])
                self._published(batch_id, entry)
                self._mark_done(batch_id)
            state = {
                "next_filenum": int(entry["state"]["next_filenum"]),
                "next_rejects": int(entry["state"].get("next_rejects", 0)),
                "batch_id": batch_id,
                "open": _open_files(entry),
                "open_since": {
                    str(k): int(v) for k, v in entry["state"].get("open_since", {}).items()
                },
            }
        return state

    def published_through(self) -> int | None:
        """The newest batch whose records (and every earlier batch's) are all published: the
        newest batch in the log, or the one before the oldest batch an open file holds records
        of. ``None`` when none is."""
        state = self.recover()
        newest = state["batch_id"]
        if newest is None:
            return None
        since = [int(v) for v in state["open_since"].values()]
        through = min(since) - 1 if since else int(newest)
        return through if through >= 0 else None

    def carried(self, batch_id: int) -> tuple[bool, dict[int, list[WrittenFile]]]:
        """For a task of batch ``batch_id``: ``(published, open files by slot)``. Reads only
        (tasks run while the driver waits for them, so nothing here is half written).

        ``published``: exactly_once, and the log already holds batch ``batch_id`` (a replay
        after a crash that took Spark's commit record): the task must write nothing, the files
        of the entry are the batch's output. Otherwise the open files of the newest entry,
        which the task of each slot continues.
        """
        entries, _ = self._listing(clean=False)
        if not entries:
            return False, {}
        newest = max(entries)
        if self._exactly_once and newest >= batch_id:
            return True, {}
        entry = self._read_entry(self._path(newest, _ENTRY_SUFFIX))
        by_slot: dict[int, list[WrittenFile]] = {}
        for f in _open_files(entry):
            by_slot.setdefault(f.partition, []).append(f)
        return False, by_slot

    def delete_orphans(self, keep: Sequence[str] = ()) -> list[str]:
        """Delete in-progress files no log entry will ever publish (from killed, failed,
        speculative or replayed tasks). Run only when no task of the query writes."""
        kept = set(keep)
        deleted: list[str] = []
        try:
            listing = self._fs.list_dir(self.output_dir)
        except FileNotFoundError:
            return deleted
        for status in listing:
            name = status.name
            if (
                name.startswith(IN_PROGRESS_PREFIX)
                and name.endswith(IN_PROGRESS_SUFFIX)
                and status.path not in kept
                and self._fs.delete(status.path)
            ):
                deleted.append(status.path)
        if deleted:
            logger.info(
                "sink %s: deleted %s orphaned in-progress file(s)",
                self._fs.display(self.output_dir),
                len(deleted),
            )
        return deleted

    # -- commit / abort -------------------------------------------------------------------

    def commit(
        self,
        batch_id: int,
        files: Sequence[WrittenFile],
        open_files: Sequence[WrittenFile] = (),
        rejects: Sequence[WrittenFile] = (),
    ) -> CommitResult:
        """Publish ``files`` as batch ``batch_id``, and keep ``open_files`` (synced, not full)
        open for the next batches; publish ``rejects`` (the batch's rejects files, by
        ``rejects_namer``) with them. Safe to call again for the same batch."""
        # 1. Finish whatever an earlier (crashed) commit left half done.
        state = self.recover()
        newest = state["batch_id"]
        if self._exactly_once and newest is not None and batch_id <= newest:
            # 2. A replay of a published batch: its output is already there.
            if not self._fs.exists(self._path(batch_id, _ENTRY_SUFFIX)):
                logger.warning(
                    "sink %s: batch %s is older than the newest published batch %s and has no "
                    "log entry; it is skipped (if the query's checkpoint was deleted, delete "
                    "the sink log %s too)",
                    self._fs.display(self.output_dir),
                    batch_id,
                    newest,
                    self._fs.display(self.log_dir),
                )
            else:
                logger.info(
                    "sink %s: batch %s was already published; nothing to do",
                    self._fs.display(self.output_dir),
                    batch_id,
                )
            self.delete_orphans(keep=[f.path for f in state["open"]])
            return CommitResult(batch_id, (), replayed=True)
        # The batch's tasks are done and nothing of it is decided yet (crash tests stop here).
        self._fault_at("before_wal", batch_id)
        # 3. %FILENUM in a deterministic order, continuing from the sink state.
        closed, still_open = self._next_open(state["open"], files, open_files)
        ordered = sorted(closed, key=lambda f: (f.partition, f.index, f.path))
        next_filenum = int(state["next_filenum"])
        renames: list[list[str]] = []
        published: list[dict[str, Any]] = []
        planned: set[str] = set()
        for f in ordered:
            dst, next_filenum = self._free_name(batch_id, f, next_filenum, planned)
            planned.add(dst)
            renames.append([f.path, dst])
            published.append({"path": dst, "rows": f.rows, "size": f.size})
        # The rejects after the output, numbered on from their own count.
        next_rejects = int(state["next_rejects"])
        rejected: list[dict[str, Any]] = []
        for f in sorted(rejects, key=lambda f: (f.partition, f.index, f.path)):
            if self._rejects_namer is None:
                raise TypeError("SinkLog needs rejects_namer to publish rejects files")
            dst, next_rejects = self._free_name(
                batch_id, f, next_rejects, planned, self._rejects_namer
            )
            planned.add(dst)
            renames.append([f.path, dst])
            rejected.append({"path": dst, "rows": f.rows, "size": f.size})
        entry: dict[str, Any] = {
            "version": _VERSION,
            "batch_id": batch_id,
            "renames": renames,
            "files": published,
            "state": {
                "next_filenum": next_filenum,
                "open": [f.to_dict() for f in still_open],
                # The batch each open file got its first records in (published_through).
                "open_since": {
                    f.path: state["open_since"].get(f.path, batch_id) for f in still_open
                },
            },
        }
        # Only once there were rejects: the entries of a sink without them stay as they were.
        if rejected:
            entry["rejects"] = rejected
        if next_rejects:
            entry["state"]["next_rejects"] = next_rejects
        if not self._exactly_once and newest is not None and batch_id <= newest:
            # at_least_once re-publishes a re-run batch: its entry gets a fresh id.
            batch_id = newest + 1
            entry["batch_id"] = batch_id
        # 4. The write-ahead entry: from here on the batch's output is decided.
        self._write_entry(batch_id, entry)
        self._fault_at("after_wal", batch_id)
        # 5. Publish (idempotent renames), 6. mark the entry done.
        self._apply(batch_id, renames)
        self._fault_at("after_renames", batch_id)
        self._published(batch_id, entry)
        self._mark_done(batch_id)
        # 7. Housekeeping: orphans of failed attempts, entries older than ``retain``.
        kept = tuple(f.path for f in still_open)
        self.delete_orphans(keep=kept)
        self._retire(batch_id)
        return CommitResult(
            batch_id,
            tuple(f["path"] for f in published),
            open=kept,
            rows=sum(f.rows for f in ordered),
            size=sum(f.size for f in ordered),
            rejects=tuple(r["path"] for r in rejected),
            rejected=sum(r["rows"] for r in rejected),
        )

    def _next_open(
        self,
        before: Sequence[WrittenFile],
        closed: Sequence[WrittenFile],
        opened: Sequence[WrittenFile],
    ) -> tuple[list[WrittenFile], list[WrittenFile]]:
        """``(files to publish, files staying open)`` after a batch: a slot's open file (one per
        slot, or per slot and partition directory) is the one its task left open, else the one
        before (its task did not run, wrote nothing to it, or ran out of room for it), unless the
        task closed it (as it was, or converted: ``stream``). An open file past ``time_per_file``
        is published now (:func:`complete`)."""
        closed_paths = {f.path for f in closed} | {f.stream for f in closed if f.stream}
        carried_paths = {f.path for f in before}
        by_slot = {_slot(f): f for f in before if f.path not in closed_paths}
        continued = {_slot(o) for o in opened}
        # An attempt that failed (or a run of the batch that crashed before its entry) may have
        # appended to a carried file: back to the size this entry records, before it is
        # published or stays open. That is the size its task reported for one it closed (or
        # handed over past time_per_file), else the one the last entry recorded (no task of
        # this batch continued it).
        handed_over = [f for f in closed if f.path in carried_paths]
        untouched = [f for key, f in by_slot.items() if key not in continued]
        for f in handed_over + untouched:
            cut_back(self._fs, f, self._permission)
        by_slot.update({_slot(f): f for f in opened})
        now = self._clock()
        to_publish = list(closed)
        still_open: list[WrittenFile] = []
        expired: list[WrittenFile] = []
        for key in sorted(by_slot):
            f = by_slot[key]
            (expired if self._rolling.expired(f.opened_ns / 1e9, now) else still_open).append(f)
        return to_publish + self._complete(expired), still_open

    def _complete(self, files: list[WrittenFile]) -> list[WrittenFile]:
        """:func:`complete` for each of ``files`` (in order), on a few threads: a conversion
        spends its time in Arrow's encoders, outside the interpreter lock."""
        if len(files) <= 1:
            return [complete(self._fs, f, self._permission, self._into) for f in files]
        with ThreadPoolExecutor(min(len(files), _CONVERTERS), "hdfs-sink-convert") as pool:
            return list(
                pool.map(lambda f: complete(self._fs, f, self._permission, self._into), files)
            )

    def close_open(self) -> CommitResult | None:
        """Publish every open file (the query stopped: no batch will continue them), by amending
        the newest entry. ``None`` when nothing is open.

        1. Finish the log (:meth:`recover`).
        2. Plan: the newest entry's renames plus one per open file, the state without open
           files; the done marker goes first, so a crash from here repeats the entry's renames
           (each skipped when done) and leaves the files open, for the next stop or batch.
           A Parquet or ORC file is converted from its Arrow stream first (:func:`complete`).
        3. Write the amended entry (atomically), 4. rename, 5. mark it done.
        6. Delete the in-progress files left (nothing is open now, and no task writes during a
           stop): the converted files' streams, a conversion a crash cut short.
        """
        state = self.recover()
        newest, still = state["batch_id"], state["open"]
        if newest is None or not still:
            self.delete_orphans()  # 6. of a stop a crash cut short there
            return None
        if self._namer is None:
            raise TypeError("SinkLog.close_open needs the namer given to SinkLog()")
        entry = self._read_entry(self._path(newest, _ENTRY_SUFFIX))
        for f in still:
            cut_back(self._fs, f, self._permission)
        # Parquet and ORC files from their Arrow streams, before anything of the entry changes.
        still = self._complete(still)
        next_filenum = int(state["next_filenum"])
        renames = [list(r) for r in entry["renames"]]
        added: list[str] = []
        planned: set[str] = set()
        for f in sorted(still, key=lambda f: (f.partition, f.index, f.path)):
            dst, next_filenum = self._free_name(newest, f, next_filenum, planned)
            planned.add(dst)
            renames.append([f.path, dst])
            entry["files"].append({"path": dst, "rows": f.rows, "size": f.size})
            added.append(dst)
        entry["renames"] = renames
        entry["state"] = {"next_filenum": next_filenum, "open": []}
        if state["next_rejects"]:
            entry["state"]["next_rejects"] = int(state["next_rejects"])
        entry["stop_files"] = len(added)
        self._fs.delete(self._path(newest, _DONE_SUFFIX))
        self._write_entry(newest, entry)
        self._apply(newest, renames)
        self._published(newest, entry)
        self._mark_done(newest)
        self.delete_orphans()  # 6.
        logger.info(
            "sink %s: published %s file(s) left open (the query stopped, or no batch wrote to "
            "them for close_idle_after)",
            self._fs.display(self.output_dir),
            len(added),
        )
        return CommitResult(
            newest,
            tuple(added),
            rows=sum(f.rows for f in still),
            size=sum(f.size for f in still),
        )

    def _free_name(
        self,
        batch_id: int,
        f: WrittenFile,
        filenum: int,
        planned: set[str],
        namer: Namer | None = None,
    ) -> tuple[str, int]:
        """The final name of ``f`` from number ``filenum`` on (by ``namer``, default the
        output's), and the next number. A name taken by someone else's file, or planned for
        another file of the batch, is skipped: never overwritten."""
        renumber = self._renumber
        if namer is None:
            namer = self._namer
        else:
            renumber = None  # rejects files are numbered by their template alone
        if namer is None:
            raise TypeError("SinkLog needs the namer given to SinkLog() to publish")
        dst = namer(f, filenum)
        filenum += 1
        asked, tries = dst, 0
        while dst in planned or self._fs.exists(dst):
            if renumber is not None:
                tries += 1
                taken, dst = dst, renumber(asked, tries)
                logger.info(
                    "sink batch %s: %s is taken; the records go to %s", batch_id, taken, dst
                )
                continue
            taken, dst = dst, namer(f, filenum)
            if dst == taken:
                shown = self._fs.display(dst)
                raise FileExistsError(f"sink batch {batch_id}: {shown} exists (never overwritten)")
            logger.info("sink batch %s: %s exists, skipping its number", batch_id, taken)
            filenum += 1
        return dst, filenum

    def abort(self, batch_id: int, files: Sequence[WrittenFile]) -> None:
        """Drop the batch's in-progress files (after finishing any half-done commit, whose
        files must not be deleted). Open files carried from earlier batches stay: they hold
        those batches' records (the next attempt cuts them back to their recorded size)."""
        carried = {f.path for f in self.recover()["open"]}
        for f in files:
            if f.path not in carried and self._fs.delete(f.path):
                logger.info("sink batch %s aborted: deleted %s", batch_id, f.path)

    def _retire(self, newest: int) -> None:
        entries, done = self._listing()
        for batch_id in sorted(entries):
            if batch_id > newest - self._retain:
                break
            if batch_id in done:
                # Entry first: a done marker without its entry is ignored, the reverse is not.
                self._fs.delete(entries[batch_id])
                self._fs.delete(self._path(batch_id, _DONE_SUFFIX))

    def entry(self, batch_id: int) -> dict[str, Any] | None:
        """What the log holds for ``batch_id`` — ``{"state": …, "renames": n, "done": bool}`` —
        or None when it holds no entry for it (never written, or retired). Reads only:
        ValueError when the entry is damaged."""
        path = self._path(batch_id, _ENTRY_SUFFIX)
        try:
            entry = self._read_entry(path)
        except FileNotFoundError:
            return None
        done = self._fs.exists(self._path(batch_id, _DONE_SUFFIX))
        return {"state": entry.get("state"), "renames": len(entry["renames"]), "done": done}

    def published(self) -> list[dict[str, Any]]:
        """Files published by the retained entries (path, rows, size), oldest first."""
        entries, _ = self._listing()
        out: list[dict[str, Any]] = []
        for batch_id in sorted(entries):
            out.extend(self._read_entry(entries[batch_id])["files"])
        return out
