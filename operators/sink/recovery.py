"""The sink's state and how a sink comes back to it after a failure or a crash.

State (a plain value, see :func:`state_value`): the next file number, the open file (final and
in-progress names, size, records, when it was opened, its number), in file-attribute mode the
other open files (``others``, least recently written first), and the pending files (closed and
synced, waiting for the completion of the cut covering them).

:class:`Recovery` needs no memory of the crashed process: the state names the open file, its
size and the pending files; every other side file of this sink belongs to work after the cut
and is deleted (:meth:`Recovery.delete_orphans`); the open file is brought back to its size at
the cut (:meth:`Recovery.restore`), by truncate or, where the filesystem has none, by copying
its prefix (only for in-progress files, which no reader sees).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from operators.common.errors import OperatorError
from operators.sink.bulk import Early
from operators.sink.formats import TableEncoder
from operators.sink.layout import MARKER, REWRITE, SinkLayout, final_of, side_name
from operators.sink.records import RecordEncoder
from operators.sink.settings import SinkSettings
from region.atomic import cut_to
from region.errors import permanent
from region.fs import FileSystem, FileWriter, LeaseRecoverer
from region.state import State

__all__ = [
    "STATE_VERSION",
    "ClosedFile",
    "OpenFile",
    "Recovery",
    "Restored",
    "empty_state",
    "parse_state",
    "state_value",
]

logger = logging.getLogger(__name__)

#: 2: the state names other open files (``others``); 3: an open file has a form (a format
#: with columns, :mod:`operators.sink.formats`). Each is written only when needed, so a release
#: that knows an older version only refuses the state rather than misreading its files.
STATE_VERSION = 3
_VERSIONS = (1, 2, 3)


@dataclass(frozen=True, slots=True)
class ClosedFile:
    """A closed, synced file waiting to be published."""

    final: str
    work: str
    size: int
    #: Records in it, for progress only (not checkpointed: 0 for a file a recovery brought back).
    tuples: int = 0
    #: When it was opened (the sink clock's seconds; not checkpointed: 0 after a recovery), for
    #: the age of the oldest record not published yet.
    opened_at: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return {"final": self.final, "work": self.work, "size": self.size}


@dataclass(slots=True)
class OpenFile:
    """The file being written."""

    final: str
    work: str
    size: int
    tuples: int
    opened_at: float
    filenum: int
    #: The name the records asked for, when the file got another one (a returning name in
    #: file-attribute mode writes ``orders-1.csv`` for ``orders.csv``): records naming it
    #: again go on in this file.
    asked: str | None = None
    writer: FileWriter | None = None
    dirty: bool = False  # written since the last sync
    touched: bool = False  # written since the last checkpoint
    #: When it was last written (the clock's seconds; not state: a restored file counts
    #: from its restore), for ``close_idle_after``.
    written_at: float = 0.0
    #: The last cut taken before its first record (-1: none, or not known after a reset).
    open_after: int = -1
    #: Its format, compression and header (``""``: lines or blocks), see
    #: :class:`~operators.sink.formats.TableEncoder`.
    form: str = ""
    #: Its Parquet or ORC file, encoded while it is written (not state: a restored file is
    #: converted from its staged file when it rolls).
    early: Early | None = None

    @property
    def name(self) -> str:
        """The name records use for this file."""
        return self.asked if self.asked is not None else self.final

    def to_dict(self) -> dict[str, Any]:
        state: dict[str, Any] = {
            "final": self.final,
            "work": self.work,
            "size": self.size,
            "tuples": self.tuples,
            "opened_at": self.opened_at,
            "filenum": self.filenum,
        }
        if self.asked is not None:
            state["asked"] = self.asked
        if self.form:
            state["form"] = self.form
        return state


@dataclass(slots=True)
class Restored:
    current: OpenFile | None
    pending: list[ClosedFile]
    next_filenum: int
    #: The cut the state was taken at (``None``: a state from before it was recorded).
    cut: int | None = None
    #: The other open files (file-attribute mode), least recently written first.
    others: list[OpenFile] = field(default_factory=list)


def state_value(
    next_filenum: int,
    current: OpenFile | None,
    pending: Iterable[ClosedFile],
    cut: int | None = None,
    others: Iterable[OpenFile] = (),
) -> dict[str, Any]:
    """The state of a sink, as checkpointed at ``cut`` (kept only with pending files: the
    cut whose completion publishes them names their manifest)."""
    files = [c.to_dict() for c in pending]
    idle = [f.to_dict() for f in others]
    opened = [*([current] if current is not None else []), *others]
    version = 3 if any(f.form for f in opened) else 2 if idle else 1
    state: dict[str, Any] = {
        "version": version,
        "next_filenum": next_filenum,
        "current": current.to_dict() if current is not None else None,
        "pending": files,
    }
    if idle:
        state["others"] = idle
    if files and cut is not None:
        state["cut"] = cut
    return state


def empty_state() -> dict[str, Any]:
    """The state of a sink before any cut: no file open, none pending, numbering from 0."""
    return state_value(0, None, ())


def parse_state(sink: str, state: State) -> Restored:
    """The files a checkpointed state names; OperatorError naming the sink if it is damaged or
    of a version this release does not read (a newer release wrote it: a downgrade). Both are
    permanent: every reset reads the same checkpoint."""
    version = state.get("version")
    if version not in _VERSIONS or isinstance(version, bool):
        known = ", ".join(map(str, _VERSIONS))
        msg = (
            f"sink {sink!r}: checkpointed state version {version!r} is not one this release "
            f"reads ({known}): a later release wrote it; run that release or a later one "
            "(docs/upgrading.md)"
        )
        raise permanent(OperatorError(msg))
    try:
        cur = state["current"]
        current = _open_file(cur) if cur is not None else None
        pending = [
            ClosedFile(str(p["final"]), str(p["work"]), int(p["size"])) for p in state["pending"]
        ]
        cut = state.get("cut")
        others = [_open_file(f) for f in state.get("others", [])]
        return Restored(
            current,
            pending,
            int(state["next_filenum"]),
            int(cut) if cut is not None else None,
            others,
        )
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        msg = f"sink {sink!r}: checkpointed state is not understood ({exc!r}): {state!r}"
        raise permanent(OperatorError(msg)) from None


def _open_file(value: Any) -> OpenFile:
    return OpenFile(
        str(value["final"]),
        str(value["work"]),
        int(value["size"]),
        int(value["tuples"]),
        float(value["opened_at"]),
        int(value["filenum"]),
        str(value["asked"]) if value.get("asked") is not None else None,
        form=str(value.get("form", "")),
    )


class Recovery:
    """The files of one sink brought back to a checkpointed state (see the module doc)."""

    def __init__(
        self,
        name: str,
        settings: SinkSettings,
        fs: FileSystem,
        layout: SinkLayout,
        encoder: RecordEncoder | TableEncoder,
    ) -> None:
        self._name = name
        self._settings = settings
        self._fs = fs
        self._layout = layout
        self._encoder = encoder

    def delete_orphans(self, keep: set[str], works: set[str], extra_dirs: set[str]) -> None:
        """Delete marked visible files of this sink whose final name is not in ``keep``, and
        its side files that are not the work file of a file of the state (``works``): an
        in-progress or staged file of work after the cut, or the Parquet file of a conversion
        the crash cut short, or a staged file already converted."""
        for suffix, final, side in self._layout.side_files(extra_dirs):
            if suffix == MARKER:
                # 1. The file first: the marker is what lets a retry find it.
                if final not in keep and self._fs.delete(final):
                    logger.info("sink %s: deleted %s (after the cut)", self._name, final)
                self._fs.delete(side)
            elif side not in works:
                self._fs.delete(side)
                logger.info("sink %s: deleted %s (after the cut)", self._name, side)

    def restore(self, cur: OpenFile) -> OpenFile | None:
        """Bring the open file of the cut back; the file to go on with, or None when it was
        published since the cut and delivery is at_least_once (a new file takes the replayed
        records)."""
        if self.published_since_the_cut(cur):
            return None
        path = cur.work
        if isinstance(self._fs, LeaseRecoverer) and self._fs.exists(path):
            # A crashed writer's HDFS lease keeps the file open, its length not yet settled:
            # close it first (IBM's sink waited for the lease to expire, or failed).
            self._fs.recover_lease(path)
        if self._settings.delivery == "exactly_once" or cur.size == 0:
            self._cut_back(cur)
        else:
            self._drop_torn_record(cur)
        return cur

    def _missing(self, cur: OpenFile) -> FileNotFoundError:
        msg = (
            f"sink {self._name!r}: {self._fs.display(cur.work)}, open at the checkpoint "
            f"with {cur.size} bytes, is missing: the records the checkpoint covers went with "
            f"it. {self._way_forward()}"
        )
        # No retry brings it back: stop at once.
        return permanent(FileNotFoundError(msg))

    def _way_forward(self) -> str:
        sink_dir = self._fs.display(self._layout.sink_dir)
        return (
            "Put the file back as it was to go on where the checkpoint is, or start the job "
            f"over: remove its checkpoint directory and {sink_dir}, and every input file is "
            "read again"
        )

    def _cut_back(self, cur: OpenFile) -> None:
        """exactly_once: the file holds exactly the bytes the cut covers."""
        path = cur.work
        try:
            actual = self._fs.status(path).size
        except FileNotFoundError:
            if cur.size:
                raise self._missing(cur) from None
            self._fs.create(path, overwrite=False, permission=self._settings.permission).close()
            return
        if actual < cur.size:
            msg = (
                f"sink {self._name!r}: {self._fs.display(path)} has {actual} bytes, fewer than "
                f"the {cur.size} its checkpoint covers (cut short outside the sink). "
                f"{self._way_forward()}"
            )
            raise permanent(OperatorError(msg))
        if actual > cur.size and self._settings.delivery == "exactly_once":
            if self._fs.supports_truncate:
                self._fs.truncate(path, cur.size)
            else:
                self.rewrite_prefix(path, cur.size)
            logger.info(
                "sink %s: cut %s back from %s to %s bytes", self._name, path, actual, cur.size
            )

    def _drop_torn_record(self, cur: OpenFile) -> None:
        """at_least_once: the IBM behaviour, append after whatever the file holds, except a
        record torn by the crash: it would glue to the replayed one and be lost as a record."""
        path = cur.work
        try:
            actual = self._fs.status(path).size
        except FileNotFoundError:
            raise self._missing(cur) from None
        if actual <= cur.size:
            return
        tail = self._fs.read(path, cur.size, actual - cur.size)
        keep = cur.size + self._encoder.whole_records(tail)
        # What the file holds from here on is what the state says: the next checkpoint records
        # the true size (a later exactly_once reset truncates to it: never into a record).
        kept, cur.size = cur.size, keep
        if keep == actual:
            return
        if self._fs.supports_truncate:
            self._fs.truncate(path, keep)
        elif self._settings.publish == "atomic":
            self.rewrite_prefix(path, keep)
        else:
            cur.size = actual
            logger.warning(
                "sink %s: %s ends with %d bytes of a record torn by a crash; this filesystem "
                "cannot truncate, so they stay",
                self._name,
                self._fs.display(path),
                actual - keep,
            )
            return
        logger.info(
            "sink %s: dropped a torn record: %s cut to %s bytes (%s at the cut)",
            self._name,
            path,
            keep,
            kept,
        )

    def published_since_the_cut(self, cur: OpenFile) -> bool:
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
        if self._settings.delivery == "exactly_once":
            msg = (
                f"sink {self._name!r}: {work}, open at the checkpoint with {cur.size} bytes, is "
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
            self._name,
            work,
            cur.size,
            final,
        )
        return True

    def rewrite_prefix(self, path: str, size: int) -> None:
        """Truncate without truncate (:func:`region.atomic.cut_to` through a side file). Only
        for in-progress files (atomic publish): a reader never sees them."""
        tmp = side_name(final_of(path, self._name), self._name, REWRITE)
        cut_to(self._fs, path, size, temp=tmp, permission=self._settings.permission)
