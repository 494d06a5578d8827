"""Fault injection for replays: a filesystem and operator wrappers that let one process "die"
(or fail) at a chosen point. Nothing here changes what the operators do; the wrappers forward
every call to the real objects and only count calls and raise at the armed point."""

from __future__ import annotations

import contextlib
import errno
from collections.abc import Callable, Mapping
from typing import Any, Protocol

from operators.testing.schedule import Fault, FsPoint, PhasePoint
from region.checkpoint import CheckpointInfo, CheckpointStore
from region.fs import FileStatus, FileSystem, FileWriter, mtime_tracks_writes
from region.state import Batch, SinkOperator, StartOperator, State, StateHandler

__all__ = [
    "Injector",
    "InstrumentedFS",
    "ObservedSink",
    "ObservedSource",
    "ObservedStore",
    "SimulatedCrash",
]


class SimulatedCrash(BaseException):
    """The simulated death of the process. A ``BaseException`` so that no ``except Exception``
    in the code under test treats it as a failure to recover from: nothing of a dead process
    runs on."""


class Mortal(Protocol):
    """The process a fault kills."""

    dead: bool

    def die(self, where: str) -> None: ...


# -- fault injection -------------------------------------------------------------------------

_PHASE_HOOKS: dict[tuple[str, str, str], str] = {
    ("source", "drain", "before"): "before the drain",
    ("sink", "drain", "after"): "after the drain",
    ("sink", "checkpoint", "after"): "after the checkpoints are taken",
    ("store", "write", "after"): "after the checkpoint is written",
    ("sink", "on_cut_completed", "after"): "after publish",
    ("source", "on_cut_published", "before"): "before the archive",
    ("source", "on_cut_published", "after"): "after the archive",
}


class Injector:
    """Holds the armed fault of the running step and fires it where it is reached."""

    def __init__(self) -> None:
        self.fault: Fault | None = None
        self.count = 0
        self.fired: str | None = None
        self.process: Mortal | None = None
        self.crashes = 0
        self.failures = 0

    def arm(self, fault: Fault | None) -> None:
        self.fault, self.count, self.fired = fault, 0, None

    def disarm(self) -> str | None:
        fired, self.fault, self.fired = self.fired, None, None
        return fired

    def fire(self, where: str, path: str | None = None) -> None:
        fault = self.fault
        assert fault is not None
        self.fault = None
        self.fired = where
        if fault.crash:
            self.crashes += 1
            assert self.process is not None
            self.process.die(where)
            raise SimulatedCrash(where)
        self.failures += 1
        raise OSError(errno.EIO, f"injected I/O error {where}", path)

    def phase(self, who: str, method: str, when: str) -> None:
        fault = self.fault
        if fault is None or not isinstance(fault.point, PhasePoint):
            return
        phase = _PHASE_HOOKS.get((who, method, when))
        if phase == fault.point.phase:
            self.fire(phase)

    def fs_call(self, op: str, area: str | None, path: str) -> str | None:
        """Before filesystem call ``op``: fires a ``before`` fault; returns ``"after"`` or
        ``"during"`` when the fault is due after (or in the middle of) this call."""
        fault = self.fault
        if fault is None or not isinstance(fault.point, FsPoint):
            return None
        point = fault.point
        if point.op != op or point.area != area:
            return None
        self.count += 1
        if self.count != point.nth:
            return None
        if point.when == "before":
            self.fire(f"before {op} of {path}", path)
        return point.when


