"""Progress of a running pipeline: one line refreshed in place on a terminal, log lines otherwise.

Both engines describe their progress as a :class:`Progress` value; :class:`ProgressDisplay` shows
it. On a terminal (``isatty``) the line is redrawn every half second by a ``rich`` live display
and log records are printed above it (:class:`LiveLineHandler`); elsewhere (a file, a pipe, a CI
log) a plain INFO log line is written every few seconds and once at the end. ``rich`` is imported
only by a live display, so runs without a terminal never load it. Only counters are shown: never
a path, a URI or a setting, so nothing here can reveal a credential.
"""

from __future__ import annotations

import functools
import logging
import sys
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, TextIO

if TYPE_CHECKING:  # imported at run time only by a live display
    from rich.console import Console
    from rich.live import Live

__all__ = ["LiveLineHandler", "Progress", "ProgressDisplay", "format_bytes", "format_count"]

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Progress:
    """Counters of a run so far. Records replayed after a reset are counted once."""

    status: str = "starting"
    #: Input files read / output files published (``None``: the engine does not count them).
    files_in: int | None = 0
    files_out: int | None = 0
    #: Files the scan could only pass over (late beyond what it can tell apart), and files that
    #: changed after they were read (not read again), each logged.
    files_passed_over: int = 0
    files_modified: int = 0
    #: Records read (each once, however often a reset replayed it).
    records_in: int = 0
    #: Records the sink wrote, each once (``None``: unknown, e.g. after a Spark SQL
    #: transform); those it could not write are counted apart, below.
    records_out: int | None = 0
    #: Records and rows the sink could not write (``on_bad_record``): kept in the rejects
    #: file, or skipped (each logged).
    records_rejected: int = 0
    records_skipped: int = 0
    #: Records read again after resets (not counted in ``records_in``).
    records_replayed: int = 0
    #: Records in output files not published when the run ended (``None``: unknown); of them,
    #: those read after the last completed cut (the next run reads those again).
    records_unpublished: int | None = 0
    records_after_cut: int = 0
    #: The run ended on a completed final cut (everything read is published). ``False`` after
    #: an immediate stop.
    final_cut: bool = True
    #: Input bytes read (line ends included); ``None``: not counted by the engine.
    bytes_in: int | None = 0
    #: Cuts completed (Spark: micro-batches committed) and resets (Spark: restarts).
    cuts: int = 0
    resets: int = 0
    last_cut_id: int | None = None
    elapsed: float = 0.0


def format_count(n: float) -> str:
    if n < 10_000:
        return f"{n:,.0f}"
    for unit, size in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if n >= size:
            return f"{n / size:.1f}{unit}"
    return f"{n:,.0f}"  # pragma: no cover - unreachable


def format_bytes(n: float) -> str:
    for unit, size in (("GB", 1 << 30), ("MB", 1 << 20), ("kB", 1 << 10)):
        if n >= size:
            return f"{n / size:.1f} {unit}"
    return f"{n:.0f} B"


def _rate(window: deque[tuple[float, int, int]]) -> tuple[float, float]:
    """Records/s and bytes/s over the samples kept in ``window``."""
    if len(window) < 2:
        return 0.0, 0.0
    (t0, r0, b0), (t1, r1, b1) = window[0], window[-1]
    span = t1 - t0
    if span <= 0:
        return 0.0, 0.0
    return max(0, r1 - r0) / span, max(0, b1 - b0) / span


def render(p: Progress, records_per_s: float, bytes_per_s: float) -> str:
    """The progress line (counters only)."""
    parts = [f"{p.status} {p.elapsed:5.1f}s"]
    if p.files_in is not None and p.files_out is not None:
        parts.append(f"files {p.files_in} in, {p.files_out} out")
    if p.files_passed_over:
        parts.append(f"{p.files_passed_over} PASSED OVER (see the warnings)")
    if p.files_modified:
        parts.append(f"{p.files_modified} CHANGED AFTER READ (see the warnings)")
    parts.append(f"records {format_count(p.records_in)} ({format_count(records_per_s)}/s)")
    if p.bytes_in is not None:
        parts.append(f"{format_bytes(p.bytes_in)} ({format_bytes(bytes_per_s)}/s)")
    cut = f"cuts {p.cuts}" + (f" (last #{p.last_cut_id})" if p.last_cut_id is not None else "")
    parts += [cut, f"resets {p.resets}"]
    return " | ".join(parts)


