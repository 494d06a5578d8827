"""The writer of the ``hdfs://`` backend (:mod:`.native`): a file's output stream through
``hdfs-native``, its calls bounded in time on a thread of its own, a refused block or an
uncompleted close repaired by ending its own lease, and the closes of published files run in
the background (waited for at the interpreter's exit)."""

from __future__ import annotations

import atexit
import errno
import logging
import queue
import threading
import time
import weakref
from collections.abc import Callable
from functools import partial
from typing import Any, Protocol, TypeVar

from region.fs import FileStatus

from .claims import WriterClaim
from .settings import FileSystemSettings

__all__ = ["NOT_REPLICATED", "NativeHdfsWriter", "await_closes", "settle_closes"]

logger = logging.getLogger(__name__)

T = TypeVar("T")


class _Host(Protocol):
    """What a writer uses of its filesystem (:class:`~.native.NativeHdfsFileSystem`): its
    client and settings, and its calls bounded by the settings' retries and lease waits."""

    @property
    def client(self) -> Any: ...

    @property
    def settings(self) -> FileSystemSettings: ...

    def display(self, path: str) -> str: ...

    def status(self, path: str) -> FileStatus: ...

    def recover_lease(self, path: str, *, own: bool = False) -> float: ...

    def _call(self, op: str, path: str, fn: Callable[[], T]) -> T: ...

    def _lease_wait(self, op: str, path: str, fn: Callable[[], T]) -> T: ...


#: The NameNode refuses a new block (addBlock) until the block before the last one has its
#: minimum replicas reported; under load the DataNodes' reports lag. Hadoop's client asks again
#: (400 ms, doubling, 5 times); hdfs-native raises it, and its stream is unusable after it.
NOT_REPLICATED = "NotReplicatedYetException"
#: hdfs-native's close when the NameNode's complete kept answering false (the last blocks'
#: replicas not reported yet) through its own five tries: the same cause, at close.
_NOT_COMPLETED = "Failed to complete file in time"
_REPLICATION_TRIES = 5
#: Bytes a writer gathers before handing them to the client in one call, sent while the
#: caller goes on: each call is a hand-off to the writer's thread (about 100 us on a busy
#: machine), which a sink writing a batch of lines at a time paid 3,000 times for 200 MB, and
#: the client's write of them takes as long as producing them did.
_WRITE_AT = 1 << 20
_REPLICATION_FIRST_DELAY = 0.4


