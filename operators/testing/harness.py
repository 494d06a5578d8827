"""Run a real pipeline (scan -> source -> your transforms -> sink) under a :class:`Schedule` of
arrivals, cuts, crashes and failures, restarting from the checkpoint after every crash, and
check the sink's promise on what a plain directory reader sees.

The contract for transforms: **a transform must be a deterministic function of its input
record** (no clocks, random numbers, counters or other state). After a crash the records since
the last cut are read and transformed again, and exactly-once output holds only if they come out
the same. The harness calls each transform twice on every new record and compares every replayed
record with its first result; a difference fails the check, naming the record.

How a crash is simulated (in one process, on real files): at the chosen point the filesystem
stops accepting calls from the "dead" process, its open files are closed as the kernel would
(bytes already handed to a writer land), its permits are cancelled and every object of it is
dropped. A new process (new operators, controller and checkpoint store on the same directories)
then recovers from the newest checkpoint. A *failure* instead raises an ``OSError`` at the point:
the region resets in-process, as it would after a transient I/O error. A machine crash (bytes
written but never synced are lost) is not simulated: after a process crash the kernel keeps them.
"""

from __future__ import annotations

import contextlib
import logging
import os
import posixpath
import re
import tempfile
import uuid
from collections import Counter
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from hypothesis import strategies as st

from operators.scan import HDFS2DirectoryScan, ScanSettings
from operators.sink import HDFS2FileSink, SinkSettings
from operators.source import HDFS2FileSource, SourceSettings
from operators.testing import checks
from operators.testing.injection import (
    Injector,
    InstrumentedFS,
    ObservedSink,
    ObservedSource,
    ObservedStore,
    SimulatedCrash,
)
from operators.testing.schedule import (
    COPYING_SUFFIX,
    Arrival,
    Crash,
    Cut,
    Fault,
    FinishCopy,
    LandingModel,
    Run,
    Schedule,
    ScheduleError,
    StartCopy,
    Stop,
    Wait,
    Write,
)
from operators.testing.strategies import schedules
from region.checkpoint import CheckpointStore
from region.controller import RegionStatus
from region.errors import ConfigError, RegionError
from region.fs import FileSystem
from region.runtime import Pipeline, PipelineRunner, StepOutcome
from region.settings import RegionSettings, Trigger
from region.state import SinkOperator

__all__ = [
    "T0",
    "ManualClock",
    "PipelineReplay",
    "ReplayResult",
    "SimulatedCrash",
    "Workspace",
    "check_pipeline",
    "default_line",
]

logger = logging.getLogger(__name__)

#: ``t0`` of a schedule: the mtime (seconds since the epoch) of a file written at ``mtime t0``.
T0 = 1_700_000_000
#: Injected failures between two completed cuts stay far below this; a pipeline that keeps
#: failing on its own reaches it and is reported.
_MAX_RESETS = 50


class _NonDeterministic(BaseException):
    """A transform gave two different results for one record; ends the replay at once."""


class ManualClock:
    """Seconds since the epoch, moved only by the harness (``wait`` steps, file arrivals)."""

    def __init__(self, now: float = float(T0)) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds

    def at_least(self, now: float) -> None:
        self.now = max(self.now, now)


def default_line(name: str, index: int) -> str:
    """The text of line ``index`` of input file ``name``: ``a.txt:0``, ``a.txt:1``, ..."""
    return f"{name}:{index}"


@dataclass
class Workspace:
    """Where replays run: a filesystem, a directory on it, and a way to set a file's mtime
    (``set_mtime(path, mtime_ns)``). Each replay gets its own fresh subdirectory."""

    fs: FileSystem
    root: str
    set_mtime: Callable[[str, int], None]

    @classmethod
    def local(cls, root: str | os.PathLike[str] | None = None) -> Workspace:
        """The local disk, under ``root``; by default a new temporary directory per replay, in
        memory (``/dev/shm``) when there is one: replays sync every file they write."""
        from operators.fs import LocalFileSystem

        def set_mtime(path: str, mtime_ns: int) -> None:
            os.utime(path, ns=(mtime_ns, mtime_ns))

        return cls(LocalFileSystem(), os.fspath(root) if root is not None else "", set_mtime)

    def new_dir(self) -> str:
        if not self.root:
            return tempfile.mkdtemp(prefix="replay-", dir=_memory_dir())
        path = posixpath.join(self.root, f"replay-{uuid.uuid4().hex[:12]}")
        self.fs.mkdirs(path)
        return path

    def remove(self, path: str) -> None:
        with contextlib.suppress(OSError):
            self.fs.delete(path, recursive=True)


