"""Property test: a region over a replayable source and a file sink, driven through emit / cut /
crash / reset / stop in any order.

Invariants, checked after every step against what a fresh reader of the checkpoint directory and
of the output file sees:

- exactly_once: the output up to the committed sink size is the input up to the committed source
  index, in order, once; while running the whole file is exactly what the source emitted; after
  a graceful stop the whole file is exactly the committed input.
- at_least_once (append on reset): the output covers the committed input, and the records it holds
  are a gap-free prefix of the input (repeats allowed).
- cut ids only grow, across crashes too.
"""

from __future__ import annotations

import os
import shutil
import tempfile

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
)

from operators.fs.local import LocalFileSystem
from region.checkpoint import CheckpointStore
from region.controller import RegionStatus
from region.runtime import Pipeline, PipelineRunner, StepOutcome
from tests.region._participants import Crash, FileSink, ListSource, expected_lines, region_settings

# Cheap durable writes: tmpfs when there is one (the store syncs every cut).
_TMP_ROOT = "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) else None


class CrashingFileSystem(LocalFileSystem):
    """Local files; with ``crash_on_rename`` the process "dies" just before publishing a cut
    file, leaving its complete temporary file behind."""

    def __init__(self) -> None:
        self.crash_on_rename = False

    def rename(self, src: str, dst: str, *, overwrite: bool = False) -> None:
        if self.crash_on_rename:
            self.crash_on_rename = False
            raise Crash(f"killed before renaming {src}")
        super().rename(src, dst, overwrite=overwrite)


CRASH_POINTS = [
    ("source", "drain"),
    ("sink", "drain"),
    ("sink", "checkpoint"),
    ("store", "rename"),
    ("source", "on_cut_completed"),
    ("sink", "on_cut_completed"),
]