#: As log lines (no terminal), progress that did not move is logged once per this many seconds.
IDLE_LOG_SECONDS = 60.0


def _counters(progress: Progress) -> Progress:
    """``progress`` without what moves while nothing is read or written (the time, the status
    and the cuts of an idle job)."""
    return replace(progress, status="", elapsed=0.0, cuts=0, last_cut_id=None)


class ProgressDisplay:
    """Shows the progress of one run on ``stream`` (default: standard error).

    ``live``: redraw one line in place (default: when ``stream`` is a terminal). ``interval``:
    seconds between two updates (default 0.5 s live, 5 s as log lines). ``width``: columns of
    the live line (default: the terminal's, read at each redraw). Use :meth:`start` with a
    polling function (the local engine), or :meth:`update` from a callback (Spark); then
    :meth:`finish` once.
    """

    def __init__(
        self,
        stream: TextIO | None = None,
        *,
        live: bool | None = None,
        interval: float | None = None,
        enabled: bool = True,
        width: int | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.stream = stream if stream is not None else sys.stderr
        if live is None:
            isatty = getattr(self.stream, "isatty", None)
            live = bool(isatty()) if callable(isatty) else False
        self.live = live
        self.enabled = enabled
        self.interval = interval if interval is not None else (0.5 if live else 5.0)
        self.width = width
        self._lock = threading.RLock()  # a record logged while drawing must not deadlock
        self._latest = Progress()
        self._window: deque[tuple[float, int, int]] = deque()
        self._last_shown = 0.0
        self._clock = clock
        # As log lines: the counters of the last line logged, and when (an idle job logs one
        # line per IDLE_LOG_SECONDS, not one per interval).
        self._last_logged: Progress | None = None
        self._last_logged_at = 0.0
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        # Live mode only, made at the first line or record shown (that is when rich is imported).
        self._console: Console | None = None
        self._live: Live | None = None
        self._finished = False

    # -- feeding ----------------------------------------------------------------------------

    def start(self, poll: Callable[[], Progress]) -> None:
        """Poll ``poll()`` every ``interval`` seconds on a daemon thread until :meth:`finish`."""

        def loop() -> None:
            while not self._stop.wait(self.interval):
                try:
                    self.update(poll())
                except Exception:  # a display must never break the run
                    logger.debug("Progress poll failed", exc_info=True)

        self._thread = threading.Thread(target=loop, name="progress", daemon=True)
        self._thread.start()

    def update(self, progress: Progress) -> None:
        """Record a new state and show it when the interval has passed (thread-safe)."""
        now = self._clock()
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
                if not self._finished:  # a late callback must not draw after the final line
                    self._draw(line)
                return
            counters = _counters(progress)
            if counters == self._last_logged and now - self._last_logged_at < IDLE_LOG_SECONDS:
                return  # nothing moved: the line would say what the last one said
            self._last_logged, self._last_logged_at = counters, now
        logger.info("%s", line)

    def finish(self, progress: Progress | None = None) -> str:
        """Stop polling and show the final line (average rates); return it."""
        self._stop.set()
        thread, self._thread = self._thread, None
        if thread is not None and thread is not threading.current_thread():
            thread.join()
        with self._lock:
            final = progress if progress is not None else self._latest
            self._latest = final
            elapsed = final.elapsed
            rates = (
                (final.records_in / elapsed, (final.bytes_in or 0) / elapsed)
                if elapsed > 0
                else (0.0, 0.0)
            )
            line = render(final, *rates)
            if self.enabled and self.live:
                self._draw_final(line)
        if self.enabled and not self.live:
            logger.info("%s", line)
        return line

    @property
    def latest(self) -> Progress:
        return self._latest

    # -- live line and log records --------------------------------------------------------

    def print_above(self, text: str) -> None:
        """Print ``text`` (a log record) above the live line, then redraw the line."""
        with self._lock:
            if not self.live:
                self._write(text if text.endswith("\n") else text + "\n")
                return
            from rich.text import Text

            console = self._get_console()
            # Printed as it is (no markup, no highlighting) and left to the terminal to wrap,
            # so that a long path stays one line to copy; an active live display moves its
            # line below it.
            record = Text(text.rstrip("\n"), end="\n")
            self._guard(
                lambda: console.print(record, soft_wrap=True, markup=False, highlight=False)
            )

    def _write(self, text: str) -> None:
        try:
            self.stream.write(text)
            self.stream.flush()
        except (OSError, ValueError):
            pass  # a closed terminal must not fail the run

    def _get_console(self) -> Console:
        if self._console is None:
            self._console = _live_console_class()(
                file=self.stream,
                width=self.width,
                force_terminal=True,  # live: the caller has decided that this is a terminal
                force_jupyter=False,
                color_system=None,  # plain text: the line and the records carry no style
                markup=False,
                highlight=False,
                emoji=False,
                log_path=False,
            )
        return self._console

    def _live_display(self) -> Live:
        """The live display, started on first use (called with the lock held)."""
        if self._live is None:
            from rich.live import Live

            self._live = Live(
                console=self._get_console(),
                auto_refresh=False,  # redrawn by update(), on the poll thread or the callback
                transient=False,
                redirect_stdout=False,
                redirect_stderr=False,
            )
            self._guard(self._live.start)
        return self._live

    def _draw(self, line: str) -> None:
        """Redraw the live line (called with the lock held)."""
        from rich.text import Text

        live = self._live_display()
        # One row: a line wider than the terminal is cropped with an ellipsis, never wrapped.
        shown = Text(line, no_wrap=True, overflow="ellipsis", end="")
        self._guard(lambda: live.update(shown, refresh=True))

    def _draw_final(self, line: str) -> None:
        """Leave the final line on screen, whole (wrapped on a narrow terminal), then a newline."""
        from rich.text import Text

        self._finished = True
        live = self._live_display()
        live.update(Text(line, overflow="fold", end=""))  # drawn by stop()
        self._guard(live.stop)

    def _guard(self, call: Callable[[], object]) -> None:
        """Run a rich call. A display must never fail the run: after an error (a closed
        terminal: OSError, ValueError on a closed file) it goes quiet. Nothing is logged here,
        as a record would come back to this display."""
        try:
            call()
        except Exception:
            if self._console is not None:
                self._console.quiet = True


@functools.cache
def _live_console_class() -> type[Console]:
    """A rich console for the live line that leaves the cursor alone (a run killed with SIGKILL
    must not leave the terminal without one) and never ends the process on a broken pipe
    (rich's default exits)."""
    from rich.console import Console

    class LiveLineConsole(Console):
        def show_cursor(self, show: bool = True) -> bool:
            return False

        def on_broken_pipe(self) -> None:
            self.quiet = True

    return LiveLineConsole


class LiveLineHandler(logging.Handler):
    """A logging handler that prints records above a live progress line (terminal mode)."""

    def __init__(self, display: ProgressDisplay) -> None:
        super().__init__()
        self.display = display

    def emit(self, record: logging.LogRecord) -> None:
        try:
            self.display.print_above(self.format(record))
        except Exception:
            self.handleError(record)


def summary_line(final: Progress) -> str:
    """The line printed when a run ends."""
    parts = [f"{format_count(final.records_in)} records in"]
    if final.records_out is not None:
        parts[0] += f", {format_count(final.records_out)} out"
    if final.records_rejected:
        parts[0] += f", {format_count(final.records_rejected)} rejected (in the rejects file)"
    if final.records_skipped:
        parts[0] += f", {format_count(final.records_skipped)} bad records skipped"
    if not final.final_cut:
        left = final.records_unpublished
        if left is None:
            what = "the batch in flight is not published (the next run reads it again)"
        else:
            what = f"{format_count(left)} records not published yet (the next run publishes them"
            if final.records_after_cut:
                what += f", reading again the {format_count(final.records_after_cut)} read"
                what += " after the last cut"
            what += ")"
        parts.append(f"stopped without a final cut: {what}")
    if final.records_replayed:
        parts.append(f"{format_count(final.records_replayed)} replayed after resets")
    if final.files_in is not None and final.files_out is not None:
        parts.append(f"{final.files_in} files read, {final.files_out} published")
    parts.append(f"{final.cuts} cuts, {final.resets} resets in {final.elapsed:.1f}s")
    return f"{final.status}: " + ", ".join(parts)
