"""Cron-style runs (``hdfs-region run --available-now`` again and again) behave as one long run:
a file that lands again under the name of one the scan archived or deleted is a new file; the
hourly export of a ``[source] file`` with ``after_read = "delete"`` is read each hour; a file with
an mtime a day ahead hides none of the files that land after it."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from tests.cli.conftest import PipelineDir, cli, kill_at

S = 1_000_000_000

CRON = """\
    engine = "{engine}"
    [region]
    period = "100ms"
    [scan]
    directory = "landing"
    {scan}
    [sink]
    file = "out/part-%FILENUM.txt"
    tuples_per_file = 1000
"""

ONE_FILE = """\
    engine = "{engine}"
    [region]
    period = "100ms"
    [scan]
    {scan}
    [source]
    file = "landing/orders.csv"
    [sink]
    file = "out/part-%FILENUM.txt"
    tuples_per_file = 1000
"""


def after_read(mode: str) -> str:
    return (
        'after_read = "archive"\narchive_dir = "archive"'
        if mode == "archive"
        else (f'after_read = "{mode}"')
    )


def land_now(pdir: PipelineDir, name: str, lines: list[str]) -> Path:
    """A file written now (its mtime is the clock's), as an export job writes it."""
    pdir.landing.mkdir(parents=True, exist_ok=True)
    path = pdir.landing / name
    temp = pdir.landing / f".{name}.tmp"
    temp.write_text("".join(f"{line}\n" for line in lines), encoding="utf-8")
    os.rename(temp, path)
    pdir.records.extend(lines)
    return path


def run(config: Path, *args: str) -> str:
    done = cli("run", str(config), *args, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stderr


@pytest.mark.parametrize("mode", ["archive", "delete"])
def test_a_name_landing_again_after_its_file_was_archived_or_deleted_is_read(
    pdir: PipelineDir, mode: str
) -> None:
    config = pdir.write_config(CRON.format(engine="local", scan=after_read(mode)))
    land_now(pdir, "a.txt", [f"first-{i}" for i in range(10)])
    run(config, "--available-now")
    assert not (pdir.landing / "a.txt").exists()
    for hour in range(2):  # the next exports, each under the same name
        land_now(pdir, "a.txt", [f"again{hour}-{i}" for i in range(10)])
        log = run(config, "--available-now")
        assert "changed" not in log, log
        assert not (pdir.landing / "a.txt").exists()
    assert sorted(pdir.output_lines()) == sorted(pdir.records)
    if mode == "archive":
        archived = sorted(p.name for p in (pdir.root / "archive").iterdir())
        assert archived == ["a-1.txt", "a-2.txt", "a.txt"]


@pytest.mark.parametrize("mode", ["archive", "delete"])
def test_the_last_checkpoint_of_a_run_already_forgot_the_names_it_moved_away(
    pdir: PipelineDir, mode: str
) -> None:
    # The next file under the name may get the inode number of a deleted one: the next run
    # must not need to tell them apart, so the run records what it moved before it ends.
    config = pdir.write_config(CRON.format(engine="local", scan=after_read(mode)))
    land_now(pdir, "a.txt", ["a"])
    run(config, "--available-now")
    shown = cli("inspect", str(pdir.root / "checkpoints" / "pipeline"))
    assert shown.returncode == 0, shown.stderr
    assert '"names_in_window": 0' in shown.stdout and '"after_read"' not in shown.stdout, (
        shown.stdout
    )


def test_the_hourly_export_of_a_single_file_with_delete_is_read_each_hour(
    pdir: PipelineDir,
) -> None:
    config = pdir.write_config(ONE_FILE.format(engine="local", scan=after_read("delete")))
    land_now(pdir, "orders.csv", [f"hour0-{i}" for i in range(10)])
    log = run(config)
    assert "does not exist" not in log, log  # it was read, then deleted
    assert not (pdir.landing / "orders.csv").exists()
    land_now(pdir, "orders.csv", [f"hour1-{i}" for i in range(10)])
    log = run(config)
    assert "does not exist" not in log and "changed" not in log, log
    assert pdir.output_lines() == pdir.records
    # No export this hour: that is worth a WARNING.
    assert "orders.csv does not exist" in run(config)


def test_a_single_file_the_user_deletes_between_runs_is_read_each_time(
    pdir: PipelineDir,
) -> None:
    # after_read = "keep": the user clears the export away; a run in between finds none.
    config = pdir.write_config(ONE_FILE.format(engine="local", scan=""))
    path = land_now(pdir, "orders.csv", [f"hour0-{i}" for i in range(10)])
    assert "does not exist" not in run(config)
    path.unlink()
    assert "orders.csv does not exist" in run(config)
    land_now(pdir, "orders.csv", [f"hour1-{i}" for i in range(10)])
    run(config)
    assert pdir.output_lines() == pdir.records


def test_a_single_file_that_is_a_symbolic_link_is_refused_at_start(pdir: PipelineDir) -> None:
    real = pdir.root / "exports" / "orders-2026.csv"
    real.parent.mkdir(parents=True)
    real.write_text("a\nb\n", encoding="utf-8")
    pdir.landing.mkdir(parents=True)
    (pdir.landing / "orders.csv").symlink_to(real)
    config = pdir.write_config(ONE_FILE.format(engine="local", scan=""))
    done = cli("run", str(config))
    assert done.returncode == 2, done.stderr
    assert "orders.csv" in done.stderr and "symbolic link" in done.stderr
    assert str(real) in done.stderr  # what to name instead
    assert pdir.output_lines() == []


def test_a_file_with_an_mtime_a_day_ahead_hides_none_of_the_files_after_it(
    pdir: PipelineDir,
) -> None:
    config = pdir.write_config(CRON.format(engine="local", scan=""))
    for i in range(10):
        land_now(pdir, f"early-{i:02d}.txt", [f"early-{i}"])
    skewed = land_now(pdir, "skewed.txt", ["skewed-0", "skewed-1"])
    ahead = time.time_ns() + 86_400 * S
    os.utime(skewed, ns=(ahead, ahead))
    log = run(config, "--available-now")
    assert "skewed.txt" in log and "ahead" in log, log  # named once, in a WARNING
    # More files than the census below the late window tells apart (CAPACITY) land meanwhile.
    for i in range(1000):
        land_now(pdir, f"late-{i:04d}.txt", [f"late-{i}"])
    log = run(config, "--available-now")
    assert "passed over" not in log and "skewed.txt" not in log, log
    assert sorted(pdir.output_lines()) == sorted(pdir.records)


@pytest.mark.slow
@pytest.mark.spark
def test_spark_cron_style_runs_read_a_name_landing_again_after_delete(pdir: PipelineDir) -> None:
    scan = after_read("delete") + '\n[spark]\nmaster = "local[2]"'
    config = pdir.write_config(CRON.format(engine="spark", scan=scan))
    for _ in range(2):  # the same bytes again: a new delivery all the same
        land_now(pdir, "a.txt", [f"same-{i}" for i in range(10)])
        log = run(config, "--available-now")
        assert "changed" not in log, log[-3000:]
        assert not (pdir.landing / "a.txt").exists()
    assert sorted(pdir.output_lines()) == sorted(pdir.records)


@pytest.mark.parametrize("mode", ["archive", "delete"])
def test_the_same_bytes_landing_again_after_archive_or_delete_are_read_again(
    pdir: PipelineDir, mode: str
) -> None:
    # The scan moved the first file away: what lands under its name later is a new delivery,
    # even byte for byte the same (a re-sent export, a heartbeat file); the default rule
    # (by content) must not take it for the file it read.
    config = pdir.write_config(CRON.format(engine="local", scan=after_read(mode)))
    lines = [f"same-{i}" for i in range(10)]
    land_now(pdir, "a.txt", lines)
    run(config, "--available-now")
    land_now(pdir, "a.txt", lines)
    run(config, "--available-now")
    assert not (pdir.landing / "a.txt").exists()
    assert sorted(pdir.output_lines()) == sorted(pdir.records)


def test_the_same_bytes_landing_again_after_a_kill_between_delete_and_checkpoint_are_read(
    pdir: PipelineDir,
) -> None:
    # Killed once the file is deleted, before a checkpoint records it: the restart restores a
    # memory that still holds the file, and meets the next one, byte for byte the same, at once.
    config = pdir.write_config(CRON.format(engine="local", scan=after_read("delete")))
    lines = [f"same-{i}" for i in range(10)]
    land_now(pdir, "a.txt", lines)
    kill_at("scan-after-read", pdir.root / "faults", "run", str(config), "--available-now")
    assert not (pdir.landing / "a.txt").exists()
    land_now(pdir, "a.txt", lines)
    run(config, "--available-now")
    assert not (pdir.landing / "a.txt").exists()
    assert sorted(pdir.output_lines()) == sorted(pdir.records)
