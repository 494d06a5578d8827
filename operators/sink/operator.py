"""HDFS2FileSink: the lifecycle of the sink's files — write, drain, checkpoint, reset, and
publish when a cut completes. Names come from :mod:`.layout`, bytes from :mod:`.records`, the
way back to a cut from :mod:`.recovery`."""

from __future__ import annotations

import contextlib
import logging
import posixpath
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from operators.common.background import Background
from operators.common.columns import Columns
from operators.common.errors import BadRecordError, OperatorError
from operators.common.plugins import load_callable
from operators.sink.bulk import EarlyConversions
from operators.sink.formats import TableEncoder, convert, form_format
from operators.sink.layout import INPROGRESS, MARKER, STAGED, SinkLayout, norm
from operators.sink.manifest import MANIFEST_DIR, Published, write_manifest
from operators.sink.metrics import SinkMetrics
from operators.sink.owner import Owner, claim_output
from operators.sink.partitions import Partitioner, partition_of
from operators.sink.publish import publish
from operators.sink.records import BadRecords, RecordEncoder
from operators.sink.recovery import (
    ClosedFile,
    OpenFile,
    Recovery,
    empty_state,
    parse_state,
    state_value,
)
from operators.sink.settings import SinkSettings
from region.errors import ConfigError, permanent
from region.fs import FileSystem, FileWriter, LaterCloser, LeaseRecoverer
from region.state import Batch, SinkOperator, State

__all__ = ["HDFS2FileSink", "SinkMetrics"]

logger = logging.getLogger(__name__)

_REJECTS_SUFFIX = ".rejects"
_ROUTED = object()  # stands for a record already routed by on_bad_record
_NUMBER_HINTS = 4096
#: Closes of one sink running in the background at once; one more waits for the oldest.
_MAX_CLOSING = 16


