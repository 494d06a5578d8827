"""The progress display: one live line on a terminal (redrawn in place, log records above it, a
line too wide cropped), log lines elsewhere; a closed terminal never fails the run."""

from __future__ import annotations

import dataclasses
import io
import logging
import re
import sys
import threading
from collections.abc import Iterator

import pytest

from operators.app.console import setup_logging
from operators.app.progress import LiveLineHandler, Progress, ProgressDisplay, render
from operators.testing.terminal import CSI, screen

RUNNING = Progress(
    status="running",
    files_in=2,
    files_out=1,
    records_in=40,
    bytes_in=1200,
    cuts=1,
    last_cut_id=1,
    elapsed=1.5,
)
DONE = Progress(
    status="done",
    files_in=3,
    files_out=2,
    records_in=60,
    bytes_in=1800,
    cuts=2,
    last_cut_id=2,
    elapsed=3.0,
)


def live_display(width: int = 160) -> tuple[ProgressDisplay, io.StringIO]:
    stream = io.StringIO()
    return ProgressDisplay(stream, live=True, interval=0, width=width), stream


def record_logger(display: ProgressDisplay) -> logging.Logger:
    """A logger of its own whose records go through the display's handler, formatted as the
    command formats them on a terminal."""
    log = logging.getLogger(f"test.progress.{id(display)}")
    handler = LiveLineHandler(display)
    handler.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))
    log.handlers[:] = [handler]
    log.propagate = False
    log.setLevel(logging.INFO)
    return log


def test_the_live_line_shows_the_counters_redrawn_in_place() -> None:
    display, stream = live_display()
    display.update(RUNNING)
    line = render(RUNNING, 0.0, 0.0)
    for part in ("files 2 in, 1 out", "records 40", "1.2 kB", "cuts 1 (last #1)", "resets 0"):
        assert part in line
    assert screen(stream.getvalue(), 160) == [line]
    display.update(RUNNING)
    display.update(DONE)
    out = stream.getvalue()
    # Redrawn on the same row: carriage return and erase line, never a new line.
    assert "\n" not in out and out.count("\r\x1b[2K") == 2
    rows = screen(out, 160)
    assert len(rows) == 1 and rows[0].startswith("done   3.0s | files 3 in, 2 out | records 60")


def test_a_log_record_is_printed_above_the_line_literally() -> None:
    display, stream = live_display()
    log = record_logger(display)
    display.update(RUNNING)
    message = "late file /data/[2024]/x.txt [bold]not bold[/bold] [red] :smile: 'quoted' 123"
    log.warning("%s", message)
    display.update(RUNNING)
    rows = screen(stream.getvalue(), 160)
    assert rows == [f"WARNING {log.name}: {message}", render(RUNNING, 0.0, 0.0)]
    # No markup, no highlighting: the only escape sequence is the redraw's erase line.
    assert set(CSI.findall(stream.getvalue())) == {("", "2", "K")}


def test_a_long_record_is_not_cut_and_the_line_stays_below_it() -> None:
    display, stream = live_display(width=40)
    log = record_logger(display)
    display.update(RUNNING)
    path = "/data/" + "x" * 60 + "/[part].txt"
    log.warning("cannot read %s", path)
    out = stream.getvalue()
    assert f"WARNING {log.name}: cannot read {path}\n" in out  # one line, wrapped by the terminal
    rows = screen(out, 40)
    assert "".join(rows[:-1]) == f"WARNING {log.name}: cannot read {path}"
    assert rows[-1] == render(RUNNING, 0.0, 0.0)[:39] + "…"


def test_a_line_wider_than_the_terminal_is_cropped_with_an_ellipsis() -> None:
    display, stream = live_display(width=40)
    wide = dataclasses.replace(RUNNING, files_passed_over=3, files_modified=2)
    for _ in range(3):
        display.update(wide)
    out = stream.getvalue()
    # No row written longer than the terminal: nothing wraps, so each redraw erases the last.
    for written in re.split(r"\r|\n", CSI.sub("", out)):
        assert len(written) <= 40
    full = render(wide, 0.0, 0.0)
    assert screen(out, 40) == [full[:39] + "…"]


def test_finish_leaves_the_final_line_whole() -> None:
    display, stream = live_display()
    display.update(RUNNING)
    final = display.finish(DONE)
    assert final == render(DONE, 20.0, 600.0)
    out = stream.getvalue()
    assert out.endswith(final + "\n")
    assert screen(out, 160) == [final]
    display.update(RUNNING)  # a late callback draws nothing after the final line
    assert stream.getvalue() == out


def test_the_final_line_wraps_on_a_narrow_terminal_rather_than_being_cut() -> None:
    display, stream = live_display(width=40)
    display.update(RUNNING)
    final = display.finish(DONE)
    rows = screen(stream.getvalue(), 40)
    assert len(rows) > 1 and all(len(row) <= 40 for row in rows)
    assert " ".join(rows).split() == final.split()


def test_finish_without_any_redraw_prints_the_final_line() -> None:
    display, stream = live_display()
    final = display.finish(DONE)
    assert stream.getvalue() == final + "\n"


