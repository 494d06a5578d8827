"""Parquet and ORC files written from record batches, and the conversion of a staged file
started while it is still being written.

A bulk file is staged as an Arrow IPC stream (:mod:`operators.sink.formats`) and becomes Parquet
or ORC when it rolls. Converting only then leaves the encoding of a whole file to the roll: a
file of a partitioned output that rolls at the end of a run waits for all of it at once, on
one core. :class:`EarlyConversions` encodes each staged file's batches on a thread of its own
as they are written, so that at the roll only the last row group and the footer remain.

The early file is only ever a copy: the staged file stays what a cut describes and what a
crash recovers from. The early file is the same in-progress file :func:`convert` writes (the
reset deletes it unless a cut names it), it is synced before it is handed over, and any
failure or doubt (a file restored from a cut, so its early batches were never seen; an error
on the thread) falls back to :func:`~operators.sink.formats.convert` from the staged file.
"""

from __future__ import annotations

import io
import logging
import threading
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

from operators.common.lazy import lazy_module
from region.fs import FileSystem, FileWriter

if TYPE_CHECKING:
    import pyarrow as pa
    import pyarrow.ipc as ipc
else:
    pa = lazy_module("pyarrow")
    ipc = lazy_module("pyarrow.ipc")


__all__ = ["GROUP_BYTES", "GROUP_ROWS", "BulkWriter", "Early", "EarlyConversions"]

logger = logging.getLogger(__name__)

T = TypeVar("T")

#: Rows gathered into one Parquet row group or ORC stripe (the staged file's batches are as
#: small as the batches written). DuckDB's 122,880 and Polars's 262,144 are of this order: big
#: enough for readers, small enough that a file's encoding is mostly done before it rolls.
GROUP_ROWS = 1 << 17
GROUP_BYTES = 64 << 20
#: Gathered rows of the early files of one thread, at most: beyond it the largest group is
#: written early (smaller row groups, as Parquet's own writers do with many open files).
_EARLY_BYTES = 64 << 20
#: Conversion threads of a sink.
_THREADS = 2
#: Written batches waiting for the thread, at most: a write waits beyond it.
_QUEUED_BYTES = 16 << 20
#: Written bytes of one file handed to the thread at once.
_HANDOFF_BYTES = 4 << 20
#: Seconds an idle conversion thread waits for work before it ends.
_IDLE = 5.0
#: Encoded bytes a bulk file's writer gathers in Arrow's memory before one write to the file.
_SINK_BUFFER = 1 << 20


class _Stream(io.RawIOBase):
    """A file writer of the sink's filesystem as a write-only stream for Parquet and ORC."""

    def __init__(self, writer: FileWriter) -> None:
        self._writer = writer
        self.size = 0

    def writable(self) -> bool:
        return True

    def write(self, data: Any) -> int:
        view = memoryview(data).cast("B")
        self._writer.write(bytes(view))
        self.size += len(view)
        return len(view)

    def tell(self) -> int:
        return self.size


class BulkWriter:
    """Record batches of one schema to one Parquet or ORC file on ``out``, gathered into row
    groups (stripes) of up to :data:`GROUP_ROWS` rows or :data:`GROUP_BYTES` bytes."""

    def __init__(self, out: FileWriter, fmt: str, codec: str | None, schema: pa.Schema) -> None:
        self._stream = _Stream(out)
        self._fmt = fmt
        self.schema = schema
        # Buffered in Arrow: the encoder writes each page (and its header) apart, and each
        # write to a Python stream takes the interpreter lock, which a conversion thread waits
        # for while the writing thread holds it (dozens of waits per row group, unbuffered).
        self._sink = pa.BufferedOutputStream(
            pa.PythonFile(self._stream, mode="w"), buffer_size=_SINK_BUFFER
        )
        sink = self._sink
        if fmt == "parquet":
            import pyarrow.parquet as pq

            self._writer: Any = pq.ParquetWriter(sink, schema, compression=codec or "none")
        else:
            import pyarrow.orc as orc

            self._writer = orc.ORCWriter(sink, compression=codec or "uncompressed")
        self._group: list[pa.RecordBatch] = []
        self._rows = 0
        #: Bytes of the gathered batches.
        self.buffered = 0

    def add(self, batch: pa.RecordBatch) -> None:
        self._group.append(batch)
        self._rows += batch.num_rows
        self.buffered += batch.nbytes
        if self._rows >= GROUP_ROWS or self.buffered >= GROUP_BYTES:
            self.flush()

    def flush(self) -> None:
        """Write the gathered batches as one row group (stripe)."""
        if self._group:
            self._writer.write(pa.Table.from_batches(self._group, self.schema))
        self._group, self._rows, self.buffered = [], 0, 0

    def close(self) -> int:
        """Write the last group and the footer (an ORC file gets one write even when empty);
        the file's size. ``out`` is neither synced nor closed."""
        try:
            if self._group or self._fmt == "orc":
                self._writer.write(pa.Table.from_batches(self._group, self.schema))
            self._group, self._rows, self.buffered = [], 0, 0
        finally:
            self._writer.close()
        self._sink.close()  # what is still buffered, written
        return self._stream.size


