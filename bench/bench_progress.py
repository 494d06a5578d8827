"""Benchmark 8: the live progress line on a terminal, hand-written ANSI (the baseline) against rich.

Baseline: the display before rich, kept here as a copy (``\\r\\x1b[2K`` + the line at each
redraw, log records written above it). Measured, old against rich:

- one-time cost of the live path in a fresh process: ``import rich.console, rich.live, rich.text``
  alone, and the first redraw of a display (imports, console and live display set-up included);
- ``ProgressDisplay.update`` per redraw (the line rendered and written), into a fake terminal
  (a StringIO of fixed width) and into a real pseudo-terminal (drained by a thread);
- ``print_above`` per log record printed above the live line;
- what a terminal shows: a line wider than the terminal redrawn 3 times, a record, the final
  line, replayed on a small terminal emulator (rows left on screen that are neither the record nor
  the final line are garbage).

    python bench/bench_progress.py                 # 2000 redraws x 7 rounds, 11 processes
    python bench/bench_progress.py --redraws 500 --rounds 3 --processes 5   # a quick run
"""

from __future__ import annotations

import argparse
import io
import os
import pty
import re
import subprocess
import sys
import threading
import time
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import Any, TextIO

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import REPO, add_common_args, machine, median, print_table, write_json
from operators.app.progress import Progress, ProgressDisplay, _rate, render
from operators.testing.terminal import CSI, screen

#: At a redraw every 0.5 s, 500 µs per redraw is 0.1% of one core.
TARGET_REDRAW_US = 500.0
#: A one-time cost, paid only by runs on a terminal.
TARGET_FIRST_DRAW_MS = 150.0
REDRAW_HZ = 2.0
WIDTH = 120

_CLEAR = "\r\x1b[2K"


class OldProgressDisplay:
    """The live mode of ``ProgressDisplay`` before rich (a copy, the baseline): the line is
    written after carriage return + erase line, records above it the same way."""

    def __init__(
        self,
        stream: TextIO,
        *,
        live: bool = True,
        interval: float = 0.5,
        enabled: bool = True,
        width: int | None = None,  # unused: the old display never knew the width
    ) -> None:
        self.stream = stream
        self.live = live
        self.enabled = enabled
        self.interval = interval
        self._lock = threading.Lock()
        self._latest = Progress()
        self._line = ""
        self._window: deque[tuple[float, int, int]] = deque()
        self._last_shown = 0.0

    def update(self, progress: Progress) -> None:
        now = time.monotonic()
        with self._lock:
            self._latest = progress
            self._window.append((now, progress.records_in, progress.bytes_in or 0))
            while len(self._window) > 2 and now - self._window[0][0] > 5.0:
                self._window.popleft()
            if not self.enabled or now - self._last_shown < self.interval * 0.9:
                return
            self._last_shown = now
            line = render(progress, *_rate(self._window))
            if self.live:
                self._line = line
                self._write(_CLEAR + line)

    def finish(self, progress: Progress | None = None) -> str:
        with self._lock:
            final = progress if progress is not None else self._latest
            elapsed = final.elapsed
            rates = (
                (final.records_in / elapsed, (final.bytes_in or 0) / elapsed)
                if elapsed > 0
                else (0.0, 0.0)
            )
            line = render(final, *rates)
            if self.enabled and self.live:
                self._line = ""
                self._write(_CLEAR + line + "\n")
        return line

    def _write(self, text: str) -> None:
        try:
            self.stream.write(text)
            self.stream.flush()
        except (OSError, ValueError):
            pass

    def print_above(self, text: str) -> None:
        with self._lock:
            if self.live and self._line:
                self._write(_CLEAR + text.rstrip("\n") + "\n" + self._line)
            else:
                self._write(text if text.endswith("\n") else text + "\n")


Display = Callable[..., Any]
DISPLAYS: dict[str, Display] = {"old": OldProgressDisplay, "rich": ProgressDisplay}


def states(n: int) -> list[Progress]:
    """``n`` successive states of a run (the counters grow, so that every line differs)."""
    return [
        Progress(
            status="running",
            files_in=i // 50,
            files_out=i // 100,
            records_in=i * 1_337,
            bytes_in=i * 160_000,
            cuts=i // 10,
            last_cut_id=i // 10 or None,
            elapsed=i * 0.5,
        )
        for i in range(1, n + 1)
    ]


# -- one-time cost, in fresh processes ---------------------------------------------------------

_FIRST_DRAW = """\
import io, sys, time
sys.path.insert(0, {repo!r})
from bench.bench_progress import DISPLAYS, states
from operators.app.progress import Progress
assert not any(m == "rich" or m.startswith("rich.") for m in sys.modules)
state = states(1)[0]
display = DISPLAYS[{which!r}](io.StringIO(), live=True, interval=0, width={width})
started = time.perf_counter()
display.update(state)
print(time.perf_counter() - started)
"""

