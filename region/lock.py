"""One process per checkpoint directory: a lock with a heartbeat, through the FileSystem protocol.

The lock is a sequence of generation files in the checkpoint directory::

    .lock-000000000007.json   the newest generation says who holds the lock (or that it is free)
    .lock-<token>.lease       kept open for writing by the holder while it lives

Only the newest generation counts. Every change (acquire, heartbeat, release) writes the next
generation to a unique temporary file and renames it onto ``.lock-<gen+1>.json`` without
overwrite: of several processes racing for the same generation exactly one rename succeeds, and a
file under a generation name is always complete. The winner then lists the directory to confirm
its generation is the newest (a stale taker can land on a number freed by cleanup) and deletes
older generations; the newest is never deleted, so numbers only grow.

The release's record (``released``) does not depend on when it is published, so it is written and
synced ahead, just after the lock is taken, under a temporary name of its own: releasing is the
rename of that file onto the next generation (same race, same confirmation), and a stopping
process has no close to wait for (on HDFS a close waits for a DataNode's report, 500 ms on a
small cluster). A process that dies holding the lock leaves that file behind as it would leave a
half-written temporary file; a taker deletes both once older than a ttl. Its heartbeat time is
the take's, which no rule reads (a released generation is free whatever its age).

A holder that stops heartbeating for ``ttl`` seconds (its own ``ttl``, recorded in the file) has
expired and may be taken over. Two stronger signals refine that:

* on local disk, the holder keeps its lease file open for writing (an ``flock`` the kernel drops
  when the process dies): while it cannot be opened for append (``BlockingIOError``) the holder is
  alive, even if its heartbeat is late (a stall), and is never taken over. Not used on remote
  filesystems by default: an idle upload held open for hours is not something to rely on, and an
  HDFS lease outlives a crashed client;
* the holder ran on this host in this PID namespace and its PID is gone (and its lease is free):
  it crashed, so it is taken over at once instead of after ``ttl``.

Heartbeat times are wall-clock times of the writing host: hosts sharing a directory need clocks
synchronised well within ``ttl``.

A holder without a lease file must itself stop writing before its lock can be taken over: any
heartbeat failure (whatever the exception) is retried every ``ttl / 10`` seconds at most, and
once the last renewal is more than half the ``ttl`` old, :meth:`CheckpointLock.check` raises
:class:`~region.errors.LockUnsafeError` (and ``on_unsafe`` is called, once per such spell): the
holder writes nothing until a heartbeat gets through again. A heartbeat that finds another
process's generation makes the lock lost for good (:class:`~region.errors.LockLostError`,
``on_lost``). The other half of the ttl covers a commit already past its check and clock
differences between hosts. A filesystem that stops answering for a while (a DataNode lost, a
NameNode failing over) so pauses the holder instead of ending it; one that another process
took over in the meantime ends it.
"""

from __future__ import annotations

import json
import logging
import os
import re
import socket
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from types import TracebackType

from region.atomic import dir_permission, read_whole, write_atomically, write_hidden
from region.errors import LockedError, LockLostError, LockUnsafeError
from region.fs import FileStatus, FileSystem, FileWriter

__all__ = ["CheckpointLock", "LockHolder"]

logger = logging.getLogger(__name__)

_GEN_NAME = re.compile(r"^\.lock-(\d{12,})\.json$")
_TMP_NAME = re.compile(r"^\.lock-[0-9a-f]{32}\.tmp$")
# Each failed round means another process changed the lock meanwhile; give up after this many.
_ACQUIRE_ROUNDS = 8
#: Without a lease, the lock is unsafe once its last renewal is older than this part of the ttl.
_SAFE_PART = 0.5
#: A failed heartbeat is retried after at most this part of the ttl.
_RETRY_PART = 0.1


def _pid_namespace() -> str | None:
    try:
        return os.readlink("/proc/self/ns/pid")
    except OSError:
        return None


def _pid_alive(pid: int) -> bool:
    if pid <= 0:
        return True  # unknown: assume alive (the safe side)
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True  # exists but belongs to someone else
    return not _zombie(pid)