class NativeHdfsWriter:
    """An HDFS output stream; the NameNode's lease makes it the file's only writer."""

    def __init__(
        self, fs: _Host, path: str, stream: Any, claim: WriterClaim, position: int
    ) -> None:
        self._fs = fs
        self._path = path
        self._stream = stream
        #: The file's length once every byte the client accepted is in it.
        self._position = position
        self._claim = claim
        self._closed = False
        self._broken: OSError | None = None
        self._worker: _CallThread | None = None
        # Bytes written but not yet handed to the client (fewer than _WRITE_AT): sent by the
        # next write that fills them, or by sync and close. Not yet durable nor visible either
        # way until sync: the client itself buffers a packet.
        self._gathered: list[bytes] = []
        self._gathered_size = 0
        self._sender: _CallThread | None = None  # sends gathered bytes, one at a time
        self._sending: _Pending | None = None  # the send under way, at most one
        #: When it was opened (``time.monotonic()``): a background close waits for a young file.
        self.opened = time.monotonic()

    @property
    def path(self) -> str:
        return self._path

    def _bounded(self, op: str, fn: Callable[..., object], *args: object) -> None:
        """``fn(*args)`` within the settings' ``timeout``, else ``TimeoutError`` naming the file.

        The client waits for DataNode acknowledgements without a time limit: a DataNode that
        dies mid-write has left an hsync waiting forever. Calls run on this writer's own daemon
        thread (one per writer, not per call: writes are the sink's hot path); a stuck call is
        left behind on it, and the writer is unusable (the caller resets and opens a new one).
        """
        if self._broken is not None:
            raise self._broken
        if self._worker is None:
            self._worker = _CallThread(f"hdfs-writer {self._path}")
            # A writer dropped without close; not at the interpreter's exit, which first waits
            # for the background closes (finalizers marked atexit run before that wait).
            weakref.finalize(self, self._worker.stop).atexit = False
        outcome = self._worker.call(fn, args, self._fs.settings.timeout)
        if outcome is _NO_ANSWER:
            msg = (
                f"{op}: no answer from the DataNodes within {self._fs.settings.timeout:g}s "
                "(a DataNode of the write pipeline died?); this writer is abandoned"
            )
            self._broken = TimeoutError(errno.ETIMEDOUT, msg, self._fs.display(self._path))
            raise self._broken
        if isinstance(outcome, BaseException):
            raise outcome

    def write(self, data: bytes | memoryview) -> None:
        if self._closed:
            raise ValueError(f"{self._fs.display(self._path)}: write to a closed writer")
        if self._broken is not None:
            raise self._broken
        self._gathered.append(bytes(data))
        self._gathered_size += len(data)
        if self._gathered_size >= _WRITE_AT:
            self._send()

    def _send(self) -> None:
        """Hand the gathered bytes to the client on a thread of its own, once the send before
        has ended (its error is raised here, or by the next sync or close: the caller's state
        never moves past bytes not synced, so a later error loses nothing)."""
        self._sent()
        if not self._gathered:
            return
        gathered = self._gathered
        data = gathered[0] if len(gathered) == 1 else b"".join(gathered)
        self._gathered, self._gathered_size = [], 0
        if self._sender is None:
            self._sender = _CallThread(f"hdfs-send {self._path}")
            weakref.finalize(self, self._sender.stop).atexit = False
        self._sending = self._sender.submit(self._send_now, (data,))

    def _sent(self) -> None:
        """Wait for the send under way, if any (each of its client calls is bounded by the
        settings' ``timeout``); raise its error."""
        sending, self._sending = self._sending, None
        if sending is not None:
            done, box = sending
            done.wait()
            if box[0] is not None:
                raise box[0]

    def _send_now(self, data: bytes) -> None:
        delay = _REPLICATION_FIRST_DELAY
        for attempt in range(1, _REPLICATION_TRIES + 1):
            try:
                self._fs._call(
                    "WRITE", self._path, partial(self._bounded, "WRITE", self._write, data)
                )
            except OSError as err:
                if NOT_REPLICATED not in str(err):
                    raise
                if attempt == _REPLICATION_TRIES:
                    msg = (
                        f"WRITE: the NameNode refused a new block {attempt} times (the block "
                        f"before it has not reached its minimum replicas): {err.strerror}"
                    )
                    raise OSError(errno.EIO, msg, self._fs.display(self._path)) from None
                logger.warning(
                    "%s: %s; try %d of %d in %.1fs on a reopened stream",
                    self._fs.display(self._path),
                    err.strerror,
                    attempt + 1,
                    _REPLICATION_TRIES,
                    delay,
                )
                time.sleep(delay)
                delay *= 2
                try:
                    data = self._reopen(data)
                except OSError as failed:
                    self._broken = failed  # no stream: every later call raises this
                    raise
                if not data:
                    return
                continue
            self._position += len(data)
            return

    def _write(self, data: bytes) -> None:
        self._stream.write(data)  # the stream of now: a refused block replaces it

    def _reopen(self, data: bytes) -> bytes:
        """After a refused block: a new stream at the file's end; returns the part of ``data``
        the file does not hold yet.

        hdfs-native drops the finished block's identity when its addBlock fails, so its stream
        cannot ask again. Steps (a crash at any of them leaves a file with a dead writer's
        lease and a prefix of what was written, which a sink's restart recovers and truncates
        to its checkpoint as after any crash):

        1. Drop the stream: the client stops renewing its lease.
        2. Recover the lease (this process holds the path's claim, so the holder is known to
           be done): the NameNode closes the file at the length its DataNodes hold.
        3. That length lies between the bytes the client accepted before this call and those
           plus ``data`` (a prefix of what was sent): anything else is an error naming both.
        4. Append: a new stream at that length.
        """
        fs, path = self._fs, self._path
        size = self._end_own_lease("WRITE", "after a refused block", len(data))  # 1.-3.
        self._stream = fs._lease_wait("APPEND", path, lambda: fs.client.append(path))  # 4.
        held = size - self._position
        self._position = size
        return data[held:]

    def flush(self) -> None:
        # The client has hsync only (no hflush): visible and durable in one step.
        self.sync()

    def sync(self) -> None:
        if self._closed:
            raise ValueError(f"{self._fs.display(self._path)}: sync of a closed writer")
        self._send()
        self._sent()
        self._fs._call("HSYNC", self._path, lambda: self._bounded("HSYNC", self._stream.hsync))

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        try:
            self._send()
            self._sent()
            self._complete()
        finally:
            self._claim.release()
            if self._worker is not None and self._broken is None:
                self._worker.stop()
            if self._sender is not None:
                self._sender.stop()

    def close_later(self) -> None:
        """Close on a thread of its own (:class:`~region.fs.LaterCloser`): for a file whose
        bytes are synced and to which nothing more is written. A close that fails is logged:
        the file stays open with this process's lease until the process ends (then its lease
        expires) or a reader recovers the lease; its synced bytes are durable either way."""
        if self._closed:
            return
        _background.submit(self)

    def _complete(self) -> None:
        """Close. The client itself asks the NameNode to complete the file for about 13 s; a
        close that still gave up waits on a replica report the NameNode may not get until the
        DataNode's next full report (one lost while the NameNode restarted), so it is not asked
        again. Steps, as in :meth:`_reopen` (this process holds the path's claim, so the writer
        whose lease ends is this one):

        1. Drop the stream: the client stops renewing its lease.
        2. Recover the lease: the DataNodes settle the last block at the length they hold and
           the NameNode closes the file (block recovery needs no replica report).
        3. That length is every byte this writer wrote (the client's close waited for their
           acknowledgements before it asked to complete): anything else is an error naming both.
        """
        fs, path = self._fs, self._path
        try:
            fs._call("CLOSE", path, lambda: self._bounded("CLOSE", self._stream.close))
            return
        except OSError as err:
            if _NOT_COMPLETED not in str(err):
                raise
            logger.info(
                "%s: %s (the last block's replicas are not reported); recovering this "
                "writer's own lease to close it",
                fs.display(path),
                err.strerror,
            )
        self._end_own_lease("CLOSE", "the NameNode did not complete the file and", 0)  # 1.-3.

    def _end_own_lease(self, op: str, why: str, unsure: int) -> int:
        """Steps 1-3 of :meth:`_reopen` and :meth:`_complete`: drop the stream, recover this
        writer's own lease, and return the length the NameNode closed the file at, which must
        lie between the bytes the client accepted and those plus ``unsure`` (sent, not yet
        acknowledged); an error naming both otherwise."""
        fs, path = self._fs, self._path
        self._stream = None  # 1.
        fs._lease_wait("RECOVERLEASE", path, lambda: fs.recover_lease(path, own=True))  # 2.
        size = fs.status(path).size
        if not self._position <= size <= self._position + unsure:  # 3.
            expected = f"{self._position}" + (f" to {self._position + unsure}" if unsure else "")
            msg = f"{op}: {why} its lease recovery left {size} bytes, expected {expected}"
            raise OSError(errno.EIO, msg, fs.display(path))
        return size

    def __enter__(self) -> NativeHdfsWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