class Early:
    """The early conversion of one staged file into ``target`` (see :class:`EarlyConversions`).
    Fed the staged file's bytes from its first (the schema) on, on the writing thread."""

    def __init__(
        self,
        owner: _Worker,
        target: str,
        fmt: str,
        codec: str | None,
        permission: int | None,
    ) -> None:
        self._owner = owner
        self.target = target
        self._fmt = fmt
        self._codec = codec
        self._permission = permission
        self._schema: pa.Schema | None = None
        self._header = b""
        self._out: FileWriter | None = None
        self.bulk: BulkWriter | None = None
        #: Why the early file cannot be used (set on the thread); the staged file is then
        #: converted at the roll.
        self.failed: BaseException | None = None
        self.cancelled = False
        #: Fed, not handed to the thread yet.
        self._pending: list[bytes | memoryview | pa.RecordBatch] = []
        self._pending_size = 0
        #: Where the finish started on the thread puts its value (:meth:`finish_soon`).
        self._finishing: list[Any] | None = None
        #: Bytes were fed after the finish started (a file written on after a failed close).
        self._late = False

    def feed(self, data: bytes | memoryview, batch: pa.RecordBatch | None = None) -> None:
        """Bytes just appended to the staged file: whole IPC messages (the schema first);
        ``batch`` the record batch they hold, when the writer has it (taken as it is, not
        read back from a copy of the bytes). Handed to the thread a few MB at a time: each
        hand-off is a wait for the interpreter lock on the thread, which one per write made
        the thread's bottleneck."""
        if self._finishing is not None:  # not in the early file: the staged file is converted
            self._late = True
            return
        if self.failed is None and not self.cancelled:
            self._pending.append(data if batch is None else batch)
            self._pending_size += len(data)
            if self._pending_size >= _HANDOFF_BYTES:
                self._hand_off()

    def _hand_off(self) -> None:
        pending, self._pending = self._pending, []
        size, self._pending_size = self._pending_size, 0
        if pending and self.failed is None and not self.cancelled:
            self._owner.submit(self, pending, size)

    def finish_soon(self) -> None:
        """Start finishing on the thread, :meth:`finish` waiting for it later: files that
        close together (the end of a run) finish on every thread at once, where a finish
        started only when the one before it ended left the other thread idle."""
        if self._finishing is None:
            self._hand_off()
            self._finishing = self._owner.post(self, self._finish)

    def finish(self) -> tuple[FileWriter, int] | None:
        """The early file with every batch fed, written and synced, not closed (as
        :func:`~operators.sink.formats.convert` gives it); ``None`` when it cannot be used
        (its target is then removed, and the caller converts the staged file)."""
        self.finish_soon()
        assert self._finishing is not None
        done = self._owner.wait(self, self._finishing)
        if self._late and not isinstance(done, BaseException):
            self._out = done[0]
            self._owner.call(self, self._discard)
            done = RuntimeError("bytes were written after its finish began")
        if isinstance(done, BaseException):
            logger.warning(
                "the early conversion of %s failed (%s); converting its staged file instead",
                self.target,
                done,
            )
            return None
        finished: tuple[FileWriter, int] = done
        return finished

    def cancel(self, *, remove: bool) -> None:
        """Stop, the staged file staying what it is: the early file is closed, and removed
        with ``remove`` (a stop; a reset deletes it with the other files no cut names, and a
        crash, as a test makes one, leaves it)."""
        self.cancelled = True
        self._pending, self._pending_size = [], 0
        if self._finishing is not None:  # finished (or failed) on the thread: given back here
            done = self._owner.wait(self, self._finishing)
            if not isinstance(done, BaseException):
                self._out = done[0]
        self._owner.call(self, lambda: self._discard(remove=remove))

    # -- on the conversion thread -------------------------------------------------------------

    def _take(self, pieces: list[bytes | memoryview | pa.RecordBatch]) -> None:
        """Whole IPC messages written to the staged file, the schema first, or the record
        batches they hold. Runs of messages are read as one stream by one call: each call
        that lets go of the interpreter lock waits to get it back from the writing thread,
        so a call per message made this thread the slowest."""
        if self._schema is None:
            header, pieces = pieces[0], pieces[1:]
            assert isinstance(header, bytes)
            self._header = header
            self._schema = ipc.read_schema(pa.py_buffer(header))
        if not pieces:
            return
        bulk = self._bulk()
        run: list[bytes | memoryview] = []
        for piece in [*pieces, None]:
            if isinstance(piece, bytes | memoryview):
                run.append(piece)
                continue
            if run:
                stream = pa.py_buffer(b"".join([self._header, *run]))
                for batch in ipc.open_stream(stream).read_all().to_batches():
                    bulk.add(batch)
                run = []
            if piece is not None:
                bulk.add(piece)

    def _bulk(self) -> BulkWriter:
        """The writer of the early file, created with its first batch (or at the end)."""
        if self.bulk is None:
            if self._schema is None:
                raise ValueError("no schema was written")
            fs = self._owner.fs
            self._out = fs.create(self.target, overwrite=True, permission=self._permission)
            self.bulk = BulkWriter(self._out, self._fmt, self._codec, self._schema)
        return self.bulk

    def _finish(self) -> tuple[FileWriter, int] | BaseException:
        if self.failed is not None:
            self._discard()
            return self.failed
        try:
            size = self._bulk().close()  # no batch: the file of an empty staged stream
            self.bulk = None
            assert self._out is not None
            self._out.sync()
        except Exception as exc:  # the staged file is converted instead
            self._discard()
            return exc
        out, self._out = self._out, None
        return out, size

    def _discard(self, *, remove: bool = True) -> None:
        self.bulk = None
        out, self._out = self._out, None
        if out is None:
            return
        try:
            out.close()
            if remove:
                self._owner.fs.delete(self.target)
        except OSError as exc:  # the reset deletes what is left: no cut names it
            logger.debug("could not remove %s: %s", self.target, exc)


