"""``[scan] after_read``: a file leaves the landing directory (archived or deleted) only after
every record read from it is published by a completed cut; replayed with crashes before,
during and after the archive step, and the rule's edges on the real local filesystem."""

from __future__ import annotations

import logging
import os
from pathlib import Path

import pytest
from hypothesis import given

from operators.fs.local import LocalFileSystem
from operators.scan import HDFS2DirectoryScan, ScanSettings
from operators.scan.housekeeping import AfterRead, ReadFile
from operators.sink import HDFS2FileSink, SinkSettings
from operators.source import HDFS2FileSource, SourceSettings
from operators.testing import PipelineReplay, Schedule
from region.checkpoint import CheckpointStore
from region.errors import RegionFailedError
from region.runtime import Pipeline, PipelineRunner
from region.settings import RegionSettings

ARCHIVED = PipelineReplay(
    sink={"file": "part-%FILENUM.txt", "tuples_per_file": 3},
    scan={"after_read": "archive", "archive_dir": "archive"},
    source={"read_chunk": 5},
)
DELETED = PipelineReplay(
    sink={"file": "part-%FILENUM.txt", "bytes_per_file": 30},
    scan={"after_read": "delete"},
    trigger="operator_driven",
)


@given(ARCHIVED.schedules())
def test_archived_files_were_read_and_published_whole_across_crashes(schedule: Schedule) -> None:
    ARCHIVED.check(schedule)


@given(DELETED.schedules())
def test_deleted_files_were_read_and_published_whole_across_crashes(schedule: Schedule) -> None:
    DELETED.check(schedule)


@pytest.mark.parametrize(
    "words",
    [
        # A crash before, and one after, the archive step of the cut that covers a.txt; one
        # inside it (the rename into the archive fails once); a cut in the middle of b.txt.
        "write a.txt (4 lines, mtime t0); run 9 batches; cut, crashing before the archive",
        "write a.txt (4 lines, mtime t0); run 9 batches; cut, crashing after the archive",
        "write a.txt (4 lines, mtime t0); write b.txt (6 lines, mtime t0+1s); run 4 batches; "
        "cut; crash; run 9 batches; cut, crashing after publish",
    ],
)
def test_named_schedules_around_the_archive(words: str) -> None:
    ARCHIVED.check(words)


def pipeline(tmp_path: Path, **scan: object) -> tuple[PipelineRunner, HDFS2DirectoryScan]:
    fs = LocalFileSystem()
    settings = ScanSettings(directory=str(tmp_path / "in"), sleep_time=0, **scan)  # type: ignore[arg-type]
    scanner = HDFS2DirectoryScan(settings, fs)
    source = HDFS2FileSource(SourceSettings(), fs, files=scanner)
    sink = HDFS2FileSink(SinkSettings(file=str(tmp_path / "out" / "part-%FILENUM.txt")), fs)
    runner = PipelineRunner(
        Pipeline(source, sinks=[sink]),
        RegionSettings(period=3600),
        CheckpointStore(fs, str(tmp_path / "ck")),
    )
    return runner, scanner


def land(tmp_path: Path, name: str, lines: int, mtime: int) -> Path:
    path = tmp_path / "in" / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(f"{name} {i}\n" for i in range(lines)))
    os.utime(path, ns=(mtime * 10**9, mtime * 10**9))
    return path


def outputs(tmp_path: Path) -> list[str]:
    out = tmp_path / "out"
    names = sorted(n for n in os.listdir(out) if not n.startswith((".", "_")))
    return [line for n in names for line in (out / n).read_text().splitlines()]


def test_archive_moves_each_file_once_published_and_a_clash_gets_a_suffix(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="operators.scan.housekeeping")
    archive = tmp_path / "archive"
    archive.mkdir()
    (archive / "a.txt").write_text("an older a.txt, never overwritten\n")
    land(tmp_path, "a.txt", 3, 1_700_000_000)
    land(tmp_path, "b.txt", 2, 1_700_000_001)
    runner, scan = pipeline(tmp_path, after_read="archive", archive_dir=str(archive))
    runner.run(available_now=True)
    assert outputs(tmp_path) == ["a.txt 0", "a.txt 1", "a.txt 2", "b.txt 0", "b.txt 1"]
    assert sorted(os.listdir(tmp_path / "in")) == []
    assert (archive / "a.txt").read_text() == "an older a.txt, never overwritten\n"
    assert (archive / "a-1.txt").read_text().splitlines() == ["a.txt 0", "a.txt 1", "a.txt 2"]
    assert (archive / "b.txt").exists()
    assert scan.metrics()["files_archived"] == 2
    assert "exists in the archive; a.txt goes to" in caplog.text
    # An archived file never comes back as new: a second run reads nothing.
    again, _ = pipeline(tmp_path, after_read="archive", archive_dir=str(archive))
    again.run(available_now=True)
    assert len(outputs(tmp_path)) == 5


def test_a_dated_archive_folder_and_delete(tmp_path: Path) -> None:
    land(tmp_path, "a.txt", 1, 1_700_000_000)
    runner, _ = pipeline(tmp_path, after_read="archive", archive_dir=str(tmp_path / "ar/%Y"))
    runner.run(available_now=True)
    assert next(p.name for p in (tmp_path / "ar").iterdir()).isdigit()  # the year
    land(tmp_path, "b.txt", 1, 1_700_000_001)
    runner, scan = pipeline(tmp_path, after_read="delete")
    runner.run(available_now=True)
    assert os.listdir(tmp_path / "in") == [] and scan.metrics()["files_deleted"] == 1
    assert outputs(tmp_path) == ["a.txt 0", "b.txt 0"]