class _Writer:
    """A writer of the instrumented filesystem."""

    def __init__(self, fs: InstrumentedFS, inner: FileWriter, area: str | None) -> None:
        self._fs, self._inner, self._area = fs, inner, area
        self.closed = False

    @property
    def path(self) -> str:
        return self._inner.path

    def write(self, data: bytes | memoryview) -> None:
        self._fs.alive()
        due = self._fs.injector.fs_call("write", self._area, self.path)
        if due == "during":
            self._inner.write(data[: len(data) // 2])
            self._fs.injector.fire(
                f"in the middle of a write of {len(data)} bytes to {self.path}", self.path
            )
        self._inner.write(data)
        if due == "after":
            self._fs.injector.fire(f"after a write to {self.path}", self.path)

    def flush(self) -> None:
        self._fs.alive()
        self._inner.flush()

    def sync(self) -> None:
        self._fs.call("sync", self.path, self._inner.sync)

    def close(self) -> None:
        if self.closed:
            return
        try:
            self._fs.call("close", self.path, self._inner.close)
        except OSError:
            # A real writer's close ends it even when it fails: its claim on the path is
            # released (every writer's close does so in a finally) and it writes no more. A
            # fault fired before the inner close ran would leave the inner writer's claim held
            # for ever, refusing the retry's create of the same path in this process, which no
            # real close does: the inner writer is ended as a dead process's is.
            self.kill()
            self._fs.writers.discard(self)
            raise
        self.closed = True
        self._fs.writers.discard(self)

    def kill(self) -> None:
        """The process died: the kernel closes the file (what the writer holds lands)."""
        if not self.closed:
            self.closed = True
            with contextlib.suppress(Exception):
                self._inner.close()


class InstrumentedFS:
    """The real filesystem as one process sees it: counts calls per area (output, checkpoints,
    input) for the injector, and refuses every call once the process is dead."""

    def __init__(self, inner: FileSystem, injector: Injector, areas: Mapping[str, str]) -> None:
        self._inner = inner
        self.injector = injector
        self._areas = dict(areas)
        self.supports_truncate = inner.supports_truncate
        self.mtime_tracks_writes = mtime_tracks_writes(inner)
        self.dead = False
        self.writers: set[_Writer] = set()

    def area(self, path: str) -> str | None:
        for area, root in self._areas.items():
            if path == root or path.startswith(root.rstrip("/") + "/"):
                return area
        return None

    def alive(self) -> None:
        if self.dead:
            raise SimulatedCrash("the process is dead")

    def call(self, op: str, path: str, fn: Callable[[], Any]) -> Any:
        self.alive()
        due = self.injector.fs_call(op, self.area(path), path)
        result = fn()
        if due == "after":
            self.injector.fire(f"after {op} of {path}", path)
        return result

    def display(self, path: str) -> str:
        return self._inner.display(path)

    def status(self, path: str) -> FileStatus:
        self.alive()
        return self._inner.status(path)

    def exists(self, path: str) -> bool:
        self.alive()
        return self._inner.exists(path)

    def list_dir(self, path: str) -> list[FileStatus]:
        result: list[FileStatus] = self.call("list", path, lambda: self._inner.list_dir(path))
        return result

    def read(self, path: str, offset: int = 0, length: int = -1) -> bytes:
        result: bytes = self.call("read", path, lambda: self._inner.read(path, offset, length))
        return result

    def _writer(self, op: str, path: str, open_: Callable[[], FileWriter]) -> FileWriter:
        # Registered before a fault "after" the open fires: the dying process must close it, as
        # the kernel would, or its claim on the path outlives the process in this interpreter.
        self.alive()
        due = self.injector.fs_call(op, self.area(path), path)
        writer = _Writer(self, open_(), self.area(path))
        self.writers.add(writer)
        if due == "after":
            try:
                self.injector.fire(f"after {op} of {path}", path)
            except OSError:
                # The open landed but its answer was lost: the caller holds no writer to close.
                writer.kill()
                self.writers.discard(writer)
                raise
        return writer

    def create(
        self, path: str, *, overwrite: bool = False, permission: int | None = None
    ) -> FileWriter:
        return self._writer(
            "create",
            path,
            lambda: self._inner.create(path, overwrite=overwrite, permission=permission),
        )

    def append(self, path: str) -> FileWriter:
        return self._writer("append", path, lambda: self._inner.append(path))

    def truncate(self, path: str, length: int) -> None:
        self.call("truncate", path, lambda: self._inner.truncate(path, length))

    def rename(self, src: str, dst: str, *, overwrite: bool = False) -> None:
        self.call("rename", src, lambda: self._inner.rename(src, dst, overwrite=overwrite))

    def delete(self, path: str, *, recursive: bool = False) -> bool:
        result: bool = self.call(
            "delete", path, lambda: self._inner.delete(path, recursive=recursive)
        )
        return result

    def mkdirs(self, path: str, *, permission: int | None = None) -> None:
        self.alive()
        self._inner.mkdirs(path, permission=permission)

    def die(self) -> None:
        self.dead = True
        for writer in list(self.writers):
            writer.kill()
        self.writers.clear()


class _Observed(StateHandler):
    """Forwards every call to the real operator; reports cut phases to the injector."""

    def __init__(self, inner: StateHandler, who: str, process: Mortal, injector: Injector) -> None:
        self.inner = inner
        self.name = inner.name
        self._who = who
        self._process = process
        self._injector = injector

    def _around(self, method: str, call: Callable[[], Any]) -> Any:
        injector = self._injector
        injector.phase(self._who, method, "before")
        result = call()
        injector.phase(self._who, method, "after")
        return result

    def drain(self) -> None:
        self._around("drain", self.inner.drain)

    def checkpoint(self, cut_id: int) -> State:
        state: State = self._around("checkpoint", lambda: self.inner.checkpoint(cut_id))
        return state

    def reset(self, state: State) -> None:
        self._around("reset", lambda: self.inner.reset(state))

    def reset_to_initial_state(self) -> None:
        self._around("reset", self.inner.reset_to_initial_state)

    def on_cut_completed(self, cut_id: int) -> None:
        self._around("on_cut_completed", lambda: self.inner.on_cut_completed(cut_id))

    def published_through(self, cut_id: int) -> int:
        return self.inner.published_through(cut_id)

    def on_cut_published(self, cut_id: int) -> None:
        self._around("on_cut_published", lambda: self.inner.on_cut_published(cut_id))

    def recall_completed(self, cut_id: int) -> None:
        self.inner.recall_completed(cut_id)

    def retire_checkpoint(self, cut_id: int) -> None:
        self.inner.retire_checkpoint(cut_id)

    def close(self) -> None:
        if not self._process.dead:  # a dead process runs no more code
            self.inner.close()


class ObservedSource(_Observed, StartOperator):
    def __init__(self, inner: StartOperator, process: Mortal, injector: Injector) -> None:
        super().__init__(inner, "source", process, injector)
        self.source = inner

    def next_batch(self, max_records: int) -> Batch | None:
        return self.source.next_batch(max_records)

    def exhausted(self) -> bool:
        return self.source.exhausted()

    def poll_interval(self) -> float:
        return self.source.poll_interval()


class ObservedSink(_Observed, SinkOperator):
    def __init__(self, inner: SinkOperator, process: Mortal, injector: Injector) -> None:
        super().__init__(inner, "sink", process, injector)
        self.sink = inner

    def write(self, batch: Batch) -> None:
        self.sink.write(batch)

    def on_tick(self, now: float) -> None:
        self.sink.on_tick(now)

    def finish(self) -> None:
        finish = getattr(self.sink, "finish", None)
        if callable(finish):
            finish()


class ObservedStore(CheckpointStore):
    def __init__(self, fs: FileSystem, directory: str, injector: Injector) -> None:
        super().__init__(fs, directory)
        self._injector = injector

    def write(
        self, cut_id: int, operators: Mapping[str, State], *, meta: Mapping[str, Any] | None = None
    ) -> CheckpointInfo:
        info = super().write(cut_id, operators, meta=meta)
        self._injector.phase("store", "write", "after")
        return info