@settings(
    max_examples=300,
    stateful_step_count=25,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
class RegionMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.tmp = tempfile.mkdtemp(prefix="region-sm-", dir=_TMP_ROOT)
        self.out = os.path.join(self.tmp, "out.txt")
        self.checkpoints = os.path.join(self.tmp, "checkpoints")
        self.fs = CrashingFileSystem()
        self.sink: FileSink | None = None
        self.running = False
        self.stopped_gracefully = False
        self.newest_cut = -1

    def teardown(self) -> None:
        if self.sink is not None:
            self.sink.crash()
        shutil.rmtree(self.tmp, ignore_errors=True)

    # ------------------------------------------------------------------ building a "process"

    @initialize(
        mode=st.sampled_from(["exactly_once", "at_least_once"]),
        count=st.integers(0, 30),
        batch_size=st.integers(1, 6),
        punctuate_every=st.sampled_from([0, 0, 3, 7]),
        retain=st.integers(1, 3),
    )
    def setup(
        self, mode: str, count: int, batch_size: int, punctuate_every: int, retain: int
    ) -> None:
        self.mode = mode
        self.input = [f"r{i}" for i in range(count)]
        self.batch_size = batch_size
        self.punctuate_every = punctuate_every
        self.retain = retain
        self._boot()

    def _boot(self) -> None:
        """A new process on the same checkpoint directory and output file."""
        self.source = ListSource(self.input, punctuate_every=self.punctuate_every)
        self.sink = FileSink(self.out, mode=self.mode, fsync=False)
        self.store = CheckpointStore(self.fs, self.checkpoints, retain=self.retain)
        pipeline = Pipeline(self.source, sinks=[self.sink], batch_size=self.batch_size)
        settings_ = region_settings(max_consecutive_reset_attempts=1_000_000)
        # Crashes are simulated in this interpreter: no lock (a dead process frees its own).
        self.runner = PipelineRunner(pipeline, settings_, self.store, lock=False)
        self.controller = self.runner.controller
        self.runner.start()
        self.running = True
        self.stopped_gracefully = False

    def _die(self) -> None:
        assert self.sink is not None
        self.sink.crash()  # everything in memory is gone; what was written stays
        self.running = False
        self.fs.crash_on_rename = False

    # ------------------------------------------------------------------ rules

    @precondition(lambda self: self.running)
    @rule()
    def emit(self) -> None:
        assert self.runner.step() is not StepOutcome.RESET

    @precondition(lambda self: self.running)
    @rule()
    def cut(self) -> None:
        assert self.controller.cut() is True

    @rule()
    def crash(self) -> None:
        if self.running:
            self._die()
        self._boot()

    @precondition(lambda self: self.running)
    @rule(point=st.sampled_from(CRASH_POINTS))
    def crash_inside_a_cut(self, point: tuple[str, str]) -> None:
        where, method = point
        if where == "store":
            self.fs.crash_on_rename = True
        else:
            operator = self.source if where == "source" else self.sink
            assert operator is not None
            operator.faults.arm(method, Crash(f"killed in {where}.{method}"))
        try:
            self.controller.cut()
        except Crash:
            pass
        else:
            raise AssertionError(f"the crash at {point} did not happen")
        self._die()
        self._boot()

    @precondition(lambda self: self.running)
    @rule()
    def sink_write_fails(self) -> None:
        assert self.sink is not None
        self.sink.faults.arm("write", OSError(5, "Input/output error", self.out))
        outcome = self.runner.step()
        if outcome is not StepOutcome.RESET:
            self.sink.faults = type(self.sink.faults)()  # no record was written: disarm

    @precondition(lambda self: self.running)
    @rule()
    def source_fails(self) -> None:
        self.source.faults.arm("next_batch", OSError("connection reset"))
        assert self.runner.step() is StepOutcome.RESET

    @precondition(lambda self: self.running)
    @rule()
    def reset(self) -> None:
        self.controller.report_failure("test", RuntimeError("injected failure"))
        assert self.controller.status is RegionStatus.PROCESSING

    @precondition(lambda self: self.running)
    @rule()
    def stop_gracefully(self) -> None:
        assert self.controller.stop() is True
        self.running = False
        self.stopped_gracefully = True

    @precondition(lambda self: self.running)
    @rule()
    def stop_immediately(self) -> None:
        assert self.controller.stop(graceful=False) is False
        self.running = False

    @precondition(lambda self: self.running)
    @rule()
    def run_to_the_end(self) -> None:
        stats = self.runner.run(available_now=True)
        assert stats.region.status is RegionStatus.STOPPED
        self.running = False
        self.stopped_gracefully = True
        assert self.committed()[0] == len(self.input)

    @precondition(lambda self: not self.running)
    @rule()
    def restart(self) -> None:
        self._boot()

    # ------------------------------------------------------------------ invariants

    def committed(self) -> tuple[int, int]:
        """(source index, sink size) of the newest cut, as a fresh process would read it."""
        latest = CheckpointStore(LocalFileSystem(), self.checkpoints).latest()
        if latest is None:
            return 0, 0
        assert latest.cut_id >= self.newest_cut, "cut ids went backwards"
        self.newest_cut = latest.cut_id
        return int(latest.operators["source"]["index"]), int(latest.operators["sink"]["size"])

    def output(self) -> bytes:
        try:
            with open(self.out, "rb") as f:
                return f.read()
        except FileNotFoundError:
            return b""

    @invariant()
    def committed_output_is_the_input_prefix(self) -> None:
        if not hasattr(self, "input"):
            return
        index, size = self.committed()
        data = self.output()
        if self.mode == "exactly_once":
            assert data[:size] == expected_lines(self.input[:index])
            if self.running:
                assert data == expected_lines(self.input[: self.source.index])
            if self.stopped_gracefully:
                assert data == expected_lines(self.input[:index])
        else:
            records = [int(line[1:]) for line in data.decode().splitlines()]
            highest = -1
            for record in records:
                assert record <= highest + 1, f"record r{record} skips ahead of r{highest}"
                highest = max(highest, record)
            assert set(range(index)) <= set(records), "a committed record is missing"


TestRegion = RegionMachine.TestCase
