"""``hdfs_scan``: the directory scan and the file source as a Spark streaming source.

``spark.readStream.format("hdfs_scan").option("directory", d).load()`` gives a DataFrame with a
``value`` column (``string`` in line mode, ``binary`` in binary mode) and, with
``include_file_info``, ``file`` (URI) and ``offset`` (byte offset of the record in the file).

Offset (JSON, written by Spark to ``<checkpoint>/offsets/N``)::

    {"v": 2, "seq": 7, "pos": int | null, "plan": "<digest>" | null, **scan cursor state}

The scan cursor (:mod:`operators.scan.cursor`, the same rule as the in-process scan) says which
files
are new; its state holds the key (the greatest file planned so far in the scan order), the names
within ``late_window`` and the census below it. ``pos`` is where the next batch continues the
key file when a batch ended inside it (``null``: the file is done); ``seq`` counts batches.

Plan log (``plan_dir``, required, never inside the watched directory; ``hdfs-region run`` keeps
it with the pipeline's checkpoint): ``<seq:020d>-<digest>.json``
holds the exact byte ranges (path, start, end, size when planned) of the batch that ends at the
offset with that ``seq`` and ``plan``. A batch Spark replays after a crash is read from its plan,
so it is the same batch even if files arrived late, grew, or the listing changed since.
"""

from __future__ import annotations

import errno
import functools
import hashlib
import json
import logging
import posixpath
import re
import time
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

from pyspark.sql.datasource import (
    DataSource,
    DataSourceStreamReader,
    InputPartition,
)
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxBytes,
    ReadMaxFiles,
    SupportsTriggerAvailableNow,
)

from operators.scan.cursor import ScanCursor, identifier
from operators.scan.housekeeping import AfterRead, ReadFile
from operators.scan.listing import list_ready_keyed
from operators.source.compressed import codec_of
from operators.source.ledger import (
    EDGE,
    HEAD,
    Expected,
    FileMoved,
    Read,
    ReadLedger,
    exact_fingerprint,
    expected_read,
    fingerprint,
    holds,
    may_grow,
    prefix_crc,
)
from operators.spark.config import ScanConfig, open_config_fs
from region.atomic import dir_permission, write_atomically
from region.fs import FileStatus, FileSystem, ListingEntry, mtime_tracks_writes

if TYPE_CHECKING:
    import pyarrow as pa

    from operators.source.rows import Rejected

__all__ = [
    "HdfsScanDataSource",
    "HdfsScanStreamReader",
    "PlannedRange",
    "ScanPartition",
]

logger = logging.getLogger(__name__)

_SOURCE = "hdfs_scan"
#: How many times a task follows a range's bytes to another file before it gives up.
_MOVES = 3
T = TypeVar("T")
_NS = 1_000_000_000
#: In the plan directory: the last batch whose files ``after_read`` handled.
_AFTER_READ_FILE = "after_read.json"
#: Mode of the batch plans (checkpoint data: readable by the group, never world-writable).
_PLAN_PERMISSION = 0o640


#: A byte range to read: ``(path, start, end, size when planned, what the file held then)``
#: (:data:`~operators.source.ledger.Expected`; ``None`` in plans written before, or for the
#: rest of a range read on elsewhere).
PlannedRange = tuple[str, int, int, int, Expected | None]


class ScanPartition(InputPartition):
    """Byte ranges (:data:`PlannedRange`) read by one Spark task."""

    def __init__(self, ranges: list[PlannedRange]) -> None:
        super().__init__(ranges)
        self.ranges = ranges


def _holder(fs: FileSystem, listing: list[FileStatus], path: str, read: Read) -> str | None:
    """The file of ``listing`` other than ``path`` that holds the bytes ``read`` describes
    (the copy of a rotation), or ``None``."""
    for status in listing:
        other = status.path
        if other != path and status.size >= read.length and holds(other, read, fs.read):
            return other
    return None


def _initial_offset() -> dict[str, Any]:
    return {"v": 2, "seq": 0, "pos": None, "plan": None, **ScanCursor(window_ns=0).state()}


@dataclass(frozen=True, slots=True)
class _Range:
    entry: ListingEntry  # (mtime_ns, name, path, size when listed, is_dir, file_id)
    start: int
    end: int

    @property
    def size(self) -> int:
        return int(self.entry[3])


class HdfsScanStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Plans batches on the driver (listing + plan log); reads byte ranges on the executors."""

    def __init__(self, config: ScanConfig) -> None:
        self.config = config
        #: ``after_read`` at :meth:`commit` (a streaming query: the sink published the batch);
        #: fused execution calls :meth:`housekeep` itself, behind the sink's open files.
        self.housekeep_on_commit = True
        #: ``(mtime_ns, bytes not read)`` of every file the latest planning found unread (the
        #: batch it planned included): what a metrics scrape on the driver reports as lag.
        self.waiting: list[tuple[int, int]] = []
        self._fs: FileSystem | None = None
        self._plan_fs: FileSystem | None = None
        self._pattern = re.compile(config.pattern) if config.pattern else None
        #: availableNow: the files (name -> (mtime_ns, size)) present when the run started.
        self._target: dict[str, tuple[int, int]] | None = None
        self._missing_warned = False
        # The cursor of the offset last returned (``_at``: its seq and plan): it remembers the
        # last listing, so names new since then are found whatever their mtime.
        self._cursor: ScanCursor | None = None
        # ``on_modified = "continue"``: what was read, by content (operators.source.ledger), as of
        # the same offset; kept in the plan of the batch that changed it last.
        self._ledger: ReadLedger | None = None
        self._at: tuple[Any, Any] | None = None
        #: ``housekept`` of the offset last planned from: a restart starts there or later.
        self._start_housekept: int | None = None
        #: The time of the last listing (ns).
        self._listed_at: int | None = None

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_fs"] = state["_plan_fs"] = None  # opened again where they are used
        state["_cursor"] = state["_at"] = None  # the driver's memory, not the executors'
        state["_ledger"] = None
        return state

    @property
    def fs(self) -> FileSystem:
        if self._fs is None:
            self._fs = open_config_fs(self.config.fs)
        return self._fs

    @property
    def plan_fs(self) -> FileSystem:
        """The filesystem of the plan log (the scanned one unless ``plan_dir`` names another)."""
        if self.config.plan_fs is None:
            return self.fs
        if self._plan_fs is None:
            self._plan_fs = open_config_fs(self.config.plan_fs)
        return self._plan_fs

    # -- driver: offsets and plans --------------------------------------------------------

    def initialOffset(self) -> dict[str, Any]:
        return _initial_offset()

    def getDefaultReadLimit(self) -> ReadLimit:
        config = self.config
        if config.max_files_per_trigger is not None:
            return ReadMaxFiles(config.max_files_per_trigger)
        if config.max_bytes_per_trigger is not None:
            return ReadMaxBytes(config.max_bytes_per_trigger)
        return ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        self._target = {e[1]: (e[0], e[3]) for e in self._list()}
        logger.info(
            "%s: availableNow run over the %s files present now",
            self.fs.display(self.config.directory),
            len(self._target),
        )

    def _list(
        self, unmatched: list[str] | None = None, young: list[ListingEntry] | None = None
    ) -> list[ListingEntry]:
        """The ready files (``unmatched`` gets the names the pattern leaves out, ``young`` the
        files too young yet)."""
        self._listed_at = now_ns = time.time_ns()
        try:
            listing = list_ready_keyed(
                self.fs,
                self.config.directory,
                pattern=self._pattern,
                min_file_age_ns=self.config.min_file_age_ns,
                now_ns=now_ns,
                young=young,
                unmatched=unmatched,
                ordered=False,  # the cursor orders the new files
            )
        except FileNotFoundError:
            where = self.fs.display(self.config.directory)
            if self.config.strict_mode:
                raise FileNotFoundError(f"{_SOURCE}: directory {where} does not exist") from None
            if not self._missing_warned:
                logger.warning("%s: directory %s does not exist yet; empty", _SOURCE, where)
                self._missing_warned = True
            return []
        if self._target is not None:
            target = self._target
            listing = [
                (e[0], e[1], e[2], min(e[3], target[e[1]][1]), e[4], e[5])
                for e in listing
                if e[1] in target and target[e[1]][0] == e[0]
            ]
        return listing

    def _cursor_at(self, start: dict[str, Any]) -> ScanCursor:
        """The cursor of ``start``: the one in memory when ``start`` is what it last returned."""
        at = (start.get("seq"), start.get("plan"))
        if self._cursor is None or self._at != at:
            config = self.config
            self._cursor = ScanCursor(
                window_ns=config.late_window_ns,
                on_late_file=config.on_late_file,
                on_modified=config.on_modified,
                name=_SOURCE,
                display=self.fs.display,
                identify=identifier(self.fs, on_modified=config.on_modified),
            )
            self._cursor.reset(start)
            self._at = at
            self._ledger = self._ledger_of(start)
            since = start.get("housekept")
            if since is not None:
                # Files after_read moved away after this offset was planned: their names are
                # forgotten, as they were in the memory of the run that moved them.
                for seq, files in self._after_read_record().get("left", {}).items():
                    if int(seq) > int(since):
                        self._forget_left(files)
        if start.get("housekept") is not None:
            self._start_housekept = int(start["housekept"])
        return self._cursor

    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, Any]:
        start = start or _initial_offset()
        while True:
            end = self._latest(start, limit)
            wait = self._held_wait(start) if end == start and self._target is not None else None
            if wait is None:
                return end
            # availableNow: a held line is part of what is there; its wait is bounded.
            time.sleep(wait)

    def _held_wait(self, start: Mapping[str, Any]) -> float | None:
        """Seconds until the first held line of ``start`` is due (``None``: none held)."""
        held = start.get("held") or ()
        if not held:
            return None
        due = min(int(h[4]) for h in held) + round(self.config.hold_partial_line * _NS)
        return max(0.05, min(1.0, (due - time.time_ns()) / _NS))

    def _latest(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, Any]:
        if self.config.after_read != "keep" and self.housekeep_on_commit and start.get("seq"):
            # A streaming query plans from the end of its last committed batch: that batch is
            # published (Spark commits a source only when a next batch starts, never the last).
            self.housekeep(int(start["seq"]))
        cursor = self._cursor_at(start)
        key = cursor.key
        pos: int | None = start.get("pos")
        # The cursor keeps what it knows of files left out that are still there (too young;
        # after a restart, not matching a pattern narrowed since).
        unmatched: list[str] | None = [] if cursor.settling else None
        young: list[ListingEntry] = []
        listing = self._list(unmatched, young)
        # 1. Candidates in scan order: late files (whole), the rest of a file cut by the last
        #    batch, then the files after the key.
        new = cursor.new_files(
            listing,
            now_ns=self._listed_at,
            young=[e[1] for e in young],
            unmatched=unmatched or (),
        )
        #    A new file starts where its content was read to before ("continue"), else at 0.
        begins = self._begins(new) if self._ledger is not None else {}
        if self._ledger is not None:
            new = [e for e in new if e[2] in begins]  # not vanished since the listing
        firsts = {e[2]: begins.get(e[2], 0) for e in new}
        #    Held lines now due (unchanged for hold_partial_line): read on, whole, first.
        held, due = self._held_of(start, listing, new)
        candidates = [(e, begin, True) for e, begin in due]
        candidates += [(e, firsts[e[2]], True) for e in new if cursor.is_late(e)]
        if key is not None and pos is not None:
            candidates += [(e, pos, False) for e in listing if (e[0], e[1]) == key and pos < e[3]]
        # A file with an mtime ahead of the listing leaves no key of its own: read whole.
        candidates += [(e, firsts[e[2]], cursor.is_ahead(e)) for e in new if not cursor.is_late(e)]
        self.waiting = [(entry[0], entry[3] - begin) for entry, begin, _ in candidates]
        # 2. Admission control: the engine's limit (ReadAllAvailable ignores the options).
        max_files = max_bytes = None
        if not isinstance(limit, ReadAllAvailable):
            max_files = self.config.max_files_per_trigger
            max_bytes = self.config.max_bytes_per_trigger
            if isinstance(limit, ReadMaxFiles):
                max_files = limit.max_files
            elif isinstance(limit, ReadMaxBytes):
                max_bytes = limit.max_bytes
        planned: list[_Range] = []
        used = 0
        for entry, begin, is_late in candidates:
            if max_files is not None and len(planned) >= max_files:
                break
            rest = entry[3] - begin
            room = rest if max_bytes is None else max_bytes - used
            # A CSV or compressed file is never cut by a batch (operators.spark.rows_io).
            whole = self.config.whole_files or is_late or self.config.unsplittable(entry[2])
            if rest <= room or (not planned and whole):
                planned.append(_Range(entry, begin, entry[3]))
                used += rest
                continue
            if not whole and room > 0:
                planned.append(_Range(entry, begin, begin + room))
            break
        # 3. The new offset and its plan.
        new_pos = pos
        for r in planned:
            if firsts.get(r.entry[2]) == r.start:
                cursor.emit(r.entry)
            if (r.entry[0], r.entry[1]) == cursor.key:
                new_pos = r.end if r.end < r.size else None
        #    A young file's last line without newline waits (not split in two records).
        releasing = {e[2] for e, _ in due}
        planned = self._hold_lines(planned, held, releasing)
        if not planned:
            counts = (cursor.passed_over, cursor.modified)
            unchanged = held == list(start.get("held") or ())
            if counts == (start.get("passed_over", 0), start.get("modified", 0)) and unchanged:
                return start
            # Files were passed over or changed: an empty batch records it, so a restart does
            # not report them again and progress shows the count.
            seq = int(start["seq"]) + 1
            self._at = (seq, None)
            offset = {
                "v": 2,
                "seq": seq,
                "pos": new_pos,
                "plan": None,
                **self._state_of(cursor),
            }
            if start.get("ledger") is not None:
                offset["ledger"] = start["ledger"]  # unchanged: still in that plan
            if held:
                offset["held"] = held
            return offset
        seq = int(start["seq"]) + 1
        # What each range's file held up to the range's end: a replay after a restart finds
        # those bytes under another name if the file was rotated meanwhile (_replayed).
        prints = self._remember(planned) if self._ledger is not None else {}
        plan = {
            "v": 1,
            "seq": seq,
            "start": {"seq": start["seq"], "plan": start.get("plan"), "pos": pos},
            "ranges": [
                [r.entry[2], r.start, r.end, r.size, *prints.get(r.entry[2], ())] for r in planned
            ],
        }
        if self.config.after_read != "keep":
            # What each file read to its end was (after_read leaves a changed file alone).
            plan["mtimes"] = {r.entry[2]: r.entry[0] for r in planned if r.end >= r.size}
        if self._ledger is not None:
            plan["ledger"] = self._ledger.state()
        body = json.dumps(plan, sort_keys=True).encode()
        digest = hashlib.sha256(body).hexdigest()[:16]
        self._write_plan(seq, digest, body)
        offset = {"v": 2, "seq": seq, "pos": new_pos, "plan": digest, **self._state_of(cursor)}
        if self._ledger is not None:
            offset["ledger"] = [seq, digest]
        if held:
            offset["held"] = held
        self._at = (seq, digest)
        return offset

    def _held_of(
        self, start: Mapping[str, Any], listing: list[ListingEntry], new: list[ListingEntry]
    ) -> tuple[list[list[Any]], list[tuple[ListingEntry, int]]]:
        """The lines ``start`` holds that still wait, and those now due: each file unchanged
        since its line was held, for ``hold_partial_line`` (as this driver's clock counts),
        with where it is read on from. A held file that changed is listed as new again (the
        ledger continues it where it was read to); one gone is continued by content under
        its new name."""
        held = list(start.get("held") or ())
        if not held:
            return [], []
        by_path = {e[2]: e for e in listing}
        renewed = {e[2] for e in new}
        hold_ns = round(self.config.hold_partial_line * _NS)
        now = time.time_ns()
        waiting: list[list[Any]] = []
        due: list[tuple[ListingEntry, int]] = []
        for path, mtime_ns, size, end, seen_ns in held:
            entry = by_path.get(path)
            if entry is None or path in renewed or (entry[0], entry[3]) != (mtime_ns, size):
                continue
            if now - int(seen_ns) >= hold_ns:
                due.append((entry, int(end)))
            else:
                waiting.append([path, mtime_ns, size, end, seen_ns])
        return waiting, due

    def _hold_lines(
        self, planned: list[_Range], held: list[list[Any]], releasing: set[str]
    ) -> list[_Range]:
        """``planned`` with each range that ends a file changed within ``hold_partial_line``
        in a line without newline ended after its last newline instead; the rest is added to
        ``held`` (``[path, mtime_ns, size, end, seen_ns]``). A range with no newline at all is
        left out. Files in ``releasing`` (their wait is over) are read to their end."""
        hold_ns = round(self.config.hold_partial_line * _NS) if self._ledger is not None else 0
        if hold_ns <= 0:
            return planned
        now = time.time_ns()
        current = mtime_tracks_writes(self.fs)
        kept: list[_Range] = []
        for r in planned:
            path, mtime_ns = r.entry[2], r.entry[0]
            listed_at = self._listed_at if self._listed_at is not None else now
            young = may_grow(mtime_ns, listed_at, hold_ns, mtime_current=current)
            # A compressed file's raw bytes have no lines to hold back (a stream still being
            # written reads as what decompressed, as on the local engine).
            compressed = codec_of(path, self.config.compression) is not None  # type: ignore[arg-type]
            if r.end < r.size or path in releasing or not young or r.end == r.start or compressed:
                kept.append(r)
                continue
            try:
                end = self._after_last_newline(path, r.start, r.end)
            except FileNotFoundError:
                kept.append(r)  # the batch's read says so
                continue
            if end < r.end and self.config.unsplittable(path):
                # A CSV line end may be inside a quoted value: the whole rest waits (read at
                # once when its last row ends or the file is unchanged for hold_partial_line).
                end = r.start
            if end < r.end:
                held.append([path, mtime_ns, r.entry[3], end, now])
                logger.debug(
                    "%s: %s: the line at byte %d waits for its newline", _SOURCE, path, end
                )
            if end > r.start:
                kept.append(_Range(r.entry, r.start, end))
        return kept

    def _after_last_newline(self, path: str, start: int, end: int) -> int:
        """The offset after the last LF in ``[start, end)`` of ``path`` (``start``: none)."""
        at = end
        step = 64 << 10
        while at > start:
            n = min(step, at - start)
            data = self.fs.read(path, at - n, n)
            i = data.rfind(b"\n")
            if i >= 0:
                return at - n + i + 1
            at -= n
        return start

    def _ledger_of(self, start: Mapping[str, Any]) -> ReadLedger | None:
        """The ledger as of offset ``start`` (``continue`` only): in the plan it names."""
        config = self.config
        if config.on_modified != "continue":
            return None
        ledger = ReadLedger(keep_files=config.remember_files, keep_for=config.remember_for)
        ref = start.get("ledger")
        if ref is not None:
            ledger.restore(self._read_plan_body(int(ref[0]), str(ref[1]))["ledger"])
        return ledger

    def _begins(self, new: list[ListingEntry]) -> dict[str, int]:
        """Where each new file continues (:mod:`operators.source.ledger`); a file that vanished
        since
        the listing is left out."""
        ledger = self._ledger
        assert ledger is not None
        begins: dict[str, int] = {}
        for entry in new:
            path = entry[2]
            try:
                where = ledger.start(
                    path, entry[3], self.fs.read, name=_SOURCE, display=self.fs.display
                )
            except FileNotFoundError:
                continue
            begins[path] = where.offset
        return begins

    def _remember(self, planned: list[_Range]) -> dict[str, list[int]]:
        """What a batch reads of each file, up to where its range ends (the file's end, or
        where the next batch goes on: a file rotated meanwhile continues there under its new
        name): the same content rule as the in-process source (two windows of 4 KiB read
        here, on the driver). Returns each file's ``[head_len, head_crc, edge_len, edge_crc]``
        for the plan."""
        ledger = self._ledger
        assert ledger is not None
        now = time.time()
        prints: dict[str, list[int]] = {}
        exact = self.config.content_check == "exact"
        for r in planned:
            path, length = r.entry[2], r.end
            try:
                head = self.fs.read(path, 0, min(length, HEAD))
                if exact:
                    # From what it continues on (checked exactly when listed): what grew.
                    crc = prefix_crc(path, length, self.fs.read, ledger.get(path))
                    if crc is None:
                        continue  # shorter now: the batch's read says so
                    read = exact_fingerprint(head, length, crc, now)
                else:
                    edge = head if length <= HEAD else self.fs.read(path, length - EDGE, EDGE)
                    read = fingerprint(head, edge, length, now)
            except FileNotFoundError:
                continue  # the batch's read says so
            ledger.remember(path, read)
            prints[path] = list(read[1:5])
        return prints

    def _state_of(self, cursor: ScanCursor) -> dict[str, Any]:
        """The cursor's state for an offset; with ``after_read``, also the last batch whose
        files it handled (``housekept``): names it moves away later are forgotten at a
        restart from this offset."""
        state = cursor.state()
        if self.config.after_read != "keep":
            state["housekept"] = int(self._after_read_record()["through"])
        return state

    def _plan_path(self, seq: int, digest: str) -> str:
        return posixpath.join(self.config.plan_dir, f"{seq:020d}-{digest}.json")

    def _write_plan(self, seq: int, digest: str, body: bytes) -> None:
        # An identical plan may exist: the batch was planned before a restart.
        path = self._plan_path(seq, digest)
        if self.plan_fs.exists(path):
            return
        if not self.plan_fs.exists(self.config.plan_dir):
            self.plan_fs.mkdirs(self.config.plan_dir, permission=dir_permission(_PLAN_PERMISSION))
        write_atomically(
            self.plan_fs,
            path,
            body,
            temp=posixpath.join(self.config.plan_dir, f".{seq:020d}-{uuid.uuid4().hex}.tmp"),
            overwrite=True,  # a plan named by its digest: one written meanwhile is the same plan
            permission=_PLAN_PERMISSION,
        )

    def _read_plan_body(self, seq: int, digest: str) -> dict[str, Any]:
        path = self._plan_path(seq, digest)
        try:
            plan: dict[str, Any] = json.loads(self.plan_fs.read(path))
        except FileNotFoundError:
            msg = (
                f"{_SOURCE}: the plan of batch offset {seq} "
                f"({self.plan_fs.display(path)}) is missing: the plan_dir was deleted or another "
                "query shares it"
            )
            raise FileNotFoundError(msg) from None
        return plan

    def _read_plan(self, end: Mapping[str, Any]) -> list[PlannedRange]:
        """The ranges of the batch that ends at ``end``, each with what its file held when
        planned (the tasks check it before they read). A batch this reader did not plan is
        a replay after a restart: each range whose file no longer holds the planned bytes is
        read where they are now (:meth:`_replayed`)."""
        plan = self._read_plan_body(int(end["seq"]), str(end["plan"]))
        ranges: list[PlannedRange] = [
            (
                str(r[0]),
                int(r[1]),
                int(r[2]),
                int(r[3]),
                (int(r[2]), int(r[4]), int(r[5]), int(r[6]), int(r[7])) if len(r) >= 8 else None,
            )
            for r in plan["ranges"]
        ]
        if self._at == (end.get("seq"), end.get("plan")):
            return ranges  # planned moments ago, by this reader
        prints = {r[0]: Read(*r[4], 0.0) for r in ranges if r[4] is not None}
        return self._replayed(int(end["seq"]), ranges, prints) if prints else ranges

    def _replayed(
        self, seq: int, ranges: list[PlannedRange], prints: dict[str, Read]
    ) -> list[PlannedRange]:
        """The ranges of a replayed batch, each read from the file that holds the planned
        bytes now. A file rotated while the job was down (renamed away, copied away and
        truncated) holds other bytes under its name: its planned bytes are found by content
        among the directory's files, as the ledger finds a continued file. Bytes no file holds
        any more are skipped with a WARNING (an error under ``strict_mode``), as the in-process
        source skips a file that vanished."""
        fs = self.fs
        moved: dict[str, str | None] = {}
        listing: list[FileStatus] | None = None  # listed once, when a file moved
        for path, read in prints.items():
            if holds(path, read, fs.read):
                continue
            if listing is None:
                listing = self._listing()
            where = moved[path] = _holder(fs, listing, path, read)
            planned = fs.display(path)
            if where is not None:
                logger.info(
                    "%s: batch %d is read again after a restart; the first %d bytes %s held "
                    "then are now at %s: read there",
                    _SOURCE,
                    seq,
                    read.length,
                    planned,
                    fs.display(where),
                )
                continue
            msg = (
                f"{_SOURCE}: batch {seq} is read again after a restart, but {planned} no longer "
                f"holds the {read.length} bytes planned and no file in the directory does"
            )
            if self.config.strict_mode:
                raise FileNotFoundError(msg)
            logger.warning("%s: its range is skipped", msg)
        if not moved:
            return ranges
        kept = []
        for path, s, e, size, expected in ranges:
            now_at = moved.get(path, path)
            if now_at is not None:
                kept.append((now_at, s, e, size, expected))
        return kept

    def _listing(self) -> list[FileStatus]:
        try:
            return self.fs.list_dir(self.config.directory)
        except FileNotFoundError:
            return []

    def relocating(self, item: PlannedRange, read: Callable[..., Iterator[T]]) -> Iterator[T]:
        """``read(path=, expected=)`` of a range in a task, from the file that holds its
        planned bytes: the range's file is checked before its first record (one small read
        more at most, none for a file within its first chunk); a file rotated since the plan
        (renamed away, copied away and truncated) holds other bytes under its name, and
        the bytes are found by content among the directory's files, as after a restart.
        Bytes no file holds any more are skipped with a WARNING (an error under
        ``strict_mode``)."""
        path, expected = item[0], item[4] if len(item) > 4 else None
        for _ in range(_MOVES):
            try:
                yield from read(path=path, expected=expected)
                return
            except FileMoved:
                assert expected is not None
                where = _holder(self.fs, self._listing(), path, expected_read(expected))
                shown = self.fs.display(path)
                if where is None:
                    msg = (
                        f"{_SOURCE}: {shown} no longer holds the {expected[0]} bytes planned "
                        "for this batch and no file in the directory does"
                    )
                    if self.config.strict_mode:
                        raise FileNotFoundError(msg) from None
                    logger.warning("%s: its range is skipped", msg)
                    return
                logger.info(
                    "%s: %s was rotated since this batch was planned; its first %d bytes are "
                    "now at %s: read there",
                    _SOURCE,
                    shown,
                    expected[0],
                    self.fs.display(where),
                )
                path = where
        msg = f"{_SOURCE}: {self.fs.display(path)} moved {_MOVES} times while read"
        raise OSError(errno.EAGAIN, msg)

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> Sequence[InputPartition]:
        if not end.get("plan") or end.get("seq") == (start or {}).get("seq"):
            return []
        ranges = self._read_plan(end)
        total = sum(r[2] - r[1] for r in ranges)
        target = max(1 << 20, -(-total // self.config.min_partitions))
        target = min(self.config.split_size, target)
        # Any cut is fine: a piece owns the lines (blocks) that start inside it.
        parts: list[InputPartition] = []
        current: list[PlannedRange] = []
        size = 0
        for path, s, e, file_size, expected in ranges:
            at = s
            whole = self.config.unsplittable(path)  # CSV, compressed: one task reads it all
            while at < e:
                take = e - at if whole else min(e - at, target - size)
                current.append((path, at, at + take, file_size, expected))
                at += take
                size += take
                if size >= target:
                    parts.append(ScanPartition(current))
                    current, size = [], 0
        if current:
            parts.append(ScanPartition(current))
        return parts

    # -- driver: after_read --------------------------------------------------------------

    def _forget_left(self, files: list[list[Any]]) -> None:
        """Files after_read moved away (``[name, mtime_ns, path, size]``; records written
        before the ledger have the first two only): the cursor forgets their names, the
        ledger their content, so a file landing under one later is new, whatever its bytes.
        A ledger forgotten here is written with the next plan."""
        assert self._cursor is not None
        self._cursor.forget((str(f[0]), int(f[1])) for f in files)
        if self._ledger is not None:
            for f in files:
                if len(f) >= 4:
                    self._ledger.forget(str(f[2]), int(f[3]))

    def _after_read_path(self) -> str:
        return posixpath.join(self.config.plan_dir, _AFTER_READ_FILE)

    def _after_read_record(self) -> dict[str, Any]:
        """``{"through": the last batch seq whose files after_read handled (0: none), "left":
        {seq: [[name, mtime_ns], ...]}}``: the files of the recent batches that left the
        directory."""
        try:
            record: dict[str, Any] = json.loads(self.plan_fs.read(self._after_read_path()))
        except FileNotFoundError:
            return {"through": 0}
        return record

    def _housekept_through(self) -> int:
        """The last batch ``seq`` whose files after_read has handled (0: none)."""
        return int(self._after_read_record()["through"])

    def housekeep(self, through_seq: int) -> None:
        """``after_read``: archive or delete the files read to their end by the batches up to
        offset ``seq`` ``through_seq``, whose records are all published (the caller knows).
        Each batch's files once: the last batch handled is recorded after its files, so a crash
        in between handles them again (:class:`operators.scan.housekeeping.AfterRead` is safe to
        repeat)."""
        config = self.config
        if config.after_read == "keep":
            return
        record = self._after_read_record()
        done = int(record["through"])
        if through_seq <= done:
            return
        after = AfterRead(
            config.after_read,  # type: ignore[arg-type]
            self.fs,
            archive_dir=config.archive_dir,
            name=_SOURCE,
        )
        plans = sorted(
            (int(st.name.split("-", 1)[0]), st.path)
            for st in self.plan_fs.list_dir(config.plan_dir)
            if st.name[:1].isdigit() and st.name.endswith(".json")
        )
        left: dict[str, list[list[Any]]] = record.get("left", {})
        for seq, path in plans:
            if done < seq <= through_seq:
                plan = json.loads(self.plan_fs.read(path))
                gone: list[list[Any]] = []
                for file, mtime_ns in plan.get("mtimes", {}).items():
                    size = next(int(r[3]) for r in plan["ranges"] if r[0] == file and r[2] >= r[3])
                    if after.handle(ReadFile(file, int(mtime_ns), size)):
                        gone.append([posixpath.basename(file), int(mtime_ns), file, size])
                if gone:
                    # Gone from the directory: a file landing under the name later is new.
                    left[str(seq)] = gone
                    if self._cursor is not None:
                        self._forget_left(gone)
        # A restart starts from an offset planned after _start_housekept: older entries are
        # in every such offset's cursor already.
        oldest = self._start_housekept
        if oldest is not None:
            left = {seq: files for seq, files in left.items() if int(seq) > oldest}
        write_atomically(
            self.plan_fs,
            self._after_read_path(),
            json.dumps({"through": through_seq, "left": left}).encode(),
            overwrite=True,
            permission=_PLAN_PERMISSION,
        )
        after.recorded()  # deleted files, moved aside until this record was written
        after.purge()

    def commit(self, end: dict[str, Any]) -> None:
        """Drop plans of batches older than ``plan_retain`` committed ones (and never one whose
        files after_read has not handled yet)."""
        if self.config.after_read != "keep" and self.housekeep_on_commit and end.get("seq"):
            # A streaming query commits a batch after its sink did: its files are published.
            self.housekeep(int(end["seq"]))
        oldest = int(end.get("seq", 0)) - self.config.plan_retain
        if self.config.after_read != "keep":
            oldest = min(oldest, self._housekept_through() + 1)
        if end.get("ledger") is not None:
            oldest = min(oldest, int(end["ledger"][0]))  # what was read is in that plan
        if oldest <= 0:
            return
        try:
            listing = self.plan_fs.list_dir(self.config.plan_dir)
        except FileNotFoundError:
            return
        for status in listing:
            # ``.<seq>-<uuid>.tmp``: a plan whose writer died before its rename.
            head = status.name.removeprefix(".").split("-", 1)[0]
            if head.isdigit() and int(head) < oldest:
                self.plan_fs.delete(status.path)

    # -- executors: reading ----------------------------------------------------------------

    def read(
        self,
        partition: InputPartition,
        on_rejected: Callable[[Rejected], None] | None = None,
    ) -> Iterator[pa.RecordBatch]:
        """The partition's records; ``on_rejected``: where the rows that do not fit go (a
        fused run's rejects file), instead of the task's log."""
        # Imported here: the driver's reader process (a new one per query) never reads.
        from operators.spark.arrow_io import read_blocks, read_lines

        assert isinstance(partition, ScanPartition)
        config = self.config
        file_info = config.include_file_info
        for item in partition.ranges:
            _, start, end, size = item[:4]
            # By the planned name: a file rotated since is found by content, under another.
            codec = codec_of(item[0], config.compression)  # type: ignore[arg-type]
            if config.rows is not None:
                from operators.spark.rows_io import read_rows

                rows = functools.partial(
                    read_rows, self.fs, start=start, end=end, size=size, config=config
                )
                if on_rejected is not None:
                    rows = functools.partial(rows, on_rejected=on_rejected)
                yield from self.relocating(item, rows)
            elif config.binary:
                blocks = functools.partial(
                    read_blocks,
                    self.fs,
                    start=start,
                    end=end,
                    size=size,
                    block_size=config.block_size,
                    chunk_size=config.read_chunk,
                    file_info=file_info,
                    codec=codec,
                )
                yield from self.relocating(item, blocks)
            else:
                lines = functools.partial(
                    read_lines,
                    self.fs,
                    start=start,
                    end=end,
                    size=size,
                    encoding=config.encoding,
                    on_decode_error=config.on_decode_error,
                    chunk_size=config.read_chunk,
                    file_info=file_info,
                    codec=codec,
                )
                yield from self.relocating(item, lines)


class HdfsScanDataSource(DataSource):
    """The ``hdfs_scan`` streaming source (register with :func:`operators.spark.register`)."""

    @classmethod
    def name(cls) -> str:
        return _SOURCE

    def _config(self) -> ScanConfig:
        # Parsed once, where Spark first asks for the schema; the parsed values travel with
        # this object to the query's reader process.
        config: ScanConfig | None = self.__dict__.get("_parsed")
        if config is None:
            from operators.spark.options import scan_config

            config = scan_config(self.options)
            self.__dict__["_parsed"] = config
        return config

    def schema(self) -> str:
        return self._config().schema()

    def streamReader(self, schema: Any) -> HdfsScanStreamReader:
        return HdfsScanStreamReader(self._config())
