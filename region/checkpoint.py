"""The region checkpoint store: one self-checking JSON file per completed cut.

Layout of a checkpoint directory::

    cut-000000000041.json          completed cuts; the id in the name orders them
    cut-000000000042.json
    cut-000000000042.done          empty: the cut's completion (on_cut_completed) ran to the end
    .cut-000000000043-<uuid>.tmp   a cut being written (or left behind by a crash)

A file becomes visible under its final name only once it is complete and durable (unique temporary
name, sync, rename without overwrite), so a reader never sees half a cut. Each file carries a format
version, the pipeline identity and a sha256 of its canonical JSON body, so damage is detected and
the reader falls back to the next older cut, saying why.
"""

from __future__ import annotations

import builtins
import dataclasses
import hashlib
import json
import logging
import re
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

from region.atomic import dir_permission, read_whole, write_atomically
from region.errors import CheckpointError
from region.fs import FileStatus, FileSystem
from region.state import State

__all__ = [
    "FORMAT_VERSION",
    "Checkpoint",
    "CheckpointInfo",
    "CheckpointStore",
    "cut_file_name",
    "get_or_create",
]

logger = logging.getLogger(__name__)

T = TypeVar("T")

#: Version of the file layout; a reader refuses versions it does not know.
FORMAT_VERSION = 1

_CUT_NAME = re.compile(r"^cut-(\d{12,})\.json$")
_TMP_NAME = re.compile(r"^\.cut-(\d{12,})-[0-9a-f]{32}\.tmp$")
_DONE_NAME = re.compile(r"^cut-(\d{12,})\.done$")
# Every file this module writes starts with these bytes; a damaged file that still does is
# reported as truncated rather than as foreign garbage.
_PREFIX = b'{"format":'
# A listing can race with a writer's rename and retention: retry a scan that lost files.
_SCAN_ATTEMPTS = 10


def cut_file_name(cut_id: int) -> str:
    """The file name of a completed cut (zero-padded so names sort like ids)."""
    return f"cut-{cut_id:012d}.json"


def _canonical(value: Any) -> bytes:
    return json.dumps(
        value, sort_keys=True, separators=(",", ":"), ensure_ascii=True, allow_nan=False
    ).encode("ascii")


@dataclass(frozen=True, slots=True)
class Checkpoint:
    """One completed cut, as read back from its file."""

    cut_id: int
    #: Seconds since the epoch when the cut was written.
    created: float
    pipeline_id: str | None
    #: Operator name -> the state its ``checkpoint()`` returned.
    operators: dict[str, dict[str, Any]]
    meta: dict[str, Any] = field(default_factory=dict)
    path: str = ""
    #: Whether the cut's completion ran to the end (:meth:`CheckpointStore.mark_completed`):
    #: what it made visible need not be announced again. ``False`` when unknown.
    completed: bool = False


@dataclass(frozen=True, slots=True)
class CheckpointInfo:
    """One cut file as listed (for ``inspect``) or as just written."""

    cut_id: int
    created: float | None
    size: int
    path: str
    valid: bool
    #: Why the file is not usable (empty when ``valid``).
    reason: str = ""
    pipeline_id: str | None = None


class _Invalid(Exception):
    """A cut file that cannot be used; the message is the reason."""