def _memory_dir() -> str | None:
    shm = "/dev/shm"
    return shm if os.path.isdir(shm) and os.access(shm, os.W_OK) else None


# -- what the harness reports ----------------------------------------------------------------


@dataclass(frozen=True)
class ReplayResult:
    """What one replay did (for tests that want to assert their schedules did something)."""

    schedule: Schedule
    #: One line per step: what actually happened.
    log: tuple[str, ...]
    #: Published files (paths relative to the output directory, in name order) and their size.
    published: tuple[str, ...]
    published_bytes: int
    #: Crashes that happened (a fault whose point was never reached does not count).
    crashes: int
    #: Injected failures the region recovered from in-process.
    failures: int
    #: Cuts completed, over every process.
    cuts: int
    #: Files the scan promised to read, and files it may skip (late beyond its window).
    files: int
    optional_files: int


# -- transforms ------------------------------------------------------------------------------


def _key(value: Any) -> Hashable:
    try:
        hash(value)
    except TypeError:
        return ("unhashable", type(value).__qualname__, repr(value))
    return (type(value).__qualname__, value)


def _short(value: Any, limit: int = 80) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


class _Checked:
    """A user transform that must give the same output for the same input, every time."""

    def __init__(self, fn: Callable[[Any], Any]) -> None:
        self.fn = fn
        self.__qualname__ = getattr(fn, "__qualname__", repr(fn))
        self.memo: dict[Hashable, Any] = {}

    def _differ(self, record: Any, first: Any, again: Any, when: str) -> _NonDeterministic:
        return _NonDeterministic(
            f"transform {self.__qualname__} is not deterministic: record {_short(record)} became "
            f"{_short(first)} and {when} {_short(again)}. A transform must be a function of its "
            "input alone (no clock, random numbers, counters or other state): after a crash the "
            "records since the last cut are transformed again, and exactly-once output needs "
            "the same result."
        )

    def __call__(self, record: Any) -> Any:
        key = _key(record)
        out = self.fn(record)
        if key in self.memo:
            if self.memo[key] != out:
                raise self._differ(record, self.memo[key], out, "when replayed")
            return out
        again = self.fn(record)
        if again != out:
            raise self._differ(record, out, again, "when transformed again")
        self.memo[key] = out
        return out

    def expected(self, record: Any) -> Any:
        key = _key(record)
        return self.memo[key] if key in self.memo else self(record)


# -- one process -----------------------------------------------------------------------------


class _Process:
    """Everything one run of the program holds in memory; dropped at a crash."""

    def __init__(self, replay: _Replay) -> None:
        config = replay.config
        self.injector = replay.injector
        self.dead = False
        self.ended = False
        self.fs = InstrumentedFS(replay.fs, replay.injector, replay.areas)
        self.store = ObservedStore(self.fs, replay.checkpoints, replay.injector)
        scan = HDFS2DirectoryScan(replay.scan_settings, self.fs, clock=replay.clock)
        self.sink = config.sink_class(replay.sink_settings, self.fs, clock=replay.clock)
        # As the engine builds it: without a transform, lines go to the sink as bytes.
        encoded_for = None if replay.transforms else getattr(self.sink, "line_encoding", None)
        source = HDFS2FileSource(
            replay.source_settings,
            self.fs,
            files=scan,
            clock=replay.clock,
            encoded_for=encoded_for,
        )
        self.sink_proxy = ObservedSink(self.sink, self, replay.injector)
        pipeline = Pipeline(
            ObservedSource(source, self, replay.injector),
            transforms=replay.transforms,
            sinks=[self.sink_proxy],
            batch_size=config.batch_size,
        )
        # Processes are simulated in this interpreter: a killed one cannot free a lock the way
        # the operating system frees a dead process's (the lock has tests of its own).
        self.runner = PipelineRunner(
            pipeline, replay.region_settings, self.store, wall_clock=replay.clock, lock=False
        )
        self.controller = self.runner.controller
        replay.injector.process = self

    def die(self, where: str) -> None:
        """The process is killed at ``where``: no call of it reaches the filesystem any more."""
        self.dead = True
        self.fs.die()
        self.controller.permits.cancel(lambda: SimulatedCrash(f"the process died {where}"))

    def shutdown(self) -> None:
        """Release what the dead (or stopped) process still holds in this interpreter."""
        if self.controller.status is not RegionStatus.STOPPED:
            with contextlib.suppress(Exception, SimulatedCrash):
                self.controller.stop(graceful=False)


