"""Named pipes and other special files: left out of the scan with a WARNING naming each, refused
as ``[source] file``; and a stop that ends the process even when an operator call blocks."""

from __future__ import annotations

import os
import signal
import threading
from pathlib import Path

import pytest

from tests.cli.conftest import PipelineDir, cli, cut_files, start_cli, wait_for

SCAN = """\
    engine = "local"
    [region]
    trigger = "{trigger}"
    drain_timeout = "{drain_timeout}"
    [scan]
    directory = "landing"
    {transform}
    [sink]
    file = "out/part-%FILENUM.txt"
    tuples_per_file = 25
"""

#: A transform that blocks in a read of a named pipe nobody writes, on the record "hang",
#: while HANG_FIFO is set; it first creates HANG_MARK, so the test knows it is blocked.
HANG_MODULE = """\
import os


def hang(record):
    fifo = os.environ.get("HANG_FIFO")
    if fifo and record == "hang":
        open(os.environ["HANG_MARK"], "w").close()
        with open(fifo) as pipe:
            pipe.read()
    return record
"""


def test_a_named_pipe_in_the_landing_directory_is_left_out_and_named(pdir: PipelineDir) -> None:
    pdir.add_file("a.txt", ["a1", "a2", "a3"])
    os.mkfifo(pdir.landing / "b.txt")  # matches the pattern; opening it would wait for a writer
    config = pdir.write_config(SCAN.format(trigger="periodic", drain_timeout="2s", transform=""))
    done = cli("run", str(config), "--available-now", timeout=60)
    assert done.returncode == 0, done.stderr
    assert pdir.output_lines() == ["a1", "a2", "a3"]
    warnings = [line for line in done.stderr.splitlines() if "b.txt" in line]
    assert len(warnings) == 1, done.stderr
    assert "WARNING" in warnings[0] and "named pipe (FIFO): left out" in warnings[0]


@pytest.mark.parametrize("engine", ["local", pytest.param("spark", marks=pytest.mark.spark)])
def test_a_named_pipe_as_source_file_is_refused(pdir: PipelineDir, engine: str) -> None:
    pdir.landing.mkdir(parents=True)
    os.mkfifo(pdir.landing / "orders.csv")
    config = pdir.write_config(
        f"""\
        engine = "{engine}"
        [source]
        file = "landing/orders.csv"
        [sink]
        file = "out/part-%FILENUM.txt"
        """
    )
    done = cli("run", str(config), timeout=60)
    assert done.returncode == 2, done.stderr
    last = done.stderr.strip().splitlines()[-1]
    assert "[source] file" in last and "orders.csv" in last
    assert "is a named pipe (FIFO), not a regular file" in last


