"""``hdfs-region switch``: a running job (local engine) is told to watch another directory; the
switch survives a SIGKILL and a restart; roots, the output directory and Spark's checkpoints
are refused with one line. A relative directory is the settings file's; with no job running
the switch is pending (exit 3); a file is refused, and one that became a file is named at
start."""

from __future__ import annotations

import os
import signal
from pathlib import Path

from tests.cli.conftest import PipelineDir, cli, start_cli, wait_for

STREAMING = """\
    engine = "local"
    [region]
    period = "100ms"
    [scan]
    directory = "{root}/landing"  # absolute: roots are checked before paths are resolved
    sleep_time = "100ms"
    roots = ["{root}"]
    [sink]
    file = "out/part-%FILENUM.txt"
    tuples_per_file = 1
"""


def put(directory: Path, name: str, lines: list[str]) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / name).write_text("".join(f"{line}\n" for line in lines))


def test_switch_a_running_job_then_kill_it_and_the_restart_keeps_the_new_directory(
    pdir: PipelineDir,
) -> None:
    pdir.add_file("a.txt", ["a1", "a2"])
    config = pdir.write_config(STREAMING.format(root=pdir.root))
    running = start_cli("run", str(config))
    try:
        wait_for(lambda: len(pdir.output_lines()) >= 2, what="a.txt read", alive=running)
        other = pdir.root / "other"
        put(other, "b.txt", ["b1"])
        switched = cli("switch", str(config), str(other))
        assert switched.returncode == 0, switched.stderr
        assert "switch to file://" in switched.stdout
        assert f"pid {running.pid}" in switched.stdout  # the job that applies it
        wait_for(lambda: "b1" in pdir.output_lines(), what="b.txt read", alive=running)
        os.kill(running.pid, signal.SIGKILL)
        running.communicate(timeout=30)
    finally:
        if running.poll() is None:
            running.kill()
            running.communicate()
    pdir.add_file("late.txt", ["never"])  # in the directory watched before the switch
    put(pdir.root / "other", "c.txt", ["c1"])
    done = cli("run", str(config), "--available-now")
    assert done.returncode == 0, done.stderr
    assert sorted(pdir.output_lines()) == ["a1", "a2", "b1", "c1"]


def test_switch_refuses_directories_outside_the_roots_and_the_output(pdir: PipelineDir) -> None:
    config = pdir.write_config(STREAMING.format(root=pdir.root))
    outside = cli("switch", str(config), "/etc")
    assert outside.returncode == 2 and "outside [scan] roots" in outside.stderr
    # A link inside the roots that leads out of them: refused as the scan would refuse it.
    pdir.root.mkdir(parents=True, exist_ok=True)
    (pdir.root / "escape").symlink_to(pdir.root.parent)
    linked = cli("switch", str(config), str(pdir.root / "escape"))
    assert linked.returncode == 2 and "through a symbolic link" in linked.stderr
    output = cli("switch", str(config), str(pdir.out))
    assert output.returncode == 2 and "is the output directory" in output.stderr
    # The output directory under another name (a link to it) is the output directory too.
    pdir.out.mkdir(parents=True, exist_ok=True)
    (pdir.root / "out-link").symlink_to(pdir.out)
    alias = cli("switch", str(config), str(pdir.root / "out-link"))
    assert alias.returncode == 2 and "is the output directory" in alias.stderr
    # Its own checkpoint directory: the scan would read (and archive) the checkpoint files.
    checkpoints = pdir.root / "checkpoints" / "pipeline"
    checkpoints.mkdir(parents=True)
    own = cli("switch", str(config), str(checkpoints))
    assert own.returncode == 2 and "is the job's checkpoint directory" in own.stderr
    assert not (pdir.root / "checkpoints" / "pipeline" / "control.json").exists()


def test_switch_is_refused_for_a_single_file_pipeline(pdir: PipelineDir) -> None:
    config = pdir.write_config(
        """\
        engine = "local"
        [source]
        file = "landing/orders.csv"
        [sink]
        file = "out/part-%FILENUM.txt"
        """
    )
    refused = cli("switch", str(config), str(pdir.root / "x"))
    assert refused.returncode == 2 and "there is no directory to switch" in refused.stderr