_IMPORT = """\
import sys, time
started = time.perf_counter()
import rich.console, rich.live, rich.text
print(time.perf_counter() - started)
"""


def fresh_process_seconds(code: str) -> float:
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=REPO
    )
    return float(done.stdout.strip().splitlines()[-1])


# -- steady state -------------------------------------------------------------------------------


def redraw_us(which: str, progress: list[Progress], stream: TextIO, width: int | None) -> float:
    """µs per ``update`` (render + redraw) over ``progress``, after a first (untimed) redraw."""
    display = DISPLAYS[which](stream, live=True, interval=0, width=width)
    display.update(progress[0])
    started = time.perf_counter()
    for state in progress:
        display.update(state)
    return (time.perf_counter() - started) / len(progress) * 1e6


def record_us(which: str, records: int) -> float:
    """µs per log record printed above the live line."""
    display = DISPLAYS[which](io.StringIO(), live=True, interval=0, width=WIDTH)
    display.update(states(1)[0])
    messages = [
        f"WARNING operators.scan.operator: 1 file(s) younger than min_file_age (3600 s); the next "
        f"run reads them: file:///data/landing/[2024]/part-{i:05d}.txt"
        for i in range(records)
    ]
    started = time.perf_counter()
    for message in messages:
        display.print_above(message)
    return (time.perf_counter() - started) / records * 1e6


class PseudoTerminal:
    """A pseudo-terminal of ``WIDTH`` columns; a thread drains what is written to it."""

    def __init__(self) -> None:
        import fcntl
        import struct
        import termios

        self.leader, follower = pty.openpty()
        fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", 40, WIDTH, 0, 0))
        self.stream = os.fdopen(follower, "w", encoding="utf-8")
        self.drained = 0
        self.reader = threading.Thread(target=self._drain, daemon=True)
        self.reader.start()

    def _drain(self) -> None:
        while True:
            try:
                data = os.read(self.leader, 65536)
            except OSError:
                return
            if not data:
                return
            self.drained += len(data)

    def close(self) -> None:
        self.stream.close()
        self.reader.join(timeout=5)
        os.close(self.leader)


