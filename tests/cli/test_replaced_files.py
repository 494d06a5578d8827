"""``hdfs-region run --available-now`` again and again (cron) on files replaced under a name
already read (``mv new.tmp daily.csv``), appended to in place, reached through a symbolic
link, with the settings changed between runs, and across a kill -9: what the command prints
and publishes, record by record."""

from __future__ import annotations

import os
import re
import signal
from pathlib import Path

import pytest

from tests.cli.conftest import PipelineDir, cli, cut_files, start_cli, wait_for

SETTINGS = """\
    engine = "local"
    [region]
    trigger = "periodic"
    period = "50ms"
    [scan]
    directory = "{directory}"
    {scan}
    [transform]
    function = "pace:shout"
    [sink]
    file = "out/part-%FILENUM.txt"
"""

#: 2023-11-14 22:13:20 UTC, in ns: files landed long before the runs.
T0 = 1_700_000_000_000_000_000
S = 1_000_000_000


def config(pdir: PipelineDir, scan: str = "", directory: str = "landing") -> Path:
    return pdir.write_config(SETTINGS.format(directory=directory, scan=scan))


def land(folder: Path, name: str, lines: list[str], mtime_ns: int | None = None) -> Path:
    """Write ``name`` as a writer that renames its finished file over the old one does."""
    folder.mkdir(parents=True, exist_ok=True)
    tmp = folder / f".{name}.tmp"
    tmp.write_text("".join(f"{line}\n" for line in lines), encoding="utf-8")
    if mtime_ns is not None:
        os.utime(tmp, ns=(mtime_ns, mtime_ns))
    os.replace(tmp, folder / name)
    return folder / name


def run(cfg: Path, **env: str) -> tuple[int, list[str]]:
    """One cron run: the records it read and the operators' WARNING/ERROR messages."""
    done = cli("run", str(cfg), "--available-now", "--no-progress", **env)
    assert done.returncode == 0, done.stderr
    # What the scan and the source say (a lock left by a killed run is the lock's business).
    warnings = [
        m.group(1)
        for m in re.finditer(r" (?:WARNING|ERROR) +((?:operators)\.\S+: .*)", done.stderr)
    ]
    summary = done.stdout.strip().splitlines()[-1]
    return int(summary.split("stopped: ", 1)[1].split(" records in", 1)[0]), warnings


