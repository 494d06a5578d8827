"""What happens to a pipeline under test: a :class:`Schedule` of plain steps that reads as words.

A schedule is a list of steps (files arriving, batches run, cuts, crashes, restarts). Each step
prints as a short phrase and :meth:`Schedule.from_words` reads the phrases back, so a failing
schedule can be pasted into a test as it was reported::

    write a.txt (3 lines, mtime t0); run 2 batches; cut, crashing after the drain; crash

Times: ``t0`` is the mtime of the first file; file mtimes are given relative to it. After every
crash the pipeline restarts from its last completed cut (new operators, same directories).
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Literal

__all__ = [
    "PHASES",
    "Arrival",
    "Crash",
    "Cut",
    "Fault",
    "FinishCopy",
    "FsPoint",
    "LandingModel",
    "PhasePoint",
    "Run",
    "Schedule",
    "ScheduleError",
    "StartCopy",
    "Step",
    "Stop",
    "Wait",
    "Write",
]

#: Suffix of a file still being copied (``hdfs dfs -put``): the scan must not read it.
COPYING_SUFFIX = "._COPYING_"

_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")

#: Places inside a cut, in the order a cut reaches them.
PHASES = (
    "before the drain",
    "after the drain",
    "after the checkpoints are taken",
    "after the checkpoint is written",
    "after publish",
    "before the archive",
    "after the archive",
)
Phase = Literal[
    "before the drain",
    "after the drain",
    "after the checkpoints are taken",
    "after the checkpoint is written",
    "after publish",
    "before the archive",
    "after the archive",
]
Area = Literal["output", "checkpoints", "input"]
FsOp = Literal[
    "create", "append", "write", "sync", "close", "truncate", "rename", "delete", "read", "list"
]
FS_OPS: tuple[str, ...] = (
    "create",
    "append",
    "write",
    "sync",
    "close",
    "truncate",
    "rename",
    "delete",
    "read",
    "list",
)
AREAS: tuple[str, ...] = ("output", "checkpoints", "input")


class ScheduleError(ValueError):
    """A schedule that cannot be run or read (names the step and what is wrong with it)."""


def _ordinal(n: int) -> str:
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"


def format_mtime(mtime_ms: int) -> str:
    """``t0``, ``t0+2s``, ``t0-0.25s``."""
    if mtime_ms == 0:
        return "t0"
    return f"t0{mtime_ms / 1000:+g}s"


def _parse_mtime(text: str, where: str) -> int:
    match = re.fullmatch(r"t0(?:([+-]\d+(?:\.\d+)?)s)?", text.strip())
    if match is None:
        raise ScheduleError(f"{where}: mtime {text!r} is not like t0, t0+2s or t0-0.5s")
    return round(float(match.group(1) or 0) * 1000)


def _check_name(name: str, where: str) -> str:
    if not _NAME.fullmatch(name) or name.endswith(COPYING_SUFFIX):
        msg = (
            f"{where}: file name {name!r} must be letters, digits, '_', '.' or '-', start with a "
            f"letter or digit (hidden names are files in flight) and not end in {COPYING_SUFFIX}"
        )
        raise ScheduleError(msg)
    return name


# -- fault points ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class PhasePoint:
    """A place inside a cut (see :data:`PHASES`)."""

    phase: Phase

    def __str__(self) -> str:
        return self.phase


@dataclass(frozen=True, slots=True)
class FsPoint:
    """The ``nth`` filesystem call ``op`` on a path of ``area``, counted from the start of the
    step: ``before`` it runs, ``after`` it returned, or ``during`` (a write: half the bytes land).
    """

    op: FsOp
    area: Area = "output"
    nth: int = 1
    when: Literal["before", "after", "during"] = "before"

    def __post_init__(self) -> None:
        if self.op not in FS_OPS:
            raise ScheduleError(f"filesystem call {self.op!r} is not one of {', '.join(FS_OPS)}")
        if self.area not in AREAS:
            raise ScheduleError(f"area {self.area!r} is not one of {', '.join(AREAS)}")
        if self.nth < 1:
            raise ScheduleError(f"{self.op}: nth must be 1 or more, got {self.nth}")
        if self.when == "during" and self.op != "write":
            raise ScheduleError(f"only a write can be cut in the middle, not a {self.op}")

    def __str__(self) -> str:
        which = f"the {_ordinal(self.nth)} {self.op} in the {self.area}"
        if self.when == "during":
            return f"in the middle of {which} (half of it written)"
        return f"{self.when} {which}"


Point = PhasePoint | FsPoint


@dataclass(frozen=True, slots=True)
class Fault:
    """A crash (the process dies; a new one restarts from the checkpoint) or a failure (an I/O
    error the region recovers from in-process by resetting to the last cut) at ``point``."""

    point: Point
    crash: bool = True

    def __str__(self) -> str:
        return f"{'crashing' if self.crash else 'failing'} {self.point}"

    @classmethod
    def from_words(cls, text: str) -> Fault:
        match = re.fullmatch(r"(crashing|failing) (.+)", text.strip())
        if match is None:
            raise ScheduleError(f"{text!r}: a fault reads 'crashing <where>' or 'failing <where>'")
        return cls(_parse_point(match.group(2)), crash=match.group(1) == "crashing")


def _parse_point(text: str) -> Point:
    text = text.strip()
    if text in PHASES:
        return PhasePoint(text)  # type: ignore[arg-type]
    match = re.fullmatch(
        r"(before|after|in the middle of) the (\d+)(?:st|nd|rd|th) (\w+) in the (\w+)"
        r"(?: \(half of it written\))?",
        text,
    )
    if match is None:
        msg = (
            f"{text!r} is not a place: one of {', '.join(repr(p) for p in PHASES)}, or like "
            "'before the 1st rename in the output'"
        )
        raise ScheduleError(msg)
    when, nth, op, area = match.groups()
    return FsPoint(
        op,  # type: ignore[arg-type]
        area,  # type: ignore[arg-type]
        int(nth),
        "during" if when == "in the middle of" else when,  # type: ignore[arg-type]
    )


# -- steps ----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Arrival:
    """A file of ``lines`` text lines, visible at once with modification time ``mtime_ms``
    (milliseconds after ``t0``). ``crlf`` ends lines with CR LF; without ``final_newline`` the
    last line has no terminator."""

    name: str
    lines: int
    mtime_ms: int = 0
    crlf: bool = False
    final_newline: bool = True

    def describe(self, *, mtime: bool = True) -> str:
        parts = [f"{self.lines} line" + ("" if self.lines == 1 else "s")]
        if self.crlf:
            parts.append("crlf")
        if not self.final_newline:
            parts.append("no final newline")
        if mtime:
            parts.append(f"mtime {format_mtime(self.mtime_ms)}")
        return f"{self.name} ({', '.join(parts)})"

    @classmethod
    def parse(cls, name: str, options: str, where: str, *, mtime: bool = True) -> Arrival:
        lines: int | None = None
        mtime_ms: int | None = None
        crlf, final_newline = False, True
        for raw in options.split(","):
            option = raw.strip()
            if m := re.fullmatch(r"(\d+) lines?", option):
                lines = int(m.group(1))
            elif option.startswith("mtime "):
                mtime_ms = _parse_mtime(option[len("mtime ") :], where)
            elif option == "crlf":
                crlf = True
            elif option == "no final newline":
                final_newline = False
            else:
                raise ScheduleError(f"{where}: unknown file option {option!r} for {name}")
        if lines is None:
            raise ScheduleError(f"{where}: give the number of lines of {name}, e.g. '3 lines'")
        if mtime and mtime_ms is None:
            raise ScheduleError(f"{where}: give the mtime of {name}, e.g. 'mtime t0+1s'")
        return cls(_check_name(name, where), lines, mtime_ms or 0, crlf, final_newline)


@dataclass(frozen=True, slots=True)
class Write:
    """Files that appear in the landing directory at once (between two steps)."""

    files: tuple[Arrival, ...]

    def __str__(self) -> str:
        return "write " + ", ".join(f.describe() for f in self.files)


@dataclass(frozen=True, slots=True)
class StartCopy:
    """A file being copied in: written as ``<name>._COPYING_``, which the scan must skip."""

    file: Arrival

    def __str__(self) -> str:
        return "start copying " + self.file.describe(mtime=False)


@dataclass(frozen=True, slots=True)
class FinishCopy:
    """The copy ends: its mtime becomes ``mtime_ms`` and it is renamed to its name."""

    name: str
    mtime_ms: int

    def __str__(self) -> str:
        return f"finish copying {self.name} (mtime {format_mtime(self.mtime_ms)})"


@dataclass(frozen=True, slots=True)
class Run:
    """``batches`` iterations of the pipeline loop (an idle one counts), with an optional fault."""

    batches: int = 1
    fault: Fault | None = None

    def __str__(self) -> str:
        words = f"run {self.batches} batch" + ("" if self.batches == 1 else "es")
        return words if self.fault is None else f"{words}, {self.fault}"


@dataclass(frozen=True, slots=True)
class Cut:
    """A consistent cut now (as the periodic trigger would take it), with an optional fault."""

    fault: Fault | None = None

    def __str__(self) -> str:
        return "cut" if self.fault is None else f"cut, {self.fault}"


@dataclass(frozen=True, slots=True)
class Crash:
    """The process dies here and restarts from its checkpoint; ``recovery`` is a fault during
    that restart (a crash there means one more restart)."""

    recovery: Fault | None = None

    def __str__(self) -> str:
        return "crash" if self.recovery is None else f"crash, recovery {self.recovery}"


@dataclass(frozen=True, slots=True)
class Stop:
    """A graceful stop (the sink ends its file, one final cut, operators closed), then a
    restart."""

    def __str__(self) -> str:
        return "stop gracefully"


@dataclass(frozen=True, slots=True)
class Wait:
    """Time passes (the clock the operators see): time-based rolling, minimum file age."""

    seconds: float

    def __str__(self) -> str:
        return f"wait {self.seconds:g}s"


Step = Write | StartCopy | FinishCopy | Run | Cut | Crash | Stop | Wait


def _parse_step(text: str, where: str) -> Step:
    text = re.sub(r"\s*\[[^\]]*\]", "", text).strip()  # [comments] such as [late]
    text = re.sub(r"^\d+\.\s*", "", text)  # numbering of the printed form
    if text.startswith("write "):
        found = re.findall(r"([^\s,()]+) \(([^)]*)\)", text[len("write ") :])
        if not found:
            raise ScheduleError(f"{where}: {text!r}: expected 'write a.txt (3 lines, mtime t0)'")
        return Write(tuple(Arrival.parse(n, o, where) for n, o in found))
    if m := re.fullmatch(r"start copying (\S+) \(([^)]*)\)", text):
        return StartCopy(Arrival.parse(m.group(1), m.group(2), where, mtime=False))
    if m := re.fullmatch(r"finish copying (\S+) \(mtime ([^)]*)\)", text):
        return FinishCopy(_check_name(m.group(1), where), _parse_mtime(m.group(2), where))
    if m := re.fullmatch(r"run (\d+) batch(?:es)?(?:, (.+))?", text):
        return Run(int(m.group(1)), Fault.from_words(m.group(2)) if m.group(2) else None)
    if m := re.fullmatch(r"cut(?:, (.+))?", text):
        return Cut(Fault.from_words(m.group(1)) if m.group(1) else None)
    if m := re.fullmatch(r"crash(?:, recovery (.+))?", text):
        return Crash(Fault.from_words(m.group(1)) if m.group(1) else None)
    if text == "stop gracefully":
        return Stop()
    if m := re.fullmatch(r"wait (\d+(?:\.\d+)?)s", text):
        return Wait(float(m.group(1)))
    msg = (
        f"{where}: {text!r} is not a step (write, start copying, finish copying, run N batches, "
        "cut, crash, stop gracefully, wait Ns)"
    )
    raise ScheduleError(msg)


@dataclass(frozen=True)
class Schedule:
    """The steps, in order. After the last step the harness runs the pipeline to the end."""

    steps: tuple[Step, ...] = field(default_factory=tuple)

    def __post_init__(self) -> None:
        object.__setattr__(self, "steps", tuple(self.steps))
        self.validate()

    @classmethod
    def of(cls, *steps: Step) -> Schedule:
        return cls(tuple(steps))

    @classmethod
    def from_words(cls, text: str) -> Schedule:
        """Read the printed form back (steps separated by ``;`` or new lines)."""
        pieces = [p for line in text.splitlines() for p in line.split(";")]
        steps: list[Step] = []
        for piece in pieces:
            if piece.strip() and not piece.strip().startswith(("then:", "#")):
                where = f"step {len(steps) + 1}"
                try:
                    steps.append(_parse_step(piece, where))
                except ScheduleError as exc:
                    if str(exc).startswith(where):
                        raise
                    raise ScheduleError(f"{where} ({piece.strip()}): {exc}") from None
        return cls(tuple(steps))

    def validate(self) -> None:
        """Names are written once, copies finish only after they start."""
        seen: set[str] = set()
        copying: set[str] = set()
        for index, step in enumerate(self.steps, 1):
            where = f"step {index} ({step})"
            if isinstance(step, Write | StartCopy):
                for arrival in step.files if isinstance(step, Write) else (step.file,):
                    _check_name(arrival.name, where)
                    if arrival.name in seen:
                        raise ScheduleError(f"{where}: {arrival.name} was already written")
                    if arrival.lines < 0:
                        raise ScheduleError(f"{where}: {arrival.name} has a negative line count")
                    seen.add(arrival.name)
                    if isinstance(step, StartCopy):
                        copying.add(arrival.name)
            elif isinstance(step, FinishCopy):
                if step.name not in copying:
                    raise ScheduleError(f"{where}: {step.name} is not being copied")
                copying.discard(step.name)
            elif isinstance(step, Run) and step.batches < 1:
                raise ScheduleError(f"{where}: run at least 1 batch")
            elif isinstance(step, Wait) and step.seconds < 0:
                raise ScheduleError(f"{where}: cannot wait a negative time")

    @property
    def words(self) -> str:
        """One line: the steps joined by ``; `` (what :meth:`from_words` reads)."""
        return "; ".join(str(s) for s in self.steps)

    def lines(self) -> list[str]:
        """Numbered steps; files arriving with an mtime older than the newest are marked late."""
        out = []
        newest: int | None = None
        for index, step in enumerate(self.steps, 1):
            text = str(step)
            mtimes = (
                [f.mtime_ms for f in step.files]
                if isinstance(step, Write)
                else [step.mtime_ms]
                if isinstance(step, FinishCopy)
                else []
            )
            if newest is not None and any(m < newest for m in mtimes):
                text += f" [late: the newest file is at {format_mtime(newest)}]"
            for m in mtimes:
                newest = m if newest is None else max(newest, m)
            out.append(f"{index}. {text}")
        return out

    def __str__(self) -> str:
        return "\n".join(self.lines()) if self.steps else "(no steps)"

    def __repr__(self) -> str:
        return f"Schedule.from_words({self.words!r})"

    def __len__(self) -> int:
        return len(self.steps)

    def __iter__(self) -> Iterator[Step]:
        return iter(self.steps)


class LandingModel:
    """Which arriving files the directory scan promises to read (the rest it may skip).

    The scan emits files in (mtime, name) order (the rule is :mod:`operators.scan.cursor`). With a
    late window every file that lands under a new name is read, whatever its mtime. With
    ``late_window = 0`` (IBM's strict rule) only a file that sorts after every file already
    visible is; the others are passed over (with a warning).
    """

    def __init__(self, late_window: float = 0.0) -> None:
        self.window_ms = round(late_window * 1000)
        self.newest: tuple[int, str] | None = None
        self.visible: dict[str, int] = {}

    def promised(self, name: str, mtime_ms: int) -> bool:
        if name in self.visible:
            return False
        newest = self.newest
        return self.window_ms > 0 or newest is None or (mtime_ms, name) > newest

    def appear(self, files: Sequence[tuple[str, int]]) -> list[bool]:
        """Files becoming visible at once; whether each one is promised."""
        verdicts = [self.promised(name, mtime) for name, mtime in files]
        for name, mtime in files:
            self.visible[name] = mtime
            key = (mtime, name)
            if self.newest is None or key > self.newest:
                self.newest = key
        return verdicts

    @property
    def newest_mtime_ms(self) -> int | None:
        return self.newest[0] if self.newest is not None else None