class EarlyConversions:
    """The threads converting the staged files of a sink while they are written: each file
    is given to the thread with the fewest files (files roll together at the end of a run,
    and two threads finish them on two cores)."""

    def __init__(self, fs: FileSystem, name: str, threads: int = _THREADS) -> None:
        self._workers = [_Worker(fs, f"{name}-{i}") for i in range(max(1, threads))]

    def start(self, target: str, fmt: str, codec: str | None, permission: int | None) -> Early:
        worker = min(self._workers, key=_Worker.load)
        return worker.start(target, fmt, codec, permission)


class _Worker:
    """One thread converting staged files. Writes are queued in order (a write waits while
    :data:`_QUEUED_BYTES` wait); each file's gathered rows are bounded, and all files'
    together (:data:`_EARLY_BYTES`). Started on the first file, a daemon: a process that ends
    leaves the files the reset deletes."""

    def __init__(self, fs: FileSystem, name: str) -> None:
        self.fs = fs
        self._name = name
        self._lock = threading.Condition()
        self._queue: deque[
            tuple[
                Early,
                tuple[list[bytes | memoryview | pa.RecordBatch], int] | Callable[[], Any],
                list[Any] | None,
            ]
        ] = deque()
        self._queued = 0
        self._files: set[Early] = set()
        self._thread: threading.Thread | None = None

    def load(self) -> int:
        with self._lock:
            return len(self._files)

    def start(self, target: str, fmt: str, codec: str | None, permission: int | None) -> Early:
        early = Early(self, target, fmt, codec, permission)
        with self._lock:
            self._files.add(early)
        return early

    def submit(
        self, early: Early, pieces: list[bytes | memoryview | pa.RecordBatch], size: int
    ) -> None:
        with self._lock:
            while self._queued > _QUEUED_BYTES:
                self._lock.wait()
            self._queue.append((early, (pieces, size), None))
            self._queued += size
            self._wake()

    def call(self, early: Early, call: Callable[[], T]) -> T:
        """Run ``call`` on the thread after everything queued; its value."""
        value: T = self.wait(early, self.post(early, call))
        return value

    def post(self, early: Early, call: Callable[[], Any]) -> list[Any]:
        """Queue ``call`` to run on the thread after everything queued; the box that
        :meth:`wait` takes its value from."""
        box: list[Any] = []
        with self._lock:
            self._queue.append((early, call, box))
            self._wake()
        return box

    def wait(self, early: Early, box: list[Any]) -> Any:
        """The value of a call posted, once it ran."""
        with self._lock:
            while not box:
                self._lock.wait()
            self._files.discard(early)
        return box[0]

    def _wake(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(
                target=self._run, name=f"sink-convert {self._name}", daemon=True
            )
            self._thread.start()
        self._lock.notify_all()

    def _run(self) -> None:
        while True:
            with self._lock:
                while not self._queue:
                    # Idle: the thread ends (a sink's next write starts another).
                    if not self._lock.wait(timeout=_IDLE) and not self._queue:
                        self._thread = None
                        return
                early, work, box = self._queue.popleft()
                if isinstance(work, tuple):
                    self._queued -= work[1]
                    self._lock.notify_all()
            if box is not None:
                assert callable(work)
                value = work()
                with self._lock:
                    box.append(value)
                    self._lock.notify_all()
                continue
            assert isinstance(work, tuple)
            if early.failed is not None or early.cancelled:
                continue
            try:
                early._take(work[0])
            except Exception as exc:  # given back at the roll, which converts the staged file
                early.failed = exc
            self._bound()

    def _bound(self) -> None:
        """Write the largest gathered group while all files together hold too much."""
        with self._lock:
            files = [f for f in self._files if f.bulk is not None and f.failed is None]
        held = sum(f.bulk.buffered for f in files if f.bulk is not None)
        for largest in sorted(files, key=lambda f: f.bulk.buffered if f.bulk else 0, reverse=True):
            if held <= _EARLY_BYTES or largest.bulk is None:
                return
            held -= largest.bulk.buffered
            try:
                largest.bulk.flush()
            except Exception as exc:
                largest.failed = exc
