"""HDFS2FileSink: records into rolling, templated files that survive crashes without loss or
(in exactly-once mode) duplication.

A file goes through three stages (``publish="atomic"``, the default):

1. *open*: written under a hidden in-progress name in its final directory,
   ``.<final name>~<sink name>.inprogress``; readers that skip hidden names never see it.
2. *pending*: closed (rolled, punctuation, :meth:`HDFS2FileSink.finish`) and synced; it waits
   until a cut that covers the close completes.
3. *published*: renamed to its final name in :meth:`HDFS2FileSink.on_cut_completed`.

With ``publish="visible"`` files are written under their final names: readers see them grow,
including records no completed cut covers yet, which a crash takes back (truncate) and writes
again. Only a file whose close a completed cut covers is final. An empty marker
``.<final name>~<sink name>.open`` stands for the in-progress name until a completed cut covers
the file, so recovery can still find files opened after the cut.

Recovery (:meth:`HDFS2FileSink.reset`) needs no memory of the crashed process: the checkpointed
state names the open file, its size and the pending files; every other in-progress file or
marker of this sink in the output directories belongs to work after the cut and is deleted.
The sink name must therefore be unique among sinks that share an output directory.

Bad records (a value of the wrong type or not encodable, a record that is not a (name, value)
pair, a file name from data that :mod:`operators.safepath` refuses or that names a file already
written) follow ``on_bad_record``: ``fail`` raises :class:`BadRecordError` (the region resets
and, repeated, fails), ``skip`` drops the record with a log line naming its index, value and
reason, ``reject`` writes it with the reason as one JSON line into ``rejects_file``: a second,
internal sink inside the base directory whose state is part of this sink's, so rejects are
exactly-once like the output (a rejects file is closed at every cut that saw rejects and
published when the cut completes). Default: ``reject`` when ``rejects_file`` is set, else
``skip`` logged at ERROR. Either way bad records are counted in :attr:`SinkMetrics.bad_records`.
"""

from __future__ import annotations

import json
import logging
import posixpath
import re
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import AliasChoices, BaseModel, ConfigDict, Field, model_validator

from operators.errors import BadRecordError, OperatorError
from operators.publish import publish
from operators.rolling import RollingPolicy
from operators.safepath import confine, name_problem
from operators.templating import FileNameTemplate
from region.checkpoint import dir_permission
from region.errors import ConfigError, permanent
from region.fs import FileSystem, FileWriter, LeaseRecoverer
from region.settings import Duration, Encoding, FileMode
from region.state import Batch, SinkOperator, State

__all__ = ["HDFS2FileSink", "SinkSettings"]

logger = logging.getLogger(__name__)

STATE_VERSION = 1
_INPROGRESS = ".inprogress"
_REWRITE = ".rewrite"
_MARKER = ".open"
_COPY_CHUNK = 8 << 20
_NAME = re.compile(r"[A-Za-z0-9_.-]+")
_REJECTS_SUFFIX = ".rejects"
_ROUTED = object()  # stands for a record already routed by on_bad_record


def _alias(snake: str, camel: str) -> AliasChoices:
    return AliasChoices(snake, camel)