@pytest.mark.parametrize("signals", [1, 2])
def test_a_stop_ends_the_process_when_an_operator_call_blocks(
    pdir: PipelineDir, signals: int
) -> None:
    pdir.add_files(3, 30)
    pdir.add_file("z.txt", ["z1", "hang", "z2"])
    (pdir.root / "hang.py").write_text(HANG_MODULE, encoding="utf-8")
    # A cut after each file: the files before z.txt are published before the call blocks.
    transform = '[transform]\nfunction = "hang:hang"'
    # One signal: the process ends drain_timeout after it; two: the second does not wait.
    drain_timeout = "2s" if signals == 1 else "1h"
    config = pdir.write_config(
        SCAN.format(trigger="operator_driven", drain_timeout=drain_timeout, transform=transform)
    )
    fifo, mark = pdir.root / "never-written", pdir.root / "blocked"
    os.mkfifo(fifo)
    checkpoints = pdir.root / "checkpoints" / "pipeline"
    running = start_cli("run", str(config), HANG_FIFO=str(fifo), HANG_MARK=str(mark))
    try:
        wait_for(mark.exists, what="the transform to block", alive=running)
        wait_for(lambda: cut_files(checkpoints), what="a cut", alive=running)
        assert running.stderr is not None
        lines: list[str] = []
        reader = threading.Thread(target=lambda: lines.extend(running.stderr or ()), daemon=True)
        reader.start()
        running.send_signal(signal.SIGTERM)
        if signals == 2:  # the second once the first was handled: it does not wait any longer
            wait_for(lambda: any("still in" in line for line in lines), what="the stop warning")
            running.send_signal(signal.SIGTERM)
        running.wait(timeout=60)
        reader.join(timeout=60)
        stderr = "".join(lines)
    finally:
        if running.poll() is None:
            running.kill()
            running.wait()
    assert running.returncode == 1, stderr
    blocked = [line for line in stderr.splitlines() if "Exiting now without a final cut" in line]
    assert len(blocked) == 1, stderr
    # Names the call that did not come back, the file it was on, and where the next run resumes.
    assert "transform hang" in blocked[0] and "z.txt" in blocked[0]
    why = "The immediate stop did not end" if signals == 2 else "The stop did not end within"
    assert why in blocked[0]
    assert "the next run resumes from cut" in blocked[0]
    # Nothing unpublished was claimed: the next run reads everything exactly once.
    again = cli("run", str(config), "--available-now")
    assert again.returncode == 0, again.stderr
    assert sorted(pdir.output_lines()) == sorted(pdir.records)


def test_a_region_that_fails_while_an_operator_call_blocks_ends_the_process(
    pdir: PipelineDir,
) -> None:
    pdir.add_file("z.txt", ["z1", "hang", "z2"])
    (pdir.root / "hang.py").write_text(HANG_MODULE, encoding="utf-8")
    config = pdir.write_config(
        """\
        engine = "local"
        [region]
        period = "100ms"
        drain_timeout = "1s"
        reset_timeout = "1s"
        max_consecutive_reset_attempts = 1
        [scan]
        directory = "landing"
        [transform]
        function = "hang:hang"
        [sink]
        file = "out/part-%FILENUM.txt"
        """
    )
    fifo, mark = pdir.root / "never-written", pdir.root / "blocked"
    os.mkfifo(fifo)
    # No signal: the periodic cut times out, the region fails, and the process ends by itself.
    done = cli("run", str(config), timeout=120, HANG_FIFO=str(fifo), HANG_MARK=str(mark))
    assert done.returncode == 1, done.stderr
    last = done.stderr.strip().splitlines()[-1]
    assert "After the region failed, the run did not end" in last, last
    assert "transform hang" in last and "z.txt" in last, last
    again = cli("run", str(config), "--available-now")
    assert again.returncode == 0, again.stderr
    assert pdir.output_lines() == ["z1", "hang", "z2"]


def test_copy_refuses_a_named_pipe_as_source(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "pipe")
    (tmp_path / "dst").mkdir()
    done = cli("copy", str(tmp_path / "pipe"), str(tmp_path / "dst") + "/", timeout=60)
    assert done.returncode == 1, done.stderr
    assert "is a named pipe (FIFO), not a regular file" in done.stderr.strip().splitlines()[-1]
    assert list((tmp_path / "dst").iterdir()) == []  # no temporary file left behind


def test_a_directory_as_source_file_is_refused_naming_it(pdir: PipelineDir) -> None:
    # A directory under the name of the file to read (an export tool that makes a folder of
    # parts): refused at start naming it, not a failure naming a file descriptor.
    (pdir.landing / "orders.csv").mkdir(parents=True)
    config = pdir.write_config(
        """\
        engine = "local"
        [source]
        file = "landing/orders.csv"
        [sink]
        file = "out/part-%FILENUM.txt"
        """
    )
    done = cli("run", str(config), timeout=60)
    assert done.returncode == 2, done.stderr
    last = done.stderr.strip().splitlines()[-1]
    assert f"[source] file: file://{pdir.landing / 'orders.csv'} is a directory" in last, last