def test_switch_is_refused_on_the_spark_engine(pdir: PipelineDir) -> None:
    config = pdir.write_config(STREAMING.format(root=pdir.root).replace('"local"', '"spark"'))
    refused = cli("switch", str(config), str(pdir.root / "other"))
    assert refused.returncode == 2
    assert "the spark engine does not read switch requests" in refused.stderr
    assert not (pdir.root / "checkpoints" / "pipeline" / "control.json").exists()


LOCAL = """\
    engine = "local"
    [region]
    period = "100ms"
    [scan]
    directory = "landing"
    {scan}
    [sink]
    file = "out/part-%FILENUM.txt"
"""


def test_a_relative_directory_is_the_settings_files_folder_and_without_a_job_it_is_pending(
    pdir: PipelineDir, tmp_path: Path
) -> None:
    pdir.add_file("a.txt", ["a1"])
    put(pdir.root / "B", "b.txt", ["b1"])
    config = pdir.write_config(LOCAL.format(scan=""))
    elsewhere = tmp_path / "elsewhere"
    (elsewhere / "B").mkdir(parents=True)  # the shell's folder has a B too: not the one meant
    switched = cli("switch", str(config), "B", cwd=elsewhere)
    # No job runs: the switch waits for the next start, and the exit code says so.
    assert switched.returncode == 3, switched.stderr
    assert f"switch to file://{pdir.root / 'B'} is pending" in switched.stdout
    assert "next start" in switched.stdout and "within a second" not in switched.stdout
    done = cli("run", str(config), "--available-now", "--no-progress", cwd=elsewhere)
    assert done.returncode == 0, done.stderr
    assert pdir.output_lines() == ["b1"]


def test_a_file_is_refused_at_switch_time_and_a_pending_switch_gone_bad_is_named_at_start(
    pdir: PipelineDir,
) -> None:
    pdir.add_file("a.txt", ["a1"])
    config = pdir.write_config(LOCAL.format(scan=""))
    a_file = pdir.root / "notes.txt"
    a_file.write_text("not a directory\n")
    refused = cli("switch", str(config), str(a_file))
    assert refused.returncode == 2
    assert f"file://{a_file} is not a directory" in refused.stderr
    control = pdir.root / "checkpoints" / "pipeline" / "control.json"
    assert not control.exists()
    # A directory when switched to, a file by the time the job starts.
    target = pdir.root / "later"
    target.mkdir()
    assert cli("switch", str(config), "later").returncode == 3
    target.rmdir()
    target.write_text("replaced by a file\n")
    for _ in range(2):  # every start names it, with the way out
        done = cli("run", str(config), "--available-now", "--no-progress")
        assert done.returncode == 2, done.stderr
        assert f"switch request in file://{control}" in done.stderr
        assert f"file://{target} is not a directory" in done.stderr
        assert f"-m operators.app switch {config} DIRECTORY" in done.stderr
    # Switching again (here back to the landing directory) is the way out.
    assert cli("switch", str(config), "landing").returncode == 3
    done = cli("run", str(config), "--available-now", "--no-progress")
    assert done.returncode == 0, done.stderr
    assert pdir.output_lines() == ["a1"]


def test_a_directory_that_does_not_exist_yet_is_accepted_unless_strict(
    pdir: PipelineDir,
) -> None:
    config = pdir.write_config(LOCAL.format(scan=""))
    switched = cli("switch", str(config), "tomorrow")
    assert switched.returncode == 3, switched.stderr
    assert f"file://{pdir.root / 'tomorrow'} does not exist yet" in switched.stderr
    strict = pdir.write_config(LOCAL.format(scan="strict_mode = true"), "strict.toml")
    refused = cli("switch", str(strict), "tomorrow")
    assert refused.returncode == 2
    assert f"file://{pdir.root / 'tomorrow'} does not exist" in refused.stderr
    assert "strict_mode" in refused.stderr