# -- a replay --------------------------------------------------------------------------------


@dataclass
class _InputFile:
    arrival: Arrival
    data: bytes
    optional: bool = False
    visible: bool = False


class _Failed(Exception):
    """The replay found a problem; the message says which."""


class _Replay:
    def __init__(self, config: PipelineReplay, schedule: Schedule, workspace: Workspace) -> None:
        self.config = config
        self.schedule = schedule
        self.workspace = workspace
        self.fs = workspace.fs
        self.dir = workspace.new_dir()
        self.landing = self.dir + "/in"
        self.out = self.dir + "/out"
        self.checkpoints = self.dir + "/checkpoints"
        self.areas = {"output": self.out, "checkpoints": self.checkpoints, "input": self.landing}
        self.fs.mkdirs(self.landing)
        self.clock = ManualClock()
        self.injector = Injector()
        self.transforms = [_Checked(fn) for fn in config.transforms]
        self.scan_settings = config.scan_settings(self.landing)
        self.source_settings = config.source_settings()
        self.sink_settings = config.sink_settings(self.out)
        self.region_settings = config.region_settings()
        self.delivery = self.sink_settings.delivery
        self.model = LandingModel(self.scan_settings.late_window)
        self.files: dict[str, _InputFile] = {}
        self.log: list[str] = []
        self.cuts = 0
        self.process: _Process | None = None
        self.expected_cache: dict[str, tuple[list[bytes], list[str]]] = {}
        #: Records that name their file: the name each written record asked for.
        self.asked: dict[bytes, str] = {}
        #: Files a reader saw published (atomic publish): they must never change.
        self.seen_final: dict[str, bytes] = {}

    # -- the run -------------------------------------------------------------------------

    def execute(self) -> ReplayResult:
        try:
            self._boot(None, "start")
            for index, step in enumerate(self.schedule.steps, 1):
                self._step(index, step)
                if self.delivery == "exactly_once":
                    self._check_moment(index)
            self._final()
            published = self._verify()
        except _NonDeterministic as exc:
            raise _Failed(str(exc)) from None
        except RegionError as exc:
            raise _Failed(f"the region failed: {exc}") from None
        finally:
            if self.process is not None:
                self._end(self.process)
        optional = sum(f.optional for f in self.files.values() if f.visible)
        return ReplayResult(
            self.schedule,
            tuple(self.log),
            tuple(name for name, _ in published.files),
            len(published.stream),
            self.injector.crashes,
            self.injector.failures,
            self.cuts,
            sum(1 for f in self.files.values() if f.visible) - optional,
            optional,
        )

    def _end(self, process: _Process) -> None:
        if process.ended:
            return
        process.ended = True
        if not process.dead:
            process.dead = True
            process.fs.die()
        process.shutdown()
        self.cuts += process.controller.snapshot().cuts

    def _boot(self, fault: Fault | None, why: str) -> None:
        """Start a new process; it recovers from the newest checkpoint."""
        while True:
            process = _Process(self)
            self.process = process
            self.injector.arm(fault)
            try:
                process.runner.start()
            except SimulatedCrash:
                where = self.injector.disarm()
                self._end(process)
                self.log.append(f"   {why}: crashed during the recovery {where}; restart")
                fault, why = None, "restart"
                continue
            except RegionError as exc:
                # A failure while reading the checkpoint at start fails the region by design
                # (falling back to an older cut would roll back): a supervisor restarts it.
                where = self.injector.disarm()
                self._end(process)
                if where is None:
                    raise
                self.log.append(f"   {why}: the region failed at start ({exc}); restart")
                fault, why = None, "restart"
                continue
            fired = self.injector.disarm()
            if fault is not None:
                self.log.append(
                    f"   {why}: recovery failed {fired} and was retried"
                    if fired
                    else f"   {why}: recovery never reached the point ({fault.point})"
                )
            return

    def _crash_and_restart(self, recovery: Fault | None = None) -> None:
        assert self.process is not None
        if not self.process.dead:
            self.process.die("between two steps")
            self.injector.crashes += 1
        self._end(self.process)
        self._boot(recovery, "restart")

    def _step(self, index: int, step: Any) -> None:
        prefix = f"{index}. {step}"
        if isinstance(step, Write):
            self._write(step)
            self.log.append(prefix)
        elif isinstance(step, StartCopy):
            self._start_copy(step.file)
            self.log.append(prefix)
        elif isinstance(step, FinishCopy):
            self._finish_copy(step)
            self.log.append(prefix)
        elif isinstance(step, Wait):
            self.clock.advance(step.seconds)
            self.log.append(prefix)
        elif isinstance(step, Crash):
            self.log.append(f"{prefix}: restart from cut {self._last_cut()}")
            self._crash_and_restart(step.recovery)
        elif isinstance(step, Stop):
            assert self.process is not None
            self._finish_sink(self.process)
            completed = self.process.controller.stop(graceful=True)
            self.log.append(
                f"{prefix}: {'final cut completed' if completed else 'final cut failed'}; restart"
            )
            self._end(self.process)
            self._boot(None, "restart")
        elif isinstance(step, Run | Cut):
            self._faulty(prefix, step)
        else:  # pragma: no cover - Schedule validates its steps
            raise ScheduleError(f"unknown step {step!r}")

    def _faulty(self, prefix: str, step: Run | Cut) -> None:
        process = self.process
        assert process is not None
        self.injector.arm(step.fault)
        outcomes: list[StepOutcome] = []
        completed: bool | None = None
        crashed = False
        try:
            if isinstance(step, Cut):
                completed = process.controller.cut()
            else:
                for _ in range(step.batches):
                    outcomes.append(process.runner.step())
        except SimulatedCrash:
            crashed = True
        fired = self.injector.disarm()
        what = []
        if isinstance(step, Run):
            done = Counter(o for o in outcomes)
            words = {
                StepOutcome.BATCH: "batch",
                StepOutcome.IDLE: "idle",
                StepOutcome.RESET: "reset",
            }
            what.append(
                ", ".join(
                    f"{n} {words[o]}" + ("es" if n > 1 and o is StepOutcome.BATCH else "")
                    for o, n in done.items()
                )
                or "no batch"
            )
        elif completed is not None:
            what.append("completed" if completed else "abandoned, region reset")
        if step.fault is not None:
            if fired is None:
                what.append(f"no fault: {step.fault.point} was never reached")
            else:
                what.append(f"{'crashed' if crashed else 'failed'} {fired}")
        if crashed:
            what.append(f"restart from cut {self._last_cut()}")
        self.log.append(f"{prefix}: {'; '.join(what)}")
        if crashed:
            self._end(process)
            self._boot(None, "restart")

    def _last_cut(self) -> str:
        latest = CheckpointStore(self.fs, self.checkpoints).latest()
        return "none (initial state)" if latest is None else str(latest.cut_id)

    # -- the landing directory -----------------------------------------------------------

    def _content(self, arrival: Arrival) -> bytes:
        end = "\r\n" if arrival.crlf else "\n"
        lines = [self.config.line(arrival.name, i) for i in range(arrival.lines)]
        text = "".join(line + end for line in lines)
        if lines and not arrival.final_newline:
            text = text[: -len(end)]
        return text.encode(self.source_settings.encoding)

    def _put(self, path: str, data: bytes, mtime_ms: int | None) -> None:
        writer = self.fs.create(path, overwrite=False)
        try:
            writer.write(data)
        finally:
            writer.close()
        if mtime_ms is not None:
            self.workspace.set_mtime(path, (T0 * 1000 + mtime_ms) * 1_000_000)

    def _appear(self, files: Sequence[tuple[str, int]]) -> None:
        for (name, mtime_ms), promised in zip(files, self.model.appear(files), strict=True):
            self.files[name].visible = True
            self.files[name].optional = not promised
            # A file is written "now": time moves to its mtime (late files are older).
            self.clock.at_least(T0 + mtime_ms / 1000)

    def _write(self, step: Write) -> None:
        for arrival in step.files:
            data = self._content(arrival)
            self.files[arrival.name] = _InputFile(arrival, data)
            self._put(f"{self.landing}/{arrival.name}", data, arrival.mtime_ms)
        self._appear([(f.name, f.mtime_ms) for f in step.files])

    def _start_copy(self, arrival: Arrival) -> None:
        data = self._content(arrival)
        self.files[arrival.name] = _InputFile(arrival, data)
        self._put(f"{self.landing}/{arrival.name}{COPYING_SUFFIX}", data, None)

    def _finish_copy(self, step: FinishCopy) -> None:
        temp = f"{self.landing}/{step.name}{COPYING_SUFFIX}"
        self.workspace.set_mtime(temp, (T0 * 1000 + step.mtime_ms) * 1_000_000)
        self.fs.rename(temp, f"{self.landing}/{step.name}")
        self._appear([(step.name, step.mtime_ms)])

    # -- the end -------------------------------------------------------------------------

    def _final(self) -> None:
        """Run until nothing is left, end the sink's file, and take the final cut."""
        process = self.process
        assert process is not None
        # Every file old enough, and every line held for its newline due.
        settings = self.scan_settings
        self.clock.advance(max(settings.min_file_age, settings.hold_partial_line) + 1)
        runner, controller = process.runner, process.controller
        total = sum(len(f.data) for f in self.files.values())
        budget = 1000 + 4 * total
        resets = 0
        for _ in range(budget):
            outcome = runner.step()
            if outcome is StepOutcome.RESET:
                resets += 1
                if resets > _MAX_RESETS:
                    break
                continue
            resets = 0
            idle = outcome is StepOutcome.IDLE
            if idle and process.runner.pipeline.source.holding():
                self.clock.advance(settings.hold_partial_line + 1)  # as an available_now run waits
                continue
            if idle and self._finish_sink(process) and controller.cut(final=True):
                self.log.append("then: ran to the end (available now), final cut completed")
                return
        stats = runner.stats()
        if resets > _MAX_RESETS:
            raise _Failed(
                f"the pipeline kept failing after the schedule ({resets} resets in a row); "
                f"last error: {stats.region.last_error}"
            )
        raise _Failed(
            f"the source never ran dry after the schedule: {budget} batches ({stats.records_in} "
            f"records) for {len(self.files)} input files of {total} bytes. Does it emit the "
            "same file or records again and again?"
        )

    @staticmethod
    def _finish_sink(process: _Process) -> bool:
        """The input ended: the sink closes its file so the final cut publishes it (as the
        runtime does before the final cut of a graceful stop or an available-now run)."""
        with process.controller.permits.hold():
            try:
                process.sink_proxy.finish()
            except Exception as exc:
                process.controller.report_failure(process.sink.name, exc)
                return False
        return True

    def _expected_of(self, name: str) -> tuple[list[bytes], list[str]]:
        cached = self.expected_cache.get(name)
        if cached is not None:
            return cached
        records = _source_records(self.files[name].data, self.source_settings)
        for transform in self.transforms:
            outputs = []
            for record in records:
                try:
                    out = transform.expected(record)
                except Exception as exc:
                    raise _Failed(
                        f"transform {transform.__qualname__} raised {type(exc).__name__}: {exc} "
                        f"on record {_short(record)} of {name}; the region would reset and "
                        "replay it until it gives up"
                    ) from None
                if out is not None:
                    outputs.append(out)
            records = outputs
        tokens = [self._encode(record, name) for record in records]
        result = (tokens, [_short(r) for r in records])
        self.expected_cache[name] = result
        return result

    def _encode(self, record: Any, name: str) -> bytes:
        if self.config.named:
            if not (isinstance(record, tuple | list) and len(record) == 2):
                raise _Failed(
                    f"the transforms turned a record of {name} into {_short(record)}: a sink "
                    "with file_attribute_name writes (file name, value) pairs"
                )
            token = self._encode_value(record[1], name)
            self.asked[token] = str(record[0])
            return token
        return self._encode_value(record, name)

    def _encode_value(self, record: Any, name: str) -> bytes:
        settings = self.sink_settings
        if settings.format == "line":
            if not isinstance(record, str):
                raise _Failed(
                    f"the transforms turned a record of {name} into {_short(record)} "
                    f"({type(record).__name__}): a line sink writes str records"
                )
            data = (record + "\n").encode(settings.encoding)
            bom = "".encode(settings.encoding)
            return data[len(bom) :] if bom else data
        if not isinstance(record, bytes | bytearray | memoryview):
            raise _Failed(
                f"the transforms turned a record of {name} into {_short(record)} "
                f"({type(record).__name__}): a binary sink writes bytes records"
            )
        return bytes(record)

    def _expected(self) -> checks.Expected:
        expected = checks.Expected()
        for name, file in self.files.items():
            if file.visible:
                tokens, shown = self._expected_of(name)
                expected.add(name, tokens, shown, optional=file.optional)
        return expected

    def _published(self) -> checks.Published:
        return checks.read_published(self.fs, self.out, bom="".encode(self.sink_settings.encoding))

    def _after_read_problems(self, published: checks.Published, *, final: bool) -> list[str]:
        """``after_read``: nothing archived (or deleted) before every record of it is
        published; at the end, every file read whole and published has left the landing
        directory (unless it changed after it was read: it then stays)."""
        mode = self.scan_settings.after_read
        if mode == "keep":
            return []
        problems: list[str] = []
        stream = published.stream
        present = {s.name: s for s in self._listing(self.landing)}
        archived: dict[str, bytes] = {}
        if mode == "archive":
            assert self.scan_settings.archive_dir is not None
            for status in self._listing(self.scan_settings.archive_dir, recursive=True):
                archived[status.path] = self.fs.read(status.path)
        for name, file in self.files.items():
            if not file.visible or file.optional:
                continue
            tokens, _ = self._expected_of(name)
            complete = all(t in stream for t in tokens)
            if name not in present and not complete and mode == "delete":
                problems.append(f"{name} was deleted before all its records were published")
            left = final and complete and name in present
            if left and self.fs.read(present[name].path) == file.data:
                problems.append(f"{name} was read whole and published but not {mode}d")
        for path, data in archived.items():
            owners = [n for n, f in self.files.items() if f.data == data]
            if not owners:
                continue
            tokens, _ = self._expected_of(owners[0])
            if not all(t in stream for t in tokens):
                problems.append(f"{path} was archived before all its records were published")
        return problems

    def _listing(self, directory: str, *, recursive: bool = False) -> list[Any]:
        try:
            entries = self.fs.list_dir(directory)
        except FileNotFoundError:
            return []
        out: list[Any] = []
        for status in entries:
            if status.is_dir:
                if recursive:
                    out += self._listing(status.path, recursive=True)
            elif not status.name.startswith((".", "_")):
                out.append(status)
        return out

    def _check_moment(self, index: int) -> None:
        published = self._published()
        problems_read = self._after_read_problems(published, final=False)
        if problems_read:
            raise _Failed(f"after step {index}: " + "; ".join(problems_read))
        if self.config.named:
            problems = checks.record_problems(published.stream, self._expected(), partial=True)
            problems += self._named_file_problems(published)
        else:
            problems = checks.exactly_once_problems(
                published.stream, self._expected(), partial=True
            )
        if problems:
            raise _Failed(
                f"after step {index}, a plain directory reader sees records more than once "
                f"(exactly_once never shows a duplicate):\n    "
                + "\n    ".join(problems)
                + f"\n  published files: {published.describe()}"
            )

    def _named_file_problems(self, published: checks.Published) -> list[str]:
        """Records that name their file: each is in the file it named or in a numbered one of
        that name (``o.csv`` -> ``o-1.csv``), and a file once published (atomic) never changes:
        nothing is overwritten."""
        problems: list[str] = []
        sub = posixpath.relpath(self.sink_settings.directory or self.out, self.out)
        for path, data in published.files:
            for line in data.splitlines(keepends=True):
                asked = self.asked.get(line)
                if asked is not None and sub != ".":
                    asked = posixpath.join(sub, asked)
                if asked is not None and not _names_match(asked, path):
                    problems.append(f"record {line!r} asked for {asked!r} but is in {path!r}")
                    break
            if self.sink_settings.publish != "atomic":
                continue
            before = self.seen_final.setdefault(path, data)
            if before != data:
                problems.append(
                    f"published file {path!r} changed from {_short(before)} to {_short(data)} "
                    "(a published file is final, never overwritten)"
                )
        return problems

    def _verify(self) -> checks.Published:
        published = self._published()
        expected = self._expected()
        if self.delivery == "exactly_once":
            if self.config.named:
                problems = checks.record_problems(published.stream, expected)
            else:
                problems = checks.exactly_once_problems(published.stream, expected)
            promise = "exactly_once: every input record, transformed, exactly once"
        else:
            problems = checks.at_least_once_problems(published.stream, expected)
            promise = "at_least_once: every input record, transformed, at least once"
        if self.config.named:
            problems += self._named_file_problems(published)
        leftovers = [h for h in published.hidden if h.startswith(".")]
        if leftovers and self.config.check_leftovers:
            problems.append("files left behind after the final cut: " + ", ".join(leftovers[:8]))
        problems += self._after_read_problems(published, final=True)
        if problems:
            raise _Failed(
                f"the published output breaks {promise}:\n    "
                + "\n    ".join(problems)
                + f"\n  published files: {published.describe()}"
            )
        return published