def test_cron_runs_read_each_replacement_whole_once_whatever_its_size_and_mtime(
    pdir: PipelineDir,
) -> None:
    """``mv new.tmp daily.csv`` over a file read: the new file is read whole, once, with the
    default ``on_modified``, not counted as changed, also when it has the old one's size and
    mtime second, or the very same mtime (``touch -r``, ``cp -p``): another inode is another
    file."""
    cfg = config(pdir)
    land(pdir.landing, "daily.csv", ["d1 a", "d1 b"])
    assert run(cfg) == (2, [])
    land(pdir.landing, "daily.csv", ["d2 a", "d2 b", "d2 c"])
    assert run(cfg) == (3, [])
    assert run(cfg) == (0, [])
    # The same size, in the same mtime second (a new inode).
    old = (pdir.landing / "daily.csv").stat()
    land(pdir.landing, "daily.csv", ["d3 a", "d3 b", "d3 c"], old.st_mtime_ns // S * S + 1)
    assert run(cfg) == (3, [])
    # The very same mtime and size: only the inode tells the new file from the one read.
    old = (pdir.landing / "daily.csv").stat()
    land(pdir.landing, "daily.csv", ["d4 a", "d4 b", "d4 c"], old.st_mtime_ns)
    assert (pdir.landing / "daily.csv").stat().st_size == old.st_size
    assert run(cfg) == (3, [])
    assert run(cfg) == (0, [])
    assert pdir.output_lines() == [
        "D1 A", "D1 B", "D2 A", "D2 B", "D2 C", "D3 A", "D3 B", "D3 C", "D4 A", "D4 B", "D4 C"
    ]  # fmt: skip


def newest_cut(pdir: PipelineDir) -> int:
    cuts = cut_files(pdir.root / "checkpoints" / "pipeline")
    return max((int(p.stem.split("-")[1]) for p in cuts), default=0)


def test_a_kill_9_in_the_middle_of_a_replacement_then_the_next_run_publishes_it_once(
    pdir: PipelineDir,
) -> None:
    """A cron run killed (SIGKILL) after a cut in the middle of a file that replaced one read
    before: the next run resumes it where the cut left it, and every record of the old file
    and of the new one is published once."""
    cfg = config(pdir)
    land(pdir.landing, "daily.csv", [f"old {i:03d}" for i in range(5)])
    assert run(cfg) == (5, [])
    before = newest_cut(pdir)
    new = [f"new {i:04d}" for i in range(3000)]
    land(pdir.landing, "daily.csv", new)
    running = start_cli("run", str(cfg), "--available-now", "--no-progress", PACE="0.001")
    try:
        wait_for(lambda: newest_cut(pdir) > before + 1, what="a cut in the file", alive=running)
        running.send_signal(signal.SIGKILL)
    finally:
        running.communicate()
    assert running.returncode == -signal.SIGKILL
    read, warnings = run(cfg)
    assert 0 < read < 3000 and warnings == []
    assert run(cfg) == (0, [])
    assert pdir.output_lines() == [f"OLD {i:03d}" for i in range(5)] + [n.upper() for n in new]


def test_a_landing_directory_named_through_a_symlink_sees_replacements_made_at_its_real_path(
    pdir: PipelineDir,
) -> None:
    """The settings name ``landing``, a symbolic link to the real folder where the writer
    renames and appends: one file, whichever path names it."""
    real = pdir.root / "real"
    real.mkdir(parents=True)
    pdir.landing.symlink_to(real, target_is_directory=True)
    cfg = config(pdir)
    land(real, "daily.csv", ["a 1", "a 2"])
    assert run(cfg) == (2, [])
    land(real, "daily.csv", ["b 1"])
    assert run(cfg) == (1, [])
    with (real / "daily.csv").open("a", encoding="utf-8") as appended:
        appended.write("b 2\n")
    read, warnings = run(cfg)
    assert read == 0
    assert warnings == [
        f"operators.cursor: scan: file file://{pdir.landing}/daily.csv changed after it was "
        f"read (its mtime moved by {moved(warnings)}): what changed is not read (on_modified "
        "= 'warn'; 'reread' reads it again whole)"
    ]
    assert run(cfg) == (0, [])
    assert pdir.output_lines() == ["A 1", "A 2", "B 1"]


def moved(warnings: list[str]) -> str:
    """The ``by N.NNNs`` a changed-file warning gives (the test does not choose it)."""
    return warnings[0].split("its mtime moved by ", 1)[1].split(")", 1)[0] if warnings else ""


@pytest.mark.parametrize("on_modified", ["warn", "reread"])
def test_a_file_appended_to_in_place_is_reported_once_and_read_again_only_by_reread(
    pdir: PipelineDir, on_modified: str
) -> None:
    """``cat more >> daily.csv``: the same inode. Under ``warn`` one WARNING naming it, the
    progress counts it, and nothing is read twice, run after run; ``reread`` reads it whole
    again, once."""
    cfg = config(pdir, f'on_modified = "{on_modified}"')
    land(pdir.landing, "daily.csv", ["a 1", "a 2"])
    assert run(cfg) == (2, [])
    with (pdir.landing / "daily.csv").open("a", encoding="utf-8") as appended:
        appended.write("a 3\n")
    done = cli("run", str(cfg), "--available-now", "--no-progress")
    assert done.returncode == 0, done.stderr
    warned = [line for line in done.stderr.splitlines() if " WARNING " in line]
    if on_modified == "warn":
        assert "0 records in" in done.stdout
        assert len(warned) == 1
        assert f"file file://{pdir.landing}/daily.csv changed after it was read" in warned[0]
        assert pdir.output_lines() == ["A 1", "A 2"]
    else:
        assert "3 records in" in done.stdout and warned == []
        assert pdir.output_lines() == ["A 1", "A 2", "A 1", "A 2", "A 3"]
    assert run(cfg) == (0, [])
    assert run(cfg) == (0, [])


def test_on_modified_changed_after_a_replacement_reads_nothing_twice(pdir: PipelineDir) -> None:
    """A replacement read under ``warn``, then the settings say ``reread``, then ``warn``
    again: a setting applies to changes found from then on, never to files already read."""
    land(pdir.landing, "daily.csv", ["a 1"])
    land(pdir.landing, "other.csv", ["o 1"])
    assert run(config(pdir)) == (2, [])
    land(pdir.landing, "daily.csv", ["b 1"])
    assert run(config(pdir)) == (1, [])
    reread = config(pdir, 'on_modified = "reread"')
    assert run(reread) == (0, [])
    with (pdir.landing / "daily.csv").open("a", encoding="utf-8") as appended:
        appended.write("b 2\n")
    assert run(reread) == (2, [])  # changed in place, read again whole as asked
    assert run(config(pdir)) == (0, [])
    assert pdir.output_lines() == ["A 1", "O 1", "B 1", "B 1", "B 2"]


@pytest.mark.parametrize("below_the_window", [False, True], ids=["in the window", "below it"])
def test_a_pattern_narrowed_then_widened_again_reads_nothing_twice(
    pdir: PipelineDir, below_the_window: bool
) -> None:
    """``pattern`` narrowed for a few runs (``*.csv`` left out), then widened back: the files
    read before they were left out are not read again; one that landed meanwhile is read
    once, and so is one that replaced a file read, where its identity is known (in the
    window). Below the window (after 256 names more) only the name is known: the replacement
    is reported as changed (``on_modified``), not read."""
    land(pdir.landing, "daily.csv", ["a 1"], T0)
    land(pdir.landing, "kept.csv", ["k 1"], T0)
    old = [f"old-{i:03d}.txt" for i in range(300 if below_the_window else 2)]
    for name in old:
        land(pdir.landing, name, [name], T0 + S)
    land(pdir.landing, "x.txt", ["x 1"])
    assert run(config(pdir)) == (3 + len(old), [])
    narrow = config(pdir, "pattern = '.*[.]txt'")
    assert run(narrow) == (0, [])
    land(pdir.landing, "y.txt", ["y 1"])
    land(pdir.landing, "daily.csv", ["b 1"])  # replaced while left out
    land(pdir.landing, "new.csv", ["n 1"])  # landed while left out
    assert run(narrow) == (1, [])
    assert run(narrow) == (0, [])
    if below_the_window:
        assert run(config(pdir)) == (
            1,
            [
                f"operators.cursor: scan: file file://{pdir.landing}/daily.csv changed after it "
                "was read (its mtime moved): what changed is not read (on_modified = 'warn'; "
                "'reread' reads it again whole)"
            ],
        )
    else:
        assert run(config(pdir)) == (2, [])
    assert run(config(pdir)) == (0, [])
    replacement = [] if below_the_window else ["B 1"]
    assert pdir.output_lines() == [
        "A 1", "K 1", *(n.upper() for n in old), "X 1", "Y 1", *replacement, "N 1"
    ]  # fmt: skip