def test_a_file_replaced_before_its_archive_stays_where_it_is_as_a_new_file(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    fs = LocalFileSystem()
    path = land(tmp_path, "a.txt", 3, 1_700_000_000)
    status = fs.status(str(path))
    read = ReadFile(str(path), status.mtime_ns, status.size, status.file_id)
    # Replaced (write-then-rename over it) after it was read, before the cut's archive step:
    # another file id. It is not the file read, and it is a new file (the scan reads it).
    new = tmp_path / "in" / ".a.txt.tmp"
    new.write_text("a new a.txt\n")
    os.utime(new, ns=(status.mtime_ns, status.mtime_ns))
    os.rename(new, path)
    after = AfterRead("archive", fs, archive_dir=str(tmp_path / "archive"))
    with caplog.at_level(logging.INFO, logger="operators.scan.housekeeping"):
        assert after.handle(read) is True
    assert path.read_text() == "a new a.txt\n" and not (tmp_path / "archive").exists()
    assert after.files_kept_changed == 0 and "this one is new" in caplog.text
    # Gone already (a crash after the move): nothing to do, no error; the file left.
    path.unlink()
    assert after.apply(read) is None and after.handle(read) is True


def test_a_file_appended_to_before_its_archive_stays_where_it_is(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    fs = LocalFileSystem()
    path = land(tmp_path, "a.txt", 3, 1_700_000_000)
    status = fs.status(str(path))
    read = ReadFile(str(path), status.mtime_ns, status.size, status.file_id)
    with path.open("a") as f:  # the same file (same inode), grown since it was read
        f.write("more\n")
    after = AfterRead("archive", fs, archive_dir=str(tmp_path / "archive"))
    assert after.handle(read) is False
    assert path.exists() and not (tmp_path / "archive").exists()
    assert after.files_kept_changed == 1
    assert "changed since it was read" in caplog.text and "it stays" in caplog.text


def test_an_archive_directory_that_cannot_be_made_is_a_clear_error_and_the_input_stays(
    tmp_path: Path,
) -> None:
    (tmp_path / "blocked").write_text("a file where the archive's folder would be\n")
    land(tmp_path, "a.txt", 2, 1_700_000_000)
    archive = str(tmp_path / "blocked" / "archive")
    runner, _ = pipeline(tmp_path, after_read="archive", archive_dir=archive)
    with pytest.raises(
        RegionFailedError,
        match=r"cannot archive .*a\.txt into .*blocked/archive.*The file stays where it is",
    ):
        runner.run(available_now=True)
    assert (tmp_path / "in" / "a.txt").exists()
    # The records are published (the cut completed); a run with the archive fixed archives it.
    assert outputs(tmp_path) == ["a.txt 0", "a.txt 1"]
    runner, _ = pipeline(tmp_path, after_read="archive", archive_dir=str(tmp_path / "ok"))
    runner.run(available_now=True)
    assert os.listdir(tmp_path / "in") == [] and (tmp_path / "ok" / "a.txt").exists()
    assert outputs(tmp_path) == ["a.txt 0", "a.txt 1"]


def test_settings_name_what_is_missing() -> None:
    with pytest.raises(ValueError, match="after_read='archive' needs archive_dir"):
        ScanSettings(directory="/in", after_read="archive")
    with pytest.raises(ValueError, match="is used only with after_read='archive'"):
        ScanSettings(directory="/in", archive_dir="/a")
    with pytest.raises(ValueError, match="is the watched directory itself"):
        ScanSettings(directory="/in", after_read="archive", archive_dir="/in/")
    assert ScanSettings(directory="/in", afterRead="delete").after_read == "delete"


def test_delete_keeps_the_inode_taken_until_the_state_is_recorded(tmp_path: Path) -> None:
    # A kill -9 after the delete, before the next checkpoint, and the next export landing under
    # the same name: it must never get the inode number of the file read, or the restart would
    # take it for that file, grown.
    fs = LocalFileSystem()
    path = land(tmp_path, "a.txt", 3, 1_700_000_000)
    status = fs.status(str(path))
    read = ReadFile(str(path), status.mtime_ns, status.size, status.file_id)
    assert AfterRead("delete", fs).handle(read) is True
    assert not path.exists()
    (hidden,) = [p for p in (tmp_path / "in").iterdir() if p.name.startswith(".a.txt.")]
    assert hidden.stat().st_ino == status.file_id  # still taken
    land(tmp_path, "a.txt", 5, 1_700_000_100)  # the next export, while the job is down
    assert fs.status(str(path)).file_id != status.file_id
    restarted = AfterRead("delete", fs)  # the restart applies the state's entry again
    assert restarted.handle(read) is True  # the file read left: the new one is new
    restarted.recorded()  # the next checkpoint forgot the name
    restarted.purge()
    assert sorted(p.name for p in (tmp_path / "in").iterdir()) == ["a.txt"]
    assert len(path.read_text().splitlines()) == 5


@pytest.mark.parametrize("on_modified", ["continue", "warn"])
def test_the_files_moved_away_are_drained_by_the_source_under_any_policy(
    tmp_path: Path, on_modified: str
) -> None:
    # The scan lists each file it moved for the reader's content memory; a reader that keeps
    # none must drain the list all the same, or it grows with every file for the job's life.
    for i in range(3):
        land(tmp_path, f"f{i}.txt", 2, 1_700_000_000 + i)
    runner, scan = pipeline(tmp_path, after_read="delete", on_modified=on_modified)
    runner.run(available_now=True)
    assert scan.metrics()["files_deleted"] == 3
    assert scan.moved_away() == []
