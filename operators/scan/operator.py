"""HDFS2DirectoryScan: emit each new file of a directory once, in the strict order (mtime_ns, name).

Which files are new is the rule of :mod:`operators.scan.cursor`, shared with the Spark source: every
file that lands is emitted once, also one that lands late (an mtime before files already read:
``cp -p``, write-then-rename), and a file that can only be passed over is reported.

Every effect happens inside :meth:`HDFS2DirectoryScan.next_batch` / :meth:`next_file`, which the
runtime calls only under a permit: whatever they return is covered by the next cut, and nothing
runs in the background that could emit a file across a reset.
"""

from __future__ import annotations

import logging
import operator
import os
import posixpath
import re
import time
from collections.abc import Callable
from typing import Any, Literal, get_args

from pydantic import AliasChoices, BaseModel, ConfigDict, Field, field_validator, model_validator

from operators.common.errors import BadRecordError, OperatorError
from operators.common.faults import stop_here
from operators.common.safepath import path_problem
from operators.scan.control import ControlFile
from operators.scan.cursor import OnModified, ScanCursor, identifier
from operators.scan.housekeeping import AfterRead, ReadFile
from operators.scan.listing import ScanKey, list_ready_keyed
from region.errors import permanent
from region.fs import FileStatus, FileSystem, ListingEntry
from region.settings import Duration
from region.state import Batch, StartOperator, State

__all__ = ["HDFS2DirectoryScan", "ScanSettings", "within_roots", "young_files"]

logger = logging.getLogger(__name__)

_NS = 1_000_000_000
_path_of = operator.itemgetter(2)
_name_of = operator.itemgetter(1)


def _alias(*names: str) -> Any:
    return AliasChoices(*names)


def _same_dir(a: str, b: str) -> bool:
    return posixpath.normpath(a or ".") == posixpath.normpath(b or ".")


def within_roots(path: str, roots: tuple[str, ...]) -> bool:
    """Whether ``path`` is one of ``roots`` or below one (lexically, after folding ``..``)."""
    norm = posixpath.normpath(path)
    for root in roots:
        base = posixpath.normpath(root)
        if norm == base or norm.startswith(base.rstrip("/") + "/"):
            return True
    return False


def roots_problem(fs: FileSystem, path: str, roots: tuple[str, ...] | None) -> str | None:
    """Why ``path`` on ``fs`` is not within ``roots`` (``None``: no roots, or within): outside
    them by name, or, on the local disk, through a symbolic link."""
    if roots is None:
        return None
    if not within_roots(path, roots):
        return f"is outside the allowed roots {list(roots)!r}"
    if fs.display(path).startswith("file:"):
        real = os.path.realpath(path)
        if not within_roots(real, tuple(os.path.realpath(root) for root in roots)):
            return (
                f"resolves through a symbolic link to {real!r}, outside the allowed roots "
                f"{list(roots)!r}"
            )
    return None


#: ``[scan] on_modified``'s values, as the settings name them.
_ON_MODIFIED = ("new_version", *get_args(OnModified))


