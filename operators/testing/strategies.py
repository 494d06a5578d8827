"""Hypothesis strategies for what happens to a pipeline: files arriving (many equal mtimes, late
files, copies in flight), batches, cuts, crashes and failures at any point, restarts.

By default only arrivals the directory scan promises to read are generated (see
:class:`~operators.testing.schedule.LandingModel`): files in (mtime, name) order, and with a
``late_window`` also files up to that much older than the newest one.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from hypothesis import strategies as st

from operators.testing.schedule import (
    PHASES,
    Arrival,
    Crash,
    Cut,
    Fault,
    FinishCopy,
    FsPoint,
    LandingModel,
    PhasePoint,
    Run,
    Schedule,
    StartCopy,
    Step,
    Stop,
    Wait,
    Write,
)

__all__ = ["fault_points", "faults", "file_arrivals", "schedules"]

During = Literal["run", "cut", "recovery"]

# (op, area, moments) that can happen during each kind of step.
_FS_POINTS: dict[str, list[tuple[str, str, tuple[str, ...]]]] = {
    "run": [
        ("write", "output", ("before", "during", "after")),
        ("create", "output", ("before", "after")),
        ("sync", "output", ("before", "after")),
        ("close", "output", ("before", "after")),
        ("read", "input", ("before",)),
        ("list", "input", ("before",)),
    ],
    "cut": [
        ("sync", "output", ("before", "after")),
        ("rename", "output", ("before", "after")),
        ("delete", "output", ("before",)),
        ("create", "checkpoints", ("before",)),
        ("write", "checkpoints", ("before", "during")),
        ("sync", "checkpoints", ("before",)),
        ("rename", "checkpoints", ("before", "after")),
        ("delete", "checkpoints", ("before",)),
    ],
    "recovery": [
        ("delete", "output", ("before", "after")),
        ("truncate", "output", ("before", "after")),
        ("rename", "output", ("before", "after")),
        ("create", "output", ("before",)),
        ("list", "output", ("before",)),
        ("read", "checkpoints", ("before",)),
    ],
}


def fault_points(
    during: During, *, torn_writes: bool = True
) -> st.SearchStrategy[PhasePoint | FsPoint]:
    """Places a fault can hit during a run of batches, a cut, or the recovery at restart:
    a filesystem call on the output, the checkpoints or the input (before it, after it, or in
    the middle of a write), and inside a cut every phase of the cut protocol."""
    choices = [
        FsPoint(op, area, 1, when)  # type: ignore[arg-type]
        for op, area, whens in _FS_POINTS[during]
        for when in whens
        if torn_writes or when != "during"
    ]
    fs = st.builds(
        lambda point, nth: FsPoint(point.op, point.area, nth, point.when),
        st.sampled_from(choices),
        st.integers(1, 3),
    )
    if during != "cut":
        return fs
    phases = [PhasePoint(p) for p in PHASES]  # type: ignore[arg-type]
    return st.one_of(st.sampled_from(phases), fs)


def faults(
    during: During, *, crashes: bool = True, failures: bool = True, torn_writes: bool = True
) -> st.SearchStrategy[Fault]:
    """A crash (process dies, restarts from the checkpoint) or a failure (an I/O error the
    region resets from in-process) at one of :func:`fault_points`."""
    if not (crashes or failures):
        raise ValueError("faults() needs crashes or failures")
    kinds = [True] * crashes + [False] * failures
    return st.builds(Fault, fault_points(during, torn_writes=torn_writes), st.sampled_from(kinds))


_LETTERS = "abcdefghijklmnopqrstuvwxyz"


@dataclass
class _Names:
    """Short distinct file names: a.txt, b.txt, ... then a1.txt, b1.txt, ..."""

    used: set[str]

    def unused(self, greater_than: str | None = None, limit: int = 8) -> list[str]:
        out: list[str] = []
        round_ = 0
        while len(out) < limit and round_ < 50:
            for letter in _LETTERS:
                name = f"{letter}{round_ or ''}.txt"
                if name not in self.used and (greater_than is None or name > greater_than):
                    out.append(name)
                    if len(out) >= limit:
                        break
            round_ += 1
        return out


# A file as drawn: (how its mtime relates to the newest file, how far, which free name, lines,
# crlf, final newline). Drawn independently of what came before, so that Hypothesis can delete
# steps while shrinking; _Builder turns it into names and mtimes the scan promises to read.
_RawFile = tuple[str, int, int, int, bool, bool]


def _raw_file(max_lines: int) -> st.SearchStrategy[_RawFile]:
    return st.tuples(
        st.sampled_from(["tie", "newer", "late"]),
        st.integers(1, 3),
        st.integers(0, 7),
        st.integers(0, max_lines),
        st.booleans(),
        st.booleans(),
    )


class _Builder:
    """Places drawn files so that the scan promises to read each of them."""

    def __init__(self, late_window: float) -> None:
        self.model = LandingModel(late_window)
        self.names = _Names(set())
        self.copying: list[Arrival] = []

    def _mtime(self, how: str, amount: int, name: str | None, pick: int) -> tuple[int, str]:
        model = self.model
        newest = model.newest
        base = newest[0] if newest is not None else 0
        window = model.window_ms
        if how == "late" and window > 0 and newest is not None:
            step = 1000 if window >= 1000 else max(1, window // 3)
            mtime = base - min(amount * step, window)
        elif how == "newer":
            mtime = base + amount * 1000
        else:
            mtime = base
        if name is None:
            floor = newest[1] if newest is not None and mtime == newest[0] and not window else None
            candidates = self.names.unused(greater_than=floor)
            if not candidates:
                mtime, candidates = base + 1000, self.names.unused()
            name = candidates[pick % len(candidates)]
        if not model.promised(name, mtime):
            mtime = base + 1000  # a fixed name that would sort too early: make it newer
        return mtime, name

    def write(self, raw: list[_RawFile]) -> Write:
        files = []
        for how, amount, pick, lines, crlf, final_newline in raw:
            mtime, name = self._mtime(how, amount, None, pick)
            self.names.used.add(name)
            files.append(Arrival(name, lines, mtime, crlf, final_newline))
        self.model.appear([(f.name, f.mtime_ms) for f in files])
        return Write(tuple(files))

    def start_copy(self, raw: _RawFile) -> StartCopy:
        _, _, pick, lines, crlf, final_newline = raw
        candidates = self.names.unused()
        name = candidates[pick % len(candidates)]
        self.names.used.add(name)
        self.copying.append(Arrival(name, lines, 0, crlf, final_newline))
        return StartCopy(self.copying[-1])

    def finish_copy(self, raw: _RawFile) -> FinishCopy | None:
        if not self.copying:
            return None
        how, amount, pick, *_ = raw
        done = self.copying.pop(pick % len(self.copying))
        mtime, _ = self._mtime(how, amount, done.name, 0)
        self.model.appear([(done.name, mtime)])
        return FinishCopy(done.name, mtime)


@st.composite
def file_arrivals(
    draw: st.DrawFn,
    *,
    late_window: float = 0.0,
    max_writes: int = 5,
    max_files: int = 3,
    max_lines: int = 5,
) -> list[Write]:
    """Groups of files appearing at once, each group with files of equal or different mtimes,
    in any name order, and late files when ``late_window`` (seconds) is given."""
    raw = draw(
        st.lists(
            st.lists(_raw_file(max_lines), min_size=1, max_size=max_files),
            min_size=1,
            max_size=max_writes,
        )
    )
    builder = _Builder(late_window)
    return [builder.write(files) for files in raw]


def schedules(
    *,
    late_window: float = 0.0,
    max_steps: int = 14,
    max_files: int = 3,
    max_lines: int = 5,
    crashes: bool = True,
    failures: bool = True,
    torn_writes: bool = True,
    copies: bool = True,
    waits: bool = True,
    stops: bool = True,
) -> st.SearchStrategy[Schedule]:
    """A whole :class:`Schedule`: files arriving between runs of a few batches, cuts, crashes
    (between steps, inside a run, inside a cut, during the recovery), failures the region
    recovers from in-process, graceful stops, time passing.

    ``late_window`` must be the scan's, so that late files stay within what it promises.
    ``torn_writes``: writes cut in the middle (turn off for sinks that cannot undo them, such as
    ``at_least_once``, which appends after whatever the crashed process left).
    """
    # Weights (by repetition): mostly files and batches, then cuts, then crashes and faults.
    run = st.tuples(st.just("run"), st.integers(1, 4))
    write = st.tuples(
        st.just("write"), st.lists(_raw_file(max_lines), min_size=1, max_size=max_files)
    )
    cut = st.tuples(st.just("cut"))
    options: list[st.SearchStrategy[tuple[Any, ...]]] = [run, write, cut] * 3 + [run]
    if crashes or failures:

        def fault(during: During) -> st.SearchStrategy[Fault]:
            return faults(during, crashes=crashes, failures=failures, torn_writes=torn_writes)

        faulty_cut = st.tuples(st.just("cut"), fault("cut"))
        options += [st.tuples(st.just("run"), st.integers(1, 4), fault("run")), faulty_cut] * 2
    if crashes:
        options += [st.tuples(st.just("crash"))] * 2
        options += [st.tuples(st.just("crash"), fault("recovery"))]
    if waits:
        options.append(st.tuples(st.just("wait"), st.sampled_from([1, 2, 5, 10])))
    if stops:
        options.append(st.tuples(st.just("stop")))
    if copies:
        options.append(st.tuples(st.just("start copy"), _raw_file(max_lines)))
        options.append(st.tuples(st.just("finish copy"), _raw_file(max_lines)))
    # A schedule starts with files: a pipeline with nothing to read tests little.
    raw_steps = st.tuples(
        write, st.lists(st.one_of(options), min_size=min(3, max_steps - 1), max_size=max_steps - 1)
    )
    return raw_steps.map(lambda raw: _build([raw[0], *raw[1]], late_window))


def _build(raw_steps: list[tuple[Any, ...]], late_window: float) -> Schedule:
    builder = _Builder(late_window)
    steps: list[Step] = []
    for raw in raw_steps:
        kind = raw[0]
        if kind == "write":
            steps.append(builder.write(raw[1]))
        elif kind == "run":
            steps.append(Run(raw[1], raw[2] if len(raw) > 2 else None))
        elif kind == "cut":
            steps.append(Cut(raw[1] if len(raw) > 1 else None))
        elif kind == "crash":
            steps.append(Crash(raw[1] if len(raw) > 1 else None))
        elif kind == "wait":
            steps.append(Wait(raw[1]))
        elif kind == "stop":
            steps.append(Stop())
        elif kind == "start copy":
            steps.append(builder.start_copy(raw[1]))
        elif kind == "finish copy":
            finished = builder.finish_copy(raw[1])
            steps.append(finished if finished is not None else Run(1))
    return Schedule(tuple(steps))