class SinkSettings(BaseModel):
    """Parameters of :class:`HDFS2FileSink` (IBM's camelCase names are accepted as aliases)."""

    model_config = ConfigDict(frozen=True, extra="forbid", populate_by_name=True)

    #: Target path template (%HOST %PROCID %PEID %PELAUNCHNUM %TIME %FILENUM %PARTITION).
    file: str | None = None
    #: Base directory: required with ``file_attribute_name`` (names are confined to it);
    #: with ``file`` it is joined in front of a relative template.
    directory: str | None = None
    #: Records are ``(file name, value)`` pairs (or two-key mappings); names are relative
    #: to ``directory``. Excludes ``file`` and the roll limits.
    file_attribute_name: str | None = Field(
        None, validation_alias=_alias("file_attribute_name", "fileAttributeName")
    )
    time_format: str = Field(
        "yyyyMMdd_HHmmss", validation_alias=_alias("time_format", "timeFormat")
    )
    tuples_per_file: int | None = Field(
        None, ge=1, validation_alias=_alias("tuples_per_file", "tuplesPerFile")
    )
    bytes_per_file: int | None = Field(
        None, ge=1, validation_alias=_alias("bytes_per_file", "bytesPerFile")
    )
    time_per_file: Duration | None = Field(
        None, validation_alias=_alias("time_per_file", "timePerFile")
    )
    close_on_punct: bool = Field(False, validation_alias=_alias("close_on_punct", "closeOnPunct"))
    encoding: Encoding = "utf-8"
    format: Literal["line", "binary"] = "line"
    delivery: Literal["exactly_once", "at_least_once"] = "exactly_once"
    publish: Literal["atomic", "visible"] = "atomic"
    #: Permission bits of new files (octal int, or a string such as "0640"); directories the
    #: sink creates get the matching traversal bits (0640 -> 0750).
    permission: FileMode = 0o640
    #: What a bad record does: ``fail`` (raise, the region resets), ``skip`` (log and drop) or
    #: ``reject`` (write it with the reason to ``rejects_file``). Default: ``reject`` when
    #: ``rejects_file`` is set, else ``skip`` logged at ERROR.
    on_bad_record: Literal["fail", "skip", "reject"] | None = Field(
        None, validation_alias=_alias("on_bad_record", "onBadRecord")
    )
    #: Template of the rejects files, relative to the base directory (``directory``, or the
    #: template's fixed directory); needs %FILENUM, e.g. ``_rejects/rejects-%FILENUM.jsonl``.
    rejects_file: str | None = Field(None, validation_alias=_alias("rejects_file", "rejectsFile"))

    @model_validator(mode="after")
    def _rejects(self) -> SinkSettings:
        mode, rejects = self.on_bad_record, self.rejects_file
        if mode == "reject" and rejects is None:
            msg = "on_bad_record='reject' needs rejects_file= (e.g. '_rejects/r-%FILENUM.jsonl')"
            raise ValueError(msg)
        if rejects is None:
            return self
        if mode in ("fail", "skip"):
            msg = f"rejects_file={rejects!r} is never written with on_bad_record={mode!r}"
            raise ValueError(msg)
        problem = name_problem(rejects)
        if problem is not None:
            msg = f"rejects_file={rejects!r} {problem}; it must be a relative path in the base"
            raise ValueError(msg)
        if not FileNameTemplate(rejects, self.time_format).uses_filenum:
            msg = f"rejects_file={rejects!r} needs %FILENUM (files are never overwritten)"
            raise ValueError(msg)
        return self

    @model_validator(mode="after")
    def _consistent(self) -> SinkSettings:
        limits = {
            "tuples_per_file": self.tuples_per_file,
            "bytes_per_file": self.bytes_per_file,
            "time_per_file": self.time_per_file,
        }
        given = {k: v for k, v in limits.items() if v is not None}
        if len(given) > 1:
            msg = f"{' and '.join(f'{k}={v!r}' for k, v in given.items())} exclude each other"
            raise ValueError(msg)
        if self.time_per_file is not None and self.time_per_file <= 0:
            msg = f"time_per_file={self.time_per_file!r} must be more than 0 seconds"
            raise ValueError(msg)
        if self.file_attribute_name is not None:
            if self.file is not None:
                msg = (
                    f"file={self.file!r} and file_attribute_name={self.file_attribute_name!r} "
                    "exclude each other"
                )
                raise ValueError(msg)
            if given:
                k, v = next(iter(given.items()))
                msg = f"{k}={v!r} cannot be used with file_attribute_name"
                raise ValueError(msg)
            if not self.directory:
                msg = (
                    f"file_attribute_name={self.file_attribute_name!r} needs directory= "
                    "(the base directory the file names are confined to)"
                )
                raise ValueError(msg)
            return self
        if not self.file:
            msg = f"file={self.file!r}: a file name template (or file_attribute_name) is required"
            raise ValueError(msg)
        if self.directory is not None and self.file.startswith("/"):
            msg = f"file={self.file!r} must be relative when directory={self.directory!r} is set"
            raise ValueError(msg)
        if self.directory is not None and ".." in self.file.split("/"):
            msg = f"file={self.file!r} must stay inside directory={self.directory!r} (no '..')"
            raise ValueError(msg)
        rolls = given or self.close_on_punct
        template = FileNameTemplate(self.file, self.time_format)
        if rolls and not template.uses_filenum and "TIME" not in template.variables:
            what = " and ".join([*given, *(["close_on_punct"] if self.close_on_punct else [])])
            msg = (
                f"file={self.file!r} has no %FILENUM (nor %TIME) but {what} rolls to new files: "
                "they would all get the same name (files are never overwritten); add %FILENUM"
            )
            raise ValueError(msg)
        base = self.file.rsplit("/", 1)[-1]
        if not base or base.startswith("."):
            msg = (
                f"file={self.file!r} must end in a file name that does not start with '.' "
                "(hidden names are reserved for in-progress files)"
            )
            raise ValueError(msg)
        return self

    @property
    def rolling(self) -> RollingPolicy:
        """When a file is complete (the same policy on Spark's ``hdfs_sink``)."""
        return RollingPolicy(
            tuples=self.tuples_per_file,
            bytes=self.bytes_per_file,
            seconds=self.time_per_file,
            on_punctuation=self.close_on_punct,
        )

    @property
    def template(self) -> str | None:
        """The full file template (``directory`` joined in front), or ``None`` in attribute mode."""
        if self.file is None:
            return None
        return posixpath.join(self.directory, self.file) if self.directory else self.file


@dataclass(frozen=True, slots=True)
class _Closed:
    """A closed, synced file waiting to be published."""

    final: str
    work: str
    size: int

    def to_dict(self) -> dict[str, Any]:
        return {"final": self.final, "work": self.work, "size": self.size}


@dataclass(slots=True)
class _Open:
    """The file being written."""

    final: str
    work: str
    size: int
    tuples: int
    opened_at: float
    filenum: int
    writer: FileWriter | None = None
    dirty: bool = False  # written since the last sync

    def to_dict(self) -> dict[str, Any]:
        return {
            "final": self.final,
            "work": self.work,
            "size": self.size,
            "tuples": self.tuples,
            "opened_at": self.opened_at,
            "filenum": self.filenum,
        }


@dataclass(slots=True)
class _Restored:
    current: _Open | None
    pending: list[_Closed]
    next_filenum: int