class ScanSettings(BaseModel):
    """Parameters of the directory scan; IBM Streams names are accepted as aliases."""

    model_config = ConfigDict(frozen=True, extra="forbid", populate_by_name=True)

    #: Directory to watch (not recursive); ``None`` waits for a control input (set_directory).
    directory: str | None = None
    #: Regular expression that must match the whole base name.
    pattern: str | None = None
    #: Seconds between two listings of the directory once every listed file is emitted.
    sleep_time: Duration = Field(5.0, validation_alias=_alias("sleep_time", "sleepTime"))
    #: Seconds before the first listing.
    init_delay: Duration = Field(0.0, validation_alias=_alias("init_delay", "initDelay"))
    #: A missing directory is fatal (``True``) or a warning and an empty listing (``False``).
    strict_mode: bool = Field(False, validation_alias=_alias("strict_mode", "strictMode"))
    #: Files younger than this (by mtime) are still being written: left for a later listing.
    min_file_age: Duration = Field(0.0, validation_alias=_alias("min_file_age", "minFileAge"))
    #: Late files (an mtime before files already read: ``cp -p``, write-then-rename) within this
    #: much of the newest file read are kept by name across restarts; later ones by the census.
    #: 0 is IBM's strict rule: a file that sorts before one already read is passed over.
    late_window: Duration = Field(600.0, validation_alias=_alias("late_window", "lateWindow"))
    #: What a file that can only be passed over does: a WARNING and a count, or an error.
    on_late_file: Literal["warn", "fail"] = Field(
        "warn", validation_alias=_alias("on_late_file", "onLateFile")
    )
    #: What a file read before that is listed again with a new mtime does. ``continue``: the
    #: content decides (:mod:`operators.source.ledger`): a file whose first bytes are those read
    #: before, under its name or another (appended to, a cumulative export, a rotation)
    #: continues after them, anything else is read whole. ``new_version`` (its older name:
    #: ``reread``): every changed version read again whole (snapshot semantics). ``warn``: a
    #: WARNING and a count, not read again (another file id under the name is read as new);
    #: ``fail``: an error.
    on_modified: OnModified = Field(
        "continue", validation_alias=_alias("on_modified", "onModified")
    )
    #: ``continue``: how many files' content read is remembered. What falls out is counted
    #: and logged; a file listed again after that is read whole.
    remember_files: int = Field(
        100_000, gt=0, validation_alias=_alias("remember_files", "rememberFiles")
    )
    #: ``continue``: how long what was read of a file is remembered after it was last read
    #: (the default covers an hourly export for a week).
    remember_for: Duration = Field(
        7 * 86400.0, gt=0, validation_alias=_alias("remember_for", "rememberFor")
    )
    #: ``continue``: how a file listed again is compared with what was read of it. ``windows``:
    #: its first 4 KiB and the 4 KiB before where the read stopped (a rewrite that keeps both
    #: and changes only the bytes between passes as the same file; an append costs what was
    #: appended). ``exact``: every byte read before (a CRC-32 of them; each change of a file
    #: read before costs a read of what was read of it).
    content_check: Literal["windows", "exact"] = Field(
        "windows", validation_alias=_alias("content_check", "contentCheck")
    )
    #: ``continue``: a last line with no newline yet, in a file changed within this time, is
    #: held back (never split in two records) until its newline lands or the file stays
    #: unchanged this long (as this process's clock measures it), then emitted whole. An
    #: ``--available-now`` run waits for it. 0: emitted at once, as it is.
    hold_partial_line: Duration = Field(
        30.0, ge=0, validation_alias=_alias("hold_partial_line", "holdPartialLine")
    )
    #: Directories a control input may switch to (the directory or below). ``None``: any.
    roots: tuple[str, ...] | None = None
    #: What happens to a file once every record read from it is published by a completed cut
    #: (:mod:`operators.scan.housekeeping`): ``keep`` it, ``archive`` it into ``archive_dir``, or
    #: ``delete`` it.
    after_read: Literal["keep", "archive", "delete"] = Field(
        "keep", validation_alias=_alias("after_read", "afterRead")
    )
    #: Where ``archive`` moves files (``strftime`` tokens allowed: ``/archive/%Y-%m-%d``).
    archive_dir: str | None = Field(None, validation_alias=_alias("archive_dir", "archiveDir"))

    @field_validator("pattern")
    @classmethod
    def _pattern_compiles(cls, value: str | None) -> str | None:
        if value is not None:
            try:
                re.compile(value)
            except re.error as exc:
                msg = f"pattern {value!r} is not a valid regular expression: {exc}"
                raise ValueError(msg) from None
        return value

    @field_validator("on_modified", mode="before")
    @classmethod
    def _one_name_for_new_version(cls, value: object) -> object:
        # The engines know it as "reread", its older name.
        if value == "new_version":
            return "reread"
        if isinstance(value, str) and value not in _ON_MODIFIED:
            msg = f"on_modified {value!r} is not one of {', '.join(map(repr, _ON_MODIFIED))}"
            raise ValueError(msg)
        return value

    @field_validator("roots")
    @classmethod
    def _roots_not_empty(cls, value: tuple[str, ...] | None) -> tuple[str, ...] | None:
        if value is not None and (not value or any(not root for root in value)):
            raise ValueError(f"roots {list(value)!r} must be a non-empty list of directories")
        return value

    @model_validator(mode="after")
    def _archive(self) -> ScanSettings:
        if self.after_read == "archive" and not self.archive_dir:
            raise ValueError("after_read='archive' needs archive_dir (where the files go)")
        if self.after_read != "archive" and self.archive_dir is not None:
            msg = f"archive_dir={self.archive_dir!r} is used only with after_read='archive'"
            raise ValueError(msg)
        if (
            self.archive_dir is not None
            and self.directory is not None
            and posixpath.normpath(self.archive_dir) == posixpath.normpath(self.directory)
        ):
            msg = f"archive_dir={self.archive_dir!r} is the watched directory itself"
            raise ValueError(msg)
        return self

    @model_validator(mode="after")
    def _directory_within_roots(self) -> ScanSettings:
        roots, directory = self.roots, self.directory
        if directory is not None and roots is not None and not within_roots(directory, roots):
            msg = f"directory {directory!r} is outside the allowed roots {list(roots)!r}"
            raise ValueError(msg)
        return self


