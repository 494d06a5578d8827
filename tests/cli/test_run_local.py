"""``hdfs-region run`` with the local engine: output, resume, transforms, stop, failures."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from operators.fs import LocalFileSystem
from operators.sink.manifest import manifest_dir, read_manifests
from tests.cli.conftest import PipelineDir, cli, cut_files, start_cli, wait_for

BASIC = """\
    engine = "local"
    [region]
    trigger = "{trigger}"
    period = "100ms"
    [scan]
    directory = "landing"
    [sink]
    file = "out/part-%FILENUM.txt"
    tuples_per_file = 70
"""


def scan_order(pdir: PipelineDir) -> list[str]:
    """Every landing record in the scan's order: files by (mtime, name), lines in file order."""
    files = sorted(pdir.landing.iterdir(), key=lambda p: (p.stat().st_mtime_ns, p.name))
    return [line for f in files for line in f.read_text().splitlines()]


@pytest.mark.parametrize("trigger", ["periodic", "operator_driven"])
def test_available_now_moves_every_record_once_in_scan_order(
    pdir: PipelineDir, tmp_path: Path, trigger: str
) -> None:
    pdir.add_files(5, 40)
    config = pdir.write_config(BASIC.format(trigger=trigger))
    # Started from another folder: relative paths resolve against the settings file's folder.
    done = cli("run", str(config), "--available-now", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert pdir.output_lines() == scan_order(pdir)
    assert len(pdir.output_lines()) == 200
    assert "200 records in" in done.stdout
    # Files of 70 records; the last one closed by the final cut, nothing left in progress;
    # beside them only the sink's own folder (which job writes here), hidden from readers.
    published = sorted(p.name for p in pdir.out.iterdir())
    assert published == ["_hdfs_sink"] + [f"part-{i}.txt" for i in range(3)]
    assert cut_files(pdir.root / "checkpoints" / "pipeline")
    if trigger == "operator_driven":
        # A cut after each file, plus the final one.
        assert "trigger: operator_driven" in done.stderr


def test_a_second_run_reads_only_new_files(pdir: PipelineDir) -> None:
    pdir.add_files(2, 30)
    config = pdir.write_config(BASIC.format(trigger="periodic"))
    assert cli("run", str(config), "--available-now").returncode == 0
    first = pdir.output_lines()
    again = cli("run", str(config), "--available-now")
    assert again.returncode == 0, again.stderr
    assert "0 records in" in again.stdout
    pdir.add_files(2, 30, prefix="g")
    third = cli("run", str(config), "--available-now")
    assert third.returncode == 0, third.stderr
    assert "60 records in" in third.stdout
    assert pdir.output_lines()[: len(first)] == first
    assert sorted(pdir.output_lines()) == sorted(pdir.records)


def test_transform_function_from_the_settings_folder(pdir: PipelineDir) -> None:
    pdir.add_file("a.txt", ["keep 1", "drop me", "keep 2"])
    config = pdir.write_config(
        """\
        engine = "local"
        [scan]
        directory = "landing"
        [transform]
        function = "pace:shout"
        [sink]
        file = "out/part-%FILENUM.txt"
        """
    )
    done = cli("run", str(config), "--available-now")
    assert done.returncode == 0, done.stderr
    assert pdir.output_lines() == ["KEEP 1", "KEEP 2"]
    assert "3 records in, 2 out" in done.stdout


def test_ibm_camel_case_names_are_accepted(pdir: PipelineDir) -> None:
    pdir.add_files(2, 10)
    config = pdir.write_config(
        """\
        engine = "local"
        [region]
        checkpointDir = "state"
        maxConsecutiveResetAttempts = 2
        [scan]
        directory = "landing"
        sleepTime = "1s"
        [source]
        onDecodeError = "replace"
        [sink]
        file = "out/part-%FILENUM.txt"
        tuplesPerFile = 5
        """
    )
    done = cli("run", str(config), "--available-now")
    assert done.returncode == 0, done.stderr
    assert len(pdir.output_lines()) == 20 and len(list(pdir.out.glob("part-*"))) == 4
    assert cut_files(pdir.root / "state")


def test_region_failure_exits_1_naming_the_cause(pdir: PipelineDir) -> None:
    pdir.add_file("a.txt", ["fine", "boom here", "never"])
    config = pdir.write_config(
        """\
        engine = "local"
        [region]
        max_consecutive_reset_attempts = 2
        [scan]
        directory = "landing"
        [transform]
        function = "pace:explode"
        [sink]
        file = "out/part-%FILENUM.txt"
        """
    )
    done = cli("run", str(config), "--available-now")
    assert done.returncode == 1
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("hdfs-region: error: consistent region failed after 2")
    assert "ValueError: cannot transform 'boom here'" in last
    assert "explode" in last
    assert pdir.output_lines() == []


def test_a_lock_release_that_fails_is_a_warning_after_the_one_line_error(
    pdir: PipelineDir, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A remote checkpoint store can refuse the release too (WebHDFS maps the NameNode's
    IllegalArgumentException to ValueError): the region's failure is still the one error line
    and exit 1, and the release is a warning (the lock lapses after its ttl)."""
    from operators.app.cli import main
    from region.lock import CheckpointLock, LockHolder

    take = CheckpointLock._take

    def refusing_release(
        self: CheckpointLock, generation: int, record: LockHolder, **kw: str | None
    ) -> bool:
        if record.released:
            raise ValueError("/ck/.lock-1.tmp: RENAME: java.net.UnknownHostException: ns")
        return take(self, generation, record, **kw)

    monkeypatch.setattr(CheckpointLock, "_take", refusing_release)
    pdir.add_file("a.txt", ["fine", "boom here"])
    config = pdir.write_config(
        """\
        engine = "local"
        [region]
        max_consecutive_reset_attempts = 1
        [scan]
        directory = "landing"
        [transform]
        function = "pace:explode"
        [sink]
        file = "out/part-%FILENUM.txt"
        """
    )
    monkeypatch.syspath_prepend(str(pdir.root))
    assert main(["run", str(config), "--available-now", "--no-progress"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("hdfs-region: error: consistent region failed after 1")
    assert any(
        "WARNING" in line and "release" in line and "UnknownHostException" in line for line in err
    )
    assert pdir.output_lines() == []


def test_a_refusal_mapped_to_value_error_is_the_one_error_line(
    pdir: PipelineDir, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """WebHDFS maps the NameNode's IllegalArgumentException to ValueError: one that ends the
    run (here at the checkpoint directory's claim) is the error line and exit 1, not a
    traceback."""
    from operators.app import engine_local
    from operators.app.cli import main

    def refused(*args: object, **kwargs: object) -> str:
        raise ValueError("/ck/pipeline.json: CREATE: java.net.UnknownHostException: ns")

    monkeypatch.setattr(engine_local, "claim_checkpoint_dir", refused)
    pdir.add_file("a.txt", ["one"])
    config = pdir.write_config(BASIC.format(trigger="periodic"))
    assert main(["run", str(config), "--available-now", "--no-progress"]) == 1
    last = capsys.readouterr().err.strip().splitlines()[-1]
    assert last == (
        "hdfs-region: error: ValueError: /ck/pipeline.json: CREATE: "
        "java.net.UnknownHostException: ns"
    ), last


@pytest.mark.parametrize("engine", ["local", "spark"])
def test_an_archive_directory_that_cannot_take_files_is_refused_at_start(
    pdir: PipelineDir, engine: str
) -> None:
    """after_read = "archive" into a path under a file: exit 2 naming it before anything is
    read (on Spark, before the session starts), not a failure after the first cut that every
    restart would repeat."""
    pdir.add_file("a.txt", ["one", "two"])
    (pdir.root / "blocked").write_text("a file where the archive's folder would be\n")
    config = pdir.write_config(
        f"""\
        engine = "{engine}"
        [scan]
        directory = "landing"
        after_read = "archive"
        archive_dir = "blocked/%Y"
        [sink]
        file = "out/part-%FILENUM.txt"
        """
    )
    done = cli("run", str(config), "--available-now")
    assert done.returncode == 2, done.stderr[-3000:]
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("hdfs-region: configuration error: [scan] archive_dir:"), last
    assert "/blocked/" in last and "after_read = 'keep'" in last
    assert pdir.output_lines() == []
    assert (pdir.landing / "a.txt").exists()


def test_an_archive_directory_on_another_filesystem_is_refused_at_start(
    pdir: PipelineDir,
) -> None:
    """A file is archived by a rename, which cannot cross filesystems: an archive directory on
    another one (here /dev/shm) is refused before anything is read, not after the first cut
    where every restart would fail again."""
    pdir.add_file("a.txt", ["one", "two"])
    shm = Path("/dev/shm")
    if not shm.is_dir() or os.stat(shm).st_dev == os.stat(pdir.root).st_dev:
        pytest.skip("needs /dev/shm on a filesystem of its own")
    archive = Path(tempfile.mkdtemp(dir=shm))
    try:
        config = pdir.write_config(
            f"""\
            engine = "local"
            [scan]
            directory = "landing"
            after_read = "archive"
            archive_dir = "{archive}/%Y"
            [sink]
            file = "out/part-%FILENUM.txt"
            """
        )
        done = cli("run", str(config), "--available-now", "--no-progress")
        assert done.returncode == 2, done.stderr[-3000:]
        last = done.stderr.strip().splitlines()[-1]
        assert last.startswith("hdfs-region: configuration error: [scan] archive_dir:"), last
        assert str(archive) in last and "another filesystem" in last
        assert pdir.output_lines() == []
        assert sorted(p.name for p in pdir.landing.iterdir()) == ["a.txt"]
    finally:
        shutil.rmtree(archive, ignore_errors=True)


def test_an_archive_directory_that_is_the_watched_one_under_another_name_is_refused(
    pdir: PipelineDir,
) -> None:
    """archive_dir a link to the watched directory: an archived file would stay there under a
    numbered name and be read again at every run. Refused at start, naming both."""
    pdir.add_file("a.txt", ["a1"])
    (pdir.root / "landing-link").symlink_to(pdir.landing)
    config = pdir.write_config(
        """\
        engine = "local"
        [scan]
        directory = "landing"
        after_read = "archive"
        archive_dir = "landing-link"
        [sink]
        file = "out/part-%FILENUM.txt"
        """
    )
    done = cli("run", str(config), "--available-now", "--no-progress")
    assert done.returncode == 2, done.stderr[-3000:]
    last = done.stderr.strip().splitlines()[-1]
    assert "landing-link is the watched directory" in last and "under another name" in last
    assert pdir.output_lines() == []
    assert sorted(p.name for p in pdir.landing.iterdir()) == ["a.txt"]


def test_the_output_or_checkpoints_under_another_name_of_the_watched_directory_are_refused(
    pdir: PipelineDir,
) -> None:
    """The watched directory a link to the output directory: the scan would read its own output
    at every run (one record becomes one more per run). Refused at start as the same names are,
    and so are checkpoints in the watched directory under another name."""
    pdir.add_file("a.txt", ["a1"])
    pdir.out.mkdir(parents=True)
    (pdir.root / "out-link").symlink_to(pdir.out)
    (pdir.root / "landing-link").symlink_to(pdir.landing)
    body = """\
        engine = "local"
        [region]
        checkpoint_dir = "{checkpoints}"
        [scan]
        directory = "{directory}"
        [sink]
        file = "out/part-%FILENUM.txt"
        """
    own_output = pdir.write_config(body.format(checkpoints="checkpoints", directory="out-link"))
    done = cli("run", str(own_output), "--available-now", "--no-progress")
    assert done.returncode == 2, done.stderr[-3000:]
    assert "writes into the watched directory" in done.stderr and "/out-link'" in done.stderr
    checkpoints = pdir.write_config(
        body.format(checkpoints="landing-link", directory="landing"), "in-landing.toml"
    )
    done = cli("run", str(checkpoints), "--available-now", "--no-progress")
    assert done.returncode == 2, done.stderr[-3000:]
    assert "[region] checkpoint_dir:" in done.stderr and "is the watched directory" in done.stderr
    assert pdir.output_lines() == []


def test_sigterm_stops_gracefully_and_a_second_process_is_refused(pdir: PipelineDir) -> None:
    pdir.add_files(3, 50)
    config = pdir.write_config(BASIC.format(trigger="periodic"))
    running = start_cli("run", str(config))  # runs until stopped
    checkpoints = pdir.root / "checkpoints" / "pipeline"
    try:
        wait_for(
            lambda: len(pdir.output_lines()) >= 140, what="output of the first run", alive=running
        )
        # The same checkpoint directory is in use: the second process fails at start and names
        # the holder (its pid).
        second = cli("run", str(config), "--available-now")
        assert second.returncode == 1
        assert f"pid {running.pid}" in second.stderr
        assert "is locked by" in second.stderr
        running.send_signal(signal.SIGTERM)
        _, stderr = running.communicate(timeout=60)
    finally:
        if running.poll() is None:
            running.kill()
            running.wait()
    assert running.returncode == 0, stderr
    # The final cut published the last, partly filled file.
    assert pdir.output_lines() == scan_order(pdir)
    last_cut = json.loads(cut_files(checkpoints)[-1].read_text())
    assert last_cut["meta"]["trigger"] == "stop"
    assert "Stopping gracefully" in stderr


def test_a_checkpoint_of_another_pipeline_is_refused(pdir: PipelineDir) -> None:
    pdir.add_files(1, 5)
    shared = """\
        engine = "local"
        {name}
        [region]
        checkpoint_dir = "shared"
        [scan]
        directory = "landing"
        [sink]
        file = "{out}/part-%FILENUM.txt"
    """
    first = pdir.write_config(shared.format(name="", out="out"), "a.toml")
    other = pdir.write_config(shared.format(name="", out="elsewhere"), "b.toml")
    assert cli("run", str(first), "--available-now").returncode == 0
    refused = cli("run", str(other), "--available-now")
    assert refused.returncode == 1
    assert "two jobs must not share checkpoint directory" in refused.stderr
    assert not (pdir.root / "elsewhere").exists()
    # A name is the identity when given: the same paths under a name are another pipeline.
    named = pdir.write_config(shared.format(name='name = "orders"', out="out"), "c.toml")
    again = cli("run", str(named), "--available-now")
    assert again.returncode == 1
    assert "'orders'" in again.stderr


def test_a_changed_sink_file_is_refused_with_the_name_that_resumes_the_job(
    pdir: PipelineDir,
) -> None:
    pdir.add_files(2, 5)
    settings = """\
        engine = "local"
        {name}
        [region]
        checkpoint_dir = "state"
        [scan]
        directory = "landing"
        [sink]
        file = "{out}/part-%FILENUM.txt"
    """
    first = pdir.write_config(settings.format(name="", out="out"))
    assert cli("run", str(first), "--available-now").returncode == 0
    before = pdir.output_lines()
    pdir.add_files(2, 5, prefix="g")
    moved = pdir.write_config(settings.format(name="", out="curated"))
    refused = cli("run", str(moved), "--available-now")
    assert refused.returncode == 1
    last = refused.stderr.strip().splitlines()[-1]
    assert "/out/part-%FILENUM.txt and is now file://" in last and "/curated/part-" in last
    advice = re.search(r"add (name = '(auto-[0-9a-f]+)') at the top of the settings file", last)
    assert advice is not None, last
    assert "a new checkpoint_dir would read every file again" in last
    assert not (pdir.root / "curated").exists()
    # Following the advice resumes the job: only the new files, into the new place.
    pinned = pdir.write_config(settings.format(name=advice.group(1), out="curated"))
    done = cli("run", str(pinned), "--available-now")
    assert done.returncode == 0, done.stderr
    assert pdir.output_lines() == before
    assert sorted(pdir.output_lines(pdir.root / "curated")) == sorted(
        r for r in pdir.records if r.startswith("g")
    )


def test_available_now_says_which_young_files_it_left(pdir: PipelineDir) -> None:
    pdir.add_files(2, 5)  # written long ago
    fresh = pdir.landing / "fresh.txt"
    fresh.write_text("young\n", encoding="utf-8")  # mtime now: younger than an hour
    config = pdir.write_config(
        """\
        engine = "local"
        [scan]
        directory = "landing"
        min_file_age = "1h"
        [sink]
        file = "out/part-%FILENUM.txt"
        """
    )
    done = cli("run", str(config), "--available-now")
    assert done.returncode == 0, done.stderr
    assert sorted(pdir.output_lines()) == sorted(pdir.records)
    warning = [line for line in done.stderr.splitlines() if "younger than min_file_age" in line]
    assert len(warning) == 1, done.stderr
    assert "WARNING" in warning[0] and "1 file(s)" in warning[0]
    assert "(3600 s); the next run reads them: file://" in warning[0]
    assert warning[0].endswith("/landing/fresh.txt")
    # Once old enough, the next run reads it.
    os.utime(fresh, (time.time() - 7200, time.time() - 7200))
    again = cli("run", str(config), "--available-now")
    assert again.returncode == 0, again.stderr
    assert "younger than min_file_age" not in again.stderr
    assert sorted(pdir.output_lines()) == sorted([*pdir.records, "young"])


def test_progress_is_logged_as_lines_when_not_a_terminal(pdir: PipelineDir) -> None:
    pdir.add_files(2, 20)
    config = pdir.write_config(BASIC.format(trigger="periodic"))
    done = cli("run", str(config), "--available-now")
    assert done.returncode == 0
    progress = [line for line in done.stderr.splitlines() if "operators.app.progress" in line]
    assert progress, done.stderr
    final = progress[-1]
    for part in ("files 2 in, 1 out", "records 40", "cuts 1", "resets 0", "/s"):
        assert part in final
    assert "\r" not in done.stderr


def test_progress_is_one_live_line_on_a_terminal(pdir: PipelineDir) -> None:
    import fcntl
    import pty
    import struct
    import subprocess
    import sys
    import termios

    from tests.cli.conftest import cli_env

    pdir.add_files(2, 20)
    # 60 ms per record: a run of about 2.4 s, so that the line is redrawn a few times even on
    # a loaded machine (30 ms gave one redraw at load 15).
    config = pdir.write_config(
        BASIC.format(trigger="periodic") + '[transform]\nfunction = "pace:shout"\n'
    )
    leader, follower = pty.openpty()
    columns = 72  # narrower than the line
    fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", 40, columns, 0, 0))
    env = cli_env(PACE="0.06", TERM="xterm")
    for name in ("COLUMNS", "LINES"):  # the width is the terminal's
        env.pop(name, None)
    try:
        proc = subprocess.Popen(
            [sys.executable, "-m", "operators.app", "run", str(config), "--available-now"],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=follower,
            env=env,
            text=True,
        )
        os.close(follower)
        chunks = []
        while True:
            try:
                data = os.read(leader, 4096)
            except OSError:  # the process closed the terminal
                break
            if not data:
                break
            chunks.append(data)
        proc.wait(timeout=60)
    finally:
        os.close(leader)
    text = b"".join(chunks).decode()
    assert proc.returncode == 0, text
    # Redrawn in place on one row: each redraw is carriage return + erase line, the only escape
    # sequence written (no colour, the cursor never hidden).
    redraws = text.split("\r\x1b[2K")
    assert len(redraws) >= 3, text  # at least one redraw during the run, then the final line
    assert re.findall(r"\x1b\[[0-9;?]*[A-Za-z]", text) == ["\x1b[2K"] * (len(redraws) - 1)
    # The line is wider than this terminal: while running it is cropped to its width (it never
    # wraps, which would leave broken rows behind), and the final line stays whole on two rows.
    for shown in redraws[:-1]:
        assert len(shown) <= columns and shown.endswith("…") and "\n" not in shown, shown
    final_rows = redraws[-1].split("\r\n")  # the terminal turns each \n into \r\n
    assert len(final_rows) == 3 and final_rows[-1] == "", final_rows
    assert all(len(row) <= columns for row in final_rows)
    assert text.count("\n") == 2  # no line end but the final line's
    final = " ".join(row.strip() for row in final_rows)
    assert final.startswith("stopped "), final
    for part in ("files 2 in, 1 out", "records 40", "resets 0"):
        assert part in final, final
    assert re.search(r"\| cuts \d+ \(last #\d+\) \|", final), final
    assert "INFO" not in text


def test_the_spark_engine_refuses_checkpoints_of_the_local_engine(pdir: PipelineDir) -> None:
    pdir.add_files(1, 5)
    config = pdir.write_config(BASIC.format(trigger="periodic"))
    assert cli("run", str(config), "--available-now").returncode == 0
    # Refused before any JVM starts: resuming with the other engine would repeat the output.
    other = cli("run", str(config), "--available-now", "--engine", "spark")
    assert other.returncode == 1
    assert "holds checkpoints of the local engine, which the spark engine cannot" in other.stderr
    assert "run with --engine local" in other.stderr
    assert len(pdir.output_lines()) == 5


NAMED = """\
    engine = "local"
    [scan]
    directory = "landing"
    [transform]
    function = "names:route"
    [sink]
    directory = "out"
    file_attribute_name = "name"
    manifest = true
    rejects_file = "_rejects/r-%FILENUM.jsonl"
"""

ROUTE = """\
def route(record):
    name, value = record.split(" ", 1)
    return (name, value)
"""


def test_records_naming_the_sinks_own_folder_or_a_skipped_name_go_to_the_rejects(
    pdir: PipelineDir,
) -> None:
    forged = '[{"path": "/etc/shadow", "size": 1, "cut": 9}]'
    records = [
        "a.csv 1",
        "_hdfs_sink/published/00000000000000000001.json lost",
        f"_hdfs_sink/published/00000000000000000009.json {forged}",
        "_hidden.csv 2",
        "b.csv 3",
    ]
    pdir.add_file("one.txt", records)
    config = pdir.write_config(NAMED)
    (pdir.root / "names.py").write_text(ROUTE, encoding="utf-8")
    done = cli("run", str(config), "--available-now", "--no-progress")
    assert done.returncode == 0, done.stderr[-3000:]
    files = {p.name: p.read_text() for p in pdir.out.iterdir() if p.is_file()}
    assert files == {"a.csv": "1\n", "b.csv": "3\n"}
    rejected = [
        json.loads(line)
        for path in sorted((pdir.out / "_rejects").iterdir())
        if not path.name.startswith(".")
        for line in path.read_text().splitlines()
    ]
    assert [r["record"] for r in rejected] == [r.split(" ", 1) for r in records[1:4]]
    assert all("starting with '_'" in r["reason"] for r in rejected)
    listed = read_manifests(LocalFileSystem(), manifest_dir(str(pdir.out)))
    assert [Path(f.path).name for _, fs in listed for f in fs] == ["a.csv", "b.csv"]


def test_interleaved_names_write_one_file_per_name_not_one_per_record(pdir: PipelineDir) -> None:
    pdir.add_file("one.txt", [f"{'ab'[i % 2]}.csv {i}" for i in range(400)])
    config = pdir.write_config(NAMED)
    (pdir.root / "names.py").write_text(ROUTE, encoding="utf-8")
    done = cli("run", str(config), "--available-now", "--no-progress")
    assert done.returncode == 0, done.stderr[-3000:]
    files = {p.name: p.read_text().split() for p in pdir.out.iterdir() if p.is_file()}
    assert files == {
        "a.csv": [str(i) for i in range(0, 400, 2)],
        "b.csv": [str(i) for i in range(1, 400, 2)],
    }


def test_the_scan_sink_and_checkpoints_on_one_filesystem_share_one_client(
    pdir: PipelineDir,
) -> None:
    """Each filesystem is opened once per run: on hdfs:// an opening connects to the NameNode
    and tries the cluster's WebHDFS for truncate, a cost paid at every start of a cron run."""
    from operators.app.config import load_pipeline
    from operators.app.engine_local import build_local

    config = load_pipeline(pdir.write_config(BASIC.format(trigger="periodic")))
    run = build_local(config)
    assert run.scan.fs is run.sink.output[0] is run.checkpoint_fs


def test_filesystems_with_other_settings_are_opened_apart(tmp_path: Path) -> None:
    from operators.fs import FileSystemSettings, open_path
    from region.fs import FileSystem

    opened: list[tuple[FileSystemSettings, FileSystem]] = []
    local, _ = open_path(str(tmp_path / "a"), opened=opened)
    again, _ = open_path(f"file://{tmp_path}/b", opened=opened)
    assert again is local
    elsewhere = FileSystemSettings(uri="webhdfs://nn.example:9870", user="alice")
    remote, path = open_path("/landing", elsewhere, opened=opened)
    other_user = elsewhere.model_copy(update={"user": "bob"})
    assert open_path("/landing", elsewhere, opened=opened)[0] is remote and path == "/landing"
    assert open_path("/x", other_user, opened=opened)[0] is not remote
    assert len(opened) == 3


@pytest.mark.parametrize(
    ("extra", "as_bytes"),
    [("", True), ('[transform]\nfunction = "pace:shout"\n', False)],
)
def test_lines_reach_the_sink_as_bytes_only_without_a_transform(
    pdir: PipelineDir, extra: str, as_bytes: bool
) -> None:
    """Without a transform nothing reads the text: lines are not decoded and encoded again
    (a transform is given ``str``, as always)."""
    from operators.app.config import load_pipeline
    from operators.app.engine_local import build_local
    from operators.source.decoding import EncodedLines, LineBlock

    pdir.add_file("a.txt", ["keep é"])
    config = load_pipeline(pdir.write_config(BASIC.format(trigger="periodic") + extra))
    run = build_local(config)
    run.source.reset_to_initial_state()
    batch = run.source.next_batch(10)
    assert batch is not None
    assert isinstance(batch.records, EncodedLines | LineBlock) == as_bytes
    assert list(batch.records) == ["keep é".encode() if as_bytes else "keep é"]


def test_a_job_of_lines_never_imports_pyarrow(pdir: PipelineDir) -> None:
    """Lines end to end need no Arrow: importing it was a fifth of every start."""
    pdir.add_file("a.txt", ["one", "two"])
    config = pdir.write_config(BASIC.format(trigger="periodic"))
    code = (
        "import sys\n"
        "from operators.app.config import load_pipeline\n"
        "from operators.app.engine_local import run_local\n"
        f"run_local(load_pipeline({str(config)!r}), available_now=True)\n"
        "print(sorted(m for m in ('pyarrow', 'numpy') if m in sys.modules))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120
    )
    assert done.stdout.strip().splitlines()[-1] == "[]"


def test_the_local_engine_takes_arrows_buffers_from_jemalloc_unless_a_pool_was_chosen(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import pyarrow as pa

    from operators.app.engine_local import use_jemalloc

    original = pa.default_memory_pool()
    try:
        monkeypatch.setenv("ARROW_DEFAULT_MEMORY_POOL", "mimalloc")
        assert not use_jemalloc()
        assert pa.default_memory_pool().backend_name == original.backend_name
        monkeypatch.delenv("ARROW_DEFAULT_MEMORY_POOL")
        assert use_jemalloc()
        assert pa.default_memory_pool().backend_name == "jemalloc"
    finally:
        pa.set_memory_pool(original)