def test_the_archive_directory_is_refused(pdir: PipelineDir) -> None:
    # after_read = "archive" moves each file read there: watching it, every archived file
    # would come back under a numbered name and be read again.
    config = pdir.write_config(
        LOCAL.format(scan='after_read = "archive"\n    archive_dir = "archive"')
    )
    (pdir.root / "archive").mkdir(parents=True)
    refused = cli("switch", str(config), "archive")
    assert refused.returncode == 2, refused.stderr
    assert "is the archive directory" in refused.stderr
    assert not (pdir.root / "checkpoints" / "pipeline" / "control.json").exists()


def test_a_pending_switch_to_a_name_that_became_a_link_to_the_output_is_named_at_start(
    pdir: PipelineDir,
) -> None:
    pdir.add_file("a.txt", ["a1"])
    config = pdir.write_config(LOCAL.format(scan=""))
    assert cli("run", str(config), "--available-now", "--no-progress").returncode == 0
    switched = cli("switch", str(config), "later")  # does not exist yet: accepted, pending
    assert switched.returncode == 3, switched.stderr
    (pdir.root / "later").symlink_to(pdir.out)  # made since: the output under another name
    done = cli("run", str(config), "--available-now", "--no-progress")
    assert done.returncode == 2, done.stderr[-3000:]
    last = done.stderr.strip().splitlines()[-1]
    assert f"names file://{pdir.root / 'later'}, the output directory" in last, last
    assert pdir.output_lines() == ["a1"]  # nothing read twice


def test_a_switch_to_the_settings_file_itself_is_refused_and_stores_nothing(
    pdir: PipelineDir, tmp_path: Path
) -> None:
    pdir.add_file("a.txt", ["a1"])
    config = pdir.write_config(LOCAL.format(scan=""))
    control = pdir.root / "checkpoints" / "pipeline" / "control.json"
    # As typed from the settings file's folder, and from elsewhere: absolute, and relative to
    # the shell's folder (from the settings file's folder that names nothing yet, which was
    # stored as a pending switch).
    relative = str(config.relative_to(tmp_path))
    cases = ((pdir.root, "pipeline.toml"), (tmp_path, str(config)), (tmp_path, relative))
    for cwd, directory in cases:
        refused = cli("switch", str(config), directory, cwd=cwd)
        assert refused.returncode == 2, refused.stdout
        assert "is the settings file" in refused.stderr and "nothing stored" in refused.stderr
        assert not control.exists()


def test_cancel_removes_a_pending_switch_and_says_so(pdir: PipelineDir) -> None:
    pdir.add_file("a.txt", ["a1"])
    put(pdir.root / "B", "b.txt", ["b1"])
    config = pdir.write_config(LOCAL.format(scan=""))
    control = pdir.root / "checkpoints" / "pipeline" / "control.json"
    none = cli("switch", str(config), "--cancel")
    assert none.returncode == 0, none.stderr
    assert "nothing to cancel" in none.stdout
    assert cli("switch", str(config), "B").returncode == 3
    cancelled = cli("switch", str(config), "--cancel")
    assert cancelled.returncode == 0, cancelled.stderr
    assert f"cancelled the pending switch to file://{pdir.root / 'B'}" in cancelled.stdout
    assert not control.exists()
    done = cli("run", str(config), "--available-now", "--no-progress")
    assert done.returncode == 0, done.stderr
    assert pdir.output_lines() == ["a1"]  # the landing directory, not B


def test_cancel_leaves_a_switch_a_cut_recorded(pdir: PipelineDir) -> None:
    pdir.add_file("a.txt", ["a1"])
    put(pdir.root / "B", "b.txt", ["b1"])
    config = pdir.write_config(LOCAL.format(scan=""))
    assert cli("switch", str(config), "B").returncode == 3
    done = cli("run", str(config), "--available-now", "--no-progress")
    assert done.returncode == 0, done.stderr
    late = cli("switch", str(config), "--cancel")
    assert late.returncode == 0, late.stderr
    assert "no pending switch" in late.stdout and "records it" in late.stdout
    assert (pdir.root / "checkpoints" / "pipeline" / "control.json").exists()