def test_the_cursor_is_left_alone() -> None:
    # A run killed with SIGKILL cannot show it again: it is never hidden.
    display, stream = live_display()
    display.update(RUNNING)
    display.finish(DONE)
    assert "\x1b[?25" not in stream.getvalue()


class BrokenStream(io.StringIO):
    def __init__(self, error: type[Exception]) -> None:
        super().__init__()
        self.error = error
        self.broken = False

    def write(self, text: str) -> int:
        if self.broken:
            raise self.error("the terminal is gone")
        return super().write(text)


@pytest.mark.parametrize("error", [OSError, BrokenPipeError, ValueError])
def test_a_closed_terminal_never_fails_the_run(error: type[Exception]) -> None:
    stream = BrokenStream(error)
    display = ProgressDisplay(stream, live=True, interval=0, width=80)
    log = record_logger(display)
    display.update(RUNNING)
    stream.broken = True
    display.update(RUNNING)  # rich would exit the process on a broken pipe; here it goes quiet
    log.warning("after the terminal closed")
    assert display.finish(DONE) == render(DONE, 20.0, 600.0)


def test_a_closed_stream_never_fails_the_run() -> None:
    display, stream = live_display()
    log = record_logger(display)
    stream.close()
    display.update(RUNNING)
    log.warning("nobody reads this")
    assert "done" in display.finish(DONE)


def test_records_from_many_threads_each_land_whole_above_the_line() -> None:
    display, stream = live_display()
    log = record_logger(display)

    def redraw() -> None:
        for _ in range(200):
            display.update(RUNNING)

    def records(n: int) -> None:
        for i in range(50):
            log.warning("thread %d record %d [x]", n, i)

    threads = [threading.Thread(target=redraw)]
    threads += [threading.Thread(target=records, args=(n,)) for n in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    final = display.finish(DONE)
    rows = screen(stream.getvalue(), 160)
    assert rows[-1] == final
    expected = {
        f"WARNING {log.name}: thread {n} record {i} [x]" for n in range(4) for i in range(50)
    }
    assert sorted(rows[:-1]) == sorted(expected)


@pytest.fixture
def restore_logging() -> Iterator[None]:
    root = logging.getLogger()
    saved = root.level, list(root.handlers)
    yield
    root.setLevel(saved[0])
    root.handlers[:] = saved[1]


def test_on_a_terminal_the_command_prints_warnings_above_the_line(restore_logging: None) -> None:
    display, stream = live_display()
    setup_logging(None, display)
    ours = [h for h in logging.getLogger().handlers if getattr(h, "_hdfs_region", False)]
    assert len(ours) == 1 and isinstance(ours[0], LiveLineHandler)
    display.update(RUNNING)
    logging.getLogger("operators.scan.operator").info("hidden on a terminal")
    logging.getLogger("operators.scan.operator").warning("passed over /in/[a].txt")
    assert screen(stream.getvalue(), 160) == [
        "WARNING operators.scan.operator: passed over /in/[a].txt",
        render(RUNNING, 0.0, 0.0),
    ]


def test_without_a_terminal_rich_is_never_imported(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, restore_logging: None
) -> None:
    for name in [n for n in sys.modules if n == "rich" or n.startswith("rich.")] + ["rich"]:
        monkeypatch.setitem(sys.modules, name, None)  # any import of rich now fails
    stream = io.StringIO()
    display = ProgressDisplay(stream, interval=0)  # a StringIO is no terminal
    assert not display.live
    setup_logging(None, display)
    caplog.set_level(logging.INFO, logger="operators.app.progress")
    display.update(RUNNING)
    display.print_above("a record")
    final = display.finish(DONE)
    assert stream.getvalue() == "a record\n"
    lines = [r.getMessage() for r in caplog.records if r.name == "operators.app.progress"]
    assert lines == [render(RUNNING, 0.0, 0.0), final]


def test_as_log_lines_an_idle_job_logs_one_line_a_minute(caplog: pytest.LogCaptureFixture) -> None:
    from operators.app.progress import IDLE_LOG_SECONDS

    now = [0.0]
    display = ProgressDisplay(io.StringIO(), live=False, interval=5.0, clock=lambda: now[0])
    idle = Progress(status="processing", records_in=10, files_in=1, cuts=1)
    with caplog.at_level(logging.INFO, logger="operators.app.progress"):
        for tick in range(int(2 * IDLE_LOG_SECONDS / 5) + 1):  # two minutes, every 5 s
            now[0] = 5.0 * (tick + 1)
            # The cuts, the status and the time move on; nothing is read or written.
            display.update(
                dataclasses.replace(idle, cuts=tick + 1, elapsed=now[0], status="checkpointing")
            )
        idle_lines = len(caplog.records)
        now[0] += 5.0
        display.update(dataclasses.replace(idle, records_in=11, elapsed=now[0]))
    assert idle_lines == 3  # the first, then one a minute
    assert len(caplog.records) == 4  # a record read: logged at once
    assert "records 11" in caplog.records[-1].getMessage()