class HDFS2DirectoryScan(StartOperator):
    """Emits the full path of each new ready file of a directory, once, in (mtime_ns, name) order.

    Which files are new is :class:`operators.scan.cursor.ScanCursor`'s rule. State:
    ``{"directory": str | None, **cursor state}``, and ``"switch"``: the last request of the
    ``control`` file applied (:mod:`operators.scan.control`), once there was one.
    """

    #: A file whose mtime changed after it was emitted is found here and ``on_modified``
    #: applied (see :class:`operators.source.operator.FileFeed`).
    watches_changes = True

    def __init__(
        self,
        settings: ScanSettings,
        fs: FileSystem,
        *,
        name: str = "scan",
        clock: Callable[[], float] = time.time,
        control: ControlFile | None = None,
    ) -> None:
        self.name = name
        self._control = control
        self._switch = 0  # seq of the last control request applied (state)
        self._next_poll_at = 0.0
        self.settings = settings
        self._fs = fs
        self._clock = clock
        self._pattern = re.compile(settings.pattern) if settings.pattern is not None else None
        self._min_age_ns = round(settings.min_file_age * _NS)
        self._not_before = clock() + settings.init_delay
        self.files_scanned = 0
        self.files_emitted = 0
        self.listings = 0
        # Checkpointed state: the directory and the cursor.
        self._directory = settings.directory
        self._cursor = ScanCursor(
            window_ns=round(settings.late_window * _NS),
            on_late_file=settings.on_late_file,
            on_modified=settings.on_modified,
            name=name,
            display=fs.display,
            identify=identifier(fs, on_modified=settings.on_modified),
        )
        # after_read: files read to their end, not yet archived or deleted, each with the cut
        # taken after its last record (None: no cut yet).
        self._after_read = AfterRead(
            settings.after_read, fs, archive_dir=settings.archive_dir, name=name, clock=clock
        )
        self._read: list[tuple[int | None, ReadFile]] = []
        self._left: list[ReadFile] = []  # moved away, not yet told the reader (moved_away)
        # on_cut_published changed the state since the last checkpoint (changed_after_publish).
        self._moved = False
        # The new files of the last listing, in order (never state: the cursor decides).
        self._new: list[ListingEntry] = []
        self._pos = 0
        self._next_list_at = 0.0
        self._missing_warned = False

    # -- emitting ---------------------------------------------------------------------------

    def next_batch(self, max_records: int) -> Batch | None:
        """Up to ``max_records`` full paths; every batch ends with a punctuation so that an
        operator-driven region cuts after each batch (one file per batch with ``max_records=1``,
        as IBM cuts after each file). ``None`` when no new file is ready."""
        if max_records < 1:
            raise ValueError(f"{self.name}: max_records must be >= 1, got {max_records}")
        paths: list[str] = []
        new, key = self._new, self._cursor.key
        while len(paths) < max_records:
            pos = self._pos
            if pos < len(new) and (key is None or (new[pos][0], new[pos][1]) > key):
                # Files after the key, in order: accounted for in bulk (100 000s per listing).
                take = new[pos : pos + max_records - len(paths)]
                self._cursor.emit_many(take)
                paths += map(_path_of, take)
                self._pos += len(take)
                self.files_emitted += len(take)
                continue
            status = self.next_file()
            new, key = self._new, self._cursor.key
            if status is None:
                break
            paths.append(status.path)
        if not paths:
            return None
        return Batch(paths, punctuation=True)

    def next_file(self) -> FileStatus | None:
        """The next file to emit, or ``None`` when none is ready now. The file counts as emitted
        (the cursor accounts for it), so call this only where the next cut covers the result."""
        if self._clock() < self._not_before:
            return None
        self._poll_control()
        if self._directory is None:
            return None
        if self._pos >= len(self._new):
            # At most one listing per call: with sleep_time=0 the clock alone never stops it.
            if self._clock() < self._next_list_at:
                return None
            self._relist()
            if not self._new:
                return None
        entry = self._new[self._pos]
        self._pos += 1
        if self._cursor.is_late(entry):
            logger.info(
                "%s: emitting late file %s (its mtime is before the newest file emitted)",
                self.name,
                self._fs.display(entry[2]),
            )
        self._cursor.emit(entry)
        self.files_emitted += 1
        return FileStatus(entry[2], entry[3], entry[0], False, entry[5])

    def _relist(self) -> None:
        directory = self._directory
        assert directory is not None
        now = self._clock()
        self._next_list_at = now + self.settings.sleep_time
        self.listings += 1
        # Files left out that are still there (too young; after a restart, not matching the
        # pattern, which may have been narrowed since they were read): the cursor keeps what
        # it knows of them.
        unmatched: list[str] | None = [] if self._cursor.settling else None
        young: list[ListingEntry] = []
        try:
            listing = list_ready_keyed(
                self._fs,
                directory,
                pattern=self._pattern,
                min_file_age_ns=self._min_age_ns,
                now_ns=round(now * _NS),
                young=young,
                unmatched=unmatched,
                ordered=False,  # the cursor orders the new files
            )
        except FileNotFoundError:
            if self.settings.strict_mode:
                msg = f"{self.name}: directory {self._fs.display(directory)} does not exist"
                raise permanent(FileNotFoundError(msg)) from None
            if not self._missing_warned:
                logger.warning(
                    "%s: directory %s does not exist; treated as empty until it appears",
                    self.name,
                    self._fs.display(directory),
                )
                self._missing_warned = True
            listing = []
        else:
            self._missing_warned = False
        self.files_scanned += len(listing)
        self._new = self._cursor.new_files(
            listing,
            now_ns=round(now * _NS),
            young=list(map(_name_of, young)),
            unmatched=unmatched or (),
        )
        self._pos = 0

    # -- control input ----------------------------------------------------------------------

    def set_directory(self, path: str) -> None:
        """Watch ``path`` from now on (the control input). Call it under a permit, like a tuple:
        the change is state, covered by the next cut. A new directory starts from an empty key.

        Raises :class:`~operators.common.errors.BadRecordError` (a ``ValueError``), changing
        nothing,
        when ``path`` is not an acceptable path (control characters, look-alike slashes, not
        NFKC, too long: :func:`operators.common.safepath.path_problem`) or, with ``roots``, lies
        outside them: lexically after folding ``..`` (a relative path is outside absolute
        roots) and, on the local disk, also after resolving symbolic links.
        """
        problem = self._refusal(path)
        if problem is not None:
            raise BadRecordError(f"{self.name}: directory {path!r} {problem}", field="directory")
        if path == self._directory:
            # The same directory again lists it at once (as IBM's scan wakes up for it).
            logger.info("%s: listing %s again now (control input)", self.name, path)
            self._next_list_at = 0.0
            return
        logger.info("%s: now watching %s (was %s)", self.name, path, self._directory)
        self._directory = path
        self._cursor.reset(None)
        self._forget_listing()

    def _poll_control(self) -> None:
        """Apply a new request of the control file (under the caller's permit, like a tuple)."""
        control = self._control
        now = self._clock()
        if control is None or now < self._next_poll_at:
            return
        self._next_poll_at = now + control.poll
        request = control.read()
        if request is None or request.seq <= self._switch:
            return
        self._switch = request.seq  # a refused request is not tried again
        try:
            self.set_directory(request.directory)
        except BadRecordError as exc:
            logger.error("%s: switch request of %s refused: %s", self.name, control.path, exc)

    def _refusal(self, path: str) -> str | None:
        """Why the control input may not switch to ``path``, or ``None``."""
        problem = path_problem(path)
        if problem is not None:
            return problem
        return roots_problem(self._fs, path, self.settings.roots)

    @property
    def fs(self) -> FileSystem:
        """The filesystem the watched directory is on."""
        return self._fs

    @property
    def directory(self) -> str | None:
        return self._directory

    @property
    def key(self) -> ScanKey | None:
        """The greatest file emitted so far."""
        key = self._cursor.key
        return None if key is None else ScanKey(*key)

    @property
    def passed_over(self) -> int:
        """Files passed over since the scan started from scratch (state: survives restarts)."""
        return self._cursor.passed_over

    @property
    def modified(self) -> int:
        """Files that changed after they were read and were not read again (state)."""
        return self._cursor.modified

    def waiting(self) -> list[tuple[int, int]]:
        """``(mtime_ns, size)`` of each file the latest listing found and the scan has not
        emitted yet. Safe from another thread (a metrics scrape): the list is replaced, never
        changed in place, by a listing."""
        new, pos = self._new, self._pos
        return [(entry[0], entry[3]) for entry in new[pos:]]

    def metrics(self) -> dict[str, int]:
        return {
            "files_scanned": self.files_scanned,
            "files_emitted": self.files_emitted,
            "listings": self.listings,
            "late_names": self._cursor.window_size,
            "files_passed_over": self._cursor.passed_over_now,
            "files_modified": self._cursor.modified_now,
            "files_archived": self._after_read.files_archived,
            "files_deleted": self._after_read.files_deleted,
            "files_kept_changed": self._after_read.files_kept_changed,
        }

    # -- after_read ---------------------------------------------------------------------------

    def finished(self, read: ReadFile) -> None:
        """The source read ``read`` to its end (its records go out before the next cut):
        archived or deleted once a cut covering it is published (``after_read``)."""
        if self._after_read.active:
            self._read.append((None, read))

    def on_cut_published(self, cut_id: int) -> None:
        """Archive or delete the files the published cut covers (safe to repeat: a file gone
        is done). The rest stay in the state for a later cut."""
        # Oldest first: the files a cut covers are a prefix of the list.
        while self._read and self._read[0][0] is not None and self._read[0][0] <= cut_id:
            read = self._read[0][1]
            folder, name = posixpath.split(read.path)
            left = self._after_read.handle(read)
            if left:
                self._left.append(read)
            if left and self._directory is not None and _same_dir(folder, self._directory):
                # Gone from the directory: a file landing under its name later is new.
                self._cursor.forget([(name, read.mtime_ns)])
            self._moved = True
            stop_here("scan-after-read")  # crash tests: moved, not yet in a checkpoint
            self._read.pop(0)

    def moved_away(self) -> list[ReadFile]:
        """The files read to their end that left their path since the last call (archived,
        deleted, or gone already): the reader forgets their content (a file landing under the
        name later is new). After a reset, the restored state's files are handled again, and
        so listed again."""
        left, self._left = self._left, []
        return left

    def poll_interval(self) -> float:
        if self._pos < len(self._new):
            return 0.0
        due = max(self._next_list_at, self._not_before)
        if self._control is not None:
            due = min(due, max(self._next_poll_at, self._not_before))
        wait = due - self._clock()
        return wait if wait > 0 else 0.05

    # -- state ------------------------------------------------------------------------------

    def drain(self) -> None:
        """Nothing is buffered: every emitted path is already downstream."""

    def changed_after_publish(self) -> bool:
        """Files moved away since the last checkpoint: their names are forgotten."""
        return self._moved

    def on_cut_completed(self, cut_id: int) -> None:
        """The checkpoint of ``cut_id`` is durable: files deleted (moved aside) before it
        are deleted for good."""
        self._after_read.purge()

    def checkpoint(self, cut_id: int) -> dict[str, Any]:
        self._moved = False
        self._after_read.recorded()
        state = {"directory": self._directory, **self._cursor.state()}
        if self._switch:
            state["switch"] = self._switch
        self._read = [(cut_id if cut is None else cut, read) for cut, read in self._read]
        if self._read:
            # Files this cut (or an earlier one) covers that are not archived yet, each with
            # the cut taken after its last record.
            state["after_read"] = [{**read.to_dict(), "cut": cut} for cut, read in self._read]
        return state

    def reset(self, state: State) -> None:
        directory = state.get("directory")
        roots = self.settings.roots
        if directory is not None and roots is not None and not within_roots(directory, roots):
            msg = (
                f"{self.name}: checkpointed directory {directory!r} is outside the allowed "
                f"roots {list(roots)!r}"
            )
            raise ValueError(msg)
        self._directory = directory
        self._switch = int(state.get("switch", 0))
        # Covered by the cut restored: archived once their records are published.
        self._after_read.forget_moves()
        self._left = []
        self._read = [(int(r["cut"]), ReadFile.from_dict(r)) for r in state.get("after_read", ())]
        try:
            self._cursor.reset(state)
        except (KeyError, TypeError, ValueError) as exc:
            msg = f"{self.name}: checkpointed scan state is not understood ({exc})"
            raise OperatorError(msg) from None
        self._forget_listing()

    def reset_to_initial_state(self) -> None:
        self._directory = self.settings.directory
        self._switch = 0
        self._read = []
        self._left = []
        self._after_read.forget_moves()
        self._cursor.reset(None)
        self._forget_listing()

    def _forget_listing(self) -> None:
        # The next call lists again at once: a replay must not wait sleep_time. The control
        # file is read again too: a switch applied after the cut is applied again.
        self._new = []
        self._pos = 0
        self._next_list_at = 0.0
        self._next_poll_at = 0.0


def young_files(
    fs: FileSystem, settings: ScanSettings, directory: str | None, *, now: float | None = None
) -> list[str]:
    """Paths under ``directory`` that the scan skips only because they are younger than
    ``settings.min_file_age`` at ``now`` (wall-clock seconds), in scan order. A missing
    directory has none."""
    if directory is None or settings.min_file_age <= 0:
        return []
    young: list[ListingEntry] = []
    pattern = re.compile(settings.pattern) if settings.pattern is not None else None
    try:
        list_ready_keyed(
            fs,
            directory,
            pattern=pattern,
            min_file_age_ns=round(settings.min_file_age * _NS),
            now_ns=round((time.time() if now is None else now) * _NS),
            young=young,
        )
    except FileNotFoundError:
        return []
    young.sort(key=lambda entry: (entry[0], entry[1]))
    return [entry[2] for entry in young]