def _zombie(pid: int) -> bool:
    """A process that ended and whose parent has not reaped it yet: dead, though
    ``kill(pid, 0)`` still finds it (common in containers whose first process reaps no
    orphans). Its first thread shows as a zombie while others still run: not dead yet."""
    try:
        with open(f"/proc/{pid}/status", "rb") as status:
            lines = status.read().splitlines()
        fields = dict(line.split(b":", 1) for line in lines if b":" in line)
    except OSError:
        return False  # no /proc: kill(pid, 0) is all we know
    state, threads = fields.get(b"State", b"").split(), fields.get(b"Threads", b"").strip()
    return state[:1] == [b"Z"] and threads in (b"0", b"1")


def _format_time(seconds: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(seconds))


@dataclass(frozen=True, slots=True)
class LockHolder:
    """What one generation file says."""

    owner: str
    host: str
    pid: int
    pid_namespace: str | None
    #: Wall-clock seconds when the holder acquired the lock and when it last proved alive.
    started: float
    heartbeat: float
    ttl: float
    token: str
    released: bool
    generation: int
    path: str

    def to_json(self) -> bytes:
        record = {
            "owner": self.owner,
            "host": self.host,
            "pid": self.pid,
            "pid_namespace": self.pid_namespace,
            "started": self.started,
            "heartbeat": self.heartbeat,
            "ttl": self.ttl,
            "token": self.token,
            "released": self.released,
        }
        return json.dumps(record, separators=(",", ":")).encode() + b"\n"

    @classmethod
    def from_json(cls, data: bytes, generation: int, path: str) -> LockHolder | None:
        """The record in ``data``, or ``None`` when it is not a complete, well-formed record."""
        try:
            doc = json.loads(data)
            holder = cls(
                owner=str(doc["owner"]),
                host=str(doc["host"]),
                pid=int(doc["pid"]),
                pid_namespace=doc.get("pid_namespace"),
                started=float(doc["started"]),
                heartbeat=float(doc["heartbeat"]),
                ttl=float(doc["ttl"]),
                token=str(doc["token"]),
                released=bool(doc["released"]),
                generation=generation,
                path=path,
            )
        except (ValueError, TypeError, KeyError, UnicodeDecodeError):
            return None
        return holder

    def describe(self, now: float) -> str:
        age = max(0.0, now - self.heartbeat)
        return (
            f"{self.owner} (host {self.host}, pid {self.pid}, started "
            f"{_format_time(self.started)}, last heartbeat {age:.1f}s ago, ttl {self.ttl:g}s)"
        )