def _names_match(asked: str, path: str) -> bool:
    """Whether ``path`` is the file name ``asked`` or a numbered one of it (``o-3.csv``)."""
    if path == asked:
        return True
    head, base = posixpath.split(asked)
    stem, ext = posixpath.splitext(base)
    numbered = re.escape(posixpath.join(head, stem)) + r"-[0-9]+" + re.escape(ext)
    return re.fullmatch(numbered, path) is not None


def _source_records(data: bytes, settings: SourceSettings) -> list[Any]:
    """The records the file source reads from ``data`` (the promise of its format)."""
    if settings.format == "binary":
        size = settings.block_size
        return [data[i : i + size] for i in range(0, len(data), size)]
    pieces = data.split(b"\n")
    last = pieces.pop()
    records = [p[:-1] if p.endswith(b"\r") else p for p in pieces]
    if last:
        records.append(last)
    return [r.decode(settings.encoding) for r in records]


# -- the public face -------------------------------------------------------------------------


class PipelineReplay:
    """A pipeline to test: scan -> file source -> ``transforms`` -> file sink.

    ``sink`` is the sink's settings with a *relative* ``file`` template (``part-%FILENUM.txt``),
    or with ``file_attribute_name`` (line format): then the transforms turn each record into a
    ``(file name, line)`` pair, and the check is per record (each exactly once, in the file it
    named or a numbered one of that name, published files never changed) instead of per input
    file in order. The harness writes under its own temporary directory. ``source`` and ``scan``
    settings are optional (their ``file`` / ``directory`` are set by the harness; ``sleep_time``
    and ``init_delay`` are ignored: time is simulated). ``trigger``: ``periodic`` cuts only
    where the schedule says; ``operator_driven`` also cuts after each file, as the region would.
    ``line(name, index)`` gives the text of each input line. ``sink_class`` builds the sink as
    ``sink_class(settings, fs, clock=clock)`` (a subclass, or a ``functools.partial`` with more
    arguments). ``workspace``: where to run (default: a new temporary directory per replay).

    Transforms must be deterministic (see the module docstring); they are called more than once
    per record. Check a schedule with :meth:`check`; draw schedules with :meth:`schedules`.
    """

    def __init__(
        self,
        *,
        sink: SinkSettings | Mapping[str, Any],
        transforms: Sequence[Callable[[Any], Any]] = (),
        source: SourceSettings | Mapping[str, Any] | None = None,
        scan: ScanSettings | Mapping[str, Any] | None = None,
        trigger: Literal["periodic", "operator_driven"] = "periodic",
        batch_size: int = 2,
        line: Callable[[str, int], str] = default_line,
        sink_class: Callable[..., SinkOperator] = HDFS2FileSink,
        workspace: Workspace | Callable[[], Workspace] | None = None,
        check_leftovers: bool = True,
    ) -> None:
        self._sink = _as_dict(sink, "sink")
        self._source = _as_dict(source, "source")
        self._scan = _as_dict(scan, "scan")
        #: Records name their files (``(name, value)`` pairs from the transforms).
        self.named = (
            self._sink.get("file_attribute_name", self._sink.get("fileAttributeName")) is not None
        )
        file = self._sink.get("file")
        if self.named:
            if self._sink.get("format", "line") != "line":
                raise ConfigError("sink: file_attribute_name is replayed in line format only")
        elif not isinstance(file, str) or file.startswith("/"):
            raise ConfigError(
                f"sink: file={file!r} must be a relative template such as 'part-%FILENUM.txt': "
                "the harness writes under its own temporary directory"
            )
        if self._source.get("file") is not None:
            raise ConfigError("source: leave file unset, the scan names the files")
        if trigger not in ("periodic", "operator_driven"):
            raise ConfigError(f"trigger {trigger!r} must be 'periodic' or 'operator_driven'")
        self.transforms = tuple(transforms)
        self.trigger = trigger
        self.batch_size = batch_size
        self.line = line
        self.sink_class = sink_class
        self.check_leftovers = check_leftovers
        self._workspace = workspace
        # Validate now: a bad setting should fail the test at once, naming the field.
        self.sink_settings("/replay/out")
        self.source_settings()
        self.scan_settings("/replay/in")

    # -- settings as the harness builds them -----------------------------------------------

    @property
    def delivery(self) -> str:
        return self.sink_settings("/replay/out").delivery

    def sink_settings(self, out: str) -> SinkSettings:
        data = dict(self._sink)
        sub = data.get("directory")
        data["directory"] = posixpath.join(out, sub) if sub else out
        return SinkSettings.model_validate(data)

    def source_settings(self) -> SourceSettings:
        return SourceSettings.model_validate({**self._source, "init_delay": 0})

    def scan_settings(self, directory: str) -> ScanSettings:
        data = {**self._scan, "directory": directory, "sleep_time": 0, "init_delay": 0}
        data.pop("roots", None)
        # A schedule lands each file whole: a last line without newline is final. Held for
        # its newline it would be published after the files read meanwhile, which the order
        # check counts against (the hold has tests of its own).
        data.setdefault("hold_partial_line", 0)
        archive = data.get("archive_dir", data.get("archiveDir"))
        if isinstance(archive, str) and not archive.startswith("/"):
            # Beside the landing directory, in the replay's own folder.
            data.pop("archiveDir", None)
            data["archive_dir"] = posixpath.join(posixpath.dirname(directory), archive)
        return ScanSettings.model_validate(data)

    def region_settings(self) -> RegionSettings:
        periodic = self.trigger == "periodic"
        return RegionSettings(
            trigger=Trigger.PERIODIC if periodic else Trigger.OPERATOR_DRIVEN,
            period=1e9,  # never fires: the schedule says when to cut
            max_consecutive_reset_attempts=_MAX_RESETS,
            reset_backoff=0,  # the schedule, not the clock, decides when the next step comes
            drain_timeout=60.0,
            reset_timeout=60.0,
        )

    # -- use --------------------------------------------------------------------------------

    def schedules(self, **options: Any) -> st.SearchStrategy[Schedule]:
        """:func:`~operators.testing.strategies.schedules` fitted to this pipeline (its scan's
        late window; no torn writes for an ``at_least_once`` sink)."""
        options.setdefault("late_window", self.scan_settings("/x").late_window)
        if self.delivery == "at_least_once":
            options.setdefault("torn_writes", False)
        return schedules(**options)

    def check(
        self, schedule: Schedule | str, *, workspace: Workspace | None = None
    ) -> ReplayResult:
        """Run ``schedule`` and check the sink's promise; ``AssertionError`` with a report when
        it is broken. A schedule may also be given in words (as a report prints it)."""
        if isinstance(schedule, str):
            schedule = Schedule.from_words(schedule)
        space = workspace or self._make_workspace()
        replay = _Replay(self, schedule, space)
        try:
            result = replay.execute()
        except _Failed as exc:
            raise AssertionError(_report(str(exc), schedule, replay.log)) from None
        finally:
            space.remove(replay.dir)
        return result

    def __call__(self, schedule: Schedule | str) -> ReplayResult:
        return self.check(schedule)

    def __repr__(self) -> str:
        names = [getattr(t, "__qualname__", repr(t)) for t in self.transforms]
        return (
            f"PipelineReplay(sink={self._sink!r}, source={self._source!r}, scan={self._scan!r}, "
            f"transforms={names}, trigger={self.trigger!r}, batch_size={self.batch_size})"
        )

    def _make_workspace(self) -> Workspace:
        workspace = self._workspace
        if workspace is None:
            return Workspace.local()
        return workspace if isinstance(workspace, Workspace) else workspace()