def quality(which: str, width: int = 40) -> dict[str, Any]:
    """A line wider than the terminal redrawn 3 times, a record above it, the final line."""
    stream = io.StringIO()
    display = DISPLAYS[which](stream, live=True, interval=0, width=width)
    record = "WARNING operators.scan.operator: late /data/[2024]/x.txt [bold]kept[/bold]"
    wide = Progress(
        status="running", files_in=12, files_out=3, files_passed_over=2, records_in=120_000,
        bytes_in=9_000_000, cuts=4, last_cut_id=4, elapsed=2.0,
    )  # fmt: skip
    for _ in range(3):
        display.update(wide)
    display.print_above(record)
    display.update(wide)
    final = display.finish(wide)
    out = stream.getvalue()
    rows = screen(out, width)

    def squeezed(text: str) -> str:  # rows are compared without spaces: wrapping drops some
        return "".join(text.split())

    record_spans = [
        k
        for i in range(len(rows))
        for k in range(1, len(rows) - i + 1)
        if squeezed("".join(rows[i : i + k])) == squeezed(record)
    ]
    final_spans = [
        k for k in range(1, len(rows) + 1) if squeezed("".join(rows[-k:])) == squeezed(final)
    ]
    expected = (record_spans[0] if record_spans else 0) + (final_spans[0] if final_spans else 0)
    # Rows written for the progress line (the record is left to the terminal to wrap).
    written = re.split(r"\r|\n", CSI.sub("", out.replace(record, "")))
    return {
        "width": width,
        "line_chars": len(render(wide, 0.0, 0.0)),
        "rows_on_screen": len(rows),
        "garbage_rows": len(rows) - expected,
        "longest_line_row_written": max(len(w) for w in written),
        "record_literal": record in out and bool(record_spans),
        "final_whole_at_the_end": bool(final_spans),
        "screen": rows,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--redraws", type=int, default=2000, help="redraws per round (2000)")
    parser.add_argument("--records", type=int, default=2000, help="records per round (2000)")
    parser.add_argument("--rounds", type=int, default=7, help="timed rounds of each (7)")
    parser.add_argument("--processes", type=int, default=11, help="fresh processes (11)")
    add_common_args(parser, "progress")
    args = parser.parse_args(argv)
    load_before = machine()["load_average"]

    imports = [fresh_process_seconds(_IMPORT) * 1e3 for _ in range(args.processes)]
    first: dict[str, list[float]] = {"old": [], "rich": []}
    fake: dict[str, list[float]] = {"old": [], "rich": []}
    real: dict[str, list[float]] = {"old": [], "rich": []}
    above: dict[str, list[float]] = {"old": [], "rich": []}
    for _ in range(args.processes):
        for which in DISPLAYS:  # alternate, so that neither side always runs on a quieter machine
            code = _FIRST_DRAW.format(repo=str(REPO), which=which, width=WIDTH)
            first[which].append(fresh_process_seconds(code) * 1e3)
    progress = states(args.redraws)
    for _ in range(args.rounds):
        for which in DISPLAYS:
            fake[which].append(redraw_us(which, progress, io.StringIO(), WIDTH))
            terminal = PseudoTerminal()
            try:
                # rich reads the width from the terminal at each redraw, as in a real run.
                real[which].append(redraw_us(which, progress, terminal.stream, None))
            finally:
                terminal.close()
            above[which].append(record_us(which, args.records))
    shown = {which: quality(which) for which in DISPLAYS}
    load_after = machine()["load_average"]

    def med(samples: dict[str, list[float]], which: str) -> float:
        return median(samples[which])

    cpu_share = {w: med(real, w) * REDRAW_HZ / 1e6 * 100 for w in DISPLAYS}
    rows: list[list[object]] = [
        ["import rich.console/live/text (ms, fresh process)", 0.0, median(imports), ""],
        ["first redraw incl. imports and set-up (ms)", med(first, "old"), med(first, "rich"), ""],
        [f"redraw, fake terminal {WIDTH} cols (µs)", med(fake, "old"), med(fake, "rich"), ""],
        ["redraw, pseudo-terminal (µs)", med(real, "old"), med(real, "rich"), ""],
        ["  share of one core at 2 redraws/s (%)", cpu_share["old"], cpu_share["rich"], ""],
        ["log record above the line (µs)", med(above, "old"), med(above, "rich"), ""],
    ]
    for row in rows:
        old, new = float(str(row[1])), float(str(row[2]))
        row[3] = f"{new - old:+.3g}"
    q_old, q_new = shown["old"], shown["rich"]
    longest, literal, whole = "longest_line_row_written", "record_literal", "final_whole_at_the_end"
    rows += [
        [
            f"{q_old['line_chars']}-char line on {q_old['width']} cols: garbage rows left",
            q_old["garbage_rows"],
            q_new["garbage_rows"],
            "",
        ],
        ["  longest progress row written (chars)", q_old[longest], q_new[longest], ""],
        ["  record with [brackets] printed literally", q_old[literal], q_new[literal], ""],
        ["  final line whole at the end", q_old[whole], q_new[whole], ""],
    ]
    print_table(
        f"Benchmark 8: live progress line, old ANSI vs rich (medians: {args.processes} "
        f"processes, {args.rounds} rounds of {args.redraws} redraws / {args.records} records)",
        ["", "old", "rich", "rich - old"],
        rows,
    )
    for which in DISPLAYS:
        print(f"\n{which}: a {q_old['width']}-column terminal after 3 redraws, a record, the end:")
        for line in shown[which]["screen"]:
            print(f"  |{line}")
    print(f"load average before {load_before}, after {load_after} ({os.cpu_count()} cpus)")

    met = {
        "redraw": med(real, "rich") <= TARGET_REDRAW_US,
        "first_draw": med(first, "rich") <= TARGET_FIRST_DRAW_MS,
        "no_garbage": q_new["garbage_rows"] == 0
        and q_new["longest_line_row_written"] <= q_new["width"],
    }
    result: dict[str, Any] = {
        "benchmark": "progress",
        "redraws": args.redraws,
        "records": args.records,
        "rounds": args.rounds,
        "processes": args.processes,
        "width": WIDTH,
        "import_rich_ms": imports,
        "first_redraw_ms": first,
        "redraw_fake_terminal_us": fake,
        "redraw_pty_us": real,
        "record_above_us": above,
        "medians": {
            "import_rich_ms": median(imports),
            **{
                f"{name}_{which}": med(samples, which)
                for name, samples in (
                    ("first_redraw_ms", first),
                    ("redraw_fake_terminal_us", fake),
                    ("redraw_pty_us", real),
                    ("record_above_us", above),
                )
                for which in DISPLAYS
            },
        },
        "quality": shown,
        "load_average_before": load_before,
        "load_average_after": load_after,
        "target": f"rich: redraw <= {TARGET_REDRAW_US:g} us (0.1% of a core at 2 Hz), first "
        f"redraw <= {TARGET_FIRST_DRAW_MS:g} ms once per terminal run, no garbage rows",
        "target_met": met,
    }
    write_json(args.json, result)
    return 0 if all(met.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