class CheckpointLock:
    """Exclusive use of a checkpoint directory by one process.

    ``acquire()`` raises :class:`LockedError` naming the holder when another live process has it.
    While held, a daemon thread refreshes the heartbeat every ``heartbeat_interval`` seconds
    (default ``ttl / 3``; ``0`` starts no thread and the caller calls :meth:`refresh`). When a
    refresh finds the lock taken over, :meth:`check` raises :class:`LockLostError` from then on
    and ``on_lost`` (if given) is called with the reason.
    """

    def __init__(
        self,
        fs: FileSystem,
        directory: str,
        *,
        owner: str | None = None,
        ttl: float = 30.0,
        heartbeat_interval: float | None = None,
        permission: int | None = 0o640,
        on_lost: Callable[[str], None] | None = None,
        on_unsafe: Callable[[str], None] | None = None,
        lease: bool | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        if not ttl > 0:
            raise ValueError(f"lock ttl must be > 0 seconds, got {ttl!r}")
        self.fs = fs
        self.directory = directory.rstrip("/") or "/"
        self.host = socket.gethostname()
        self.pid = os.getpid()
        self.owner = owner or f"{self.host}:{self.pid}"
        self.ttl = float(ttl)
        self.heartbeat_interval = ttl / 3 if heartbeat_interval is None else heartbeat_interval
        if not 0 <= self.heartbeat_interval < ttl * _SAFE_PART:
            msg = (
                f"lock heartbeat_interval must be >= 0 and under half the ttl ({ttl:g}s), got "
                f"{heartbeat_interval!r}: the lock counts as lost when not renewed for that long"
            )
            raise ValueError(msg)
        self.permission = permission
        self.on_lost = on_lost
        self.on_unsafe = on_unsafe
        self._unsafe_told = False
        #: Keep a lease file open while holding (default: on local disk only).
        self.lease = fs.display(self.directory).startswith("file:") if lease is None else lease
        self._clock = clock
        self._token = uuid.uuid4().hex
        self._pid_namespace = _pid_namespace()
        self._mutex = threading.RLock()
        self._generation = 0  # of the file that currently says we hold the lock; 0: not held
        self._started = 0.0
        self._lease: FileWriter | None = None
        #: The released record written ahead (a temporary name in the directory), while held.
        self._release: str | None = None
        self._lost: str | None = None
        #: Clock time written in our newest generation, and why the newest heartbeat failed.
        self._renewed = 0.0
        self._failure: str | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # ------------------------------------------------------------------ files

    def _path(self, name: str) -> str:
        return (
            self.directory + name if self.directory.endswith("/") else self.directory + "/" + name
        )

    def _gen_path(self, generation: int) -> str:
        return self._path(f".lock-{generation:012d}.json")

    def _lease_path(self, token: str) -> str:
        return self._path(f".lock-{token}.lease")

    def _generations(
        self, *, temps: list[FileStatus] | None = None
    ) -> list[tuple[int, FileStatus]]:
        """Generation files, oldest first; temporary files are added to ``temps`` if given."""
        try:
            entries = self.fs.list_dir(self.directory)
        except FileNotFoundError:
            return []
        found: list[tuple[int, FileStatus]] = []
        for status in entries:
            if status.is_dir:
                continue
            if match := _GEN_NAME.match(status.name):
                found.append((int(match.group(1)), status))
            elif temps is not None and _TMP_NAME.match(status.name):
                temps.append(status)
        return sorted(found, key=lambda item: item[0])

    def _record(self, *, released: bool = False) -> LockHolder:
        return LockHolder(
            owner=self.owner,
            host=self.host,
            pid=self.pid,
            pid_namespace=self._pid_namespace,
            started=self._started,
            heartbeat=self._clock(),
            ttl=self.ttl,
            token=self._token,
            released=released,
            generation=0,
            path="",
        )

    def _delete_quietly(self, path: str) -> None:
        try:
            self.fs.delete(path)
        except OSError as exc:
            logger.debug("Could not delete %s: %s", self.fs.display(path), exc)

    def _temp_path(self) -> str:
        return self._path(f".lock-{uuid.uuid4().hex}.tmp")

    def _take(self, generation: int, record: LockHolder, *, written: str | None = None) -> bool:
        """Publish ``record`` as ``generation``; ``True`` when it is now the newest generation.
        ``written``: a temporary file already holding ``record``, synced (the release's)."""
        # 1. Write the complete record under a unique name (unless written ahead), and 2. rename
        #    it onto the generation name without overwrite: one racer wins.
        target = self._gen_path(generation)
        try:
            if written is not None:
                try:
                    self.fs.rename(written, target, overwrite=False)
                except FileNotFoundError:
                    if not self.fs.exists(self.directory):
                        raise
                    written = None  # deleted meanwhile (a taker's clean-up): write it now
            if written is None:
                write_atomically(
                    self.fs,
                    target,
                    record.to_json(),
                    temp=self._temp_path(),
                    permission=self.permission,
                    close_later=True,
                )
        except FileExistsError:
            return False
        # 3. Confirm: a taker that read an old listing may land on a number cleanup freed.
        temps: list[FileStatus] = []
        generations = self._generations(temps=temps)
        if generations and generations[-1][0] != generation:
            self._delete_quietly(target)
            return False
        # 4. Older generations are history; the newest (ours) is never deleted. Temporary files
        #    older than a ttl were left by crashes (a live writer renames within moments).
        for old, status in generations[:-1]:
            if old < generation:
                self._delete_quietly(status.path)
        #    Our own release record, written ahead, stays whatever its age.
        own = self._release.rsplit("/", 1)[-1] if self._release is not None else None
        now = self._clock()
        for status in temps:
            if now - status.mtime_ns / 1e9 > self.ttl and status.name != own:
                self._delete_quietly(status.path)
        return True

    def _write_release(self) -> None:
        """Write the released record ahead (see the module's docstring): once per hold, right
        after the take. A failure is logged; :meth:`release` then writes the record itself."""
        with self._mutex:
            if not self._generation or self._lost is not None or self._release is not None:
                return
            temp = self._temp_path()
            try:
                write_hidden(
                    self.fs,
                    temp,
                    self._record(released=True).to_json(),
                    permission=self.permission,
                )
            except Exception as exc:
                logger.debug(
                    "Could not write the release of the lock of %s ahead: %s",
                    self.fs.display(self.directory),
                    exc,
                )
                return
            self._release = temp

    def _read(self, generation: int, status: FileStatus) -> LockHolder | None:
        """The record of ``generation``; ``None`` when unreadable. ``FileNotFoundError`` when it
        was replaced meanwhile."""
        return LockHolder.from_json(read_whole(self.fs, status.path), generation, status.path)

    def _lease_held(self, holder: LockHolder) -> bool:
        if not self.lease:
            return False
        try:
            probe = self.fs.append(self._lease_path(holder.token))
        except BlockingIOError:
            return True
        except OSError:
            return False
        probe.close()
        return False

    def _expired(self, holder: LockHolder | None, status: FileStatus, now: float) -> bool:
        if holder is None:
            # Unreadable record (damaged by hand or by a broken backend): age by mtime.
            return now - status.mtime_ns / 1e9 > self.ttl
        if holder.released:
            return True
        if self._lease_held(holder):
            return False
        if (
            holder.host == self.host
            and holder.pid_namespace is not None
            and holder.pid_namespace == self._pid_namespace
            and not _pid_alive(holder.pid)
        ):
            logger.warning(
                "Checkpoint directory lock holder %s is gone (no process %d on this host)",
                holder.owner,
                holder.pid,
            )
            return True
        return now - holder.heartbeat > holder.ttl

    # ------------------------------------------------------------------ public API

    @property
    def held(self) -> bool:
        return self._generation > 0 and self._lost is None

    @property
    def lost(self) -> str | None:
        """Why the lock was lost, or ``None``."""
        return self._lost

    def acquire(self) -> None:
        """Take the lock or raise :class:`LockedError` naming the live holder."""
        with self._mutex:
            if self.held:
                return
            if self._lease is not None:  # left from a lock this object lost
                self._close_lease()
            if not self.fs.exists(self.directory):
                self.fs.mkdirs(self.directory, permission=dir_permission(self.permission))
            self._lost = None
            self._failure = None
            for _round in range(_ACQUIRE_ROUNDS):
                # 1. Who holds the newest generation?
                generations = self._generations()
                previous: LockHolder | None = None
                base = 0
                if generations:
                    base, status = generations[-1]
                    try:
                        previous = self._read(base, status)
                    except FileNotFoundError:
                        continue  # replaced meanwhile: look again
                    now = self._clock()
                    if previous is not None and previous.token == self._token:
                        # Ours: an earlier attempt renamed it but then failed (e.g. listing).
                        self._generation = base
                        self._renewed = previous.heartbeat
                        previous = None
                        break
                    if not self._expired(previous, status, now):
                        # 2. Held by a live process (or by an unreadable record not yet aged).
                        raise LockedError(self._locked_message(previous, status, now))
                # 3. Free, released or expired: take the next generation.
                self._started = self._clock()
                record = self._record()
                if not self._take(base + 1, record):
                    continue  # someone else was faster; the next round names them
                self._generation = base + 1
                self._renewed = record.heartbeat
                break
            else:
                raise LockedError(
                    f"checkpoint directory {self.fs.display(self.directory)} is being "
                    f"locked and unlocked by other processes; gave up after {_ACQUIRE_ROUNDS} tries"
                )
            # 4. Our lease, and the previous holder's leftovers.
            if previous is not None and not previous.released:
                logger.warning(
                    "Took over the lock of checkpoint directory %s from %s",
                    self.fs.display(self.directory),
                    previous.describe(self._clock()),
                )
            if previous is not None and self.lease:
                self._delete_quietly(self._lease_path(previous.token))
            if self.lease:
                try:
                    self._lease = self.fs.create(
                        self._lease_path(self._token), overwrite=True, permission=self.permission
                    )
                except OSError as exc:
                    logger.warning("No lease file for the checkpoint directory lock: %s", exc)
            logger.info(
                "Locked checkpoint directory %s as %s",
                self.fs.display(self.directory),
                self.owner,
            )
            # 5. The release's record, written ahead: the stop then renames it, no close to wait.
            self._write_release()
            if self.heartbeat_interval > 0:
                self._stop.clear()
                self._thread = threading.Thread(
                    target=self._heartbeat_loop, name="checkpoint-lock-heartbeat", daemon=True
                )
                self._thread.start()

    def _locked_message(self, holder: LockHolder | None, status: FileStatus, now: float) -> str:
        shown = self.fs.display(self.directory)
        if holder is None:
            age = now - status.mtime_ns / 1e9
            return (
                f"checkpoint directory {shown} is locked: {self.fs.display(status.path)} cannot "
                f"be read; it expires {max(0.0, self.ttl - age):.0f}s after its last change"
            )
        expires = holder.heartbeat + holder.ttl - now
        if expires <= 0:
            # Not expired although overdue: only a held lease says so.
            return (
                f"checkpoint directory {shown} is locked by {holder.describe(now)}; its heartbeat "
                "is overdue but its process is alive (it holds its lease): stop that process"
            )
        return (
            f"checkpoint directory {shown} is locked by {holder.describe(now)}; stop that "
            f"process, or if it is gone the lock expires in {expires:.0f}s"
        )

    @property
    def renewed_at(self) -> float | None:
        """When this process last wrote its lock (the lock's clock, ``time.time()`` by
        default): taken or renewed; ``None`` while not held. Read by metrics (the age of the
        heartbeat)."""
        return self._renewed if self._generation else None

    def refresh(self) -> None:
        """Prove this holder alive. Raises :class:`LockLostError` if another process took over.
        A lock unsafe for a while is renewed all the same when no other process took it: its
        generation files decide, one rename wins."""
        with self._mutex:
            self._check_lost()
            if self._generation == 0:
                raise LockLostError(
                    f"checkpoint directory {self.fs.display(self.directory)} is not locked"
                )
            record = self._record()
            if self._take(self._generation + 1, record):
                self._generation += 1
                self._renewed = record.heartbeat
                return
            newest = self.holder()
            if newest is not None and newest.token == self._token and not newest.released:
                # Our own newer generation, from a beat that failed after its rename.
                self._generation = newest.generation
                self._renewed = newest.heartbeat
                return
            self._lost = self._lost_reason()
            raise LockLostError(self._lost)

    def _lost_reason(self) -> str:
        reason = f"lost the lock of checkpoint directory {self.fs.display(self.directory)}"
        generations = self._generations()
        if generations:
            gen, status = generations[-1]
            try:
                holder = self._read(gen, status)
            except FileNotFoundError:
                holder = None
            if holder is not None:
                reason += f" to {holder.describe(self._clock())}"
        return reason

    def check(self) -> None:
        """Raise :class:`LockLostError` when the lock has been lost, and
        :class:`~region.errors.LockUnsafeError` while it may be lost before the caller's next
        write lands: without a lease, a lock whose last renewal is older than half its ttl
        (another process may take it over at the ttl), until a heartbeat gets through again."""
        self._check_lost()
        problem = self._unsafe()
        if problem is not None:
            raise LockUnsafeError(problem)

    def _check_lost(self) -> None:
        if self._lost is not None:
            raise LockLostError(self._lost)

    def _unsafe(self) -> str | None:
        """Why the lock may be taken over before the next write lands, or ``None``."""
        if not self._generation or self._lease is not None:
            return None
        age = self._clock() - self._renewed
        if age <= self.ttl * _SAFE_PART:
            return None
        failure = f" (last heartbeat failure: {self._failure})" if self._failure else ""
        return (
            f"the lock of checkpoint directory {self.fs.display(self.directory)} was last "
            f"renewed {age:.1f}s ago{failure}; another process may take it over after its ttl "
            f"of {self.ttl:g}s, so this one writes nothing until a heartbeat gets through"
        )

    def _heartbeat_loop(self) -> None:
        wait = self.heartbeat_interval
        while not self._stop.wait(wait):
            try:
                self.refresh()
            except LockLostError as exc:
                logger.error("%s", exc)
                if self.on_lost is not None:
                    self.on_lost(str(exc))
                return
            except Exception as exc:
                # Any failure (an OSError, a backend's ValueError, a bug) is retried soon: a beat
                # may get through while the lock is still safe; check() pauses the holder when
                # it is not, and a later beat that gets through resumes it.
                self._failure = f"{type(exc).__name__}: {exc}"
                logger.warning("Checkpoint directory lock heartbeat failed: %s", self._failure)
                if self._taken_over():
                    # A write failed but a read still works: another process holds it now.
                    self._lost = self._lost_reason()
                    logger.error("%s", self._lost)
                    if self.on_lost is not None:
                        self.on_lost(self._lost)
                    return
                wait = min(self.heartbeat_interval, self.ttl * _RETRY_PART)
                until_unsafe = self._renewed + self.ttl * _SAFE_PART - self._clock()
                if until_unsafe > 0:
                    wait = min(wait, until_unsafe)
                else:
                    self._tell_unsafe()
            else:
                if self._unsafe_told:
                    logger.warning(
                        "Checkpoint directory lock %s renewed again: writing resumes",
                        self.fs.display(self.directory),
                    )
                self._unsafe_told = False
                self._failure = None
                # The next beat is due an interval after this record's time, not after its
                # (maybe slow) write: its time is what another process compares with the ttl.
                wait = max(0.0, self._renewed + self.heartbeat_interval - self._clock())

    def _taken_over(self) -> bool:
        """Whether the newest generation is another holder's (a read; ``False`` when it fails)."""
        try:
            newest = self.holder()
        except Exception:
            return False
        return (
            newest is not None
            and newest.token != self._token
            and newest.generation > self._generation
        )

    def _tell_unsafe(self) -> None:
        problem = self._unsafe()
        if problem is None or self._unsafe_told:
            return
        self._unsafe_told = True
        logger.error("%s", problem)
        if self.on_unsafe is not None:
            self.on_unsafe(problem)

    def release(self) -> None:
        """Give the lock up (publishing a released generation) and stop the heartbeat."""
        self._stop.set()
        thread, self._thread = self._thread, None
        if thread is not None and thread is not threading.current_thread():
            thread.join()
        with self._mutex:
            written, self._release = self._release, None
            if self._generation and self._lost is None:
                try:
                    record = self._record(released=True)
                    if self._take(self._generation + 1, record, written=written):
                        written = None
                        logger.info(
                            "Unlocked checkpoint directory %s", self.fs.display(self.directory)
                        )
                    else:
                        self._delete_quietly(self._gen_path(self._generation))
                except Exception as exc:
                    # Not fatal: without heartbeats the lock expires after ttl. Any failure (a
                    # remote store maps some refusals to ValueError) must not replace the error
                    # that ended the run, since release runs in its cleanup.
                    logger.warning(
                        "Could not release the checkpoint directory lock %s: %s: %s",
                        self.fs.display(self.directory),
                        type(exc).__name__,
                        exc,
                    )
            if written is not None:  # not renamed into place (or renamed, then found stale)
                self._delete_quietly(written)
            self._close_lease()
            self._generation = 0

    def _close_lease(self) -> None:
        if self._lease is not None:
            lease, self._lease = self._lease, None
            try:
                lease.close()
            except OSError as exc:
                logger.debug("Closing the lease file failed: %s", exc)
            self._delete_quietly(self._lease_path(self._token))

    def __enter__(self) -> CheckpointLock:
        self.acquire()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.release()

    def in_use(self) -> str | None:
        """Who holds the lock now, when :meth:`acquire` would refuse it (a live process, or an
        unreadable record not yet aged), described for a message; ``None`` when it is free,
        released or expired (a process starting now would take it)."""
        for _round in range(_ACQUIRE_ROUNDS):
            generations = self._generations()
            if not generations:
                return None
            generation, status = generations[-1]
            try:
                holder = self._read(generation, status)
            except FileNotFoundError:
                continue  # replaced meanwhile: look again
            now = self._clock()
            if self._expired(holder, status, now):
                return None
            if holder is None:
                return f"a process whose lock record {self.fs.display(status.path)} is unreadable"
            return holder.describe(now)
        return "processes locking and unlocking it"

    def holder(self) -> LockHolder | None:
        """Who the newest generation names (for ``inspect``), or ``None`` when there is none."""
        for _round in range(_ACQUIRE_ROUNDS):
            generations = self._generations()
            if not generations:
                return None
            try:
                return self._read(*generations[-1])
            except FileNotFoundError:
                continue
        return None