def _as_dict(value: Any, what: str) -> dict[str, Any]:
    if value is None:
        return {}
    if hasattr(value, "model_dump"):
        data: dict[str, Any] = value.model_dump(exclude_unset=True)
        return data
    if isinstance(value, Mapping):
        return dict(value)
    raise ConfigError(f"{what}: expected settings or a dict, got {type(value).__name__}")


def _report(problem: str, schedule: Schedule, log: Sequence[str]) -> str:
    lines = [
        "Pipeline replay failed: " + problem,
        "",
        "Schedule (after every crash the pipeline restarts from its last completed cut):",
        *("  " + line for line in schedule.lines()),
        "  then: run to the end (available now), final cut",
        "",
        "What happened:",
        *("  " + line for line in log),
        "",
        "Replay it with:",
        f"  replay.check({schedule.words!r})",
    ]
    return "\n".join(lines)


def check_pipeline(
    schedule: Schedule | str,
    *,
    sink: SinkSettings | Mapping[str, Any],
    transforms: Sequence[Callable[[Any], Any]] = (),
    **options: Any,
) -> ReplayResult:
    """One call: ``PipelineReplay(sink=..., transforms=..., **options).check(schedule)``."""
    return PipelineReplay(sink=sink, transforms=transforms, **options).check(schedule)
