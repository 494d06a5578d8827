"""A random-crash property of the content rule (``on_modified = "continue"``, the default) in
the real scan -> source -> sink, in process: files appended to, rewritten, written anew with
more rows, rotated by rename and by copytruncate, a last line left without newline (held
while young: ``hold_partial_line``), between runs of the pipeline that cut at random and
crash (the process dropped, its open files left as they are) at random; then a run to the
end. Every line published once, never a line in two pieces; every line still in a landing
file published."""

from __future__ import annotations

import collections
import contextlib
import os
import shutil
from collections.abc import Callable
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from operators.fs.local import LocalFileSystem
from operators.scan import HDFS2DirectoryScan, ScanSettings
from operators.sink import HDFS2FileSink, SinkSettings
from operators.source import HDFS2FileSource, SourceSettings
from operators.testing import checks
from operators.testing.injection import Injector, InstrumentedFS, SimulatedCrash
from region.checkpoint import CheckpointStore
from region.fs import FileSystem
from region.runtime import Pipeline, PipelineRunner, StepOutcome
from region.settings import RegionSettings, Trigger

T0 = 1_700_000_000
OPS = ("append", "rewrite", "cumulative", "rotate", "copytruncate", "partial")


class _Landing:
    """The landing directory and every line written into it (each unique)."""

    def __init__(self, directory: Path) -> None:
        self.dir = directory
        self.landed: set[str] = set()
        self.n = 0
        self.rotations = 0
        self.at = T0
        #: A line each file has without newline yet (its writer is still at it).
        self.pending: dict[str, str] = {}
        #: Such lines that stay as they are (the file moved away with it): records too.
        self.final: set[str] = set()
        #: Seconds the processes' clock is past the newest mtime (the end: every hold due).
        self.idle = 1.0

    def clock(self) -> float:
        return self.at + self.idle

    def _lines(self, count: int) -> str:
        out = [f"line {self.n + i:06d}" for i in range(count)]
        self.n += count
        self.landed.update(out)
        return "".join(f"{line}\n" for line in out)

    def _stamp(self, path: Path) -> None:
        self.at += 1
        os.utime(path, (self.at, self.at))

    def apply(self, op: str, name: str, count: int) -> None:
        path = self.dir / name
        piece = self.pending.pop(name, None)
        if piece is not None and op in ("append", "cumulative", "partial"):
            with path.open("a") as f:  # the writer ends its line
                f.write("end\n")
            self.landed.add(piece + "end")
        elif piece is not None and op in ("rotate", "copytruncate"):
            self.final.add(piece)  # moved away as it is
        if op == "partial":
            piece = f"part {self.n:06d} "
            self.n += 1
            with path.open("a") as f:
                f.write(self._lines(count) + piece)
            self.pending[name] = piece
        elif op == "append" or not path.exists():
            with path.open("a") as f:
                f.write(self._lines(count))
        elif op == "rewrite":  # another export moved over the name
            tmp = self.dir / f".{name}.tmp"
            tmp.write_text(self._lines(count))
            os.replace(tmp, path)
        elif op == "cumulative":  # every row so far and new ones, written anew
            tmp = self.dir / f".{name}.tmp"
            tmp.write_text(path.read_text() + self._lines(count))
            os.replace(tmp, path)
        elif op == "rotate":
            self.rotations += 1
            os.replace(path, self.dir / f"{name}.{self.rotations}")
            path.write_text(self._lines(count))
        elif op == "copytruncate":
            self.rotations += 1
            shutil.copyfile(path, self.dir / f"{name}.{self.rotations}")
            self._stamp(self.dir / f"{name}.{self.rotations}")
            os.truncate(path, 0)
            with path.open("a") as f:
                f.write(self._lines(count))
        self._stamp(path)

    def present(self) -> set[str]:
        """The lines in the landing files now: each must be published."""
        return {
            line
            for p in self.dir.iterdir()
            if not p.name.startswith(".")
            for line in p.read_text().splitlines()
        }


class _Process:
    """One run of the program: its pipeline and its view of the filesystem."""

    def __init__(self, root: Path, clock: Callable[[], float], check: str) -> None:
        self.fs = InstrumentedFS(LocalFileSystem(), Injector(), {})
        self.runner = _runner(root, self.fs, clock, check)

    def kill(self) -> None:
        """kill -9: no call reaches the filesystem any more; what its writers hold lands."""
        self.fs.die()
        with contextlib.suppress(Exception, SimulatedCrash):
            self.runner.controller.stop(graceful=False)


def _runner(root: Path, fs: FileSystem, clock: Callable[[], float], check: str) -> PipelineRunner:
    scan = HDFS2DirectoryScan(
        ScanSettings(directory=str(root / "in"), sleep_time=0, init_delay=0, content_check=check),
        fs,
    )
    source = HDFS2FileSource(
        SourceSettings(read_chunk=37, init_delay=0), fs, files=scan, clock=clock
    )
    sink = HDFS2FileSink(
        SinkSettings(directory=str(root / "out"), file="part-%FILENUM.txt", tuples_per_file=9), fs
    )
    pipeline = Pipeline(source, transforms=[], sinks=[sink], batch_size=4)
    region = RegionSettings(
        trigger=Trigger.PERIODIC, period=1e9, reset_backoff=0, max_consecutive_reset_attempts=3
    )
    store = CheckpointStore(fs, str(root / "ck"))
    runner = PipelineRunner(pipeline, region, store, lock=False)
    runner.start()
    return runner


step = st.tuples(
    st.sampled_from(OPS),
    st.sampled_from(["a.log", "b.log"]),
    st.integers(1, 40),
    st.integers(0, 12),  # batches the running process takes after the landing
    st.sampled_from(["cut", "crash", "none"]),
)


@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(st.lists(step, min_size=1, max_size=10), st.sampled_from(["windows", "exact"]))
def test_landings_between_random_cuts_and_crashes_publish_each_line_once(
    tmp_path_factory: object, steps: list[tuple[str, str, int, int, str]], check: str
) -> None:
    """Under either content check (``exact``: every byte read compared, its CRC run on over
    chunks of 37 bytes, across cuts and restarts)."""
    root = tmp_path_factory.mktemp("landing")  # type: ignore[attr-defined]
    (root / "in").mkdir()
    landing = _Landing(root / "in")
    process = _Process(root, landing.clock, check)
    for op, name, count, batches, then in steps:
        landing.apply(op, name, count)
        for _ in range(batches):
            process.runner.step()
        if then == "cut":
            process.runner.controller.cut()
        elif then == "crash":
            process.kill()
            process = _Process(root, landing.clock, check)
    process.kill()
    landing.idle = 100.0  # the end: every held line due
    runner = _Process(root, landing.clock, check).runner
    for _ in range(10_000):
        if runner.step() is StepOutcome.IDLE:
            if not runner.pipeline.source.holding():
                break
            landing.idle += 31  # lines restored as held wait the hold from the restart
    with runner.controller.permits.hold():
        runner.pipeline.sinks[0].finish()
    assert runner.controller.cut(final=True)
    published = checks.read_published(LocalFileSystem(), str(root / "out"))
    lines = published.stream.decode().splitlines()
    counted = collections.Counter(lines)
    twice = sorted(line for line, n in counted.items() if n > 1)
    assert not twice, f"published twice: {twice[:5]}"
    assert set(lines) <= landing.landed | landing.final | set(landing.pending.values())
    missing = sorted(landing.present() - set(lines))
    assert not missing, f"never published: {missing[:5]} ({len(missing)})"