class CheckpointStore:
    """Writes and reads region checkpoints in ``directory`` through a :class:`FileSystem`.

    ``retain`` newest cut files are kept. ``pipeline_id`` is stored in every cut and checked on
    read: a cut of another pipeline is an error, never silently skipped (``None`` stores no
    identity and accepts any). ``permission`` is the mode of new files (``None``: the backend's
    default). ``start_fresh`` makes :meth:`latest` return ``None`` instead of raising when cut
    files exist but none is valid. ``guard`` is called just before a cut is published; raising
    there abandons the write (pass :meth:`region.lock.CheckpointLock.check` so a process that
    lost the directory lock stops publishing cuts).
    """

    def __init__(
        self,
        fs: FileSystem,
        directory: str,
        *,
        retain: int = 10,
        pipeline_id: str | None = None,
        permission: int | None = 0o640,
        start_fresh: bool = False,
        guard: Callable[[], None] | None = None,
    ) -> None:
        if isinstance(retain, bool) or not isinstance(retain, int) or retain < 1:
            raise ValueError(f"retain must be an integer >= 1, got {retain!r}")
        self.fs = fs
        self.directory = directory.rstrip("/") or "/"
        self.retain = retain
        self.pipeline_id = pipeline_id
        self.permission = permission
        self.start_fresh = start_fresh
        self.guard = guard
        self._last_cut_id = 0
        #: Bytes of the newest checkpoint this store wrote (``None`` before the first).
        self.last_size: int | None = None
        #: Completion markers seen by the last listing: cut id -> path.
        self._done: dict[int, str] = {}

    # ------------------------------------------------------------------ paths and listing

    def _path(self, name: str) -> str:
        return (
            self.directory + name if self.directory.endswith("/") else self.directory + "/" + name
        )

    @property
    def display(self) -> str:
        return self.fs.display(self.directory)

    def _scan(
        self,
    ) -> tuple[builtins.list[tuple[int, FileStatus]], builtins.list[tuple[int, FileStatus]]]:
        """Cut files and temporary files as ``(cut_id, status)``, oldest first; the ids with a
        completion marker go to ``self._done``."""
        self._done = {}
        try:
            entries = self.fs.list_dir(self.directory)
        except FileNotFoundError:
            return [], []
        cuts: builtins.list[tuple[int, FileStatus]] = []
        temps: builtins.list[tuple[int, FileStatus]] = []
        for status in entries:
            if status.is_dir:
                continue
            if match := _CUT_NAME.match(status.name):
                cuts.append((int(match.group(1)), status))
            elif match := _TMP_NAME.match(status.name):
                temps.append((int(match.group(1)), status))
            elif match := _DONE_NAME.match(status.name):
                self._done[int(match.group(1))] = status.path
        cuts.sort(key=lambda item: item[0])
        temps.sort(key=lambda item: item[0])
        return cuts, temps

    def next_cut_id(self) -> int:
        """The id for the next cut: above every cut file, temporary file and cut written by this
        store, so an id is never reused, not even one whose file is corrupt or unfinished."""
        cuts, temps = self._scan()
        newest = max([self._last_cut_id, *(i for i, _ in cuts), *(i for i, _ in temps)])
        return newest + 1

    # ------------------------------------------------------------------ writing

    def write(
        self, cut_id: int, operators: Mapping[str, State], *, meta: Mapping[str, Any] | None = None
    ) -> CheckpointInfo:
        """Durably record cut ``cut_id`` with every operator's state; return what was written.

        When this returns, the cut survives a crash of this process and of the machine. Raises
        :class:`CheckpointError` when ``cut_id`` is not newer than every cut already in the
        directory or a state is not JSON; filesystem errors propagate as built-in ``OSError``.
        """
        if isinstance(cut_id, bool) or not isinstance(cut_id, int) or cut_id < 0:
            raise CheckpointError(f"cut id must be an integer >= 0, got {cut_id!r}")

        # 1. Build and checksum the document before touching the filesystem.
        created = time.time()
        body: dict[str, Any] = {
            "format": FORMAT_VERSION,
            "pipeline_id": self.pipeline_id,
            "cut_id": cut_id,
            "created": created,
            "meta": dict(meta or {}),
            "operators": {},
        }
        for name, state in operators.items():
            if not isinstance(name, str):
                raise CheckpointError(f"cut {cut_id}: operator name {name!r} is not a string")
            try:
                _canonical(state)
            except (TypeError, ValueError) as exc:
                raise CheckpointError(
                    f"cut {cut_id}: state of operator {name!r} is not plain JSON: {exc}"
                ) from None
            body["operators"][name] = dict(state)
        try:
            digest = hashlib.sha256(_canonical(body)).hexdigest()
        except (TypeError, ValueError) as exc:
            raise CheckpointError(f"cut {cut_id}: meta is not plain JSON: {exc}") from None
        # "format" first (see _PREFIX), the checksum before the bulky payload for readability.
        document = {"format": FORMAT_VERSION, "sha256": digest}
        document.update((k, v) for k, v in body.items() if k != "format")
        data = json.dumps(document, separators=(",", ":"), ensure_ascii=True).encode("ascii")
        data += b"\n"

        # 2. Refuse an id that would not sort last: it would be read as older than existing cuts
        #    (or be deleted by retention at once).
        cuts, temps = self._scan()
        if cuts and cuts[-1][0] >= cut_id:
            raise CheckpointError(
                f"cut {cut_id} is not newer than {self.fs.display(cuts[-1][1].path)} "
                f"already in checkpoint directory {self.display}"
            )
        if not cuts and not temps and not self.fs.exists(self.directory):
            self.fs.mkdirs(self.directory, permission=dir_permission(self.permission))

        # 3. Write under a unique hidden name, make it durable, and 4. publish it by a rename
        #    without overwrite, so a cut file is never replaced.
        final = self._path(cut_file_name(cut_id))
        try:
            write_atomically(
                self.fs,
                final,
                data,
                temp=self._path(f".cut-{cut_id:012d}-{uuid.uuid4().hex}.tmp"),
                permission=self.permission,
                before_rename=self.guard,
                close_later=True,
            )
        except FileExistsError:
            raise CheckpointError(
                f"cut {cut_id}: {self.fs.display(final)} already exists "
                "(is another process writing to this checkpoint directory?)"
            ) from None
        self._last_cut_id = max(self._last_cut_id, cut_id)
        self.last_size = len(data)
        # DEBUG: the controller's line says the cut completed (at INFO when it is news).
        logger.debug(
            "Wrote checkpoint of cut %d to %s (%d bytes)", cut_id, self.fs.display(final), len(data)
        )

        # 5. Retention: keep the newest `retain` cut files; drop temporary files of cuts up to
        #    this one (left behind by crashes before their rename).
        ids = [i for i, _ in cuts] + [cut_id]
        paths = [s.path for _, s in cuts] + [final]
        for old_id, old_path in builtins.list(zip(ids, paths, strict=True))[: -self.retain]:
            if self._delete_quietly(old_path):
                logger.debug("Retired checkpoint of cut %d (%s)", old_id, old_path)
        for tmp_id, status in temps:
            if tmp_id <= cut_id and self._delete_quietly(status.path):
                logger.info("Removed unfinished checkpoint %s", self.fs.display(status.path))
        kept = set(ids[-self.retain :])
        for done_id, done_path in self._done.items():
            if done_id not in kept:
                self._delete_quietly(done_path)
        return CheckpointInfo(cut_id, created, len(data), final, True, "", self.pipeline_id)

    def mark_completed(self, cut_id: int) -> None:
        """Record that the completion of cut ``cut_id`` (every ``on_cut_completed``) ran to the
        end: an empty ``cut-<id>.done``. Not synced and never raised: a marker lost in a crash
        only means the completion's announcements are made again (at least once)."""
        path = self._path(cut_file_name(cut_id).removesuffix(".json") + ".done")
        try:
            self.fs.create(path, overwrite=True, permission=self.permission).close()
        except Exception:
            logger.warning(
                "Cannot record the completion of cut %d at %s", cut_id, path, exc_info=True
            )

    def _delete_quietly(self, path: str) -> bool:
        """Delete; a failure is logged, not raised (the cut itself is already durable)."""
        try:
            return self.fs.delete(path)
        except OSError as exc:
            logger.warning("Could not delete %s: %s", self.fs.display(path), exc)
            return False

    # ------------------------------------------------------------------ reading

    def _decode(self, data: bytes, name_id: int, path: str) -> Checkpoint:
        """The checkpoint in ``data`` or :class:`_Invalid` saying what is wrong with it."""
        if not data:
            raise _Invalid("zero-length file (the write never finished)")
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise _Invalid(f"garbage: not UTF-8 text (bad byte at offset {exc.start})") from None
        try:
            doc = json.loads(text)
        except json.JSONDecodeError as exc:
            if data.startswith(_PREFIX) and not data.rstrip().endswith(b"}"):
                raise _Invalid(f"truncated: the document stops after {len(data)} bytes") from None
            raise _Invalid(f"garbage: not JSON at offset {exc.pos} ({exc.msg})") from None
        if not isinstance(doc, dict):
            raise _Invalid(f"garbage: a JSON {type(doc).__name__}, not a checkpoint document")
        version = doc.get("format")
        if version != FORMAT_VERSION or isinstance(version, bool):
            if version is None:
                raise _Invalid("garbage: no format version")
            raise _Invalid(
                f"unknown format version {version!r} (this program reads {FORMAT_VERSION})"
            )
        stored = doc.pop("sha256", None)
        if not isinstance(stored, str):
            raise _Invalid("no checksum (field 'sha256')")
        actual = hashlib.sha256(_canonical(doc)).hexdigest()
        if stored != actual:
            raise _Invalid(
                f"wrong checksum: the file says {stored[:16]}..., the content hashes to "
                f"{actual[:16]}..."
            )
        cut_id, created, pipeline_id = doc.get("cut_id"), doc.get("created"), doc.get("pipeline_id")
        operators, meta = doc.get("operators"), doc.get("meta", {})
        if isinstance(cut_id, bool) or not isinstance(cut_id, int):
            raise _Invalid(f"field 'cut_id' is {cut_id!r}, expected an integer")
        if cut_id != name_id:
            raise _Invalid(f"holds cut {cut_id} but is named for cut {name_id}")
        if isinstance(created, bool) or not isinstance(created, int | float):
            raise _Invalid(f"field 'created' is {created!r}, expected seconds since the epoch")
        if pipeline_id is not None and not isinstance(pipeline_id, str):
            raise _Invalid(f"field 'pipeline_id' is {pipeline_id!r}, expected a string or null")
        if not isinstance(operators, dict) or not all(
            isinstance(v, dict) for v in operators.values()
        ):
            raise _Invalid("field 'operators' is not an object of operator states")
        if not isinstance(meta, dict):
            raise _Invalid(f"field 'meta' is {meta!r}, expected an object")
        return Checkpoint(cut_id, float(created), pipeline_id, operators, meta, path)

    def _foreign(self, checkpoint: Checkpoint) -> str | None:
        """Why ``checkpoint`` belongs to another pipeline, or ``None`` when it is ours."""
        if self.pipeline_id is None or checkpoint.pipeline_id == self.pipeline_id:
            return None
        writer = (
            "without a pipeline identity"
            if checkpoint.pipeline_id is None
            else f"by pipeline {checkpoint.pipeline_id!r}"
        )
        return f"written {writer}, but this is pipeline {self.pipeline_id!r}"

    def latest(self) -> Checkpoint | None:
        """The newest valid cut, or ``None`` when the directory holds no cut file (or is missing).

        Files are tried newest first; each one skipped is logged at WARNING with the reason.
        Raises :class:`CheckpointError` naming the directory and every file's reason when cut
        files exist but none is valid (unless ``start_fresh``), when a file cannot be read for a
        reason other than its content (the error is not a verdict on the cut, so falling back to
        an older cut would silently roll back), and when a cut of another pipeline is found.
        """
        rejected: builtins.list[tuple[str, str]] = []
        for _attempt in range(_SCAN_ATTEMPTS):
            cuts, temps = self._scan()
            if cuts or temps:
                newest = max(i for i, _ in cuts + temps)
                self._last_cut_id = max(self._last_cut_id, newest)
            if not cuts:
                # A directory listed while a writer renames a cut in and retires an older one
                # may show neither (readdir promises nothing for entries changed during it):
                # list again when a cut was seen before or one is being written.
                raced = self._last_cut_id > 0 or bool(temps) or _attempt == 0
                if raced and _attempt < _SCAN_ATTEMPTS - 1:
                    continue
                if not rejected:
                    return None
                break
            rejected = []
            vanished = False
            for cut_id, status in reversed(cuts):
                shown = self.fs.display(status.path)
                try:
                    data = read_whole(self.fs, status.path)
                except FileNotFoundError:
                    # Retired by the writer between our listing and the read.
                    vanished = True
                    rejected.append((status.name, "deleted while being read"))
                    continue
                except OSError as exc:
                    raise CheckpointError(
                        f"cannot read checkpoint {shown} in {self.display}: {exc}"
                    ) from exc
                try:
                    checkpoint = self._decode(data, cut_id, status.path)
                except _Invalid as exc:
                    logger.warning("Skipping checkpoint %s: %s", shown, exc)
                    rejected.append((status.name, str(exc)))
                    continue
                foreign = self._foreign(checkpoint)
                if foreign is not None:
                    raise CheckpointError(
                        f"checkpoint {shown} was {foreign}: two jobs must not share checkpoint "
                        f"directory {self.display}; give this job its own directory"
                    )
                if cut_id in self._done:
                    checkpoint = dataclasses.replace(checkpoint, completed=True)
                if rejected:
                    logger.warning(
                        "Recovering from cut %d (%s): %d newer checkpoint file(s) unusable",
                        cut_id,
                        shown,
                        len(rejected),
                    )
                else:
                    logger.info("Recovering from cut %d (%s)", cut_id, shown)
                return checkpoint
            if not vanished:
                break
        reasons = "; ".join(f"{name}: {reason}" for name, reason in rejected)
        message = f"no valid checkpoint in {self.display}: {reasons}"
        if self.start_fresh:
            logger.warning("%s; starting fresh as asked", message)
            return None
        raise CheckpointError(
            message + ". Repair or remove these files, or start fresh to ignore them"
        )

    def list(self) -> builtins.list[CheckpointInfo]:
        """Every cut file, oldest first, each checked (reads every file: for ``inspect``)."""
        infos: builtins.list[CheckpointInfo] = []
        cuts, _ = self._scan()
        for cut_id, status in cuts:
            try:
                checkpoint = self._decode(read_whole(self.fs, status.path), cut_id, status.path)
            except _Invalid as exc:
                infos.append(
                    CheckpointInfo(cut_id, None, status.size, status.path, False, str(exc))
                )
                continue
            except FileNotFoundError:
                continue
            except OSError as exc:
                reason = f"cannot be read: {exc}"
                infos.append(CheckpointInfo(cut_id, None, status.size, status.path, False, reason))
                continue
            foreign = self._foreign(checkpoint)
            infos.append(
                CheckpointInfo(
                    cut_id,
                    checkpoint.created,
                    status.size,
                    status.path,
                    foreign is None,
                    foreign or "",
                    checkpoint.pipeline_id,
                )
            )
        return infos


def get_or_create(
    fs: FileSystem,
    directory: str,
    factory: Callable[[Checkpoint | None], T],
    *,
    retain: int = 10,
    pipeline_id: str | None = None,
    start_fresh: bool = False,
    permission: int | None = 0o640,
    guard: Callable[[], None] | None = None,
) -> T:
    """``factory(newest valid checkpoint)``, or ``factory(None)`` when there is none to recover
    (Spark's ``StreamingContext.getOrCreate``). Errors as :meth:`CheckpointStore.latest`."""
    store = CheckpointStore(
        fs,
        directory,
        retain=retain,
        pipeline_id=pipeline_id,
        permission=permission,
        start_fresh=start_fresh,
        guard=guard,
    )
    return factory(store.latest())