_NO_ANSWER = object()
_STOP = object()
#: A call handed to a :class:`_CallThread`: set once it ended, then ``[None]`` or ``[error]``.
_Pending = tuple[threading.Event, list[BaseException | None]]
#: Background closes at once; one more makes ``close_later`` wait (a NameNode that stopped
#: completing files must not gather threads without end).
_MAX_BACKGROUND_CLOSES = 32
#: How long the interpreter's exit waits for background closes.
_EXIT_WAIT = 60.0
#: How long the exit waits for any one background close (from its hand-over): a healthy
#: cluster completes a file within about a second, through hdfs-native's retries of 0.5, 1
#: and 2 s. A close still running after this waits on the cluster, e.g. for a DataNode's report
#: lost while the NameNode restarted, which the DataNode sends again only with its next full
#: report, hours later. Its synced bytes are durable; the next reader recovers the lease.
_EXIT_STALL = 10.0
#: A background close is asked no sooner than this many seconds after its file was opened
#: (see the module's docstring).
_CLOSE_AFTER = 0.1


class _BackgroundCloses:
    """The writers being closed in the background, one short-lived daemon thread each (each
    close is bounded by its filesystem's ``timeout``; they run side by side, so a cut every
    100 ms on a cluster that completes files after 500 ms does not build a queue)."""

    def __init__(self) -> None:
        self._slots = threading.BoundedSemaphore(_MAX_BACKGROUND_CLOSES)
        self._done = threading.Condition()
        #: The closes running: when each was handed over (``time.monotonic()``), and its writer.
        self._running: dict[int, tuple[float, NativeHdfsWriter]] = {}

    def submit(self, writer: NativeHdfsWriter) -> None:
        self._slots.acquire()
        with self._done:
            self._running[id(writer)] = (time.monotonic(), writer)
        name = f"hdfs-close {writer.path}"
        threading.Thread(target=self._close, args=(writer,), name=name, daemon=True).start()

    def _close(self, writer: NativeHdfsWriter) -> None:
        try:
            young = writer.opened + _CLOSE_AFTER - time.monotonic()
            if young > 0:
                time.sleep(young)
            writer.close()
        except FileNotFoundError as exc:  # deleted meanwhile (a retired checkpoint)
            logger.info("%s: not closed, it was deleted: %s", writer.path, exc)
        except Exception as exc:
            logger.warning(
                "%s: the background close failed (its synced bytes stay; the file stays open "
                "until its lease is recovered or expires): %s",
                writer._fs.display(writer.path),
                exc,
            )
        finally:
            # The client's stream is freed here, not by whichever thread drops the writer
            # last: at the interpreter's exit that could be this thread, frozen mid-drop.
            writer._stream = None
            with self._done:
                del self._running[id(writer)]
                self._done.notify_all()
            self._slots.release()

    def settle(self, timeout: float | None, *, stall: float | None = None) -> list[str]:
        """Wait until every close handed over has ended, at most ``timeout`` seconds, and with
        ``stall`` no longer than until each close still running has run that long; the files
        still being closed then (none: all ended)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._done:
            while self._running:
                limits = [] if deadline is None else [deadline]
                if stall is not None:
                    limits.append(max(started for started, _ in self._running.values()) + stall)
                left = min(limits) - time.monotonic() if limits else None
                if left is not None and left <= 0:
                    break
                self._done.wait(left)
            return [w._fs.display(w.path) for _, w in self._running.values()]

    def wait_for(self, cluster: str, timeout: float) -> bool:
        """Wait, at most ``timeout`` seconds, until the closes running on ``cluster`` (its
        display of ``/``) have ended; whether there were any."""
        deadline = time.monotonic() + timeout

        def mine() -> bool:
            return any(w._fs.display("/") == cluster for _, w in self._running.values())

        with self._done:
            found = mine()
            while mine() and (left := deadline - time.monotonic()) > 0:
                self._done.wait(left)
            return found


_background = _BackgroundCloses()


def await_closes(cluster: str, timeout: float) -> bool:
    """Wait, at most ``timeout`` seconds, until the background closes on ``cluster`` (its
    display of ``/``) have ended; whether there were any."""
    return _background.wait_for(cluster, timeout)


def settle_closes(timeout: float | None = None) -> bool:
    """Wait until every close handed to the background has ended (landed or failed, at most
    ``timeout`` seconds); whether they all have."""
    return not _background.settle(timeout)


@atexit.register
def _settle_at_exit() -> None:
    left = _background.settle(_EXIT_WAIT, stall=_EXIT_STALL)
    if left:
        logger.warning(
            "Exiting with %d HDFS file(s) not closed yet: the NameNode has not completed them "
            "(their writes are synced and durable; the next reader recovers the lease): %s",
            len(left),
            ", ".join(left[:5]) + (", ..." if len(left) > 5 else ""),
        )


class _CallThread:
    """A daemon thread that runs calls handed to it, one at a time; the caller waits for each
    with a time limit. Daemon: a call stuck forever never holds up the interpreter's exit."""

    def __init__(self, name: str) -> None:
        self._calls: queue.SimpleQueue[Any] = queue.SimpleQueue()
        threading.Thread(target=self._loop, name=name, daemon=True).start()

    def _loop(self) -> None:
        while (item := self._calls.get()) is not _STOP:
            fn, args, done, box = item
            try:
                fn(*args)
                box.append(None)
            except BaseException as err:  # handed to the caller's thread
                box.append(err)
            # Hold nothing between calls: a writer dropped without close must free its stream
            # (and so its lease).
            item = fn = args = None
            done.set()

    def submit(self, fn: Callable[..., object], args: tuple[object, ...]) -> _Pending:
        """Hand ``fn(*args)`` to the thread; once the event is set, the list holds ``None`` or
        the exception ``fn`` raised."""
        done = threading.Event()
        box: list[BaseException | None] = []
        self._calls.put((fn, args, done, box))
        return done, box

    def call(self, fn: Callable[..., object], args: tuple[object, ...], timeout: float) -> object:
        """``None``, the exception ``fn`` raised, or ``_NO_ANSWER`` after ``timeout``."""
        done, box = self.submit(fn, args)
        if not done.wait(timeout):
            return _NO_ANSWER
        return box[0]

    def stop(self) -> None:
        self._calls.put(_STOP)