@dataclass(slots=True)
class SinkMetrics:
    """Counters of this sink object (not state: they only grow, also across resets)."""

    files_opened: int = 0
    files_written: int = 0  # closed (complete) files
    files_published: int = 0
    tuples_written: int = 0
    bytes_written: int = 0
    #: Records that could not be written (skipped or rejected, see ``on_bad_record``).
    bad_records: int = 0
    records_rejected: int = 0  # of ``bad_records``, those written to the rejects file
    published: list[tuple[str, int]] = field(default_factory=list)  # the last 100


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
        if not _NAME.fullmatch(name):
            msg = f"sink name {name!r} must be letters, digits, '_', '-' or '.'"
            raise ConfigError(msg)
        if (
            settings.delivery == "exactly_once"
            and settings.publish == "visible"
            and not fs.supports_truncate
        ):
            msg = (
                f"sink {name!r}: delivery='exactly_once' with publish='visible' needs truncate, "
                f"which {type(fs).__name__} does not support: use publish='atomic' or "
                "delivery='at_least_once'"
            )
            raise ConfigError(msg)
        self.name = name
        self.settings = settings
        self._fs = fs
        self._on_published = on_published
        self._clock = clock
        self._partition = partition
        self._peid = peid
        self._pelaunchnum = pelaunchnum
        self._atomic = settings.publish == "atomic"
        self._line = settings.format == "line"
        self._attr = settings.file_attribute_name
        self._rolling = settings.rolling
        self._encoding = settings.encoding
        # Encodings with a byte-order mark write it once, at the start of each file.
        self._bom = "".encode(self._encoding)

        template = settings.template
        self._template = (
            FileNameTemplate(template, settings.time_format) if template is not None else None
        )
        # Where recovery looks for this sink's in-progress files and markers.
        self._roots: list[tuple[str, bool]] = []  # (directory, recursive)
        self._base = ""
        if template is None:
            self._base = _norm(settings.directory or ".")
            self._roots.append((self._base, True))
        else:
            head = template.rsplit("/", 1)[0] if "/" in template else "."
            if "%" in head:  # variables in directories: walk from the static part
                assert self._template is not None
                prefix = self._template.static_prefix
                static = prefix.rsplit("/", 1)[0] if "/" in prefix else ""
                if static in ("", "."):
                    msg = (
                        f"sink {name!r}: file template {template!r} has variables in its first "
                        "directory; recovery would have to walk the whole filesystem: start it "
                        "with a fixed directory (or set directory=)"
                    )
                    raise ConfigError(msg)
                self._roots.append((_norm(static), True))
            else:
                self._roots.append((_norm(head or "/"), False))

        mode = settings.on_bad_record
        if mode is None:
            mode = "reject" if settings.rejects_file is not None else "skip"
        self._on_bad = mode
        # A skip nobody asked for is an ERROR: the record is gone unless someone reads the log.
        self._skip_level = logging.WARNING if settings.on_bad_record == "skip" else logging.ERROR
        # Side names add ".", "~<sink name>" and a suffix to a final name: keep room for them.
        self._reserve = 2 + len(name) + max(len(_INPROGRESS), len(_MARKER), len(_REWRITE))
        self._dir_permission = dir_permission(settings.permission)
        self._dirs: set[str] = set()  # output directories known to exist
        self._rejects: HDFS2FileSink | None = None
        self._rejects_dir: str | None = None
        if settings.rejects_file is not None:
            rejects = SinkSettings(
                file=posixpath.join(self._roots[0][0], settings.rejects_file),
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
            self._rejects_dir = _norm(posixpath.dirname(rejects.template))
        if self._template is not None:
            # Variables (%TIME's format, %PEID, %HOST) must not lead a name out of its directory.
            sample = self._render(0, clock())
            problem = self._template_problem(sample)
            if problem is not None:
                msg = f"sink {name!r}: file template {template!r} gives {sample!r}, which {problem}"
                raise ConfigError(msg)

        self._ready = False
        self._cur: _Open | None = None
        self._closed: list[_Closed] = []  # closed since the last checkpoint
        self._pending: list[tuple[int, _Closed]] = []  # (covering cut, file)
        self._next_filenum = 0
        self._marked: set[str] = set()  # visible files whose marker still exists
        self._cut_current: dict[int, str | None] = {}
        # Files published and announced by on_cut_completed since the last reset; and whether
        # the restored cut's completion is known to have finished (recall_completed): a reset
        # announces neither again.
        self._announced: set[str] = set()
        self._recalled = False
        self.metrics = SinkMetrics()

    # -- public read-only views ---------------------------------------------------------------

    @property
    def files_written(self) -> int:
        """Files closed by this sink object (the IBM ``nFilesWritten`` metric)."""
        return self.metrics.files_written

    @property
    def files_published(self) -> int:
        return self.metrics.files_published

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
        records = batch.records
        if records:
            self._roll_if_old(self._clock())
            if self._attr is None:
                self._write_run(records, 0, len(records))
            else:
                self._write_named(records)
        if batch.punctuation and self._rolling.on_punctuation:
            self._close_current()

    def on_tick(self, now: float) -> None:
        if self._ready:
            self._roll_if_old(now)

    def finish(self) -> None:
        """The final punctuation: close the current file so that the next cut publishes it.

        Call it before the final cut of a graceful stop; :meth:`close` alone publishes nothing.
        """
        if self._ready:
            self._close_current()
        if self._rejects is not None:
            self._rejects.finish()

    def _roll_if_old(self, now: float) -> None:
        cur = self._cur
        if cur is not None and self._rolling.expired(cur.opened_at, now):
            self._close_current()

    def _write_run(
        self,
        records: Sequence[Any],
        start: int,
        end: int,
        originals: Sequence[Any] | None = None,
    ) -> None:
        """Write ``records[start:end]`` to the current file(s), rolling at the exact record.

        A record that cannot be encoded goes to :meth:`_bad_record` with ``originals[i]`` (the
        whole record, when ``records`` holds only the values); the others are written.
        """
        i = start
        while i < end:
            cur = self._cur if self._cur is not None else self._open(None)
            take = end - i
            room = self._rolling.room(cur.tuples)
            if room is not None:
                take = min(take, room)
                if take <= 0:  # restored from a run with a larger limit
                    self._close_current()
                    continue
            try:
                data, take = self._encode(records, i, take, cur)
            except BadRecordError as exc:
                bad = exc.offset
                if self._on_bad == "fail" or bad is None or not i <= bad < end:
                    raise
                if bad > i:  # the records before it are fine (the first bad one raised)
                    self._write_run(records, i, bad, originals)
                self._bad_record((originals or records)[bad], bad, exc)
                i = bad + 1
                continue
            if cur.writer is None:
                cur.writer = self._fs.append(cur.work)
            cur.writer.write(data)
            cur.size += len(data)
            cur.tuples += take
            cur.dirty = True
            self.metrics.tuples_written += take
            self.metrics.bytes_written += len(data)
            i += take
            if self._rolling.full(cur.tuples, cur.size):
                self._close_current()

    def _encode(
        self, records: Sequence[Any], start: int, take: int, cur: _Open
    ) -> tuple[bytes, int]:
        """Bytes of ``take`` records from ``start``; fewer when ``bytes_per_file`` is reached."""
        chunk = records[start : start + take]
        try:
            if self._line:
                text = "\n".join(chunk) + "\n"
                data = text.encode(self._encoding)
                if self._bom:
                    data = data[len(self._bom) :]
            else:
                data = b"".join(chunk)
        except (TypeError, UnicodeError):
            for j, record in enumerate(chunk):
                self._encode_one(record, start + j, cur)
            raise  # not reached: one record above failed alone
        rolling = self._rolling
        if take == 1 or not rolling.crosses(cur.size, len(data)):
            return data, take
        # This chunk crosses the byte limit: encode record by record up to the one reaching it.
        pieces: list[bytes] = []
        cumulative: list[int] = []
        added = 0
        for j, record in enumerate(chunk):
            piece = self._encode_one(record, start + j, cur)
            pieces.append(piece)
            added += len(piece)
            cumulative.append(added)
            if rolling.crosses(cur.size, added):
                break
        fit = rolling.fitting(cumulative, cur.size)
        return b"".join(pieces[:fit]), fit

    def _encode_one(self, record: Any, index: int, cur: _Open) -> bytes:
        where = f"record {index} of the batch for {self._fs.display(cur.final)}"
        if self._line:
            if not isinstance(record, str):
                msg = f"{where}: line mode needs str, got {type(record).__name__} {_short(record)}"
                raise BadRecordError(msg, file=cur.final, offset=index, field=self._attr)
            try:
                data = (record + "\n").encode(self._encoding)
            except UnicodeEncodeError as exc:
                msg = (
                    f"{where}: {_short(record)} cannot be encoded as {self._encoding} "
                    f"(character {exc.start}: {exc.reason})"
                )
                raise BadRecordError(msg, file=cur.final, offset=index, field=self._attr) from None
            return data[len(self._bom) :] if self._bom else data
        if not isinstance(record, bytes | bytearray | memoryview):
            msg = f"{where}: binary mode needs bytes, got {type(record).__name__} {_short(record)}"
            raise BadRecordError(msg, file=cur.final, offset=index, field=self._attr)
        return bytes(record)

    def _write_named(self, records: Sequence[Any]) -> None:
        # 1. Split every record first: a malformed one is routed (or raised) before any write.
        names: list[Any] = []
        values: list[Any] = []
        for index, record in enumerate(records):
            try:
                name, value = self._split(record, index)
            except BadRecordError as exc:
                self._bad_record(record, index, exc)
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
                path = self._resolve(name, start)
                if self._cur is None or self._cur.final != path:
                    self._close_current()
                    self._open(path)
            except (BadRecordError, FileExistsError, NotADirectoryError, IsADirectoryError) as exc:
                # A refused name, a file written before (never overwritten), or a name that
                # clashes with the tree (a file where a directory is needed, or the reverse):
                # the records of this run cannot be written.
                if self._on_bad == "fail":
                    raise
                for index in range(start, end):
                    self._bad_record(records[index], index, self._refusal(exc, name, index))
                start = end
                continue
            self._write_run(values, start, end, records)
            start = end

    def _refusal(self, exc: Exception, name: Any, index: int) -> Exception:
        """``exc`` for the record at ``index`` (a name check raised for the first of a run)."""
        if isinstance(exc, BadRecordError) and exc.offset != index:
            try:
                self._resolve(name, index)
            except BadRecordError as again:
                return again
        return exc

    def _split(self, record: Any, index: int) -> tuple[Any, Any]:
        attr = self._attr
        if isinstance(record, tuple | list) and len(record) == 2:
            return record[0], record[1]
        if isinstance(record, Mapping) and len(record) == 2 and attr in record:
            (value,) = (v for k, v in record.items() if k != attr)
            return record[attr], value
        msg = (
            f"record {index}: expected a (file name, value) pair or a mapping of {attr!r} and "
            f"one value, got {type(record).__name__} {_short(record)}"
        )
        raise BadRecordError(msg, offset=index, field=attr)

    def _resolve(self, name: Any, index: int) -> str:
        """The path of a file named by a record, confined to the base directory (the rules are
        in :mod:`operators.safepath`)."""
        problem: str | None
        try:
            path = confine(self._base, name, reserve=self._reserve)
        except ValueError as exc:
            problem = str(exc)
        else:
            reserved = self._rejects_dir
            if reserved is not None and reserved != self._base and _below(path, reserved):
                problem = "is inside the directory of the rejects files"
            else:
                problem = self._tree_conflict(path)
            if problem is None:
                return path
        msg = (
            f"record {index}: file name {_short(name)} in {self._attr!r} {problem}; names must be "
            f"relative paths inside {self._fs.display(self._base)}"
        )
        raise BadRecordError(msg, file=self._base, offset=index, field=self._attr)

    def _tree_conflict(self, path: str) -> str | None:
        """Why ``path`` cannot coexist with a file this sink has not published yet (one would
        have to be a directory of the other), or ``None``."""
        finals = [c.final for c in self._closed] + [c.final for _, c in self._pending]
        if self._cur is not None:
            finals.append(self._cur.final)
        for final in finals:
            if _below(path, final):
                return f"needs {self._fs.display(final)}, a file being written, as a directory"
            if _below(final, path):
                return f"is a directory of {self._fs.display(final)}, a file being written"
        return None

    def _bad_record(self, record: Any, index: int, exc: Exception) -> None:
        """Route a record that cannot be written, as ``on_bad_record`` says."""
        if self._on_bad == "fail":
            raise exc
        reason = str(exc)
        if not isinstance(exc, BadRecordError):  # its message names neither record nor value
            reason = f"record {index} {_short(record)}: {reason}"
        self.metrics.bad_records += 1
        if self._rejects is not None:
            line = json.dumps(
                {"sink": self.name, "index": index, "reason": reason, "record": repr(record)},
                ensure_ascii=True,
            )
            self._rejects.write(Batch([line]))
            self.metrics.records_rejected += 1
            logger.warning("sink %s: rejected %s", self.name, reason)
        else:
            logger.log(self._skip_level, "sink %s: skipped %s", self.name, reason)

    # -- files --------------------------------------------------------------------------------

    def _taken(self, final: str) -> bool:
        if (self._cur is not None and self._cur.final == final) or any(
            c.final == final for c in self._closed
        ):
            return True
        return any(c.final == final for _, c in self._pending) or self._fs.exists(final)

    def _open(self, final: str | None) -> _Open:
        """Open a new file (lazily: only when a record is about to be written)."""
        now = self._clock()
        filenum = self._next_filenum
        if final is None:
            assert self._template is not None
            while True:
                final = self._render(filenum, now)
                problem = self._template_problem(final)
                if problem is not None:
                    msg = f"sink {self.name!r}: the file template gives {final!r}, which {problem}"
                    raise permanent(OperatorError(msg))
                if not self._taken(final):
                    break
                if not self._template.uses_filenum:
                    msg = (
                        f"sink {self.name!r}: {self._fs.display(final)} already exists or is "
                        f"being written, and files are never overwritten: add %FILENUM to "
                        f"{self._template.template!r}"
                    )
                    raise permanent(FileExistsError(msg))
                logger.info(
                    "sink %s: %s exists, skipping file number %s", self.name, final, filenum
                )
                filenum += 1
        elif self._taken(final):
            msg = (
                f"sink {self.name!r}: {self._fs.display(final)} was already written, and files "
                "are never overwritten (group the records by file name)"
            )
            raise permanent(FileExistsError(msg))
        work = _side_name(final, self.name, _INPROGRESS) if self._atomic else final
        permission = self.settings.permission
        self._ensure_dir(posixpath.dirname(final))
        if not self._atomic:
            # 1. The marker first: a crash after step 2 leaves a file recovery can find.
            marker = self._fs.create(
                _side_name(final, self.name, _MARKER), overwrite=True, permission=permission
            )
            marker.sync()
            marker.close()
            self._marked.add(final)
        # 2. The file itself; never over an existing one.
        writer = self._fs.create(work, overwrite=False, permission=permission)
        self._next_filenum = filenum + 1
        cur = _Open(final, work, 0, 0, now, filenum, writer)
        if self._bom:
            writer.write(self._bom)
            cur.size = len(self._bom)
        self._cur = cur
        self.metrics.files_opened += 1
        logger.debug("sink %s: opened %s", self.name, work)
        return cur

    def _render(self, filenum: int, now: float) -> str:
        assert self._template is not None
        return _norm(
            self._template.render(
                filenum=filenum,
                now=now,
                partition=self._partition,
                peid=self._peid,
                pelaunchnum=self._pelaunchnum,
            )
        )

    def _template_problem(self, final: str) -> str | None:
        """Why a rendered template path is not acceptable, or ``None``."""
        root = self._roots[0][0]
        if root == ".":
            below = final
        elif _below(final, root):
            below = final[len(root.rstrip("/")) + 1 :]
        else:
            return f"is outside {root!r}"
        problem = name_problem(below, reserve=self._reserve)
        return None if problem is None else f"below {root!r} {problem}"

    def _ensure_dir(self, directory: str) -> None:
        """Create a missing output directory with the sink's directory permission (a backend
        creating parents on its own would use its default mode)."""
        if not directory or directory in self._dirs:
            return
        if not self._fs.exists(directory):
            self._fs.mkdirs(directory, permission=self._dir_permission)
        self._dirs.add(directory)

    def _close_current(self) -> None:
        cur = self._cur
        if cur is None:
            return
        if cur.writer is not None:
            if cur.dirty:
                cur.writer.sync()  # pending files must survive a crash: the cut promises them
            cur.writer.close()
            cur.writer = None
        self._cur = None
        self._closed.append(_Closed(cur.final, cur.work, cur.size))
        self.metrics.files_written += 1
        logger.debug("sink %s: closed %s (%s bytes)", self.name, cur.work, cur.size)

    def _publish(self, done: _Closed, *, recovering: bool = False) -> None:
        """Rename a covered file to its final name (safe to repeat: :mod:`operators.publish`),
        then count and announce it."""
        if self._atomic:
            publish(
                self._fs, done.work, done.final, who=f"sink {self.name!r}", recovering=recovering
            )
        self.metrics.files_published += 1
        self.metrics.published.append((done.final, done.size))
        del self.metrics.published[:-100]
        logger.info("sink %s: published %s (%s bytes)", self.name, done.final, done.size)
        if self._on_published is not None:
            self._on_published(done.final, done.size)

    def _drop_writer(self) -> None:
        """Release the open file's handle without publishing (reset and crash)."""
        cur = self._cur
        if cur is not None and cur.writer is not None:
            writer, cur.writer = cur.writer, None
            try:
                writer.close()
            except OSError as exc:  # the reset truncates or deletes whatever it left
                logger.warning("sink %s: closing %s failed: %s", self.name, cur.work, exc)

    # -- state handler ------------------------------------------------------------------------

    def drain(self) -> None:
        cur = self._cur
        if cur is not None and cur.writer is not None and cur.dirty:
            cur.writer.sync()  # durable (hsync), not only visible (hflush)
            cur.dirty = False
        if self._rejects is not None:
            # Each cut that saw rejects publishes them in a file of their own.
            self._rejects.finish()
            self._rejects.drain()

    def checkpoint(self, cut_id: int) -> State:
        self.drain()  # the state may only describe durable bytes; no-op after a drain
        self._pending.extend((cut_id, c) for c in self._closed)
        self._closed = []
        self._cut_current[cut_id] = self._cur.final if self._cur is not None else None
        state: dict[str, Any] = {
            "version": STATE_VERSION,
            "next_filenum": self._next_filenum,
            "current": self._cur.to_dict() if self._cur is not None else None,
            "pending": [c.to_dict() for _, c in self._pending],
        }
        if self._rejects is not None:
            state["rejects"] = self._rejects.checkpoint(cut_id)
        return state

    def on_cut_completed(self, cut_id: int) -> None:
        published: set[str] = set()
        while self._pending and self._pending[0][0] <= cut_id:
            done = self._pending[0][1]
            self._publish(done)
            self._pending.pop(0)
            published.add(done.final)
            self._announced.add(done.final)
        if not self._atomic:
            # The completed cut covers these files: recovery must no longer delete them.
            for final in [*published, self._cut_current.get(cut_id)]:
                if final is not None and final in self._marked:
                    self._fs.delete(_side_name(final, self.name, _MARKER))
                    self._marked.discard(final)
        self._cut_current = {k: v for k, v in self._cut_current.items() if k > cut_id}
        if self._rejects is not None:
            self._rejects.on_cut_completed(cut_id)

    def recall_completed(self, cut_id: int) -> None:
        self._recalled = True
        if self._rejects is not None:
            self._rejects.recall_completed(cut_id)

    def reset(self, state: State) -> None:
        restored = self._parse(state)
        self._ready = False
        self._drop_writer()
        # 1. Finish what the cut promised: publish the files it covers, unless its completion
        #    did (then they are published and announced, and may have been moved away since).
        for done in restored.pending:
            if not self._recalled and done.final not in self._announced:
                self._publish(done, recovering=True)
        self._recalled = False
        self._announced = {done.final for done in restored.pending}  # a repeated reset
        # 2. Delete this sink's files the cut does not know (opened after it).
        keep = {c.final for c in restored.pending}
        extra_dirs = {posixpath.dirname(c.final) for c in restored.pending}
        if restored.current is not None:
            keep.add(restored.current.final)
            extra_dirs.add(posixpath.dirname(restored.current.final))
        self._delete_orphans(keep, extra_dirs)
        # 3. Bring the open file back to its size at the cut.
        current = restored.current
        if current is not None and self._published_since_the_cut(current):
            current = None  # at_least_once goes on with a new file; exactly_once raised
        if current is not None:
            self._restore(current)
        # 4. In-memory state.
        self._cur = current
        self._closed = []
        self._pending = []
        self._next_filenum = restored.next_filenum
        self._marked = set()
        self._cut_current = {}
        self._ready = True
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
        self._ready = False
        self._drop_writer()
        self._delete_orphans(set(), set())
        self._cur = None
        self._closed = []
        self._pending = []
        self._next_filenum = 0
        self._marked = set()
        self._cut_current = {}
        self._recalled = False
        self._announced = set()
        self._ready = True
        if self._rejects is not None:
            self._rejects.reset_to_initial_state()

    def close(self) -> None:
        cur = self._cur
        if cur is not None and cur.writer is not None:
            if cur.dirty:
                cur.writer.sync()
                cur.dirty = False
            cur.writer.close()
            cur.writer = None
        self._ready = False
        if self._rejects is not None:
            self._rejects.close()

    def abandon(self) -> None:
        """Stop like a crashed process: release file handles, publish and delete nothing.

        For replay tests that simulate a crash in-process; the next sink object recovers.
        """
        self._drop_writer()
        self._ready = False
        if self._rejects is not None:
            self._rejects.abandon()

    # -- recovery -----------------------------------------------------------------------------

    def _parse(self, state: State) -> _Restored:
        try:
            if state.get("version") != STATE_VERSION:
                msg = f"version {state.get('version')!r}, expected {STATE_VERSION}"
                raise ValueError(msg)
            cur = state["current"]
            current = None
            if cur is not None:
                current = _Open(
                    str(cur["final"]),
                    str(cur["work"]),
                    int(cur["size"]),
                    int(cur["tuples"]),
                    float(cur["opened_at"]),
                    int(cur["filenum"]),
                )
            pending = [
                _Closed(str(p["final"]), str(p["work"]), int(p["size"])) for p in state["pending"]
            ]
            return _Restored(current, pending, int(state["next_filenum"]))
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            msg = f"sink {self.name!r}: checkpointed state is not understood ({exc!r}): {state!r}"
            raise OperatorError(msg) from None

    def _delete_orphans(self, keep: set[str], extra_dirs: set[str]) -> None:
        """Delete in-progress files and marked visible files of this sink not in ``keep``."""
        roots = list(self._roots) + [(d or ".", False) for d in sorted(extra_dirs)]
        seen: set[str] = set()
        for root, recursive in roots:
            for directory, entries in self._walk(root, recursive, seen):
                for status in entries:
                    found = _parse_side_name(status.name, self.name)
                    if found is None:
                        continue
                    suffix, base = found
                    final = _norm(posixpath.join(directory, base))
                    side = _norm(posixpath.join(directory, status.name))
                    if suffix == _MARKER:
                        # 1. The file first: the marker is what lets a retry find it.
                        if final not in keep and self._fs.delete(final):
                            logger.info("sink %s: deleted %s (after the cut)", self.name, final)
                        self._fs.delete(side)
                    elif suffix == _REWRITE or final not in keep:
                        self._fs.delete(side)
                        logger.info("sink %s: deleted %s (after the cut)", self.name, side)

    def _walk(self, root: str, recursive: bool, seen: set[str]) -> list[tuple[str, list[Any]]]:
        out = []
        todo = [root]
        while todo:
            directory = todo.pop()
            if directory in seen:
                continue
            seen.add(directory)
            try:
                entries = self._fs.list_dir(directory)
            except (FileNotFoundError, NotADirectoryError):
                continue
            out.append((directory, [s for s in entries if not s.is_dir]))
            if recursive:
                todo.extend(_norm(posixpath.join(directory, s.name)) for s in entries if s.is_dir)
        return out

    def _restore(self, cur: _Open) -> None:
        path = cur.work
        if isinstance(self._fs, LeaseRecoverer) and self._fs.exists(path):
            # A crashed writer's HDFS lease keeps the file open, its length not yet settled:
            # close it first (IBM's sink waited for the lease to expire, or failed).
            self._fs.recover_lease(path)
        if self.settings.delivery == "exactly_once" or cur.size == 0:
            try:
                actual = self._fs.status(path).size
            except FileNotFoundError:
                if cur.size:
                    msg = (
                        f"sink {self.name!r}: {self._fs.display(path)}, open at the checkpoint "
                        f"with {cur.size} bytes, is missing"
                    )
                    raise FileNotFoundError(msg) from None
                self._fs.create(path, overwrite=False, permission=self.settings.permission).close()
                return
            if actual < cur.size:
                msg = (
                    f"sink {self.name!r}: {self._fs.display(path)} has {actual} bytes, fewer than "
                    f"the {cur.size} its checkpoint covers"
                )
                raise OperatorError(msg)
            if actual > cur.size and self.settings.delivery == "exactly_once":
                if self._fs.supports_truncate:
                    self._fs.truncate(path, cur.size)
                else:
                    self._rewrite_prefix(path, cur.size)
                logger.info(
                    "sink %s: cut %s back from %s to %s bytes", self.name, path, actual, cur.size
                )
            return
        # at_least_once: the IBM behaviour, append after whatever the file holds, except a
        # record torn by the crash: it would glue to the replayed one and be lost as a record.
        try:
            actual = self._fs.status(path).size
        except FileNotFoundError:
            msg = (
                f"sink {self.name!r}: {self._fs.display(path)}, open at the checkpoint "
                f"with {cur.size} bytes, is missing"
            )
            raise FileNotFoundError(msg) from None
        if actual <= cur.size:
            return
        keep = cur.size + self._whole_records(self._fs.read(path, cur.size, actual - cur.size))
        # What the file holds from here on is what the state says: the next checkpoint records
        # the true size (a later exactly_once reset truncates to it: never into a record).
        kept, cur.size = cur.size, keep
        if keep == actual:
            return
        if self._fs.supports_truncate:
            self._fs.truncate(path, keep)
        elif self.settings.publish == "atomic":
            self._rewrite_prefix(path, keep)
        else:
            cur.size = actual
            logger.warning(
                "sink %s: %s ends with %d bytes of a record torn by a crash; this filesystem "
                "cannot truncate, so they stay",
                self.name,
                self._fs.display(path),
                actual - keep,
            )
            return
        logger.info(
            "sink %s: dropped a torn record: %s cut to %s bytes (%s at the cut)",
            self.name,
            path,
            keep,
            kept,
        )

    def _published_since_the_cut(self, cur: _Open) -> bool:
        """Whether the open file was published since the cut: its in-progress file is missing
        and its final name exists. Only a newer cut publishes it, so that cut's checkpoint was
        there and is no longer readable (the store fell back to this older one).

        The published file holds the cut's bytes and records written after the cut, which the
        source replays: exactly_once cannot go on (those records would be written twice) and
        raises; at_least_once may write them twice, so it warns and drops the open file (its
        bytes at the cut are published; the replayed records go to a new file).
        """
        if cur.final == cur.work or self._fs.exists(cur.work) or not self._fs.exists(cur.final):
            return False
        final, work = self._fs.display(cur.final), self._fs.display(cur.work)
        if self.settings.delivery == "exactly_once":
            msg = (
                f"sink {self.name!r}: {work}, open at the checkpoint with {cur.size} bytes, is "
                f"missing: it was already published as {final} by a newer cut that is no longer "
                "readable (damaged or deleted checkpoint?), with records after this checkpoint "
                "that resuming from it would write again. Restore the newer checkpoint; or, if "
                f"no reader has used {final} nor the files this sink published after it: move "
                f"those files away, rename {final} back to {work} and restart: it is cut back to "
                "this checkpoint and the records after it are written once"
            )
            raise permanent(OperatorError(msg))  # the same checkpoint every retry
        logger.warning(
            "sink %s: %s, open at the checkpoint with %s bytes, was already published as %s by a "
            "newer cut that is no longer readable (damaged or deleted checkpoint?); "
            "at_least_once: the records after this checkpoint are written again, to a new file",
            self.name,
            work,
            cur.size,
            final,
        )
        return True

    def _whole_records(self, tail: bytes) -> int:
        """Length of the prefix of ``tail`` (bytes written after the cut) made of whole records:
        up to the last line end in line mode; none in binary mode, where records have no
        boundaries to find."""
        if self.settings.format != "line":
            return 0
        newline = "\n".encode(self._encoding)[len(self._bom) :]  # encode() prefixes a BOM
        end = len(tail)
        while (found := tail.rfind(newline, 0, end)) >= 0:
            if found % len(newline) == 0:  # aligned with the code units of the encoding
                return found + len(newline)
            end = found + len(newline) - 1
        return 0

    def _rewrite_prefix(self, path: str, size: int) -> None:
        """Truncate without truncate: copy the first ``size`` bytes to a fresh in-progress file.

        Only for in-progress files (atomic publish): a reader never sees them.
        """
        final = _final_of(path, self.name)
        tmp = _side_name(final, self.name, _REWRITE)
        writer = self._fs.create(tmp, overwrite=True, permission=self.settings.permission)
        try:
            offset = 0
            while offset < size:
                chunk = self._fs.read(path, offset, min(_COPY_CHUNK, size - offset))
                if not chunk:
                    msg = f"{self._fs.display(path)}: ended at {offset} bytes, expected {size}"
                    raise OperatorError(msg)
                writer.write(chunk)
                offset += len(chunk)
            writer.sync()
        finally:
            writer.close()
        self._fs.rename(tmp, path, overwrite=True)


def _norm(path: str) -> str:
    return posixpath.normpath(path) if path else "."


def _below(path: str, directory: str) -> bool:
    """Whether ``path`` lies below ``directory`` (both normalised)."""
    return path.startswith(directory.rstrip("/") + "/")


def _side_name(final: str, sink: str, suffix: str) -> str:
    head, base = posixpath.split(final)
    return posixpath.join(head, f".{base}~{sink}{suffix}")


def _final_of(side: str, sink: str) -> str:
    head, base = posixpath.split(side)
    found = _parse_side_name(base, sink)
    assert found is not None, side
    return posixpath.join(head, found[1])


def _parse_side_name(name: str, sink: str) -> tuple[str, str] | None:
    """``(suffix, final base name)`` when ``name`` is an in-progress file or marker of ``sink``.

    ``~`` cannot occur in sink names, so ``~<sink><suffix>`` identifies the sink exactly.
    """
    if not name.startswith("."):
        return None
    for suffix in (_INPROGRESS, _MARKER, _REWRITE):
        tail = f"~{sink}{suffix}"
        if name.endswith(tail) and len(name) > len(tail) + 1:
            return suffix, name[1 : -len(tail)]
    return None


def _short(value: Any, limit: int = 80) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."
