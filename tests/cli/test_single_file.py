"""``[source] file``: a pipeline that reads one named file (IBM's ``HDFS2FileSource file``),
exactly once, resumed after a SIGKILL, and following the scan's rule when the file changes
after it was read."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest

from tests.cli.conftest import PipelineDir, cli, cut_files, start_cli, wait_for

ONE_FILE = """\
    engine = "{engine}"
    [region]
    period = "100ms"
    {scan}
    [source]
    file = "landing/orders.csv"
    {transform}
    [sink]
    file = "out/part-%FILENUM.txt"
    tuples_per_file = 40
"""


def one_file(
    pdir: PipelineDir, *, engine: str = "local", scan: str = "", pace: bool = False
) -> Path:
    transform = '[transform]\nfunction = "pace:shout"' if pace else ""
    return pdir.write_config(ONE_FILE.format(engine=engine, scan=scan, transform=transform))


def test_reads_the_one_file_and_ends(pdir: PipelineDir) -> None:
    pdir.add_files(2, 10)  # other files in the same directory are not read
    pdir.add_file("orders.csv", [f"order-{i}" for i in range(100)])
    config = one_file(pdir)
    done = cli("run", str(config))  # no --available-now: one file is read, then the run ends
    assert done.returncode == 0, done.stderr
    assert pdir.output_lines() == [f"order-{i}" for i in range(100)]
    again = cli("run", str(config))
    assert again.returncode == 0 and "0 records in" in again.stdout, again.stderr


@pytest.mark.parametrize("on_modified", ["warn", "reread"])
def test_a_file_that_changed_after_it_was_read_follows_on_modified(
    pdir: PipelineDir, on_modified: str
) -> None:
    path = pdir.add_file("orders.csv", ["a", "b"])
    config = one_file(pdir, scan=f'[scan]\non_modified = "{on_modified}"')
    assert cli("run", str(config)).returncode == 0
    with path.open("a") as f:  # grows, and gets a new mtime
        f.write("c\n")
    again = cli("run", str(config))
    assert again.returncode == 0, again.stderr
    if on_modified == "warn":  # not read again: named in a WARNING and counted
        assert "orders.csv" in again.stderr and "on_modified = 'warn'" in again.stderr
        assert pdir.output_lines() == ["a", "b"]
    else:  # read again whole, as the scan does
        assert pdir.output_lines() == ["a", "b", "a", "b", "c"]


def test_killed_in_the_middle_of_the_file_resumes_exactly_once(pdir: PipelineDir) -> None:
    lines = [f"order-{i:04d}" for i in range(3000)]  # three batches
    pdir.add_file("orders.csv", lines)
    config = one_file(pdir, pace=True)
    checkpoints = pdir.root / "checkpoints" / "pipeline"
    running = start_cli("run", str(config), PACE="0.002")
    try:
        wait_for(
            lambda: len(pdir.output_lines()) >= 40 and cut_files(checkpoints),
            what="a published file",
            alive=running,
        )
        os.kill(running.pid, signal.SIGKILL)
        running.communicate(timeout=30)
    finally:
        if running.poll() is None:
            running.kill()
            running.communicate()
    assert len(pdir.output_lines()) < 3000  # killed before the end
    done = cli("run", str(config))
    assert done.returncode == 0, done.stderr
    assert pdir.output_lines() == [line.upper() for line in lines]


def test_a_missing_file_is_named_in_a_warning(pdir: PipelineDir) -> None:
    pdir.landing.mkdir(parents=True)
    done = cli("run", str(one_file(pdir)))
    assert done.returncode == 0, done.stderr
    assert "orders.csv does not exist: nothing was read from it" in done.stderr


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ('[scan]\ndirectory = "landing"', "[scan] directory: not used with [source] file"),
        ('[scan]\npattern = ".*"', "[scan] pattern: not used with [source] file"),
    ],
)
def test_file_and_a_scanned_directory_exclude_each_other(
    pdir: PipelineDir, body: str, message: str
) -> None:
    done = cli("run", str(one_file(pdir, scan=body)))
    assert done.returncode == 2
    assert message in done.stderr


def test_a_hidden_file_name_is_refused(pdir: PipelineDir) -> None:
    config = pdir.write_config(
        """\
        engine = "local"
        [source]
        file = "landing/_orders.csv"
        [sink]
        file = "out/part-%FILENUM.txt"
        """
    )
    done = cli("run", str(config))
    assert done.returncode == 2
    assert "[source] file: 'landing/_orders.csv' must end in a file name" in done.stderr