class HDFS2FileSink(SinkOperator):
    """Writes each batch's records into the current file; rolls, publishes and recovers.

    ``on_published(final_path, size)`` is called once for each published file, after its
    rename (atomic) or after the cut covering its close completed (visible), also across
    restarts: the region records each finished completion (:meth:`recall_completed`). Only a
    crash between the callback and that record (one cut's files) announces them again.
    ``clock`` gives ``time.time()``-like seconds for %TIME and ``time_per_file``.
    """

    def __init__(
        self,
        settings: SinkSettings,
        fs: FileSystem,
        *,
        name: str = "sink",
        on_published: Callable[[str, int], None] | None = None,
        clock: Callable[[], float] = time.time,
        partition: int | None = None,
        peid: str = "0",
        pelaunchnum: int = 0,
    ) -> None:
        layout = SinkLayout(
            settings,
            fs,
            name,
            now=clock(),
            partition=partition,
            peid=peid,
            pelaunchnum=pelaunchnum,
        )
        if settings.publish == "visible" and not fs.supports_truncate:
            # A visible file is cut back in place after a crash: exactly_once must drop the
            # records after the cut, and a compressed piece torn by the crash would stop its
            # readers.
            why, other = "", ""
            if settings.delivery == "exactly_once":
                why, other = "delivery='exactly_once'", " or delivery='at_least_once'"
            elif settings.compression_codec is not None:
                why = f"compression={settings.compression!r}"
            if why:
                msg = (
                    f"sink {name!r}: {why} with publish='visible' needs truncate, which "
                    f"{type(fs).__name__} does not support: use publish='atomic'{other}"
                )
                raise ConfigError(msg)
        self.name = name
        self.settings = settings
        self._fs = fs
        if on_published is None and settings.on_published is not None:
            on_published = load_callable(settings.on_published, "[sink] on_published")
        self._on_published = on_published
        self._clock = clock
        self._atomic = settings.publish == "atomic"
        self._attr = settings.file_attribute_name
        self._overwrite = settings.on_returning_name == "overwrite"
        # Last number given to each returning name (only a hint where to look for a free one).
        self._numbers: dict[str, int] = {}
        self._rolling = settings.rolling
        self._layout = layout
        self._encoder: RecordEncoder | TableEncoder = (
            RecordEncoder(settings, fs, self._rolling)
            if settings.format in ("line", "binary")
            else TableEncoder(settings, fs, self._rolling)
        )
        self._recovery = Recovery(name, settings, fs, layout, self._encoder)
        self.metrics = SinkMetrics()
        # Rejected records go to a second, internal sink inside the base directory, whose
        # state is part of this one's: rejects are exactly-once like the output.
        self._rejects: HDFS2FileSink | None = None
        if settings.rejects_file is not None:
            rejects = SinkSettings(
                file=posixpath.join(layout.root, settings.rejects_file),
                time_format=settings.time_format,
                delivery=settings.delivery,
                permission=settings.permission,
                on_bad_record="fail",
            )
            self._rejects = HDFS2FileSink(
                rejects,
                fs,
                name=name + _REJECTS_SUFFIX,
                clock=clock,
                partition=partition,
                peid=peid,
                pelaunchnum=pelaunchnum,
            )
            assert rejects.template is not None
            layout.rejects_dir = norm(posixpath.dirname(rejects.template))
        self._bad = BadRecords(settings, name, self.metrics, self._rejects)
        self._parts: Partitioner | None = None
        if settings.partition_by:
            derived = {k: (d.column, d.strftime) for k, d in settings.derived.items()}
            self._parts = Partitioner(settings.partition_by, settings.schema_, derived)

        # The files, all restored by reset() (reset_to_initial_state() included).
        self._ready = False
        self._cur: OpenFile | None = None
        # File-attribute mode: the other open files by the name records use, least recently
        # written first (at most max_open_files - 1 of them).
        self._idle: dict[str, OpenFile] = {}
        self._evicted = False  # the WARNING about a full pool is given once
        self._closed: list[ClosedFile] = []  # closed since the last checkpoint
        self._pending: list[tuple[int, ClosedFile]] = []  # (covering cut, file)
        self._next_filenum = 0
        self._marked: set[str] = set()  # visible files whose marker still exists
        self._cut_open: dict[int, list[str]] = {}  # the files open at each cut taken
        # The last cut taken (-1: none, or not known): see published_through.
        self._last_cut = -1
        # Files published and announced by on_cut_completed since the last reset; and whether
        # the restored cut's completion is known to have finished (recall_completed): a reset
        # announces neither again.
        self._announced: set[str] = set()
        self._recalled = False
        # Closes still running in the background, by in-progress path, oldest first: an HDFS
        # close waits until a DataNode has reported the last block (500 ms on one DataNode),
        # which the sink need not wait for until it publishes the file. The file's bytes are
        # synced before (its state is durable); only its completion is pending.
        self._closing: dict[str, Background[None]] = {}
        # Staged Arrow streams already converted (Parquet, ORC): the last cut's state may still
        # name one as open, so each is deleted once a cut taken after its conversion completes.
        self._spent: list[str] = []
        self._early = EarlyConversions(fs, name)
        self._spent_at: dict[int, list[str]] = {}

    # -- public read-only views ---------------------------------------------------------------

    @property
    def files_written(self) -> int:
        """Files closed by this sink object (IBM's ``nSikedFiles`` metric, so spelt)."""
        return self.metrics.files_written

    @property
    def files_published(self) -> int:
        return self.metrics.files_published

    @property
    def records_unpublished(self) -> int:
        """Records in output files not published yet (the open files, and closed files waiting
        for their cut), e.g. after an immediate stop: the next run publishes them."""
        cur = self._cur
        open_files = [*([cur] if cur is not None else []), *self._idle.values()]
        waiting = [*self._closed, *(c for _, c in self._pending)]
        return sum(f.tuples for f in open_files) + sum(c.tuples for c in waiting)

    @property
    def unpublished_since(self) -> float | None:
        """When the oldest file holding records not published yet was opened (the clock's
        seconds; ``None`` when every record written is published): the age of what readers
        cannot see yet. Safe from a metrics scrape's thread (plain reads)."""
        cur = self._cur
        files: list[OpenFile | ClosedFile] = [*([cur] if cur is not None else [])]
        files += [*self._idle.values(), *self._closed, *(c for _, c in self._pending)]
        opened = [f.opened_at for f in files if f.tuples]
        return min(opened) if opened else None

    def bind_job(self, checkpoints: str, job_id: str | None = None) -> None:
        """Claim the output directory for the job keeping its checkpoints at ``checkpoints``
        (:mod:`operators.sink.owner`): another job's is refused with ConfigError."""
        claim_output(
            self._fs,
            self._layout.sink_dir,
            Owner(checkpoints, job_id),
            permission=self.settings.permission,
        )

    @property
    def output(self) -> tuple[FileSystem, str]:
        """The filesystem and the directory this sink writes below (its template's fixed
        directory, or the base directory of record-named files)."""
        return self._fs, self._layout.root

    @property
    def line_encoding(self) -> str | None:
        """The encoding in which this sink takes lines as ``bytes``
        (:class:`~operators.source.decoding.EncodedLines`), or ``None``."""
        return self._encoder.line_encoding

    @property
    def current_file(self) -> str | None:
        """Final name of the file being written, if any."""
        return self._cur.final if self._cur is not None else None

    # -- tuple processing ---------------------------------------------------------------------

    def write(self, batch: Batch) -> None:
        if not self._ready:
            msg = (
                f"sink {self.name!r}: write before reset() or reset_to_initial_state(); "
                "the runtime restores the sink first"
            )
            raise OperatorError(msg)
        for rejected in batch.rejected:
            self._bad.route_rejected(rejected)
        records = batch.records
        if records:
            self._roll_if_old(self._clock())
            if self._attr is not None:
                self._write_named(records)
            elif self._parts is not None:
                self._write_partitioned(records)
            else:
                self._write_run(records, 0, len(records))
        if batch.punctuation and self._rolling.on_punctuation:
            self._close_all()

    def on_tick(self, now: float) -> None:
        if self._ready:
            self._roll_if_old(now)

    def finish(self) -> None:
        """The final punctuation: close the current file so that the next cut publishes it.

        Call it before the final cut of a graceful stop; :meth:`close` alone publishes nothing.
        """
        if self._ready:
            self._close_all()
        if self._rejects is not None:
            self._rejects.finish()

    def _roll_if_old(self, now: float) -> None:
        rolling = self._rolling
        cur = self._cur
        if cur is not None and (
            rolling.expired(cur.opened_at, now) or rolling.quiet(cur.written_at, now)
        ):
            self._close_current()
        if self._parts is not None:  # each partition's file rolls on its own clock
            for name, f in list(self._idle.items()):
                if rolling.expired(f.opened_at, now) or rolling.quiet(f.written_at, now):
                    self._close_file(f)
                    del self._idle[name]

    def _write_run(
        self,
        records: Sequence[Any],
        start: int,
        end: int,
        originals: Sequence[Any] | None = None,
        partition: str | None = None,
    ) -> None:
        """Write ``records[start:end]`` to the current file(s), rolling at the exact record
        (the next file in the directory ``partition`` of a partitioned output).

        A record that cannot be encoded is routed with ``originals[i]`` (the whole record,
        when ``records`` holds only the values); the others are written.
        """
        i = start
        while i < end:
            cur = self._cur if self._cur is not None else self._open(None, partition=partition)
            take = end - i
            room = self._rolling.room(cur.tuples)
            if room is not None:
                take = min(take, room)
                if take <= 0:  # restored from a run with a larger limit
                    self._close_current()
                    continue
            try:
                data, take = self._encoder.encode(records, i, take, cur.final, cur.size)
            except BadRecordError as exc:
                bad = exc.offset
                if self._bad.fail or bad is None or not i <= bad < end:
                    raise
                if bad > i:  # the records before it are fine (the first bad one raised)
                    self._write_run(records, i, bad, originals, partition)
                self._bad.route((originals or records)[bad], bad, exc)
                i = bad + 1
                continue
            if cur.writer is None:
                cur.writer = self._fs.append(cur.work)
            cur.writer.write(data)
            if cur.early is not None:
                encoder = self._encoder
                cur.early.feed(data, encoder.batch if isinstance(encoder, TableEncoder) else None)
            cur.size += len(data)
            cur.tuples += take
            cur.dirty = cur.touched = True
            cur.written_at = self._clock()
            self.metrics.tuples_written += take
            self.metrics.bytes_written += len(data)
            i += take
            if self._rolling.full(cur.tuples, cur.size):
                self._close_current()

    def _write_named(self, records: Sequence[Any]) -> None:
        # 1. Split every record first: a malformed one is routed (or raised) before any write.
        names: list[Any] = []
        values: list[Any] = []
        for index, record in enumerate(records):
            try:
                name, value = self._bad.split(record, index)
            except BadRecordError as exc:
                self._bad.route(record, index, exc)
                name, value = _ROUTED, None
            names.append(name)
            values.append(value)
        # 2. Runs of records naming the same file; the name is checked once per run.
        start, n = 0, len(records)
        while start < n:
            name = names[start]
            end = start + 1
            if name is _ROUTED:
                start = end
                continue
            while end < n and names[end] is not _ROUTED and names[end] == name:
                end += 1
            try:
                path = self._layout.resolve(name, start, self._in_flight())
                if self._cur is None or self._cur.name != path:
                    self._switch(path)
            except (BadRecordError, FileExistsError, NotADirectoryError, IsADirectoryError) as exc:
                # A refused name, or a name that clashes with the tree (a file where a
                # directory is needed, or the reverse): the records of this run cannot be
                # written. (A name written before is not refused: see _returning.)
                if self._bad.fail:
                    raise
                for index in range(start, end):
                    self._bad.route(records[index], index, self._refusal(exc, name, index))
                start = end
                continue
            self._write_run(values, start, end, records)
            start = end

    def _write_partitioned(self, records: Sequence[Any]) -> None:
        """Each record to the open file of its partition (:mod:`operators.sink.partitions`),
        the batch's records of one partition in one write, in their order."""
        assert self._parts is not None
        if isinstance(records, Columns):  # a partition at a time, never a record at a time
            parts, bad = self._parts.split(records)
            for index, error in bad:
                self._bad.route(records[index], index, error)
            self._write_buckets(parts)
            return
        buckets: dict[str, list[Any]] = {}
        for index, where in enumerate(self._parts.dirs(records)):
            if isinstance(where, BadRecordError):
                self._bad.route(records[index], index, where)
            else:
                buckets.setdefault(where, []).append(records[index])
        self._write_buckets(buckets)

    def _write_buckets(self, buckets: Mapping[str, Sequence[Any]]) -> None:
        for where, group in buckets.items():
            directory = posixpath.join(self._layout.root, where)
            self._switch(directory)
            self._write_run(group, 0, len(group), partition=directory)

    def _switch(self, path: str) -> None:
        """Make the open file of the name ``path`` the current one: kept open in the pool,
        or opened, after closing the least recently written files beyond max_open_files."""
        if self._cur is not None:
            self._idle[self._cur.name] = self._cur  # last written: the end of the order
            self._cur = None
        found = self._idle.pop(path, None)
        if found is not None:
            self._cur = found
            return
        limit = self.settings.max_open_files
        while len(self._idle) > limit - 1:
            name = next(iter(self._idle))
            evicted = self._idle[name]
            self._close_file(evicted)
            del self._idle[name]
            if limit > 1 and not self._evicted:
                self._evicted = True
                logger.warning(
                    "sink %s: more than max_open_files=%s names are written between cuts: "
                    "%s, the least recently written, is closed, and records naming it again "
                    "go to a numbered file; raise max_open_files to keep more files open "
                    "(logged once)",
                    self.name,
                    limit,
                    self._fs.display(evicted.final),
                )
        if self._parts is not None:
            self._open(None, partition=path)
        else:
            self._open(path)

    def _refusal(self, exc: Exception, name: Any, index: int) -> Exception:
        """``exc`` for the record at ``index`` (a name check raised for the first of a run)."""
        if isinstance(exc, BadRecordError) and exc.offset != index:
            try:
                self._layout.resolve(name, index, self._in_flight())
            except BadRecordError as again:
                return again
        return exc

    def _in_flight(self) -> list[str]:
        """Final names of the files written and not published yet."""
        finals = [c.final for c in self._closed] + [c.final for _, c in self._pending]
        return finals + [f.final for f in self._open_files()]

    def _open_files(self) -> list[OpenFile]:
        """Every open file: the pool's, least recently written first, then the current one."""
        files = list(self._idle.values())
        if self._cur is not None:
            files.append(self._cur)
        return files

    # -- files --------------------------------------------------------------------------------

    def _taken(self, final: str) -> bool:
        return final in self._in_flight() or self._fs.exists(final)

    def _open(self, final: str | None, *, partition: str | None = None) -> OpenFile:
        """Open a new file (lazily: only when a record is about to be written): ``final``
        (file-attribute mode), or the template's next name, in the directory ``partition``
        when the output is partitioned."""
        now = self._clock()
        asked: str | None = None
        filenum = self._next_filenum
        layout = self._layout
        if final is None:
            assert layout.template is not None
            while True:
                final = layout.render(filenum, now)
                if partition is not None:
                    rel = posixpath.relpath(final, layout.root)
                    final = norm(posixpath.join(partition, rel))
                problem = layout.template_problem(final)
                if problem is not None:
                    msg = f"sink {self.name!r}: the file template gives {final!r}, which {problem}"
                    raise permanent(OperatorError(msg))
                if not self._taken(final):
                    break
                if not layout.template.uses_filenum:
                    msg = (
                        f"sink {self.name!r}: {self._fs.display(final)} already exists or is "
                        f"being written, and files are never overwritten: add %FILENUM to "
                        f"{layout.template.template!r}"
                    )
                    raise permanent(FileExistsError(msg))
                logger.info(
                    "sink %s: %s exists, skipping file number %s", self.name, final, filenum
                )
                filenum += 1
        elif self._taken(final):
            final, asked = self._returning(final), final
            if final == asked:
                asked = None
        staged = isinstance(self._encoder, TableEncoder) and self._encoder.bulk
        work = layout.side(final, STAGED if staged else INPROGRESS) if self._atomic else final
        permission = self.settings.permission
        layout.ensure_dir(posixpath.dirname(final))
        if not self._atomic:
            # 1. The marker first: a crash after step 2 leaves a file recovery can find.
            marker = self._fs.create(
                layout.side(final, MARKER), overwrite=True, permission=permission
            )
            try:
                marker.sync()
            finally:
                marker.close()  # a failed sync must not leave it open: the retry creates it again
            self._marked.add(final)
        # 2. The file itself; never over an existing one (unless asked to: on_returning_name).
        writer = self._fs.create(work, overwrite=self._overwrite, permission=permission)
        self._next_filenum = filenum + 1
        if partition is not None:
            asked = partition  # the pool knows a partition's file by its directory
        cur = OpenFile(final, work, 0, 0, now, filenum, asked, writer, written_at=now)
        cur.form = self._encoder.form
        header = self._encoder.header
        if header:
            writer.write(header)
            cur.size = len(header)
        if staged and work.endswith(STAGED):
            # Its Parquet or ORC file is encoded while it is written (operators.sink.bulk).
            fmt, codec = form_format(cur.form)
            target = layout.side(final, INPROGRESS)
            cur.early = self._early.start(target, fmt, codec, permission)
            cur.early.feed(header)
        # Opened for a record: its records come after the last cut taken (published_through).
        cur.open_after = self._last_cut
        self._cur = cur
        self.metrics.files_opened += 1
        logger.debug("sink %s: opened %s", self.name, work)
        return cur

    def _returning(self, path: str) -> str:
        """Where the records of a name written before (or of an existing file) go: the first
        free numbered name (``on_returning_name="new_file"``), or ``path`` itself once its
        earlier, unpublished version is dropped (``"overwrite"``)."""
        if self._overwrite:
            self._drop_unpublished(path)
            return path
        number = self._numbers.get(path, 0)
        while True:
            number += 1
            candidate = self._layout.numbered(path, number)
            if not self._taken(candidate):
                break
        if len(self._numbers) >= _NUMBER_HINTS:  # only a hint: forget it rather than grow
            self._numbers.clear()
        self._numbers[path] = number
        logger.info(
            "sink %s: %s was written before; its new records go to %s",
            self.name,
            self._fs.display(path),
            self._fs.display(candidate),
        )
        return candidate

    def _drop_unpublished(self, path: str) -> None:
        """``on_returning_name="overwrite"``: forget the earlier version of ``path`` no cut
        covers yet (what the IBM sink's overwrite loses). A version a checkpoint covers waits
        for that cut's completion: the error resets the region, which publishes it first."""
        if any(c.final == path for _, c in self._pending):
            msg = (
                f"sink {self.name!r}: {self._fs.display(path)} is covered by a cut that has not "
                "completed yet; it is overwritten after the reset publishes it"
            )
            raise OperatorError(msg)
        for done in [c for c in self._closed if c.final == path]:
            self._closed.remove(done)
            self._settle(done.work)
            self._fs.delete(done.work)
            if path in self._marked:
                self._fs.delete(self._layout.side(path, MARKER))
                self._marked.discard(path)
            logger.info("sink %s: overwriting %s (not published yet)", self.name, done.work)

    def _close_current(self) -> None:
        if self._cur is not None:
            self._close_file(self._cur)
            self._cur = None

    def _close_all(self) -> None:
        """Close every open file (punctuation, final punctuation)."""
        # Their early conversions finish on every thread at once, while the files are closed
        # here one by one.
        for f in self._open_files():
            if f.early is not None:
                f.early.finish_soon()
        for name, f in list(self._idle.items()):
            self._close_file(f)
            del self._idle[name]
        self._close_current()

    def _close_file(self, cur: OpenFile) -> None:
        """Close an open file: it waits for a cut. The caller forgets it only afterwards: a
        failed sync leaves it open, and the reset releases its writer (:meth:`_drop_writer`).

        A writer whose close may wait on the storage (:class:`~region.fs.LaterCloser`, HDFS)
        is closed in the background once synced: writing, the cut that covers the file and
        its checkpoint's own close go on meanwhile, and :meth:`_publish` waits for it, so a
        published file is a closed one."""
        if cur.writer is not None:
            if cur.dirty:
                cur.writer.sync()  # pending files must survive a crash: the cut promises them
                cur.dirty = False
            self._close_writer(cur.work, cur.writer)
            cur.writer = None
        closed = ClosedFile(cur.final, cur.work, cur.size, cur.tuples, cur.opened_at)
        if cur.work.endswith(STAGED):
            closed = self._convert(cur)
        self._closed.append(closed)
        self.metrics.files_written += 1
        logger.debug("sink %s: closed %s (%s bytes)", self.name, cur.work, cur.size)

    def _close_writer(self, work: str, writer: FileWriter) -> None:
        """Close the synced writer of ``work``, in the background where its close may wait on
        the storage (:meth:`_publish` waits for it: a published file is a closed one)."""
        if isinstance(writer, LaterCloser):
            while len(self._closing) >= _MAX_CLOSING:
                self._settle(next(iter(self._closing)))
            self._closing[work] = Background(writer.close, f"sink-close {writer.path}")
        else:
            writer.close()

    def _convert(self, cur: OpenFile) -> ClosedFile:
        """A Parquet or ORC file from its staged Arrow stream (closed and synced above), as
        the in-progress file the publish renames. What a crash leaves at each step:

        1. Its close lands (settled here). The last cut's state names the staged file as
           open, or no cut does (then it is deleted at the reset and its records replayed).
        2. The Parquet or ORC file is written and synced as ``.<name>~<sink>.inprogress``:
           finished here when it was written while the staged file grew
           (:mod:`operators.sink.bulk`), else written here from the staged file. A crash
           while it is written leaves a partial file no state names as a work file: the
           reset deletes it, cuts the staged file back to the last cut and goes on.
        3. The staged file is spent, deleted once a cut taken from now on completes (that cut
           names the converted file as pending). A crash before leaves it beside the pending
           file, and the reset deletes it: the state names the converted file instead.
        """
        self._settle(cur.work)  # 1.
        target = self._layout.side(cur.final, INPROGRESS)
        early, cur.early = cur.early, None
        done = early.finish() if early is not None else None  # 2., while it was written
        writer, size = done or convert(
            self._fs, cur.work, target, cur.form, self.settings.permission
        )
        self._close_writer(target, writer)
        self._spent.append(cur.work)  # 3.
        logger.debug(
            "sink %s: converted %s (%s bytes) into %s (%s bytes)",
            self.name,
            cur.work,
            cur.size,
            target,
            size,
        )
        return ClosedFile(cur.final, target, size, cur.tuples, cur.opened_at)

    def _settle(self, work: str, *, recovering: bool = False) -> None:
        """Make sure the closed file ``work`` is closed on the storage before it is published:

        1. Its close running in the background: wait for it to land.
        2. That close failed, or, ``recovering``, this process may not have closed it (a
           process killed before its close landed leaves it open with a dead writer's lease):
           on a filesystem with leases, recover its lease. The file is final (every byte
           synced, none written after), so this closes it at its checkpointed length.
        3. Without leases, a failed close is raised.
        """
        closing = self._closing.pop(work, None)
        error = closing.error() if closing is not None else None  # 1.
        if error is None and not recovering:
            return
        if not isinstance(self._fs, LeaseRecoverer):
            if error is not None:  # 3.
                raise error
            return
        if error is not None:
            logger.warning(
                "sink %s: the close of %s failed (%s); recovering its lease",
                self.name,
                self._fs.display(work),
                error,
            )
        # Gone (published before a crash, or removed): publish() tells which.
        with contextlib.suppress(FileNotFoundError):
            self._fs.recover_lease(work)  # 2.

    def _settle_all(self) -> None:
        """Wait for every close running in the background; a failure is logged (the files
        are synced; a reset publishes or deletes them, recovering their leases)."""
        closing, self._closing = self._closing, {}
        for work, pending in closing.items():
            error = pending.error()
            if error is not None:
                logger.warning(
                    "sink %s: the close of %s failed: %s", self.name, self._fs.display(work), error
                )

    def _publish(self, done: ClosedFile, *, recovering: bool = False) -> None:
        """Rename a covered file to its final name (safe to repeat: :mod:`operators.sink.publish`),
        then count and announce it. It is closed first (:meth:`_settle`)."""
        self._settle(done.work, recovering=recovering)
        if self._atomic:
            publish(
                self._fs,
                done.work,
                done.final,
                who=f"sink {self.name!r}",
                recovering=recovering,
                overwrite=self._overwrite,
            )
        self.metrics.files_published += 1
        self.metrics.tuples_published += done.tuples
        self.metrics.bytes_published += done.size
        self.metrics.published.append((done.final, done.size))
        del self.metrics.published[:-100]
        logger.info("sink %s: published %s (%s bytes)", self.name, done.final, done.size)
        if self._on_published is not None:
            self._on_published(done.final, done.size)

    def _write_manifest(self, cut_id: int, files: list[ClosedFile]) -> None:
        """With ``manifest``: record what cut ``cut_id`` published
        (:mod:`operators.sink.manifest`)."""
        if not self.settings.manifest or not files:
            return
        write_manifest(
            self._fs,
            posixpath.join(self._layout.sink_dir, MANIFEST_DIR),
            cut_id,
            [Published(f.final, f.size, cut_id, self._partition_of(f.final)) for f in files],
            retain=self.settings.manifest_retain,
            permission=self.settings.permission,
        )

    def _partition_of(self, final: str) -> dict[str, str | None] | None:
        if self._parts is None:
            return None
        return partition_of(final, self._layout.root)

    def _drop_writer(self) -> None:
        """Release the open files' handles without publishing (reset and crash)."""
        for cur in self._open_files():
            self._cancel_early(cur)
            if cur.writer is None:
                continue
            writer, cur.writer = cur.writer, None
            try:
                writer.close()
            except OSError as exc:  # the reset truncates or deletes whatever it left
                logger.warning("sink %s: closing %s failed: %s", self.name, cur.work, exc)

    # -- state handler ------------------------------------------------------------------------

    def drain(self) -> None:
        for cur in self._open_files():
            if cur.writer is not None and cur.dirty:
                cur.writer.sync()  # durable (hsync), not only visible (hflush)
                cur.dirty = False
        if self._rejects is not None:
            # Each cut that saw rejects publishes them in a file of their own.
            self._rejects.finish()
            self._rejects.drain()

    def published_through(self, cut_id: int) -> int:
        """Every record written before cut ``cut_id`` (completed) is published, unless an open
        file holds records: then only those before the cut taken before the first of them was
        opened (-1: not known, after a restart)."""
        return min([cut_id, *(f.open_after for f in self._open_files() if f.tuples)])

    def checkpoint(self, cut_id: int) -> State:
        self._last_cut = cut_id
        self.drain()  # the state may only describe durable bytes; no-op after a drain
        # A file of the pool that got no record since the previous cut is done: this cut
        # publishes it (a name that is quiet for a whole cut does not wait for the stop). A
        # partition's file rolls by the limits and close_idle_after instead (_roll_if_old).
        if self._parts is None:
            for name, f in list(self._idle.items()):
                if not f.touched:
                    self._close_file(f)
                    del self._idle[name]
        for f in self._open_files():
            f.touched = False
        self._pending.extend((cut_id, c) for c in self._closed)
        self._closed = []
        self._cut_open[cut_id] = [f.final for f in self._open_files()]
        if self._spent:
            self._spent_at[cut_id], self._spent = self._spent, []
        state = state_value(
            self._next_filenum,
            self._cur,
            (c for _, c in self._pending),
            cut=cut_id,
            others=self._idle.values(),
        )
        if self._rejects is not None:
            state["rejects"] = self._rejects.checkpoint(cut_id)
        return state

    def on_cut_completed(self, cut_id: int) -> None:
        published: set[str] = set()
        covered = [done for c, done in self._pending if c <= cut_id]
        while self._pending and self._pending[0][0] <= cut_id:
            done = self._pending[0][1]
            self._publish(done)
            self._pending.pop(0)
            published.add(done.final)
            self._announced.add(done.final)
        self._write_manifest(cut_id, covered)
        if not self._atomic:
            # The completed cut covers these files: recovery must no longer delete them.
            for final in [*published, *self._cut_open.get(cut_id, [])]:
                if final in self._marked:
                    self._fs.delete(self._layout.side(final, MARKER))
                    self._marked.discard(final)
        self._cut_open = {k: v for k, v in self._cut_open.items() if k > cut_id}
        for taken in [k for k in self._spent_at if k <= cut_id]:
            for staged in self._spent_at.pop(taken):
                self._fs.delete(staged)
        if self._rejects is not None:
            self._rejects.on_cut_completed(cut_id)

    def recall_completed(self, cut_id: int) -> None:
        self._recalled = True
        if self._rejects is not None:
            self._rejects.recall_completed(cut_id)

    def reset(self, state: State) -> None:
        restored = parse_state(self.name, state)
        self._ready = False
        self._drop_writer()
        self._settle_all()
        # 1. Finish what the cut promised: publish the files it covers, unless its completion
        #    did (then they are published and announced, and may have been moved away since).
        redone = [
            done
            for done in restored.pending
            if not self._recalled and done.final not in self._announced
        ]
        for done in redone:
            self._publish(done, recovering=True)
        if redone and restored.cut is not None:
            # The same manifest the completion writes (it may have been cut short before it).
            self._write_manifest(restored.cut, restored.pending)
        self._recalled = False
        self._announced = {done.final for done in restored.pending}  # a repeated reset
        # 2. Delete this sink's files the cut does not know (opened after it).
        opened = [*restored.others, *([restored.current] if restored.current else [])]
        keep = {c.final for c in restored.pending} | {f.final for f in opened}
        works = {c.work for c in restored.pending} | {f.work for f in opened}
        extra_dirs = {posixpath.dirname(final) for final in keep}
        self._recovery.delete_orphans(keep, works, extra_dirs)
        # 3. Bring each open file back to its size at the cut (at_least_once goes on with a
        #    new file when a lost newer cut published it; exactly_once raises).
        current = restored.current
        if current is not None:
            current = self._recovery.restore(current)
        idle = [f for f in map(self._recovery.restore, restored.others) if f is not None]
        # 4. In-memory state. When an open file got its first record is not kept: the input
        #    it holds is housekept only once it is published (published_through).
        self._last_cut = -1
        now = self._clock()
        for f in [*idle, *([current] if current is not None else [])]:
            f.written_at = now  # close_idle_after counts from the restore
        self._cur = current
        self._idle = {f.name: f for f in idle}
        self._closed = []
        self._pending = []
        self._next_filenum = restored.next_filenum
        self._marked = set()
        self._cut_open = {}
        self._numbers = {}
        self._spent = []
        self._spent_at = {}
        self._ready = True
        # 5. A file of another form (format, compression or header changed since the cut) is
        #    not appended to: it is closed as it is, published by the next cut.
        for f in self._open_files():
            if f.form != self._encoder.form:
                logger.warning(
                    "sink %s: %s was written as %s, and this run writes %s: it is closed as it "
                    "is, and the records go on in a new file",
                    self.name,
                    self._fs.display(f.final),
                    f.form or "line",
                    self._encoder.form or "line",
                )
        for name, f in list(self._idle.items()):
            if f.form != self._encoder.form:
                self._close_file(f)
                del self._idle[name]
        if self._cur is not None and self._cur.form != self._encoder.form:
            self._close_current()
        if self._rejects is not None:
            rejects = state.get("rejects")
            if isinstance(rejects, dict):
                self._rejects.reset(rejects)
            else:  # a cut from before rejects_file was set
                self._rejects.reset_to_initial_state()
        logger.info(
            "sink %s: reset to %s (next file number %s)",
            self.name,
            restored.current.work if restored.current else "no open file",
            restored.next_filenum,
        )

    def reset_to_initial_state(self) -> None:
        # No cut ever completed, so nothing of this sink was promised: every in-progress file and
        # every marked visible file is from an earlier attempt. Numbering restarts at 0, which is
        # safe because those files are gone and published names are skipped, never overwritten.
        self.reset(empty_state())

    def _cancel_early(self, cur: OpenFile, *, remove: bool = False) -> None:
        """Stop the early conversion of a file that stays staged (a reset, a stop): a file
        restored from a cut converts its staged file when it rolls."""
        early, cur.early = cur.early, None
        if early is not None:
            early.cancel(remove=remove)

    def close(self) -> None:
        for cur in self._open_files():
            self._cancel_early(cur, remove=True)
            if cur.writer is not None:
                if cur.dirty:
                    cur.writer.sync()
                    cur.dirty = False
                cur.writer.close()
                cur.writer = None
        self._settle_all()
        self._ready = False
        if self._rejects is not None:
            self._rejects.close()

    def abandon(self) -> None:
        """Stop like a crashed process: release file handles, publish and delete nothing.

        For replay tests that simulate a crash in-process; the next sink object recovers.
        """
        self._drop_writer()
        self._settle_all()  # handles released, as a dead process's are
        self._ready = False
        if self._rejects is not None:
            self._rejects.abandon()
